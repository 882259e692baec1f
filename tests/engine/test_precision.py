"""A bundle lowered for bf16 or f16 runs at that precision on both engines, and says what really ran."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runtime.bundle.bundle import Bundle
from runtime.bundle.manifest import DEFAULT_TOLERANCE
from runtime.engine.config import EngineConfig
from runtime.engine.loader import LoadReport, load_engine
from runtime.engine.precision import executed_precision, lower_of, ov_precision_name
from runtime.export.export import export_bundle
from tests.engine.arithmetic import executorch_arithmetic, executorch_options

pytestmark = pytest.mark.export


def _native_bf16() -> bool:
    import openvino as ov

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


@pytest.fixture(scope="module")
def tiny_bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import sys

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "examples"))
    try:
        from tiny_policy import make_tiny_policy
    finally:
        sys.path.pop(0)
    out = tmp_path_factory.mktemp("precision")
    return {
        p: export_bundle(make_tiny_policy, out / p, precision=p, policy_name="tiny").path
        for p in ("f32", "bf16", "f16")
    }


def _run(bundle: Path, engine: str) -> tuple[object, LoadReport, np.ndarray]:
    """Load and run the test case; a program the executorch engine computes below its precision on
    this CPU is accepted (the refusal itself is tested in test_engines.py) and held to what ran."""
    report = LoadReport()
    options = executorch_options(bundle) if engine == "executorch" else {}
    config = EngineConfig(bundle=str(bundle), engine=engine, warmup_runs=0, **options)  # type: ignore[arg-type]
    e = load_engine(config, report=report)
    out = e.infer(Bundle.open(bundle).test_case().inputs)["action"]
    return e, report, out


# the least error each precision's rounding leaves in this model's outputs, relative to their peak
# (an f32 program stays within 1e-6 of the reference): bf16 keeps 8 bits of mantissa, f16 11
@pytest.mark.parametrize(("precision", "rounding"), [("bf16", 1e-4), ("f16", 1e-5)])
@pytest.mark.parametrize("engine", ["openvino", "executorch"])
def test_a_low_precision_program_carries_it_on_either_engine(
    tiny_bundles: dict[str, Path], engine: str, precision: str, rounding: float
) -> None:
    case = Bundle.open(tiny_bundles[precision]).test_case()
    reference = case.outputs["action"]
    e, report, out = _run(tiny_bundles[precision], engine)
    info = e.info  # type: ignore[attr-defined]
    # the executorch engine passes OpenVINO nothing at load: the precision is in the program itself
    # (a CPU with native bf16 may compute an f16 program at bf16: the outputs then carry bf16)
    assert info.precision == lower_of(precision, info.arithmetic)
    if not _native_bf16():
        assert (info.precision, info.arithmetic) == (precision, "f32")
    assert report.parity is not None and report.parity.ok
    assert report.parity.tolerance == DEFAULT_TOLERANCE[info.precision]
    scale = float(np.abs(reference).max())
    err = float(np.abs(out - reference).max())
    # the rounding is in the numbers ...
    assert err > rounding * scale
    # ... and within what the precision is held to
    assert err < DEFAULT_TOLERANCE[precision] * scale


def test_both_engines_run_the_same_bf16_program(tiny_bundles: dict[str, Path]) -> None:
    _, _, a = _run(tiny_bundles["bf16"], "openvino")
    _, _, b = _run(tiny_bundles["bf16"], "executorch")
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


@pytest.mark.parametrize("engine", ["openvino", "executorch"])
def test_an_f32_program_reports_the_device_arithmetic(tiny_bundles: dict[str, Path], engine: str) -> None:
    e, report, out = _run(tiny_bundles["f32"], engine)
    info = e.info  # type: ignore[attr-defined]
    # the openvino engine applies the program's f32; the executorch engine gets the plugin's default
    expected = "f32" if engine == "openvino" else executorch_arithmetic(tiny_bundles["f32"])
    assert (info.precision, info.arithmetic) == (expected, expected)
    assert report.parity is not None and report.parity.ok
    if expected == "f32":
        reference = Bundle.open(tiny_bundles["f32"]).test_case().outputs["action"]
        assert np.abs(out - reference).max() <= 2e-5 * np.abs(reference).max()


def test_lower_keeps_the_precision_of_the_bundle(tiny_bundles: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    from runtime.export.export import lower_bundle

    copy = tmp_path / "b"
    shutil.copytree(tiny_bundles["f32"], copy)
    lower_bundle(copy, "CPU", precision="bf16")  # from the float32 portable program
    e, _, out = _run(copy, "executorch")
    assert e.info.precision == "bf16"  # type: ignore[attr-defined]
    _, _, made_at_export = _run(tiny_bundles["bf16"], "executorch")
    np.testing.assert_allclose(out, made_at_export, rtol=0, atol=1e-6)


def test_executed_precision_reads_the_execution_graph() -> None:
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 16], np.float32, name="x")
    w = ops.constant(np.ones((16, 4), np.float32))
    model = ov.Model([ops.relu(ops.matmul(x, w, False, False))], [x], "mm")
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    assert executed_precision(compiled) == "f32"
    layers = {
        op.get_rt_info()["layerType"].astype(str): op.get_rt_info()["runtimePrecision"].astype(str)
        for op in compiled.get_runtime_model().get_ops()
    }
    assert ov_precision_name(layers["FullyConnected"]) == "f32"
