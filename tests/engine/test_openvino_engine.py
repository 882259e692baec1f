"""The direct OpenVINO engine on a tiny program compiled in the test (no export, no torch).

The delegate's payload is what ExecuTorch's OpenVINO backend stores: a compiled model's
``export_model`` blob. The engine imports it with its properties; what OpenVINO applied is asked of the
compiled model (``get_property``), never taken from what the engine was told.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from runtime.bundle.manifest import Manifest, TensorSpec, TestCaseEntry
from runtime.bundle.pte import DelegateInfo, MethodInfo
from runtime.engine.openvino_engine import OpenVINOEngine, direct_engine_refusal, import_blob
from runtime.engine.precision import executed_precision
from runtime.errors import BundleError, InferenceError

# action = x @ W with W = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]; extra = 2 * y
W = np.arange(12, dtype=np.float32).reshape(4, 3)


def _model(dynamic: bool = False) -> ov.Model:
    x = ops.parameter([-1, 4] if dynamic else [2, 4], np.float32, name="x")
    y = ops.parameter([3], np.float32, name="y")
    action = ops.matmul(x, ops.constant(W), False, False)
    extra = ops.multiply(y, ops.constant(np.float32(2.0)))
    return ov.Model([action, extra], [x, y], "tiny")


@lru_cache(maxsize=2)
def _blob(dynamic: bool = False) -> bytes:
    return bytes(ov.Core().compile_model(_model(dynamic), "CPU").export_model().getvalue())


def _method(payload: bytes | memoryview | None = None, **kw: Any) -> MethodInfo:
    delegate = DelegateInfo(
        kw.pop("backend_id", "OpenvinoBackend"),
        kw.pop("specs", {"device": b"CPU"}),
        _blob() if payload is None else payload,
    )
    fields: dict[str, Any] = {
        "name": "forward",
        "num_inputs": 2,
        "num_outputs": 2,
        "delegates": (delegate,),
        "kernel_ops": (),
        "single_delegate": True,
    }
    fields.update(kw)
    return MethodInfo(**fields)


def _manifest(
    inputs: tuple[TensorSpec, ...] = (TensorSpec("x", "float32", (2, 4)), TensorSpec("y", "float32", (3,))),
    outputs: tuple[TensorSpec, ...] = (
        TensorSpec("action", "float32", (2, 3), "action"),
        TensorSpec("extra", "float32", (3,)),
    ),
) -> Manifest:
    return Manifest(
        policy_name="tiny",
        inputs=inputs,
        outputs=outputs,
        action_output="action",
        chunk_length=2,
        action_names=("a", "b", "c"),
        control_rate_hz=30.0,
        programs={},
        test_case=TestCaseEntry("t.npz", "0" * 64),
    )


def _engine(method: MethodInfo | None = None, manifest: Manifest | None = None, **kw: Any) -> OpenVINOEngine:
    settings: dict[str, Any] = {
        "device": "CPU",
        "bundle": "b",
        "program": "p.pte",
        "precision": "f32",
        "threads": 1,
        "cpus": [0],
    }
    settings.update(kw)
    return OpenVINOEngine(manifest or _manifest(), method or _method(), **settings)


_CORE = ov.Core  # the real one, for the stand-ins that import as it does


class _RecordingCore:
    """Imports as OpenVINO's Core does (on the CPU), recording what the engine asked for."""

    calls: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def import_model(self, blob: Any, device: str, props: dict[str, Any]) -> Any:
        _RecordingCore.calls.append((device, dict(props)))
        return _CORE().import_model(blob, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


@pytest.fixture
def recording_core(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    _RecordingCore.calls = []
    monkeypatch.setattr(ov, "Core", _RecordingCore)
    return _RecordingCore.calls


def _type_name(precision: Any) -> str:
    return {"<Type: 'float32'>": "f32", "<Type: 'bfloat16'>": "bf16", "<Type: 'float16'>": "f16"}[str(precision)]


# what the direct engine refuses to run


def test_a_program_the_direct_engine_cannot_run_is_refused_with_the_reason() -> None:
    other = DelegateInfo("XnnpackBackend", {}, b"")
    openvino = DelegateInfo("OpenvinoBackend", {}, b"")
    assert direct_engine_refusal(_method(kernel_ops=("aten.b", "aten.a", "aten.b"))) == (
        "ops left on ExecuTorch kernels: aten.a, aten.b"
    )
    assert direct_engine_refusal(_method(delegates=())) == "0 delegates (the direct engine runs exactly one)"
    assert direct_engine_refusal(_method(delegates=(openvino, openvino))) == (
        "2 delegates (the direct engine runs exactly one)"
    )
    assert direct_engine_refusal(_method(delegates=(other,))) == "delegate is XnnpackBackend, not OpenvinoBackend"
    assert direct_engine_refusal(_method(single_delegate=False)) == (
        "the delegate call does not map the method's inputs straight to its outputs"
    )
    assert direct_engine_refusal(_method()) is None
    with pytest.raises(BundleError) as err:
        _engine(_method(kernel_ops=("aten.atan2",)))
    assert (
        str(err.value)
        == "b/p.pte: the openvino engine cannot run this program: ops left on ExecuTorch kernels: aten.atan2"
    )


def test_a_blob_compiled_for_another_device_is_refused() -> None:
    with pytest.raises(BundleError) as err:
        _engine(_method(specs={"device": b"GPU"}))
    assert str(err.value) == "b/p.pte: the delegate was compiled for GPU, not CPU"
    # a delegate that does not say its device is imported for the one asked
    assert _engine(_method(specs={})).info.device == "CPU"


# what the engine hands OpenVINO, read back from the compiled model


@pytest.mark.parametrize("threads", [1, 2])
def test_the_cpu_properties_are_applied(threads: int) -> None:
    engine = _engine(threads=threads, cpus=[5, 7], bundle="tiny-bundle", program="tiny.pte")
    compiled = engine._compiled
    assert compiled.get_property("INFERENCE_NUM_THREADS") == threads
    assert compiled.get_property("ENABLE_CPU_PINNING") is False
    assert str(compiled.get_property("PERFORMANCE_HINT")) == "LATENCY"
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    info = engine.info
    assert (info.engine, info.device, info.precision, info.arithmetic) == ("openvino", "CPU", "f32", "f32")
    assert (info.threads, info.cpus) == (threads, (5, 7))
    assert (info.bundle, info.program, info.openvino_version) == ("tiny-bundle", "tiny.pte", ov.get_version())


def test_the_precision_hint_is_what_the_compiled_model_runs() -> None:
    default = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")  # the plugin's, on this CPU
    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    for precision, capability in (("bf16", "BF16"), ("f16", "FP16")):
        engine = _engine(precision=precision)
        hint = _type_name(engine._compiled.get_property("INFERENCE_PRECISION_HINT"))
        # the hint is applied where the CPU has the type; elsewhere the plugin falls back to one it has:
        # f32 (AVX2), or its own default (bf16 on an AVX-512 BF16 CPU without FP16, as AMD Zen 4)
        if capability in capabilities:
            assert hint == precision
        else:
            assert hint in ("f32", _type_name(default)) and hint != precision
        # what the matrix product really ran at is read from OpenVINO's execution graph
        ran = executed_precision(engine._compiled)
        assert (engine.info.arithmetic, engine.info.precision) == (ran, ran)
    # no hint (an int8 program's float layers, or precision None): the plugin's default
    for precision in (None, "int8"):
        engine = _engine(precision=precision, program_precision="int8")
        assert engine._compiled.get_property("INFERENCE_PRECISION_HINT") == default
        assert engine.info.arithmetic == _type_name(default)
        assert engine.info.precision == "int8"


def test_the_outputs_carry_the_programs_precision_when_it_is_lower() -> None:
    engine = _engine(precision="f32", program_precision="f16")
    assert (engine.info.precision, engine.info.arithmetic) == ("f16", "f32")
    # f32 by default
    assert _engine(precision="f32").info.precision == "f32"


def test_another_device_gets_the_cache_dir_and_no_cpu_settings(recording_core: list[Any]) -> None:
    engine = _engine(_method(specs={"device": b"GPU"}), device="GPU", precision="f32", cache_dir="/var/cache/ov")
    assert recording_core == [
        ("GPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32", "CACHE_DIR": "/var/cache/ov"})
    ]
    assert (engine.info.device, engine.info.threads) == ("GPU", 0)
    recording_core.clear()
    _engine(_method(specs={"device": b"GPU"}), device="GPU", precision=None)
    assert recording_core == [("GPU", {"PERFORMANCE_HINT": "LATENCY"})]
    recording_core.clear()
    # the CPU gets its threads and no pinning, and no cache dir (its blob is already compiled)
    _engine(threads=3, precision="bf16", cache_dir="/var/cache/ov")
    assert recording_core == [
        (
            "CPU",
            {
                "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_PRECISION_HINT": "bf16",
                "INFERENCE_NUM_THREADS": 3,
                "ENABLE_CPU_PINNING": False,
            },
        )
    ]


# a blob OpenVINO cannot import


class _RefusingCore:
    def import_model(self, blob: Any, device: str, props: dict[str, Any]) -> Any:
        raise RuntimeError("Exception from src/inference/src/cpp/core.cpp:131:\n\nbad blob: deserialize failed\n")


@pytest.mark.parametrize(
    ("compiled_by", "why"),
    [
        (
            "SAME",
            "the blob is damaged (OpenVINO {compiled_by} compiled it, the same version as here); make it again from "
            "the bundle's portable program: lerobot-runtime lower b --device CPU",
        ),
        (
            "2024.0.0-1111-abc",
            "either the blob is damaged or another OpenVINO version compiled it (the manifest does not say which); "
            "make it again here: lerobot-runtime lower b --device CPU",
        ),
        (
            "",
            "either the blob is damaged or another OpenVINO version compiled it (the manifest does not say which); "
            "make it again here: lerobot-runtime lower b --device CPU",
        ),
    ],
)
def test_a_blob_that_does_not_import_says_why_and_what_openvino_said(
    monkeypatch: pytest.MonkeyPatch, compiled_by: str, why: str
) -> None:
    installed = ov.get_version()
    if compiled_by == "SAME":  # the same release, another build
        compiled_by = installed.split("-")[0] + "-1-other-build"
    monkeypatch.setattr(ov, "Core", _RefusingCore)
    with pytest.raises(BundleError) as err:
        _engine(compiled_by=compiled_by)
    assert str(err.value) == (
        f"b/p.pte: OpenVINO {installed} could not import the CPU blob: {why.format(compiled_by=compiled_by)}. "
        "OpenVINO says: Exception from src/inference/src/cpp/core.cpp:131: | bad blob: deserialize failed"
    )
    assert isinstance(err.value.__cause__, RuntimeError)


# the program against the manifest


def test_a_program_that_does_not_match_the_manifest_is_refused() -> None:
    x, y = TensorSpec("x", "float32", (2, 4)), TensorSpec("y", "float32", (3,))
    action = TensorSpec("action", "float32", (2, 3), "action")
    cases = [
        (_manifest(inputs=(x,)), "b/p.pte: program has 2 inputs / 2 outputs, manifest declares 1 / 2"),
        (_manifest(outputs=(action,)), "b/p.pte: program has 2 inputs / 2 outputs, manifest declares 2 / 1"),
        (
            _manifest(inputs=(TensorSpec("x", "float32", (4, 2)), y)),
            "b/p.pte: input 'x': manifest shape [4, 2], program shape [2, 4]",
        ),
        (
            _manifest(inputs=(x, TensorSpec("y", "float32", (4,)))),
            "b/p.pte: input 'y': manifest shape [4], program shape [3]",
        ),
    ]
    for manifest, message in cases:
        with pytest.raises(BundleError) as err:
            _engine(manifest=manifest)
        assert str(err.value) == message


def test_a_dynamic_dimension_takes_the_manifests_shape_and_the_next_input_is_still_checked() -> None:
    dynamic = _method(_blob(dynamic=True))
    engine = _engine(dynamic)
    out = engine.infer({"x": np.ones((2, 4), np.float32), "y": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(out["action"], [[18, 22, 26], [18, 22, 26]])
    with pytest.raises(BundleError) as err:
        _engine(dynamic, _manifest(inputs=(TensorSpec("x", "float32", (2, 4)), TensorSpec("y", "float32", (5,)))))
    assert str(err.value) == "b/p.pte: input 'y': manifest shape [5], program shape [3]"


# running


def test_the_outputs_come_back_by_the_manifests_names_and_stay_as_returned() -> None:
    engine = _engine()
    x = np.array([[1, 0, 0, 0], [0, 1, 1, 0]], np.float32)
    first = engine.infer({"x": x, "y": np.array([1.0, -2.0, 0.5], np.float32)})
    assert list(first) == ["action", "extra"]
    np.testing.assert_array_equal(first["action"], [[0, 1, 2], [9, 11, 13]])
    np.testing.assert_array_equal(first["extra"], [2.0, -4.0, 1.0])
    second = engine.infer({"x": np.ones((2, 4), np.float32), "y": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(second["action"], [[18, 22, 26], [18, 22, 26]])
    # the next inference does not write into a chunk already returned
    np.testing.assert_array_equal(first["action"], [[0, 1, 2], [9, 11, 13]])
    np.testing.assert_array_equal(first["extra"], [2.0, -4.0, 1.0])


def test_a_memory_mapped_blob_is_imported_without_a_copy_and_held() -> None:
    data = bytearray(_blob())
    engine = _engine(_method(memoryview(data)))
    held = engine._blob
    assert isinstance(held, ov.Tensor)
    assert np.shares_memory(held.data, np.frombuffer(data, np.uint8))
    assert held.data.dtype == np.uint8 and held.data.shape == (len(data),)
    assert _engine()._blob is None  # bytes: OpenVINO keeps its own copy


def test_import_blob_hands_a_view_over_as_a_shared_tensor() -> None:
    seen: list[tuple[Any, str, dict[str, Any]]] = []

    class Core:
        def import_model(self, blob: Any, device: str, props: dict[str, Any]) -> str:
            seen.append((blob, device, props))
            return "compiled"

    data = bytearray(b"\x01\x02\x03")
    compiled, held = import_blob(Core(), memoryview(data), "NPU", {"k": 1})
    assert compiled == "compiled" and held is seen[0][0]
    assert isinstance(held, ov.Tensor) and np.shares_memory(held.data, np.frombuffer(data, np.uint8))
    assert seen[0][1:] == ("NPU", {"k": 1})
    assert import_blob(Core(), b"\x01\x02", "CPU", {}) == ("compiled", None)
    assert seen[1] == (b"\x01\x02", "CPU", {})


class _Request:
    """A stand-in infer request: records what it is handed and writes only the outputs it is told to."""

    def __init__(self, write: tuple[int, ...], fail: str = "") -> None:
        self.buffers = [np.zeros((2, 3), np.float32), np.zeros(3, np.float32)]
        self.write, self.fail = write, fail
        self.calls: list[tuple[list[np.ndarray], dict[str, Any]]] = []
        self.seen_before_run: list[np.ndarray] = []

    def get_output_tensor(self, i: int) -> Any:
        return type("T", (), {"data": self.buffers[i]})()

    def infer(self, arrays: list[np.ndarray], **kw: Any) -> Any:
        self.calls.append((arrays, kw))
        self.seen_before_run = [b.copy() for b in self.buffers]
        if self.fail:
            raise RuntimeError(self.fail)
        for i in self.write:
            self.buffers[i][...] = 7.0
        return type("R", (), {"to_tuple": lambda _self: tuple(self.buffers)})()


def test_every_output_is_marked_before_a_run_and_the_inputs_are_read_in_place() -> None:
    engine = _engine()
    request = _Request(write=(0, 1))
    engine._request = request
    x, y = np.ones((2, 4), np.float32), np.ones(3, np.float32)
    out = engine.run_validated([x, y])
    ((arrays, kw),) = request.calls
    assert arrays[0] is x and arrays[1] is y and kw == {"share_inputs": True}
    # both buffers held the marker (a signalling NaN) when the program ran
    for before in request.seen_before_run:
        assert np.all(before.view(np.uint32) == 0x7FBADBAD)
    np.testing.assert_array_equal(out["extra"], [7.0, 7.0, 7.0])
    out["extra"][0] = 1.0  # a copy: the request's buffer is not the caller's
    assert request.buffers[1][0] == 7.0


@pytest.mark.parametrize(("write", "name", "count"), [((0,), "extra", 3), ((1,), "action", 6)])
def test_an_output_left_unwritten_is_an_inference_error(
    write: tuple[int, ...], name: str, count: int, caplog: pytest.LogCaptureFixture
) -> None:
    engine = _engine(bundle="tiny-bundle")
    engine._request = _Request(write=write)
    caplog.set_level(logging.ERROR, logger="runtime.engine.openvino_engine")
    with pytest.raises(InferenceError) as err:
        engine.run_validated([np.ones((2, 4), np.float32), np.ones(3, np.float32)])
    total = 3 if name == "extra" else 6
    reason = (
        f"OpenVINO returned without writing output {name!r} ({count} of {total} values unwritten) and reported no "
        "error; the previous result is not served"
    )
    assert str(err.value) == f"inference failed (bundle tiny-bundle, device CPU, method forward): {reason}"
    assert err.value.backend_reason == reason
    assert caplog.messages == [
        f"inference failed: bundle tiny-bundle, program p.pte, device CPU, method forward: {reason}"
    ]


def test_a_failed_run_carries_openvinos_reason_and_the_engine_keeps_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = _engine(bundle="tiny-bundle")
    real = engine._request
    engine._request = _Request(write=(), fail="\n  Exception from src/plugins/intel_cpu: shape mismatch  \n")
    caplog.set_level(logging.ERROR, logger="runtime.engine.openvino_engine")
    with pytest.raises(InferenceError) as err:
        engine.infer({"x": np.ones((2, 4), np.float32), "y": np.ones(3, np.float32)})
    reason = "Exception from src/plugins/intel_cpu: shape mismatch"
    assert str(err.value) == f"inference failed (bundle tiny-bundle, device CPU, method forward): {reason}"
    assert err.value.backend_reason == reason
    assert isinstance(err.value.__cause__, RuntimeError)
    assert caplog.messages == [
        f"inference failed: bundle tiny-bundle, program p.pte, device CPU, method forward: {reason}"
    ]
    engine._request = real
    out = engine.infer({"x": np.ones((2, 4), np.float32), "y": np.ones(3, np.float32)})
    np.testing.assert_array_equal(out["extra"], [2.0, 2.0, 2.0])


def test_close_lets_go_of_the_compiled_model_and_the_blob() -> None:
    engine = _engine(_method(memoryview(bytearray(_blob()))))
    with engine:
        assert engine._blob is not None
    assert (engine._request, engine._compiled, engine._blob) == (None, None, None)
