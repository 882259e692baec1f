"""The ExecuTorch engine on tiny programs the real exporter made (cached on disk, see tests/engine/exported.py).

What the backend really computes at (it passes OpenVINO no properties) is asked of OpenVINO here by
importing the same blob with no properties, as the backend does; never assumed for one kind of CPU.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import numpy as np
import openvino as ov
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch.runtime")

from runtime.bundle.manifest import Manifest, TensorSpec, TestCaseEntry  # noqa: E402
from runtime.bundle.pte import DelegateInfo, MethodInfo, parse_program  # noqa: E402
from runtime.engine import executorch_engine, ovlib  # noqa: E402
from runtime.engine.executorch_engine import (  # noqa: E402
    ExecuTorchEngine,
    _import_failure,
    import_runtime,
    lower_arithmetic,
    lower_arithmetic_refusal,
)
from runtime.engine.precision import executed_precision  # noqa: E402
from runtime.errors import BundleError, InferenceError, MissingDependencyError  # noqa: E402
from tests.engine.exported import program  # noqa: E402

LOG = "runtime.engine.executorch_engine"
X, Y = TensorSpec("x", "float32", (2, 4)), TensorSpec("y", "float32", (3,))
ACTION, EXTRA = TensorSpec("action", "float32", (2, 3), "action"), TensorSpec("extra", "float32", (3,))


def _manifest(inputs: tuple[TensorSpec, ...] = (X, Y), outputs: tuple[TensorSpec, ...] = (ACTION, EXTRA)) -> Manifest:
    return Manifest(
        policy_name="tiny",
        inputs=inputs,
        outputs=outputs,
        action_output=outputs[0].name,
        chunk_length=2,
        action_names=("a", "b", "c"),
        control_rate_hz=30.0,
        programs={},
        test_case=TestCaseEntry("t.npz", "0" * 64),
    )


def _engine(data: bytes | None = None, manifest: Manifest | None = None, **kw: Any) -> ExecuTorchEngine:
    data = program("two_outputs") if data is None else data
    settings: dict[str, Any] = {
        "device": "CPU",
        "bundle": "b",
        "program": "p.pte",
        "requested_precision": None,
        "cpus": [0],
    }
    settings.update(kw)
    return ExecuTorchEngine(manifest or _manifest(), data, parse_program(data)["forward"], **settings)


def _backend_default(data: bytes) -> tuple[str, int]:
    """What OpenVINO runs the program's blob at, imported as ExecuTorch's backend does (no properties)."""
    payload = parse_program(data)["forward"].delegates[0].payload
    compiled = ov.Core().import_model(bytes(payload), "CPU", {})
    return executed_precision(compiled), int(compiled.get_property("INFERENCE_NUM_THREADS"))


def _method(*delegates: DelegateInfo) -> MethodInfo:
    return MethodInfo("forward", 2, 2, delegates, (), len(delegates) == 1)


# loading


def test_the_engine_runs_the_program_and_says_what_it_runs() -> None:
    data = program("two_outputs")
    arithmetic, threads = _backend_default(data)
    engine = _engine(data, cpus=list(range(threads)), bundle="tiny-bundle", program="tiny.pte")
    info = engine.info
    assert (info.engine, info.device, info.arithmetic, info.threads) == ("executorch", "CPU", arithmetic, threads)
    assert info.precision == arithmetic  # an f32 program: what the device computes it at
    assert (info.cpus, info.bundle, info.program) == (tuple(range(threads)), "tiny-bundle", "tiny.pte")
    assert info.openvino_version == ov.get_version()
    x = np.array([[1, 0, 0, 0], [0, 1, 1, 0]], np.float32)
    first = engine.infer({"x": x, "y": np.array([1.0, -2.0, 0.5], np.float32)})
    assert list(first) == ["action", "extra"]
    # small whole numbers: exact at f32 and at bf16 alike
    np.testing.assert_array_equal(first["action"], [[0, 1, 2], [9, 11, 13]])
    np.testing.assert_array_equal(first["extra"], [2.0, -4.0, 1.0])
    second = engine.infer({"x": np.ones((2, 4), np.float32), "y": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(second["action"], [[18, 22, 26], [18, 22, 26]])
    # the next run does not write into a chunk already returned
    np.testing.assert_array_equal(first["action"], [[0, 1, 2], [9, 11, 13]])


def test_the_buffers_marked_before_a_run_are_the_ones_the_program_writes() -> None:
    engine = _engine(read_back=("f32", 1))
    out = engine.infer({"x": np.ones((2, 4), np.float32), "y": np.ones(3, np.float32)})
    # the marked views are the program's own output buffers: the run overwrote the marker in them
    np.testing.assert_array_equal(engine._output_views[0], [[18, 22, 26], [18, 22, 26]])
    np.testing.assert_array_equal(engine._output_views[1], [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(out["extra"], [2.0, 2.0, 2.0])


def test_a_lower_precision_program_keeps_its_precision_and_a_read_back_given_is_used() -> None:
    # the caller's read-back (the loader already imported the blob) is taken as it is
    engine = _engine(program_precision="f16", read_back=("f32", 3), cpus=[0, 1, 2])
    assert (engine.info.precision, engine.info.arithmetic, engine.info.threads) == ("f16", "f32", 3)
    engine = _engine(program_precision="int8", read_back=("bf16", 1))
    assert (engine.info.precision, engine.info.arithmetic) == ("int8", "bf16")


def test_the_read_back_imports_the_openvino_blob_only() -> None:
    data = program("two_outputs")
    method = parse_program(data)["forward"]
    assert ExecuTorchEngine.read_back(method, "CPU") == _backend_default(data)
    # nothing delegated to OpenVINO: ExecuTorch's portable kernels, float32 on the calling thread
    assert ExecuTorchEngine.read_back(_method(), "CPU") == ("f32", 0)
    other = DelegateInfo("XnnpackBackend", {}, b"not an OpenVINO blob")
    assert ExecuTorchEngine.read_back(_method(other), "CPU") == ("f32", 0)
    assert ExecuTorchEngine.read_back(_method(other, method.delegates[0]), "CPU") == _backend_default(data)


def test_the_read_back_on_another_device_counts_no_cpu_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    data = program("two_outputs")
    arithmetic, _ = _backend_default(data)
    core = ov.Core
    imported: list[tuple[str, dict[str, Any]]] = []

    class OnTheCpu:  # imports as OpenVINO's Core does, on the CPU, recording the device asked for
        def import_model(self, blob: Any, device: str, props: dict[str, Any]) -> Any:
            imported.append((device, props))
            return core().import_model(blob, "CPU", props)

    monkeypatch.setattr(ov, "Core", OnTheCpu)
    assert ExecuTorchEngine.read_back(parse_program(data)["forward"], "GPU") == (arithmetic, 0)
    assert imported == [("GPU", {})]


def test_every_input_dtype_is_checked_against_the_program() -> None:
    data = program("every_dtype")
    names = ("u8", "i8", "i32", "i64", "f16", "f32", "b")
    dtypes = ("uint8", "int8", "int32", "int64", "float16", "float32", "bool")
    inputs = tuple(TensorSpec(n, d, (2,)) for n, d in zip(names, dtypes, strict=True))
    manifest = _manifest(inputs, (TensorSpec("sum", "float32", (2,), "action"),))
    engine = _engine(data, manifest, read_back=("f32", 1))
    values = [np.array([1, 2], d) for d in dtypes[:-1]] + [np.array([True, False])]
    out = engine.infer(dict(zip(names, values, strict=True)))
    np.testing.assert_array_equal(out["sum"], [7.0, 12.0])  # six 1s and a True; six 2s and a False
    # each input declared with the dtype of the one after it is refused, naming it and what the program takes
    takes = {
        "u8": "Byte, is_memory_planned=True, nbytes=2",
        "i8": "Char, is_memory_planned=True, nbytes=2",
        "i32": "Int, is_memory_planned=True, nbytes=8",
        "i64": "Long, is_memory_planned=True, nbytes=16",
        "f16": "Half, is_memory_planned=True, nbytes=4",
        "f32": "Float, is_memory_planned=True, nbytes=8",
        "b": "Bool, is_memory_planned=True, nbytes=2",
    }
    for i, name in enumerate(names):
        wrong = dtypes[(i + 1) % len(dtypes)]
        changed = tuple(TensorSpec(s.name, wrong, s.shape) if s.name == name else s for s in inputs)
        with pytest.raises(BundleError) as err:
            _engine(data, _manifest(changed, manifest.outputs), read_back=("f32", 1))
        assert str(err.value) == (
            f"b/p.pte: input {name!r}: manifest says {wrong}[2], program takes "
            f"TensorInfo(sizes=[2], dtype={takes[name]})"
        )


def test_a_program_that_does_not_match_the_manifest_is_refused() -> None:
    cases = [
        (_manifest(inputs=(X,)), "b/p.pte: program has 2 inputs / 2 outputs, manifest declares 1 / 2"),
        (_manifest(outputs=(ACTION,)), "b/p.pte: program has 2 inputs / 2 outputs, manifest declares 2 / 1"),
        (
            _manifest(inputs=(X, TensorSpec("y", "float32", (4,)))),
            "b/p.pte: input 'y': manifest says float32[4], program takes "
            "TensorInfo(sizes=[3], dtype=Float, is_memory_planned=True, nbytes=12)",
        ),
        (
            _manifest(inputs=(TensorSpec("x", "float32", (4, 2)), Y)),
            "b/p.pte: input 'x': manifest says float32[4, 2], program takes "
            "TensorInfo(sizes=[2, 4], dtype=Float, is_memory_planned=True, nbytes=32)",
        ),
    ]
    for manifest, message in cases:
        with pytest.raises(BundleError) as err:
            _engine(manifest=manifest, read_back=("f32", 1))
        assert str(err.value) == message


def _damaged(data: bytes) -> bytes:
    """The program with 16 bytes of its OpenVINO blob's header inverted."""
    payload = bytes(parse_program(data)["forward"].delegates[0].payload)
    at = data.find(payload[:64])
    damaged = bytearray(data)
    for i in range(at + 16, at + 32):
        damaged[i] ^= 0xFF
    return bytes(damaged)


def _openvinos_refusal(data: bytes) -> str:
    payload = bytes(parse_program(data)["forward"].delegates[0].payload)
    with pytest.raises(RuntimeError) as err:
        ov.Core().import_model(payload, "CPU", {})
    return str(err.value)


LOAD_FAILED = "b/p.pte: ExecuTorch could not load method 'forward': Failed to load method forward, error: 0x"


def test_a_blob_that_does_not_load_carries_openvinos_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _damaged(program("two_outputs"))
    reason = _openvinos_refusal(data)
    # the backend freed its core (and the C API's message with it): the blob is imported again for the text
    monkeypatch.setattr(ovlib, "last_error_message", lambda: None)
    with pytest.raises(BundleError) as err:
        _engine(data)
    text = str(err.value)
    assert text.startswith(LOAD_FAILED)
    assert text.endswith("; OpenVINO says: " + " | ".join(line.strip() for line in reason.splitlines() if line.strip()))
    assert "\n" not in text
    assert isinstance(err.value.__cause__, RuntimeError)
    # the C API's own message, when it still has one, is taken first
    monkeypatch.setattr(ovlib, "last_error_message", lambda: "Exception from src/core:\nbad header")
    with pytest.raises(BundleError) as err:
        _engine(data)
    assert str(err.value).endswith("; OpenVINO says: Exception from src/core: | bad header")


def test_a_load_failure_without_openvinos_text_says_what_executorch_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ovlib, "last_error_message", lambda: None)
    monkeypatch.setattr(executorch_engine, "_import_failure", lambda *args: None)
    with pytest.raises(BundleError) as err:
        _engine(_damaged(program("two_outputs")))
    assert (
        str(err.value)
        == "b/p.pte: ExecuTorch could not load method 'forward': Failed to load method forward, error: 0x:1"
    )


def test_openvinos_reason_for_refusing_a_blob_is_found_by_importing_it() -> None:
    data = program("two_outputs")
    damaged = _damaged(data)
    assert _import_failure(ov, parse_program(damaged)["forward"], "CPU") == _openvinos_refusal(damaged)
    assert _import_failure(ov, parse_program(data)["forward"], "CPU") is None  # it imports
    assert _import_failure(ov, _method(), "CPU") is None  # nothing for OpenVINO
    other = DelegateInfo("XnnpackBackend", {}, b"not an OpenVINO blob")
    assert _import_failure(ov, _method(other), "CPU") is None


def test_without_the_runtime_or_its_openvino_backend_the_load_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "executorch.runtime", None)
    with pytest.raises(MissingDependencyError) as err:
        import_runtime()
    assert str(err.value) == (
        "the executorch engine needs the ExecuTorch runtime (import of executorch.runtime halted; None in "
        "sys.modules); install it with pip install 'lerobot-runtime[executorch]', or use --engine openvino"
    )
    monkeypatch.undo()
    asked: list[str] = []

    class Registry:
        def is_available(self, name: str) -> bool:
            asked.append(name)
            return False

    class Runtime:
        backend_registry = Registry()

        @staticmethod
        def get() -> Runtime:
            return Runtime()

    monkeypatch.setattr(executorch_engine, "import_runtime", lambda: (torch, Runtime, None))
    with pytest.raises(MissingDependencyError) as err:
        _engine()
    assert asked == ["OpenvinoBackend"]
    assert str(err.value) == (
        "ExecuTorch's OpenVINO backend is not available in this executorch build; install 'executorch[openvino]' "
        "and openvino (or set OPENVINO_LIB_PATH to libopenvino_c.so)"
    )


def test_the_program_is_loaded_with_minimal_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large program's flatbuffer is not walked whole at load: its digest was checked by the bundle."""
    from executorch.runtime import Runtime, Verification

    asked: list[dict[str, Any]] = []
    real = Runtime.get()

    class Recording:
        backend_registry = real.backend_registry

        def load_program(self, source: Any, **kw: Any) -> Any:
            asked.append(kw)
            return real.load_program(source, **kw)

    monkeypatch.setattr(
        executorch_engine, "import_runtime", lambda: (torch, type("R", (), {"get": Recording}), Verification)
    )
    engine = _engine(read_back=("f32", 1))
    assert asked == [{"verification": Verification.Minimal}]
    np.testing.assert_array_equal(
        engine.infer({"x": np.ones((2, 4), np.float32), "y": np.ones(3, np.float32)})["extra"], [2.0, 2.0, 2.0]
    )


# what is said at load


def _said(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOG]


@pytest.mark.parametrize(
    ("requested", "program_precision", "read_back", "said"),
    [
        (
            "bf16",
            "f32",
            ("f32", 1),
            (
                "WARNING",
                "engine executorch cannot apply INFERENCE_PRECISION_HINT=bf16: ExecuTorch's OpenVINO backend passes "
                "no properties at load, so CPU computes at f32; lower the bundle for that precision (lerobot-runtime "
                "lower BUNDLE --precision bf16) or use --engine openvino",
            ),
        ),
        (
            None,
            "f32",
            ("bf16", 1),
            (
                "WARNING",
                "CPU computes this f32 program at bf16 (the plugin's default, which ExecuTorch's OpenVINO backend "
                "cannot change), as engine.accept_lower_arithmetic allows: the parity gate holds it to the bf16 "
                "tolerance; --engine openvino runs it at f32",
            ),
        ),
        (
            None,
            "bf16",
            ("f32", 1),
            (
                "INFO",
                "CPU has no native bf16 arithmetic: the program's bf16 weights and activations are computed in f32",
            ),
        ),
        (
            None,
            "f16",
            ("bf16", 1),
            (
                "WARNING",
                "CPU computes this f16 program at bf16 (the plugin's default, which ExecuTorch's OpenVINO backend "
                "cannot change), as engine.accept_lower_arithmetic allows: the parity gate holds it to the bf16 "
                "tolerance; --engine openvino runs it at f16",
            ),
        ),
        (None, "f16", ("f16", 1), None),
        (
            None,
            "f16",
            ("f32", 1),
            ("INFO", "CPU has no native f16 arithmetic: the program's f16 weights and activations are computed in f32"),
        ),
        ("f32", "f32", ("f32", 1), None),  # the hint asked for is what runs
        (
            "f32",
            "f32",
            ("bf16", 1),
            (
                "WARNING",
                "engine executorch cannot apply INFERENCE_PRECISION_HINT=f32: ExecuTorch's OpenVINO backend passes "
                "no properties at load, so CPU computes at bf16; lower the bundle for that precision (lerobot-runtime "
                "lower BUNDLE --precision f32) or use --engine openvino",
            ),
        ),
        # a bf16 program computed in f32 carries bf16: the hint asked for is what the outputs carry
        (
            "bf16",
            "bf16",
            ("f32", 1),
            (
                "INFO",
                "CPU has no native bf16 arithmetic: the program's bf16 weights and activations are computed in f32",
            ),
        ),
        ("bf16", "bf16", ("bf16", 1), None),
        (None, "int8", ("bf16", 1), None),  # held to its accuracy gate
        (None, "f32", ("f32", 1), None),
    ],
)
def test_what_is_said_about_the_precision_at_load(
    caplog: pytest.LogCaptureFixture,
    requested: str | None,
    program_precision: str,
    read_back: tuple[str, int],
    said: tuple[str, str] | None,
) -> None:
    caplog.set_level(logging.INFO, logger=LOG)
    _engine(requested_precision=requested, program_precision=program_precision, read_back=read_back)
    assert _said(caplog) == ([said] if said else [])


def test_more_threads_than_cpus_is_said_at_load(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOG)
    _engine(read_back=("f32", 2), cpus=[0, 1])
    _engine(read_back=("f32", 4), cpus=[1, 3], device="GPU")  # the CPU's threads only
    assert _said(caplog) == []
    _engine(read_back=("f32", 3), cpus=[0, 1])
    assert _said(caplog) == [
        (
            "WARNING",
            "OpenVINO's CPU plugin was set up before inference was pinned to CPUs [0, 1]: the executorch engine will "
            "run 3 threads on them (load the engine first in a fresh process, or use --engine openvino, which sets "
            "the thread count)",
        )
    ]


def test_the_refusal_of_a_lower_arithmetic_names_every_way_out() -> None:
    assert lower_arithmetic("f32", "bf16") and lower_arithmetic("f16", "bf16") and lower_arithmetic("f32", "f16")
    assert not lower_arithmetic("f32", "f32") and not lower_arithmetic("bf16", "bf16")
    assert not lower_arithmetic("bf16", "f32")  # computed more exactly than lowered
    assert not lower_arithmetic("int8", "bf16")
    assert lower_arithmetic_refusal("b/p.pte", "CPU", "f32", "bf16", None) == (
        "b/p.pte: the executorch engine would compute this f32 program at bf16 on CPU (OpenVINO's CPU default here, "
        "and ExecuTorch 1.5.1's backend passes OpenVINO no precision); refusing rather than serving bf16 arithmetic "
        "unasked. Ways out: --engine openvino, which runs it at f32; a bf16 program (lerobot-runtime lower BUNDLE "
        "--precision bf16); or engine.accept_lower_arithmetic = true (--accept-lower-arithmetic) to serve it at "
        "bf16, held to the bf16 tolerance"
    )
    assert lower_arithmetic_refusal("b", "GPU", "f16", "bf16", "ops left on ExecuTorch kernels: aten.atan2") == (
        "b: the executorch engine would compute this f16 program at bf16 on GPU (OpenVINO's GPU default here, and "
        "ExecuTorch 1.5.1's backend passes OpenVINO no precision); refusing rather than serving bf16 arithmetic "
        "unasked. Ways out: the openvino engine cannot run this program (ops left on ExecuTorch kernels: "
        "aten.atan2), so lower it for bf16; a bf16 program (lerobot-runtime lower BUNDLE --precision bf16); or "
        "engine.accept_lower_arithmetic = true (--accept-lower-arithmetic) to serve it at bf16, held to the bf16 "
        "tolerance"
    )


# running


class _Native:
    """A stand-in for ExecuTorch's native method: records its call, writes the outputs it is told to."""

    def __init__(self, views: list[np.ndarray], write: tuple[int, ...], fail: str = "") -> None:
        self.views, self.write, self.fail = views, write, fail
        self.calls: list[tuple[list[Any], dict[str, Any]]] = []
        self.seen: list[np.ndarray] = []

    def call(self, tensors: list[Any], **kw: Any) -> list[Any]:
        self.calls.append((tensors, kw))
        self.seen = [v.copy() for v in self.views]
        if self.fail:
            raise RuntimeError(self.fail)
        for i in self.write:
            self.views[i][...] = 5.0
        return [torch.from_numpy(v) for v in self.views]


def _stand_in(engine: ExecuTorchEngine, write: tuple[int, ...], fail: str = "") -> _Native:
    views = [np.zeros((2, 3), np.float32), np.zeros(3, np.float32)]
    engine._output_views = views
    native = _Native(views, write, fail)
    engine._native = native
    return native


def test_the_inputs_go_in_without_a_copy_and_every_output_is_marked_first() -> None:
    engine = _engine(read_back=("f32", 1))
    native = _stand_in(engine, write=(0, 1))
    x, y = np.ones((2, 4), np.float32), np.ones(3, np.float32)
    out = engine.run_validated([x, y])
    ((tensors, kw),) = native.calls
    assert kw == {"clone_outputs": False}
    assert np.shares_memory(tensors[0].numpy(), x) and np.shares_memory(tensors[1].numpy(), y)
    for before in native.seen:  # each output held the marker (a signalling NaN) when the program ran
        assert np.all(before.view(np.uint32) == 0x7FBADBAD)
    np.testing.assert_array_equal(out["extra"], [5.0, 5.0, 5.0])
    assert not np.shares_memory(out["extra"], native.views[1])  # the caller's copy


@pytest.mark.parametrize(("write", "name", "count", "total"), [((0,), "extra", 3, 3), ((1,), "action", 6, 6)])
def test_an_output_left_unwritten_is_an_inference_error(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    write: tuple[int, ...],
    name: str,
    count: int,
    total: int,
) -> None:
    engine = _engine(read_back=("f32", 1), bundle="tiny-bundle")
    _stand_in(engine, write)
    monkeypatch.setattr(ovlib, "last_error_message", lambda: None)
    caplog.set_level(logging.ERROR, logger=LOG)
    with pytest.raises(InferenceError) as err:
        engine.run_validated([np.ones((2, 4), np.float32), np.ones(3, np.float32)])
    reason = (
        f"OpenVINO returned without writing output {name!r} ({count} of {total} values unwritten) and reported no "
        "error; the previous result is not served"
    )
    said = f"OpenVINO says: {reason}"
    assert str(err.value) == f"inference failed (bundle tiny-bundle, device CPU, method forward): {said}"
    assert err.value.backend_reason == reason
    assert _said(caplog) == [
        ("ERROR", f"inference failed: bundle tiny-bundle, program p.pte, device CPU, method forward: {said}")
    ]
    # OpenVINO's own message, when it left one, is the reason
    monkeypatch.setattr(ovlib, "last_error_message", lambda: "Exception from src/plugins: no output")
    with pytest.raises(InferenceError) as err:
        engine.run_validated([np.ones((2, 4), np.float32), np.ones(3, np.float32)])
    assert err.value.backend_reason == "Exception from src/plugins: no output"
    assert str(err.value).endswith("method forward): OpenVINO says: Exception from src/plugins: no output")


def test_a_failed_run_carries_openvinos_reason_or_says_there_was_none(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    engine = _engine(read_back=("f32", 1), bundle="tiny-bundle")
    _stand_in(engine, write=(), fail="Failed to execute method forward, error: 0x30")
    monkeypatch.setattr(ovlib, "last_error_message", lambda: "Exception from src/plugins: shape mismatch")
    caplog.set_level(logging.ERROR, logger=LOG)
    arrays = [np.ones((2, 4), np.float32), np.ones(3, np.float32)]
    with pytest.raises(InferenceError) as err:
        engine.run_validated(arrays)
    detail = "Failed to execute method forward, error: 0x30; OpenVINO says: Exception from src/plugins: shape mismatch"
    assert str(err.value) == f"inference failed (bundle tiny-bundle, device CPU, method forward): {detail}"
    assert err.value.backend_reason == "Exception from src/plugins: shape mismatch"
    assert isinstance(err.value.__cause__, RuntimeError)
    assert _said(caplog) == [
        ("ERROR", f"inference failed: bundle tiny-bundle, program p.pte, device CPU, method forward: {detail}")
    ]
    monkeypatch.setattr(ovlib, "last_error_message", lambda: None)
    with pytest.raises(InferenceError) as err:
        engine.run_validated(arrays)
    assert str(err.value) == (
        "inference failed (bundle tiny-bundle, device CPU, method forward): Failed to execute method forward, "
        "error: 0x30; no OpenVINO message (Failed to execute method forward, error: 0x30)"
    )
    assert err.value.backend_reason is None


def test_close_lets_go_of_the_program() -> None:
    with _engine(read_back=("f32", 1)) as engine:
        assert engine._native is not None
    assert (engine._output_views, engine._native, engine._method, engine._program) == ([], None, None, None)
