"""Real failures: a program whose execution fails inside OpenVINO, and a partially delegated program."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.bundle.manifest import Manifest, TensorSpec, TestCaseEntry
from runtime.bundle.pte import parse_program
from runtime.engine.config import EngineConfig
from runtime.engine.loader import LoadReport, load_engine
from runtime.errors import BundleError, InferenceError

pytestmark = pytest.mark.export


@pytest.fixture(scope="module")
def mismatch_program() -> bytes:
    """``x * 2 + y`` with one dynamic length shared by x and y.

    ExecuTorch checks each input against its own bounds only, so x of length 3 and y of length 5 reach
    OpenVINO, whose element-wise shape inference then fails: a real delegate execution failure.
    """
    import torch
    from torch.export import Dim

    from runtime.export.export import lower_program

    class AddScaled(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x * 2.0 + y

    n = Dim("n", min=1, max=16)
    ep = torch.export.export(AddScaled(), (torch.randn(4), torch.randn(4)), dynamic_shapes={"x": {0: n}, "y": {0: n}})
    return lower_program(ep, "CPU")


def _manifest() -> Manifest:
    spec = TensorSpec("x", "float32", (16,))
    return Manifest(
        policy_name="add",
        inputs=(spec, TensorSpec("y", "float32", (16,))),
        outputs=(TensorSpec("action", "float32", (16,), "action"),),
        action_output="action",
        chunk_length=16,
        action_names=("j",),
        control_rate_hz=30.0,
        programs={},
        test_case=TestCaseEntry("t.npz", "0" * 64),
    )


def _bad_inputs() -> list[np.ndarray]:
    return [np.ones(3, np.float32), np.ones(5, np.float32)]


def test_executorch_failure_carries_openvinos_reason(mismatch_program: bytes, caplog: pytest.LogCaptureFixture) -> None:
    from runtime.engine.executorch_engine import ExecuTorchEngine

    method = parse_program(mismatch_program)["forward"]
    engine = ExecuTorchEngine(
        _manifest(),
        mismatch_program,
        method,
        device="CPU",
        bundle="add-bundle",
        program="p.pte",
        requested_precision=None,
        cpus=[0],
    )
    ok = engine.run_validated([np.ones(16, np.float32), np.full(16, 0.5, np.float32)])
    np.testing.assert_allclose(ok["action"], 2.5)

    caplog.set_level(logging.ERROR)
    with pytest.raises(InferenceError) as err:
        engine.run_validated(_bad_inputs())
    reason = err.value.backend_reason
    assert reason is not None
    # OpenVINO's own words, not just ExecuTorch's status code
    assert "Exception from src/" in reason
    assert "mismatch" in reason
    assert "OpenVINO says:" in str(err.value)
    assert "add-bundle" in str(err.value) and "method forward" in str(err.value) and "CPU" in str(err.value)
    assert reason in caplog.text
    # the engine still works after the failure
    again = engine.run_validated([np.ones(16, np.float32), np.ones(16, np.float32)])
    np.testing.assert_allclose(again["action"], 3.0)


def test_openvino_engine_failure_carries_openvinos_reason(
    mismatch_program: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    from runtime.engine.openvino_engine import OpenVINOEngine

    method = parse_program(mismatch_program)["forward"]
    engine = OpenVINOEngine(
        _manifest(),
        method,
        device="CPU",
        bundle="add-bundle",
        program="p.pte",
        precision="f32",
        # with INFERENCE_NUM_THREADS=1 this OpenVINO CPU plugin returns an empty output instead of failing
        threads=2,
        cpus=[0],
    )
    caplog.set_level(logging.ERROR)
    with pytest.raises(InferenceError) as err:
        engine.run_validated(_bad_inputs())
    assert err.value.backend_reason and "mismatch" in err.value.backend_reason
    assert err.value.backend_reason in caplog.text
    np.testing.assert_allclose(engine.run_validated([np.ones(2, np.float32)] * 2)["action"], 3.0)


def test_openvino_engine_never_serves_a_stale_chunk(mismatch_program: bytes) -> None:
    """With one thread the CPU plugin returns from the broken run without error and without output."""
    from runtime.engine.openvino_engine import OpenVINOEngine

    method = parse_program(mismatch_program)["forward"]
    engine = OpenVINOEngine(
        _manifest(), method, device="CPU", bundle="b", program="p.pte", precision="f32", threads=1, cpus=[0]
    )
    assert engine.info.threads == 1
    np.testing.assert_allclose(engine.run_validated([np.ones(16, np.float32)] * 2)["action"], 3.0)
    with pytest.raises(InferenceError, match=r"without writing output 'action' \(16 of 16 values unwritten\)"):
        engine.run_validated(_bad_inputs())
    np.testing.assert_allclose(engine.run_validated([np.full(16, 2.0, np.float32)] * 2)["action"], 6.0)


_STALE_SCRIPT = """
import os, sys
import numpy as np
os.sched_setaffinity(0, {0})  # before OpenVINO's CPU plugin starts: one inference thread
from runtime.bundle.pte import parse_program
from runtime.engine.executorch_engine import ExecuTorchEngine
from runtime.errors import InferenceError
from tests.engine.test_failures import _bad_inputs, _manifest
data = open(sys.argv[1], "rb").read()
engine = ExecuTorchEngine(_manifest(), data, parse_program(data)["forward"], device="CPU", bundle="b",
                          program="p.pte", requested_precision=None, cpus=[0])
print("threads", engine.info.threads)
print("first", engine.run_validated([np.ones(16, np.float32)] * 2)["action"][0])
try:
    print("served", engine.run_validated(_bad_inputs())["action"][:4])
except InferenceError as e:
    print("refused", e.backend_reason)
print("after", engine.run_validated([np.full(16, 2.0, np.float32)] * 2)["action"][0])
"""


def test_executorch_engine_never_serves_a_stale_chunk(mismatch_program: bytes, tmp_path: Path) -> None:
    import subprocess
    import sys

    program = tmp_path / "p.pte"
    program.write_bytes(mismatch_program)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _STALE_SCRIPT, str(program)], cwd=root, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "threads 1" in lines and "first 3.0" in lines, done.stdout
    refused = [line for line in lines if line.startswith("refused")]
    assert refused and "without writing output 'action'" in refused[0], done.stdout
    assert "after 6.0" in lines, done.stdout


def _atan_policy() -> tuple[Any, dict[str, Any]]:
    import torch

    class Atan(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(6, 12)

        def forward(self, state: torch.Tensor) -> torch.Tensor:
            h = self.fc(state).reshape(2, 6)
            # aten.atan2 has no OpenVINO conversion in this backend: it stays on ExecuTorch's kernels
            return torch.atan2(h, torch.ones_like(h)) * 2.0

    torch.manual_seed(0)
    return Atan().eval(), {"observation.state": torch.randn(6)}


@pytest.fixture(scope="module")
def partial_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runtime.export.export import export_bundle

    return export_bundle(_atan_policy, tmp_path_factory.mktemp("partial") / "b", policy_name="atan").path


def test_partially_delegated_program_runs_on_executorch(partial_bundle: Path) -> None:
    from runtime.bundle.manifest import read_manifest
    from tests.engine.arithmetic import executorch_options

    assert read_manifest(partial_bundle).programs["CPU"].delegation == "partial"
    options = executorch_options(partial_bundle)
    if options:  # a CPU where ExecuTorch's backend computes this f32 program at bf16: said, then accepted
        with pytest.raises(BundleError, match=r"the openvino engine cannot run this program \(ops left .*atan2"):
            load_engine(EngineConfig(bundle=str(partial_bundle), warmup_runs=0))
    report = LoadReport()
    engine = load_engine(EngineConfig(bundle=str(partial_bundle), warmup_runs=0, **options), report=report)
    assert engine.info.engine == "executorch"
    assert "atan2" in report.engine_reason
    assert report.parity is not None and report.parity.ok


def test_openvino_engine_refuses_a_partial_program(partial_bundle: Path) -> None:
    with pytest.raises(
        BundleError, match=r"openvino engine cannot run this program: ops left on ExecuTorch kernels: .*atan2"
    ):
        load_engine(EngineConfig(bundle=str(partial_bundle), engine="openvino"))


def test_not_a_program(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="not an ExecuTorch program: expected file identifier b'ET12'"):
        parse_program(b"\x00" * 64, "x.pte")


def test_truncated_program(mismatch_program: bytes) -> None:
    with pytest.raises(BundleError, match=r"truncated|corrupt"):
        parse_program(mismatch_program[: len(mismatch_program) // 2], "x.pte")


def _damaged(program: bytes) -> bytes:
    """The program with 16 bytes inside its OpenVINO blob inverted (the blob's header)."""
    payload = bytes(parse_program(program)["forward"].delegates[0].payload)
    at = program.find(payload[:64])
    assert at > 0
    data = bytearray(program)
    for i in range(at + 16, at + 32):
        data[i] ^= 0xFF
    return bytes(data)


def test_executorch_load_failure_carries_openvinos_reason(mismatch_program: bytes) -> None:
    from runtime.engine.executorch_engine import ExecuTorchEngine

    data = _damaged(mismatch_program)
    with pytest.raises(BundleError) as err:
        ExecuTorchEngine(
            _manifest(), data, parse_program(data)["forward"], device="CPU", bundle="b", program="p.pte",
            requested_precision=None, cpus=[0],
        )  # fmt: skip
    text = str(err.value)
    assert "OpenVINO says: Exception from src/" in text and "deserialize" in text, text
    assert "\n" not in text


def test_openvino_engine_damaged_blob_is_called_damaged(mismatch_program: bytes) -> None:
    import openvino as ov

    from runtime.engine.openvino_engine import OpenVINOEngine

    data = _damaged(mismatch_program)
    version = ov.get_version().split("-")[0]
    with pytest.raises(BundleError) as err:
        OpenVINOEngine(
            _manifest(), parse_program(data)["forward"], device="CPU", bundle="b", program="p.pte",
            precision="f32", threads=1, cpus=[0], compiled_by=version,
        )  # fmt: skip
    text = str(err.value)
    assert f"the blob is damaged (OpenVINO {version} compiled it, the same version as here)" in text, text
    assert "lerobot-runtime lower b --device CPU" in text and "deserialize" in text
    assert "\n" not in text


def test_multi_line_messages_are_one_journal_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    from runtime.log import setup_logging

    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    setup_logging("INFO")
    try:
        text = "Exception from a:\nCheck failed at b:\n\n[CPU] bad\n"
        logging.getLogger("runtime.test").error("load failed: %s", text)
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("runtime.test").exception("with a traceback")
    finally:
        root = logging.getLogger()
        for h in list(root.handlers):
            if type(h).__name__ == "_StderrHandler":
                root.removeHandler(h)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "<3>runtime.test: load failed: Exception from a: | Check failed at b: | [CPU] bad"
    assert len(lines) == 2 and lines[1].startswith("<3>runtime.test: with a traceback | Traceback")
    assert lines[1].endswith("ValueError: boom")
