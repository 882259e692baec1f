"""Both engines on real exported programs, against eager PyTorch, on the CPU this machine has."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from runtime.bundle.bundle import Bundle, sha256_bytes
from runtime.engine.base import Engine
from runtime.engine.config import EngineConfig
from runtime.engine.devices import present_devices
from runtime.engine.loader import LoadReport, load_engine
from runtime.engine.parity import compare
from runtime.errors import BundleError, ConfigError, DeviceError, InputValidationError, ParityError
from tests.engine.arithmetic import executorch_arithmetic, executorch_options


def _load(bundle: Path, **kw: object) -> tuple[Engine, LoadReport]:
    report = LoadReport()
    engine = load_engine(EngineConfig(bundle=str(bundle), warmup_runs=0, **kw), report=report)  # type: ignore[arg-type]
    return engine, report


def _eager_reference(bundle: Path) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Run the demo policy in eager PyTorch on the bundle's test inputs (independent of the bundle's own record)."""
    import torch

    from runtime.policies.act import make_demo_policy

    model, example = make_demo_policy()
    inputs = Bundle.open(bundle).test_case().inputs
    with torch.inference_mode():
        out = model(*(torch.from_numpy(inputs[k]) for k in example)).numpy()
    return inputs, out


@pytest.mark.parametrize("engine_name", ["openvino", "executorch"])
def test_engine_matches_eager_pytorch(demo_bundle: Path, engine_name: str) -> None:
    inputs, eager = _eager_reference(demo_bundle)
    options = executorch_options(demo_bundle) if engine_name == "executorch" else {}
    engine, report = _load(demo_bundle, engine=engine_name, **options)
    out = engine.infer(inputs)
    assert set(out) == {"action"}
    assert out["action"].shape == (100, 6) and out["action"].dtype == np.float32
    tol = 2e-5 if engine.info.precision == "f32" else 0.075
    case = Bundle.open(demo_bundle).test_case()
    # in the test case's units, as the gate judges (bf16 rounding on outputs of several units is
    # larger than 0.075 in absolute terms)
    assert compare(out, {"action": eager}, tol, case.scale, case.scale_source).ok
    assert report.parity is not None and report.parity.ok
    assert report.parity.tolerance == tol
    # a different observation gives a different chunk: the program really computes
    other = dict(inputs, **{"observation.state": inputs["observation.state"] + 1.0})
    assert not np.allclose(engine.infer(other)["action"], out["action"])
    engine.close()


def test_auto_picks_openvino_for_a_fully_delegated_program(demo_bundle: Path) -> None:
    engine, report = _load(demo_bundle)
    assert engine.info.engine == "openvino"
    assert "one OpenVINO delegate" in report.engine_reason


def test_openvino_engine_never_imports_torch(demo_bundle: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys, json\n"
        "from runtime.engine.config import EngineConfig\n"
        "from runtime.engine.loader import load_engine\n"
        f"e = load_engine(EngineConfig(bundle={str(demo_bundle)!r}, engine='openvino'))\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'executorch': 'executorch' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"torch": False, "executorch": False}


def test_precision_is_read_back_from_openvino(demo_bundle: Path) -> None:
    import openvino as ov

    f32, _ = _load(demo_bundle, engine="openvino", precision="f32")
    assert f32.info.precision == "f32"
    bf16, report = _load(demo_bundle, engine="openvino", precision="bf16")
    native_bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    # what the device really runs, not the request echoed: f32 on CPUs without native bf16
    assert bf16.info.precision == ("bf16" if native_bf16 else "f32")
    assert report.parity is not None and report.parity.tolerance == (0.075 if native_bf16 else 2e-5)


def test_executorch_engine_says_when_it_cannot_apply_the_precision(
    demo_bundle: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    default = executorch_arithmetic(demo_bundle)  # what ExecuTorch's backend computes here
    engine, _ = _load(demo_bundle, engine="executorch", precision="auto", accept_lower_arithmetic=True)
    assert (engine.info.precision, engine.info.arithmetic) == (default, default)
    if default != "f32":
        assert "computes this f32 program at bf16" in caplog.text
    else:
        assert "cannot apply" not in caplog.text and "computes this" not in caplog.text
    # a hint asked for at load cannot reach the program: said, with what to do instead
    caplog.clear()
    other = "f32" if default == "bf16" else "bf16"
    engine, _ = _load(demo_bundle, engine="executorch", precision=other, accept_lower_arithmetic=True)
    assert engine.info.arithmetic == default
    assert (
        f"engine executorch cannot apply INFERENCE_PRECISION_HINT={other}: ExecuTorch's OpenVINO backend passes "
        f"no properties at load, so CPU computes at {default}; lower the bundle for that precision "
        f"(lerobot-runtime lower BUNDLE --precision {other}) or use --engine openvino"
    ) in caplog.text


def _backend_defaults_to_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """The executorch engine as it is on a CPU with native bf16, on any CPU: its read-back says bf16.
    (The real case is checked against the real read-back in the test above.)"""
    from runtime.engine.executorch_engine import ExecuTorchEngine

    real = ExecuTorchEngine.read_back

    def bf16_default(method: object, device: str) -> tuple[str, int]:
        return "bf16", real(method, device)[1]  # type: ignore[arg-type]

    monkeypatch.setattr(ExecuTorchEngine, "read_back", staticmethod(bf16_default))


def test_executorch_refuses_to_compute_an_f32_program_at_bf16_unasked(
    demo_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _backend_defaults_to_bf16(monkeypatch)
    with pytest.raises(BundleError) as err:
        _load(demo_bundle, engine="executorch")
    text = str(err.value)
    assert "\n" not in text  # one line in the journal
    assert "the executorch engine would compute this f32 program at bf16 on CPU" in text
    # every way out is named
    assert "--engine openvino, which runs it at f32" in text
    assert "lerobot-runtime lower BUNDLE --precision bf16" in text
    assert "engine.accept_lower_arithmetic = true (--accept-lower-arithmetic)" in text
    # auto never picks it for a program the openvino engine can run
    engine, _ = _load(demo_bundle)
    assert engine.info.engine == "openvino" and engine.info.arithmetic == "f32"


def test_executorch_serves_an_accepted_lower_arithmetic_at_its_tolerance(
    demo_bundle: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _backend_defaults_to_bf16(monkeypatch)
    caplog.set_level(logging.WARNING)
    engine, report = _load(demo_bundle, engine="executorch", accept_lower_arithmetic=True)
    assert (engine.info.precision, engine.info.arithmetic) == ("bf16", "bf16")
    assert report.parity is not None and report.parity.tolerance == 0.075
    assert "as engine.accept_lower_arithmetic allows" in caplog.text


def test_executorch_refusal_when_the_openvino_engine_cannot_run_the_program() -> None:
    from runtime.engine.executorch_engine import lower_arithmetic, lower_arithmetic_refusal

    assert lower_arithmetic("f32", "bf16") and lower_arithmetic("f16", "bf16")
    assert not lower_arithmetic("f32", "f32") and not lower_arithmetic("bf16", "bf16")
    assert not lower_arithmetic("int8", "bf16")  # held to its accuracy gate instead
    text = lower_arithmetic_refusal("b", "CPU", "f32", "bf16", "ops left on ExecuTorch kernels: aten.foo")
    assert "the openvino engine cannot run this program (ops left on ExecuTorch kernels: aten.foo)" in text
    assert "--engine openvino" not in text


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to keep one for the control loop")
def test_inference_is_pinned_apart_from_the_control_cpu(demo_bundle: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    control = allowed[0]
    engine, _ = _load(demo_bundle, engine="openvino", control_cpu=control)
    assert control not in engine.info.cpus
    assert set(engine.info.cpus) == set(allowed) - {control}
    assert os.sched_getaffinity(0) == set(engine.info.cpus)  # the loading (inference) thread
    assert engine.info.threads == len(allowed) - 1  # read back from OpenVINO


def test_explicit_cpu_set_and_threads_are_read_back(demo_bundle: Path) -> None:
    cpu = sorted(os.sched_getaffinity(0))[-1]
    engine, _ = _load(demo_bundle, engine="openvino", cpus=(cpu,), threads=1)
    assert engine.info.cpus == (cpu,)
    assert engine.info.threads == 1


def test_executorch_threads_follow_the_cpu_set_in_a_fresh_process(demo_bundle: Path) -> None:
    """ExecuTorch passes no thread count: OpenVINO sizes its pool from the affinity at plugin start."""
    import subprocess
    import sys

    cpu = sorted(os.sched_getaffinity(0))[-1]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "runtime",
            "check",
            str(demo_bundle),
            "--engine",
            "executorch",
            "--cpus",
            str(cpu),
            "--runs",
            "2",
            "--json",
            *(["--accept-lower-arithmetic"] if executorch_options(demo_bundle) else []),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["engine"] == "executorch"
    assert result["cpus"] == [cpu]
    assert result["threads"] == 1
    assert result["torch_imported"] is True


def test_unavailable_cpu_is_a_config_error(demo_bundle: Path) -> None:
    with pytest.raises(ConfigError, match=r"engine.cpus: CPU\(s\) \[4096\] are not available"):
        _load(demo_bundle, cpus=(4096,))


def test_device_preference_skips_absent_devices_with_reasons(
    demo_bundle: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    present = present_devices()
    assert "CPU" in present
    engine, report = _load(demo_bundle, devices=("NPU", "GPU", "CPU"))
    assert engine.info.device == "CPU"
    for dev in ("NPU", "GPU"):
        if dev not in present:
            assert any(r.startswith(f"{dev}: not present (OpenVINO sees") for r in report.skipped_devices)
            assert f"device skipped: {dev}: not present" in caplog.text


def test_absent_device_only_is_refused_naming_what_is_there(demo_bundle: Path) -> None:
    missing = next((d for d in ("NPU", "GPU") if d not in present_devices()), None)
    if missing is None:
        pytest.skip("this machine has both a GPU and an NPU")
    with pytest.raises(DeviceError, match=rf"{missing}: not present \(OpenVINO sees .*CPU"):
        _load(demo_bundle, devices=(missing,))


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda o: o.pop("observation.state"), "observation.state", "missing input(s) 'observation.state'"),
        (lambda o: o.update(extra=np.zeros(1)), "extra", "unexpected input(s) 'extra'"),
        (
            lambda o: o.update({"observation.state": np.zeros(6, np.float64)}),
            "observation.state",
            "input 'observation.state': expected dtype float32, got float64",
        ),
        (
            lambda o: o.update({"observation.state": np.zeros(7, np.float32)}),
            "observation.state",
            "input 'observation.state': expected shape [6], got [7]",
        ),
        (
            lambda o: o.update({"observation.images.front": np.zeros((96, 128), np.uint8)}),
            "observation.images.front",
            "expected shape [96, 128, 3], got [96, 128]",
        ),
        (
            lambda o: o.update({"observation.state": [0.0] * 6}),
            "observation.state",
            "expected a numpy array of float32[6], got list",
        ),
    ],
)
def test_bad_inputs_are_named(demo_engine: Engine, demo_bundle: Path, change: object, field: str, message: str) -> None:
    obs = dict(Bundle.open(demo_bundle).test_case().inputs)
    change(obs)  # type: ignore[operator]
    with pytest.raises(InputValidationError) as err:
        demo_engine.infer(obs)
    assert err.value.field == field
    assert message in str(err.value)
    # the engine keeps serving after a bad request
    good = Bundle.open(demo_bundle).test_case()
    np.testing.assert_allclose(demo_engine.infer(good.inputs)["action"], good.outputs["action"], atol=2e-5)


def _tamper_reference(bundle: Path, delta: float) -> None:
    case = Bundle.open(bundle).test_case()
    arrays = {f"input/{k}": v for k, v in case.inputs.items()}
    ref = case.outputs["action"].copy()
    ref[42, 3] += delta
    arrays["output/action"] = ref
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    (bundle / "test_case.npz").write_bytes(buf.getvalue())
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["test_case"]["sha256"] = sha256_bytes(buf.getvalue())
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_parity_failure_refuses_to_serve(bundle_copy: Path) -> None:
    _tamper_reference(bundle_copy, 0.5)
    with pytest.raises(ParityError) as err:
        _load(bundle_copy, engine="openvino", precision="f32")
    text = str(err.value)
    assert "refusing to serve" in text
    assert "in output 'action' at [42, 3]" in text
    assert "max abs error" in text and "absolute difference 0.5;" in text  # error in units of the scale
    assert "tolerance 2e-05" in text


def test_parity_failure_can_be_overridden(bundle_copy: Path, caplog: pytest.LogCaptureFixture) -> None:
    _tamper_reference(bundle_copy, 0.5)
    engine, report = _load(bundle_copy, engine="openvino", precision="f32", allow_parity_failure=True)
    assert report.parity is not None and not report.parity.ok
    assert report.parity.index == (42, 3)
    assert "parity FAILED but allow_parity_failure is set" in caplog.text
    assert engine.infer(Bundle.open(bundle_copy).test_case().inputs)["action"].shape == (100, 6)


def test_load_report_times_every_step(demo_bundle: Path) -> None:
    _, report = _load(demo_bundle)
    assert set(report.timing_ms) == {"open", "compile", "load", "parity", "warmup", "ready"}
    assert report.timing_ms["load"] == pytest.approx(report.timing_ms["open"] + report.timing_ms["compile"])
    assert report.timing_ms["ready"] >= report.timing_ms["load"] + report.timing_ms["parity"]


def test_program_from_another_openvino_version_is_refused(bundle_copy: Path) -> None:
    manifest = json.loads((bundle_copy / "manifest.json").read_text())
    manifest["programs"]["CPU"]["openvino_version"] = "2024.0.0"
    (bundle_copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=r"compiled by OpenVINO 2024.0.0, this machine has .*lerobot-runtime lower"):
        _load(bundle_copy)
