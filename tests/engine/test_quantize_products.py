"""INT8 of a policy with a product by a stored constant (``x @ C``, as SmolVLA resizes its images).

NNCF scales such a constant along the axis the product sums over, which OpenVINO 2025.4.1 runs wrong
at f32 and crashes on at bf16 on an AMX CPU (docs/repro/openvino_int8_input_channel_scale_sigfpe.py);
``quantize`` leaves the product float. Exported, quantised and gated for real: on an AMX CPU the
program with the product quantised crashes the gate at the CPU's default precision and is off by NaN
at f32, so the gate's first try must run and the error must be small.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch.backends.openvino.quantizer")
pytestmark = pytest.mark.export

K, N = 640, 512  # SmolVLA's default image width resized to 512


class Resized(torch.nn.Module):  # type: ignore[misc]
    """state (6) -> 8 rows of width K -> times a constant K x N map -> a chunk of 3 x 6 actions."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = torch.nn.Linear(6, 8 * K)
        self.cols = torch.rand(K, N) / K  # a plain tensor: a lifted constant, as SmolVLA's resize maps
        self.head = torch.nn.Linear(8 * N, 18)

    def forward(self, state: Any) -> Any:
        rows = self.up(state).reshape(8, K)
        return self.head(torch.matmul(rows, self.cols).reshape(-1)).reshape(3, 6)


def make_resized_policy() -> tuple[Any, dict[str, Any]]:
    return Resized(), {"observation.state": torch.linspace(-1, 1, 6)}


def test_a_product_by_a_constant_stays_float_and_the_gate_runs_at_the_cpus_default(tmp_path: Path) -> None:
    import openvino as ov

    from runtime.engine.precision import ov_precision_name
    from runtime.export.export import export_bundle
    from runtime.export.quantize import quantize_bundle

    export_bundle(make_resized_policy, tmp_path / "f32")
    calib = tmp_path / "recorded"
    calib.mkdir()
    rng = np.random.default_rng(0)
    for k in range(12):
        np.savez(calib / f"{k:02d}.npz", **{"observation.state": rng.uniform(-1, 1, 6).astype(np.float32)})
    bundle = quantize_bundle(tmp_path / "f32", calib, tmp_path / "int8")
    gate = bundle.manifest.quantization["gate"]
    default = ov_precision_name(str(ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")))
    assert "crashed" not in gate and "float_precision" not in gate, gate
    assert gate["float_arithmetic"] == default
    assert gate["max_error"] <= 0.05, gate  # of the default bound 0.2: the float product is exact enough


def test_reproducer_script_runs_its_control_and_says_each_case() -> None:
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "docs" / "repro" / "openvino_int8_input_channel_scale_sigfpe.py"
    control = subprocess.run(
        [sys.executable, str(script), "output-channel-bf16"], capture_output=True, text=True, timeout=120
    )
    assert control.returncode == 0 and control.stdout.startswith("output-channel-bf16: ok"), control.stderr[-1000:]
    whole = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    lines = whole.stdout.splitlines()
    assert lines[0].startswith("openvino ") and len(lines) >= 4, whole.stdout
    for case, line in zip(("input-channel-bf16", "input-channel-f32", "output-channel-bf16"), lines[1:], strict=False):
        assert (
            line.startswith(f"{case}: ok")
            or line.startswith(f"{case}: crashed: SIG")
            or line.startswith(f"{case}: wrong: ")
        ), line
    assert (whole.returncode == 0) == (lines[-1] == "ok"), whole.stdout
