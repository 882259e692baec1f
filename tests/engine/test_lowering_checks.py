"""Export/lower refuses programs OpenVINO runs with wrong results and no error, and warns about risky ones.

Each case is first shown to really go wrong here (ExecuTorch + OpenVINO 2025.4.1 on this CPU), on a
small graph lowered without the checks, then shown to be refused (or warned about and caught).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.engine.config import EngineConfig
from runtime.errors import ExportError, ParityError

pytestmark = pytest.mark.export


def _torch() -> Any:
    import torch

    return torch


def _lower_unchecked(model: Any, example: tuple[Any, ...]) -> Any:
    """Lower exactly as ``lower_program`` does, minus the checks, and load it in ExecuTorch."""
    torch = _torch()
    from executorch.backends.openvino.partitioner import OpenvinoPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.backend.compile_spec_schema import CompileSpec
    from executorch.runtime import Runtime

    edge = to_edge_transform_and_lower(
        torch.export.export(model, example), partitioner=[OpenvinoPartitioner([CompileSpec("device", b"CPU")])]
    )
    return Runtime.get().load_program(edge.to_executorch().buffer).load_method("forward")


def _lower_checked(model: Any, example: tuple[Any, ...]) -> bytes:
    from runtime.export.export import lower_program

    return lower_program(_torch().export.export(model, example), "CPU")


def _models() -> dict[str, Any]:
    torch = _torch()

    class PassThrough(torch.nn.Module):  # the policy hands its input state back as a second output
        def __init__(self) -> None:
            super().__init__()
            self.head = torch.nn.Linear(6, 12)

        def forward(self, state: Any) -> Any:
            return self.head(state).reshape(2, 6), state.clone()

    class Conv(torch.nn.Module):
        def __init__(self, channels_last_out: bool = False) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.channels_last_out = channels_last_out

        def forward(self, img: Any) -> Any:
            y = self.conv(img)
            return y.contiguous(memory_format=torch.channels_last) if self.channels_last_out else y.flatten(1)

    class Int64Cumsum(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            steps = torch.cumsum((x * 2**33).to(torch.int64), 0)
            return (steps // 2**30).to(torch.float32).reshape(1, -1)

    return {"passthrough": PassThrough, "conv": Conv, "cumsum": Int64Cumsum}


def test_an_output_that_is_an_input_comes_back_wrong_and_is_refused() -> None:
    torch = _torch()
    model = _models()["passthrough"]().eval()
    state = torch.linspace(0.1, 0.9, 6)
    with torch.no_grad():
        _, eager_state = model(state)
    _, got_state = _lower_unchecked(model, (state,)).execute([state.clone()])
    assert float((got_state - eager_state).abs().max()) > 0.1  # the bug, reproduced here
    with pytest.raises(ExportError) as err:
        _lower_checked(model, (state,))
    assert "output 1 ('getitem_1', program output 1) is its input 0 ('state', program input 0) passed " in str(
        err.value
    )


def test_export_refuses_it_before_writing_a_bundle(tmp_path: Path) -> None:
    torch = _torch()
    from runtime.export.export import export_bundle

    def make() -> tuple[Any, dict[str, Any]]:
        return _models()["passthrough"](), {"observation.state": torch.rand(6)}

    expected = r"program output 1 'output_1'\) is its input 0 \('state', program input 0 'observation.state'\)"
    with pytest.raises(ExportError, match=expected):
        export_bundle(make, tmp_path / "b")
    assert not (tmp_path / "b" / "manifest.json").exists()


def test_a_channels_last_input_comes_back_wrong_and_is_refused() -> None:
    torch = _torch()
    model = _models()["conv"]().eval()
    img = torch.rand(1, 3, 8, 8).to(memory_format=torch.channels_last)
    with torch.no_grad():
        eager = model(img)
    (got,) = _lower_unchecked(model, (img,)).execute([img])
    assert float((got - eager).abs().max()) > 0.1
    with pytest.raises(ExportError, match=r"input 0 \('img', program input 0\) has dim order \[0, 2, 3, 1\]"):
        _lower_checked(model, (img,))
    _lower_checked(model, (img.contiguous(),))  # the same model with a contiguous input is fine


def test_a_channels_last_output_comes_back_wrong_and_is_refused() -> None:
    torch = _torch()
    model = _models()["conv"](channels_last_out=True).eval()
    img = torch.rand(1, 3, 8, 8)
    with torch.no_grad():
        eager = model(img)
    (got,) = _lower_unchecked(model, (img,)).execute([img])
    assert float((got - eager).abs().max()) > 0.1
    with pytest.raises(ExportError, match=r"output 0 \('getitem', program output 0\) has dim order \[0, 2, 3, 1\]"):
        _lower_checked(model, (img,))


def test_int64_cumsum_is_warned_about_and_the_parity_gate_catches_its_wrong_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    torch = _torch()
    from runtime.engine.loader import load_engine
    from runtime.export.export import export_bundle

    x = torch.tensor([1.0, 2.0, 3.0])
    model = _models()["cumsum"]()
    (got,) = _lower_unchecked(model, (x,)).execute([x.clone()])
    np.testing.assert_array_equal(model(x).numpy(), [[8.0, 24.0, 48.0]])
    assert not np.array_equal(got.numpy(), model(x).numpy())  # computed in 32 bits here

    def factory() -> tuple[Any, dict[str, Any]]:
        return _models()["cumsum"](), {"x": x}

    with (
        caplog.at_level(logging.WARNING, logger="runtime.export.lowering_checks"),
        pytest.raises(ExportError, match="closely enough to be f32 rounding") as err,
    ):
        export_bundle(factory, tmp_path / "refused", action_names=("a", "b", "c"))
    warnings = [r.getMessage() for r in caplog.records]
    assert any("int64 aten::cumsum at 'aten_cumsum_default'" in w and "32 bits" in w for w in warnings)
    assert "got -2, reference 8" in str(err.value) and not (tmp_path / "refused").exists()
    # written unproved, the load gate refuses it on the robot just the same
    export_bundle(factory, tmp_path / "b", action_names=("a", "b", "c"), prove_on_export=False)
    with pytest.raises(ParityError, match="max abs error"):
        load_engine(EngineConfig(bundle=str(tmp_path / "b"), warmup_runs=0, parity_runs=2))
