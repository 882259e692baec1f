"""What ``export`` decides before and around lowering, on tiny torch models and a stand-in lowering.

Lowering itself (ExecuTorch + OpenVINO, seconds per program) is replaced by a program built by hand
(``tests/bundle/programs.py``), so every check, refusal and manifest field of ``export_bundle`` and
``lower_bundle`` runs in well under a second. Real lowerings of real models are in the export tests
(``tests/engine/test_export_checks.py``, ``test_engines.py``, ``test_lowering_checks.py``).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import operator
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.bundle.manifest import RtcEntry
from runtime.errors import BundleError, DeviceError, ExportError
from runtime.export import export, prove
from runtime.export.export import (
    _program_entry,
    check_device_present,
    export_bundle,
    lower_bundle,
    parse_tolerance,
    staged_directory,
)
from runtime.export.trace import _named_outputs, _strip_batch, _tensor_dtype, default_scale, input_role, load_factory
from tests.bundle import programs

torch = pytest.importorskip("torch")

SO101 = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


# --- the factory -------------------------------------------------------------------------------


def test_a_factory_is_loaded_from_a_file_or_a_module(tmp_path: Path) -> None:
    f = tmp_path / "my_policy.py"
    f.write_text("def make():\n    return 'from the file'\nNOT_A_FUNCTION = 3\n")
    assert load_factory(f"{f}:make")() == "from the file"
    assert load_factory("runtime.export.export:parse_tolerance") is parse_tolerance
    # the module path may itself hold colons: the function is after the last one
    d = tmp_path / "a:b"
    d.mkdir()
    (d / "p.py").write_text("def make():\n    return 2\n")
    assert load_factory(f"{d / 'p.py'}:make")() == 2


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("make_policy", "--factory: expected FILE.py:FUNC or module:FUNC, got 'make_policy'"),
        (":make", "--factory: expected FILE.py:FUNC or module:FUNC, got ':make'"),
        ("policy.py:", "--factory: expected FILE.py:FUNC or module:FUNC, got 'policy.py:'"),
        ("no/such/policy.py:make", "--factory: no/such/policy.py does not exist"),
        ("runtime.export.export:NO_SUCH", "--factory: runtime.export.export has no function 'NO_SUCH'"),
        ("runtime.export.export:PORTABLE_FILE", "--factory: runtime.export.export has no function 'PORTABLE_FILE'"),
        (
            "runtime.no_such_module:make",
            "--factory: cannot import module 'runtime.no_such_module': No module named 'runtime.no_such_module'",
        ),
    ],
)
def test_a_factory_that_cannot_be_found_is_refused_naming_what(spec: str, expected: str) -> None:
    with pytest.raises(ExportError) as err:
        load_factory(spec)
    assert str(err.value) == expected


def test_a_factory_file_without_the_function_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "p.py"
    f.write_text("X = 1\n")
    with pytest.raises(ExportError) as err:
        load_factory(f"{f}:X")
    assert str(err.value) == f"--factory: {f} has no function 'X'"
    with pytest.raises(ExportError) as err:
        load_factory(f"{tmp_path}:make")  # a directory, not a .py file: imported as a module name
    assert str(err.value).startswith(f"--factory: cannot import module {str(tmp_path)!r}: ")


# --- small rules -------------------------------------------------------------------------------


def test_the_device_must_be_known_and_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export, "present_devices", lambda: ["CPU", "GPU"])
    check_device_present("CPU")
    check_device_present("GPU")
    with pytest.raises(DeviceError) as err:
        check_device_present("TPU")
    assert str(err.value) == "--device: expected one of CPU, GPU, NPU, got 'TPU'"
    with pytest.raises(DeviceError) as err:
        check_device_present("NPU")
    assert str(err.value) == (
        "OpenVINO does not see a NPU on this machine (it sees: CPU, GPU). OpenVINO compiles only for devices "
        "that are present: lower the NPU program on the machine that has it, with: "
        "lerobot-runtime lower BUNDLE --device NPU"
    )
    monkeypatch.setattr(export, "present_devices", lambda: [])
    with pytest.raises(DeviceError, match=r"\(it sees: none\)"):
        check_device_present("CPU")


def test_tolerances_are_read_per_precision() -> None:
    assert parse_tolerance("f32=1e-4, bf16=0.05") == {"f32": 1e-4, "bf16": 0.05}
    assert parse_tolerance(" int8=0 ,, f16=2") == {"int8": 0.0, "f16": 2.0}
    assert parse_tolerance("") == {}
    expected = (
        "--tolerance: expected PRECISION=NUMBER entries with a precision among f32, f16, bf16, int8 and a "
        "non-negative number, got {!r}"
    )
    for bad in ("f64=1", "f32=-1", "f32", "f32=x", "f32=nan", "=1"):
        with pytest.raises(ExportError) as err:
            parse_tolerance(f"bf16=0.1,{bad}")
        assert str(err.value) == expected.format(bad)


def test_input_roles_explicit_images_win_else_frames_and_names() -> None:
    frame = torch.zeros(4, 5, 3, dtype=torch.uint8)
    chw = torch.zeros(3, 4, 5)
    vec = torch.zeros(6)
    assert input_role("cam", frame, None) == "image"  # a uint8 H x W x C frame
    assert input_role("observation.images.front", chw, None) == "image"  # LeRobot's name, float CHW
    assert input_role("cam", torch.zeros(4, 5, 3), None) == "other"  # float HWC: not a frame by type
    assert input_role("cam", torch.zeros(1, 4, 5, 3, dtype=torch.uint8), None) == "other"  # 4-d
    assert input_role("observation.environment_state", vec, None) == "env"
    assert input_role("observation.state", vec, None) == "state"
    assert input_role("joints", vec, None) == "other"
    # explicit image names: only those are images, whatever their type or name
    assert input_role("cam", chw, {"cam"}) == "image"
    assert input_role("observation.image", frame, {"cam"}) == "other"
    assert input_role("observation.state", frame, set()) == "state"
    assert input_role("observation.environment_state", frame, set()) == "env"


def test_a_dtype_a_bundle_cannot_carry_is_refused() -> None:
    assert _tensor_dtype("input", "x", torch.zeros(1, dtype=torch.int32)) == "int32"
    assert _tensor_dtype("output", "y", torch.zeros(1, dtype=torch.bool)) == "bool"
    with pytest.raises(ExportError) as err:
        _tensor_dtype("output", "y", torch.zeros(1, dtype=torch.float64))
    assert str(err.value) == (
        "output 'y': dtype float64 is not one a bundle carries (float32, float16, uint8, int8, int32, int64, bool)"
    )


def test_the_default_scale_is_each_joints_peak_magnitude_at_least_one() -> None:
    ref = np.array([[0.5, -40.0, 2.0], [-0.25, 10.0, -3.0]], np.float32)
    assert default_scale(ref) == ((1.0, 40.0, 3.0), "max(1, peak |reference| per joint)")
    assert default_scale(np.array([[[0.1, -7.5]], [[2.5, 1.0]]], np.float32))[0] == (2.5, 7.5)


def test_outputs_are_named_action_then_output_k() -> None:
    a, b, c = torch.zeros(1), torch.ones(1), torch.zeros(2)
    assert _named_outputs(a) == {"action": a}
    assert _named_outputs((a, b, c)) == {"action": a, "output_1": b, "output_2": c}
    assert _named_outputs([a, b]) == {"action": a, "output_1": b}
    named = {"action": a, "value": b}
    assert _named_outputs(named) == named and _named_outputs(named) is not named
    with pytest.raises(ExportError) as err:
        _named_outputs(3.0)
    assert str(err.value) == "the model returned float; expected a tensor, a tuple or a dict of tensors"


def test_the_batch_of_one_is_stripped_from_every_input_and_output() -> None:
    x, y = torch.arange(6.0).reshape(1, 6), torch.arange(4.0).reshape(1, 2, 2)
    ex, ref = _strip_batch({"x": x}, {"action": y})
    assert ex["x"].tolist() == [0, 1, 2, 3, 4, 5] and ref["action"].tolist() == [[0, 1], [2, 3]]
    for kind, example, reference, name, shape in (
        ("input", {"x": torch.zeros(2, 6)}, {"action": y}, "x", [2, 6]),
        ("input", {"x": torch.tensor(1.0)}, {"action": y}, "x", []),
        ("output", {"x": x}, {"action": y, "extra": torch.zeros(3)}, "extra", [3]),
    ):
        with pytest.raises(ExportError) as err:
            _strip_batch(example, reference)
        assert str(err.value) == (
            f"{kind} {name!r}: the action output has a leading batch dimension of 1, so every input and output "
            f"must have one too (the program removes it); {name!r} has shape {shape}"
        )


def test_a_staged_directory_replaces_the_bundle_only_when_it_succeeds(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "bundle"
    with staged_directory(out) as stage:
        assert stage.parent == out.parent and stage.name.startswith(".bundle.partial-")
        (stage / "a").write_text("first")
    assert (out / "a").read_text() == "first"

    with pytest.raises(RuntimeError), staged_directory(out) as stage:
        (stage / "a").write_text("second")
        raise RuntimeError("export failed")
    assert (out / "a").read_text() == "first"
    assert sorted(p.name for p in out.parent.iterdir()) == ["bundle"]  # nothing partial left

    with staged_directory(out) as stage:
        (stage / "b").write_text("third")
    assert sorted(p.name for p in out.iterdir()) == ["b"]  # replaced whole
    assert sorted(p.name for p in out.parent.iterdir()) == ["bundle"]  # the old one removed


def test_a_program_entry_records_its_delegation(caplog: pytest.LogCaptureFixture) -> None:
    full = programs.build()
    entry = _program_entry(full, "CPU", "program_cpu.pte", "bf16")
    assert (entry.device, entry.file, entry.precision, entry.delegation) == ("CPU", "program_cpu.pte", "bf16", "full")
    import hashlib

    assert entry.sha256 == hashlib.sha256(full).hexdigest()
    assert entry.openvino_version == importlib.metadata.version("openvino")

    partial = programs.build(
        [
            programs.Method(
                operators=["aten::mul", "aten::add"],
                instructions=[(programs.DELEGATE_CALL, 0, [0, 1, 2]), (programs.KERNEL_CALL, 1, [2, 2, 2])],
            )
        ]
    )
    with caplog.at_level(logging.WARNING, logger="runtime.export"):
        assert _program_entry(partial, "CPU", "p.pte", "f32").delegation == "partial"
    assert [r.getMessage() for r in caplog.records] == [
        "p.pte: 1 op(s) stay on ExecuTorch's portable kernels (aten::add); the openvino engine cannot run "
        "this program, the executorch engine will"
    ]


# --- export_bundle, with the lowering stood in for ----------------------------------------------


class Lowering:
    """Stands in for ``lower_program``: records what it was asked and returns a hand-built program."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.dtypes: list[set[str]] = []  # of each program's graph: the precision it was lowered at
        self.program = programs.build()

    def __call__(
        self, exported: Any, device: str, *, input_names: tuple[str, ...] = (), output_names=(), snippets: bool = False
    ) -> bytes:
        self.calls.append({"device": device, "inputs": input_names, "outputs": output_names, "snippets": snippets})
        graph = getattr(exported, "graph", None)
        nodes = graph.nodes if graph is not None else ()
        self.dtypes.append({str(v.dtype) for n in nodes if isinstance(v := n.meta.get("val"), torch.Tensor)})
        return self.program


def gate_found(
    error: float = 1e-6, precision: str = "f32", *, engine: str = "openvino", program: str = "f32"
) -> dict[str, Any]:
    """What the load gate child reports (runtime.export.prove.run_gate) for an error, the precision it ran
    at and the program's own."""
    parity = {
        "max_abs_err": error,
        "tolerance": 1e-3,
        "ok": True,
        "output": "action",
        "index": [0, 0],
        "got": 0.0,
        "expected": 0.0,
        "units": "absolute",
        "runs": 16,
        "failed_run": 0,
    }
    return {
        "engine": engine,
        "device": "CPU",
        "precision": precision,
        "program_precision": program,
        "below_program": engine == "executorch" and program == "f32" and precision != "f32",
        "parity": parity,
        "describe": f"max abs error {error:.3g} over 16 replays",
        "cpu": "avx2",
        "ready_ms": 1.0,
    }


@pytest.fixture
def lowering(monkeypatch: pytest.MonkeyPatch) -> Lowering:
    """The lowering stood in for, and the load gate's child (a hand-built program does not run)."""
    stand_in = Lowering()
    monkeypatch.setattr(export, "lower_program", stand_in)
    monkeypatch.setattr(export, "present_devices", lambda: ["CPU", "GPU"])
    monkeypatch.setattr(prove, "measure", lambda stage, device: gate_found())
    return stand_in


class Chunk(torch.nn.Module):  # type: ignore[misc]
    """state (6) and a uint8 frame (4 x 4 x 3) -> a chunk of ``chunk`` x ``dim`` actions."""

    def __init__(self, chunk: int = 3, dim: int = 6, batch: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = torch.nn.Linear(6 + 48, chunk * dim)
        self.shape = (1, chunk, dim) if batch else (chunk, dim)

    def forward(self, state: Any, frame: Any) -> Any:
        flat = torch.cat([state.reshape(-1), frame.reshape(-1).float() / 255.0])
        return self.head(flat).reshape(self.shape)


def make_chunk_policy() -> tuple[Any, dict[str, Any]]:
    gen = torch.Generator().manual_seed(1)
    return Chunk(), {
        "observation.state": torch.rand(6, generator=gen),
        "cam": torch.randint(0, 255, (4, 4, 3), dtype=torch.uint8, generator=gen),
    }


def test_a_bundle_is_written_with_its_manifest_test_case_and_program(tmp_path: Path, lowering: Lowering) -> None:
    bundle = export_bundle(make_chunk_policy, tmp_path / "b", control_rate_hz=25, description="two inputs")

    m = bundle.manifest
    assert m.policy_name == "chunk_policy"  # the factory's name without make_
    assert m.description == "two inputs"
    assert [(s.name, s.dtype, s.shape, s.role) for s in m.inputs] == [
        ("observation.state", "float32", (6,), "state"),
        ("cam", "uint8", (4, 4, 3), "image"),
    ]
    assert [(s.name, s.dtype, s.shape, s.role) for s in m.outputs] == [("action", "float32", (3, 6), "action")]
    assert (m.action_output, m.chunk_length, m.action_names) == ("action", 3, SO101)
    assert m.control_rate_hz == 25.0 and isinstance(m.control_rate_hz, float)
    assert (m.model_batch, m.observation_history, m.language, m.rtc) == (0, 1, None, None)
    assert m.test_case.tolerance == {"f32": 2e-5, "f16": 0.075, "bf16": 0.075, "int8": 0.15}
    assert m.test_case.scale_source == "max(1, peak |reference| per joint)"
    assert set(m.programs) == {"CPU"}
    entry = m.programs["CPU"]
    assert (entry.file, entry.precision, entry.delegation) == ("program_cpu.pte", "f32", "full")
    assert (bundle.path / "program_cpu.pte").read_bytes() == lowering.program
    assert lowering.calls == [
        {"device": "CPU", "inputs": ("observation.state", "cam"), "outputs": ("action",), "snippets": False}
    ]
    assert set(m.tools) == {"lerobot_runtime", "torch", "executorch", "openvino", "nncf", "python"}
    assert m.source == {}

    # the test case is the eager model's own answer to the example inputs
    model, example = make_chunk_policy()
    with torch.no_grad():
        expected = model(*example.values()).numpy()
    case = bundle.test_case()
    np.testing.assert_array_equal(case.inputs["cam"], example["cam"].numpy())
    np.testing.assert_array_equal(case.outputs["action"], expected)
    assert m.test_case.scale == {"action": tuple(float(v) for v in np.maximum(np.abs(expected).max(axis=0), 1.0))}
    # the portable program is the model, loadable and giving the same answer
    loaded = torch.export.load(str(bundle.path / "model.pt2")).module()
    np.testing.assert_allclose(loaded(*example.values()).detach().numpy(), expected, rtol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


class Tasked(torch.nn.Module):  # type: ignore[misc]
    """state, task tokens and their mask -> a chunk of 2 x 6 actions."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = torch.nn.Linear(6 + 4, 12)

    def forward(self, state: Any, tokens: Any, mask: Any) -> Any:
        return self.head(torch.cat([state, tokens.float() * mask.float()])).reshape(2, 6)


def make_tasked_policy() -> tuple[Any, dict[str, Any]]:
    return Tasked(), {
        "observation.state": torch.linspace(0, 1, 6),
        "tokens": torch.tensor([5, 9, 0, 0]),
        "mask": torch.tensor([True, True, False, False]),
    }


def test_every_option_reaches_the_manifest(tmp_path: Path, lowering: Lowering) -> None:
    tokenizer = json.dumps({"model": {"type": "WordLevel"}})
    bundle = export_bundle(
        "tests.export.test_export_rules:make_tasked_policy",
        tmp_path / "b",
        device="GPU",
        policy_name="mine",
        action_names=("a", "b", "c", "d", "e", "f"),
        image_inputs=(),
        tolerance={"f32": 1e-3},
        action_scale=(1, 2, 3, 4, 5, 6),
        scale_source="the action's std",
        source={"checkpoint": "ckpt"},
        input_roles={"observation.state": "other", "tokens": "language", "mask": "language"},
        language={"definition": tokenizer, "tokens_input": "tokens", "mask_input": "mask", "max_length": 4},
    )
    m = bundle.manifest
    assert m.policy_name == "mine" and m.action_names == ("a", "b", "c", "d", "e", "f")
    assert [(s.name, s.dtype, s.role) for s in m.inputs] == [
        ("observation.state", "float32", "other"),  # a role given outright wins over the name
        ("tokens", "int64", "language"),
        ("mask", "bool", "language"),
    ]
    assert m.test_case.tolerance == {"f32": 1e-3, "f16": 0.075, "bf16": 0.075, "int8": 0.15}
    assert m.test_case.scale == {"action": (1, 2, 3, 4, 5, 6)} and m.test_case.scale_source == "the action's std"
    assert m.source == {"checkpoint": "ckpt"}
    assert set(m.programs) == {"GPU"} and m.programs["GPU"].file == "program_gpu.pte"
    assert (bundle.path / "program_gpu.pte").read_bytes() == lowering.program
    assert lowering.calls[0]["device"] == "GPU"
    assert m.language is not None
    assert (m.language.tokens_input, m.language.mask_input, m.language.max_length) == ("tokens", "mask", 4)
    assert (m.language.append_newline, m.language.max_task_bytes) == (False, 512)
    assert m.language.tokenizer.file == "tokenizer.json"
    assert (bundle.path / "tokenizer.json").read_text() == tokenizer


def test_explicit_image_inputs_are_the_only_images(tmp_path: Path, lowering: Lowering) -> None:
    roles = [s.role for s in export_bundle(make_chunk_policy, tmp_path / "b", image_inputs=()).manifest.inputs]
    assert roles == ["state", "other"]  # the uint8 frame is not an image when the images are named


def test_a_model_with_a_batch_of_one_is_exported_unbatched(tmp_path: Path, lowering: Lowering) -> None:
    def make_batched() -> tuple[Any, dict[str, Any]]:
        model, example = make_chunk_policy()
        model.shape = (1, 3, 6)
        return _Batched(model), {k: v.unsqueeze(0) for k, v in example.items()}

    m = export_bundle(make_batched, tmp_path / "b", action_names=tuple("abcdef")).manifest
    assert m.model_batch == 1 and m.chunk_length == 3
    assert [s.shape for s in m.inputs] == [(6,), (4, 4, 3)] and m.outputs[0].shape == (3, 6)


class _Batched(torch.nn.Module):  # type: ignore[misc]
    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, state: Any, frame: Any) -> Any:
        return self.inner(state[0], frame[0]).reshape(1, 3, 6)


def test_an_action_of_other_than_six_joints_is_named_joint_k(tmp_path: Path, lowering: Lowering) -> None:
    def make() -> tuple[Any, dict[str, Any]]:
        return Chunk(chunk=2, dim=4), make_chunk_policy()[1]

    assert export_bundle(make, tmp_path / "b").manifest.action_names == ("joint_0", "joint_1", "joint_2", "joint_3")


class _ValueThenAction(torch.nn.Module):  # type: ignore[misc]
    """A batch-first model returning a value before its action, as a dict or as a tuple (action first)."""

    def __init__(self, as_tuple: bool = False) -> None:
        super().__init__()
        self.inner = Chunk(batch=True)
        self.as_tuple = as_tuple

    def forward(self, state: Any, frame: Any) -> Any:
        action = self.inner(state[0], frame[0])
        value = action.sum().reshape(1, 1)
        return (action, value) if self.as_tuple else {"value": value, "action": action}


@pytest.mark.parametrize("as_tuple", [False, True], ids=["dict", "tuple"])
def test_a_batched_model_with_several_outputs_is_unbatched_by_its_action(
    tmp_path: Path, lowering: Lowering, as_tuple: bool
) -> None:
    # the batch is recognised on the action, wherever it stands among the outputs, and every output loses it
    def make() -> tuple[Any, dict[str, Any]]:
        return _ValueThenAction(as_tuple), {k: v.unsqueeze(0) for k, v in make_chunk_policy()[1].items()}

    bundle = export_bundle(make, tmp_path / "b")
    m = bundle.manifest
    other = "output_1" if as_tuple else "value"
    assert m.model_batch == 1 and m.chunk_length == 3
    outputs = sorted((s.name, s.shape, s.role) for s in m.outputs)
    assert outputs == [("action", (3, 6), "action"), (other, (1,), "other")]
    # the portable program takes and gives what the wire carries: no batch
    model, example = make()
    loaded = torch.export.load(str(bundle.path / "model.pt2")).module()
    got = loaded(*(v[0] for v in example.values()))
    with torch.no_grad():
        want = model(*example.values())
    want_action, want_value = (want[0], want[1]) if as_tuple else (want["action"], want["value"])
    got_action, got_value = (got[0], got[1]) if as_tuple else (got["action"], got["value"])
    torch.testing.assert_close(got_action, want_action[0])
    torch.testing.assert_close(got_value, want_value[0])


class _Factory:
    """A factory that is an object, not a function: it has no ``__name__``."""

    def __call__(self) -> tuple[Any, dict[str, Any]]:
        return make_chunk_policy()


def test_what_is_not_given_takes_its_default(tmp_path: Path, lowering: Lowering) -> None:
    m = export_bundle(_Factory(), tmp_path / "b", action_scale=(1, 1, 1, 1, 1, 1)).manifest
    assert m.policy_name == "policy"
    assert m.control_rate_hz == 30.0 and m.description == ""
    assert (m.test_case.scale, m.test_case.scale_source) == ({"action": (1, 1, 1, 1, 1, 1)}, "")


def _steps(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The progress lines, each step's duration cut off."""
    return [
        r.getMessage().split(" done in ")[0] + (" done" if " done in " in r.getMessage() else "")
        for r in caplog.records
        if r.getMessage().startswith("[")
    ]


def test_the_slow_steps_are_told_as_each_starts_and_ends(
    tmp_path: Path, lowering: Lowering, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="runtime.export"):
        export_bundle(make_chunk_policy, tmp_path / "b")
    said = [
        "[1/5] building the model and its eager reference",
        "[2/5] exporting with torch.export",
        "[3/5] lowering to OpenVINO for CPU (f32)",
        "[4/5] writing the test case and manifest",
        "[5/5] proving the bundle: the load gate on this machine",
    ]
    assert _steps(caplog) == [line for step in said for line in (f"{step} ...", f"{step} done")]
    assert all(
        r.getMessage().endswith(" s") and float(r.getMessage().split(" done in ")[1][:-2]) >= 0
        for r in caplog.records
        if " done in " in r.getMessage()
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="runtime.export"):
        lower_bundle(tmp_path / "b", "GPU")
    said = ["[1/2] loading model.pt2", "[2/2] lowering to OpenVINO for GPU (f32)"]
    assert _steps(caplog) == [line for step in said for line in (f"{step} ...", f"{step} done")]


class _Guided(torch.nn.Module):  # type: ignore[misc]
    """Two frames of state and the previous chunk's leftover (its weights, a guidance cap) -> 3 x 6."""

    def forward(self, state: Any, prefix: Any, weights: Any, guidance: Any) -> Any:
        return state.mean(0) + prefix * weights[:, None] * guidance


def make_guided_policy() -> tuple[Any, dict[str, Any]]:
    return _Guided(), {
        "observation.state": torch.linspace(0, 1, 12).reshape(2, 6),
        "rtc.prefix": torch.ones(3, 6),
        "rtc.weights": torch.linspace(1, 0, 3),
        "rtc.guidance": torch.tensor([5.0]),
    }


def test_history_and_real_time_chunking_reach_the_manifest_and_the_time_of_export_is_utc(
    tmp_path: Path, lowering: Lowering
) -> None:
    import datetime as dt

    rtc = {
        "prefix_input": "rtc.prefix",
        "weights_input": "rtc.weights",
        "guidance_input": "rtc.guidance",
        "chunk_size": 3,
        "execution_horizon": 2,
        "prefix_attention_schedule": "LINEAR",
        "max_guidance_weight": 5.0,
    }
    roles = {"rtc.prefix": "prefix", "rtc.weights": "prefix_weights", "rtc.guidance": "guidance"}
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    m = export_bundle(make_guided_policy, tmp_path / "b", observation_history=2, input_roles=roles, rtc=rtc).manifest
    after = dt.datetime.now(dt.UTC)
    assert m.observation_history == 2 and m.inputs[0].shape == (2, 6)
    assert m.rtc == RtcEntry("rtc.prefix", "rtc.weights", "rtc.guidance", 3, 2, "LINEAR", 5.0)
    created = dt.datetime.fromisoformat(m.created_utc)
    assert created.utcoffset() == dt.timedelta(0) and created.microsecond == 0
    assert before <= created <= after
    assert m.created_utc == created.isoformat() and m.created_utc.endswith("+00:00")


def _refusal(tmp_path: Path, make: Any, **options: Any) -> str:
    with pytest.raises(ExportError) as err:
        export_bundle(make, tmp_path / "b", **options)
    assert not (tmp_path / "b").exists()
    return str(err.value)


@pytest.mark.parametrize("precision", ["int8", "f64"])
def test_a_precision_export_cannot_make_is_refused(tmp_path: Path, lowering: Lowering, precision: str) -> None:
    assert _refusal(tmp_path, make_chunk_policy, precision=precision) == (
        f"--precision: expected one of f32, f16, bf16 (int8 comes from lerobot-runtime quantize), got {precision!r}"
    )
    assert lowering.calls == []


def test_what_the_factory_returns_is_checked(tmp_path: Path, lowering: Lowering) -> None:
    expected = "the factory must return (torch.nn.Module, dict[str, torch.Tensor])"
    assert _refusal(tmp_path, lambda: Chunk()) == expected
    assert _refusal(tmp_path, lambda: (Chunk(), [1], 2)) == expected
    assert _refusal(tmp_path, lambda: (Chunk(), [torch.zeros(6)])) == expected
    assert _refusal(tmp_path, lambda: (Chunk(), {"state": [0.0] * 6})) == (
        "example input 'state': expected a torch.Tensor, got list"
    )
    assert lowering.calls == []


class _Returns(torch.nn.Module):  # type: ignore[misc]
    def __init__(self, out: Any) -> None:
        super().__init__()
        self.out = out

    def forward(self, x: Any) -> Any:
        return self.out


def test_the_eager_failure_names_the_error_and_the_inputs(tmp_path: Path, lowering: Lowering) -> None:
    class Fails(torch.nn.Module):  # type: ignore[misc]
        def forward(self, x: Any, y: Any) -> Any:
            raise ValueError("no")

    assert _refusal(tmp_path, lambda: (Fails(), {"x": torch.zeros(2, 3), "y": torch.zeros(1)})) == (
        "the eager run failed: ValueError: no (inputs: x [2, 3], y [1])"
    )


def test_outputs_are_checked_before_the_slow_steps(tmp_path: Path, lowering: Lowering) -> None:
    x = {"x": torch.zeros(3)}
    assert _refusal(tmp_path, lambda: (_Returns({"action": torch.zeros(2, 6), "v": 1.0}), x)) == (
        "output 'v': expected a torch.Tensor, got float"
    )
    shape_error = (
        "output 'action': expected a [chunk_length, action_dim] tensor (or [1, chunk_length, action_dim] for a "
        "model with a batch dimension), got shape {}"
    )
    assert _refusal(tmp_path, lambda: (_Returns(torch.zeros(6)), x)) == shape_error.format([6])
    assert _refusal(tmp_path, lambda: (_Returns(torch.zeros(2, 2, 6)), x)) == shape_error.format([2, 2, 6])
    assert _refusal(tmp_path, lambda: (_Returns({"value": torch.zeros(2, 6)}), x)) == shape_error.format(None)
    assert _refusal(tmp_path, lambda: (_Returns(torch.zeros(2, 6, dtype=torch.float64)), x)) == (
        "output 'action': dtype float64 is not one a bundle carries (float32, float16, uint8, int8, int32, int64, bool)"
    )
    assert _refusal(tmp_path, lambda: (_Returns(torch.zeros(2, 6)), {"x": torch.zeros(3, dtype=torch.float64)})) == (
        "input 'x': dtype float64 is not one a bundle carries (float32, float16, uint8, int8, int32, int64, bool)"
    )
    assert lowering.calls == []


def test_names_scales_images_and_roles_are_checked_against_the_model(tmp_path: Path, lowering: Lowering) -> None:
    assert _refusal(tmp_path, make_chunk_policy, action_names=("a", "b")) == (
        "--action-names: the action has 6 values per step, 2 names given"
    )
    assert _refusal(tmp_path, make_chunk_policy, action_scale=(1.0,) * 5) == (
        "action scale: expected 6 positive values, got [1.0, 1.0, 1.0, 1.0, 1.0]"
    )
    assert _refusal(tmp_path, make_chunk_policy, action_scale=(1.0, 1.0, 1.0, 1.0, 1.0, 0.0)) == (
        "action scale: expected 6 positive values, got [1.0, 1.0, 1.0, 1.0, 1.0, 0.0]"
    )
    assert _refusal(tmp_path, make_chunk_policy, image_inputs=("cam", "wrist", "top")) == (
        "--image-inputs: wrist, top is not an input (inputs: observation.state, cam)"
    )
    roles = "image, state, env, other, noise, language, prefix, prefix_weights, guidance"
    assert _refusal(tmp_path, make_chunk_policy, input_roles={"cam": "camera"}) == (
        f"input roles: expected an input (observation.state, cam) with a role among {roles}, got 'cam': 'camera'"
    )
    assert _refusal(tmp_path, make_chunk_policy, input_roles={"wrist": "image"}) == (
        f"input roles: expected an input (observation.state, cam) with a role among {roles}, got 'wrist': 'image'"
    )
    assert lowering.calls == []


def test_a_failed_lowering_leaves_the_old_bundle(
    tmp_path: Path, lowering: Lowering, monkeypatch: pytest.MonkeyPatch
) -> None:
    export_bundle(make_chunk_policy, tmp_path / "b")
    before = (tmp_path / "b" / "manifest.json").read_bytes()

    def fails(*args: Any, **kwargs: Any) -> bytes:
        raise ExportError("lowering for CPU failed: boom")

    monkeypatch.setattr(export, "lower_program", fails)
    with pytest.raises(ExportError, match="lowering for CPU failed: boom"):
        export_bundle(make_chunk_policy, tmp_path / "b", description="new")
    assert (tmp_path / "b" / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_lower_bundle_adds_a_program_at_the_bundles_precision(tmp_path: Path, lowering: Lowering) -> None:
    export_bundle(make_chunk_policy, tmp_path / "b")
    lowering.program = programs.build(
        [
            programs.Method(
                operators=["aten::add"],
                instructions=[(programs.DELEGATE_CALL, 0, [0, 1, 2]), (programs.KERNEL_CALL, 0, [2, 2, 2])],
            )
        ]
    )
    bundle = lower_bundle(tmp_path / "b", "GPU")
    m = bundle.manifest
    assert set(m.programs) == {"CPU", "GPU"}
    gpu = m.programs["GPU"]
    assert (gpu.device, gpu.file, gpu.precision, gpu.delegation) == ("GPU", "program_gpu.pte", "f32", "partial")
    assert (bundle.path / "program_gpu.pte").read_bytes() == lowering.program
    assert lowering.calls[-1]["device"] == "GPU"
    assert lowering.calls[-1]["inputs"] == ("observation.state", "cam")
    assert lowering.calls[-1]["outputs"] == ("action",)
    assert m.programs["CPU"].file == "program_cpu.pte"  # the other program is kept

    with pytest.raises(DeviceError):
        lower_bundle(tmp_path / "b", "NPU")


def test_lower_bundle_refuses_a_bundle_without_a_portable_program(tmp_path: Path, lowering: Lowering) -> None:
    export_bundle(make_chunk_policy, tmp_path / "b")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    manifest.pop("portable_program")
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "b" / "model.pt2").unlink()
    with pytest.raises(ExportError) as err:
        lower_bundle(tmp_path / "b", "GPU")
    assert str(err.value) == (
        f"{tmp_path / 'b'}: the bundle has no portable_program (.pt2) to lower from; re-export it"
    )
    assert lowering.calls == [lowering.calls[0]]


def test_lower_bundle_refuses_a_portable_program_changed_after_export(tmp_path: Path, lowering: Lowering) -> None:
    # the .pt2 is what the new program is made from: a tampered one must never become a program
    export_bundle(make_chunk_policy, tmp_path / "b")
    portable = tmp_path / "b" / "model.pt2"
    portable.write_bytes(portable.read_bytes() + b"\0")
    with pytest.raises(BundleError) as err:
        lower_bundle(tmp_path / "b", "GPU")
    assert str(err.value).startswith(f"{portable}: sha256 ")
    assert str(err.value).endswith("the file was changed or damaged after export")
    assert "portable_program.sha256" in str(err.value)
    assert len(lowering.calls) == 1 and not (tmp_path / "b" / "program_gpu.pte").exists()


def test_lower_bundle_keeps_the_bundles_precision_unless_asked(
    tmp_path: Path, lowering: Lowering, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "export_for_lowering", lambda model, example, precision: model)
    export_bundle(make_chunk_policy, tmp_path / "b", precision="bf16")
    m = lower_bundle(tmp_path / "b", "GPU").manifest
    assert (m.programs["CPU"].precision, m.programs["GPU"].precision) == ("bf16", "bf16")


# --- lowering at a lower precision -------------------------------------------------------------


class Normed(torch.nn.Module):  # type: ignore[misc]
    """Linear then LayerNorm: autocast leaves the norm's weight float32 beside a bf16 input."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 6)
        self.norm = torch.nn.LayerNorm(6)

    def forward(self, x: Any) -> Any:
        return self.norm(self.linear(x)).reshape(2, 3)


def _dtypes(exported: Any, op: Any) -> list[list[str]]:
    """The dtypes of the operands of each ``op`` node of the exported graph."""
    return [
        [str(a.meta["val"].dtype) for a in n.all_input_nodes]
        for n in exported.graph_module.graph.nodes
        if n.op == "call_function" and n.target is op
    ]


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16), ("f16", torch.float16)])
def test_a_lower_precision_program_computes_at_it_with_float32_inputs_and_outputs(precision: str, dtype: Any) -> None:
    model, x = Normed().eval(), torch.linspace(-1, 1, 4)
    exported = export.export_for_lowering(model, (x,), precision)

    name = str(dtype)
    matmuls = _dtypes(exported, torch.ops.aten.linear.default)
    assert matmuls and all(set(d) == {name} for d in matmuls)
    norms = _dtypes(exported, torch.ops.aten.layer_norm.default)
    assert norms and all(set(d) == {name} for d in norms)  # the float32 weight and bias cast to the input's
    got = exported.module()(x)
    assert got.dtype == torch.float32
    with torch.no_grad():
        want = model(x)
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        rounded = model(x).float()
    assert not torch.equal(got, want)  # the casts are in the program
    torch.testing.assert_close(got, rounded, atol=0.05, rtol=0.05)


class _Counts(torch.nn.Module):  # type: ignore[misc]
    """A float output beside an integer one and a plain number."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        y = self.linear(x)
        return {"action": y, "count": (y > 0).sum(), "steps": 3}


@pytest.mark.parametrize("precision", ["bf16", "f16"])
def test_at_precision_gives_floats_back_as_float32_and_leaves_the_rest(precision: str) -> None:
    wrapped = export.at_precision(_Counts().eval(), precision)
    assert wrapped.training is False  # set, not .eval(): an unlifted saved export refuses train()
    out = wrapped(torch.linspace(-1, 1, 4))
    assert out["action"].dtype == torch.float32
    assert out["count"].dtype == torch.int64 and out["steps"] == 3


def test_an_f32_program_is_the_model_as_it_is() -> None:
    model, x = Normed().eval(), torch.linspace(-1, 1, 4)
    exported = export.export_for_lowering(model, (x,), "f32")
    dtypes = {str(n.meta["val"].dtype) for n in exported.graph_module.graph.nodes if "val" in n.meta}
    assert dtypes == {"torch.float32"}
    with torch.no_grad():
        assert torch.equal(exported.module()(x), model(x))


def test_lower_bundle_casts_the_portable_program_to_the_precision_asked(
    tmp_path: Path, lowering: Lowering, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = lowering.dtypes
    export_bundle(make_chunk_policy, tmp_path / "b")
    m = lower_bundle(tmp_path / "b", "GPU", precision="bf16").manifest
    assert m.programs["GPU"].precision == "bf16" and m.programs["CPU"].precision == "f32"
    assert "torch.bfloat16" not in seen[0] and "torch.bfloat16" in seen[1]
    monkeypatch.setattr(export, "export_for_lowering", _raises)
    with pytest.raises(ExportError) as err:
        lower_bundle(tmp_path / "b", "GPU", precision="f16")
    assert str(err.value) == "torch.export at f16 failed: RuntimeError: cannot"


def _raises(*args: Any) -> Any:
    raise RuntimeError("cannot")


def test_export_bundle_lowers_the_program_at_the_precision_asked(tmp_path: Path, lowering: Lowering) -> None:
    seen = lowering.dtypes
    bundle = export_bundle(make_chunk_policy, tmp_path / "bf16", precision="bf16")
    assert bundle.manifest.programs["CPU"].precision == "bf16"
    export_bundle(make_chunk_policy, tmp_path / "f32")
    assert "torch.bfloat16" in seen[0] and "torch.bfloat16" not in seen[1]
    # the portable program stays the float32 model, whatever the precision of the program
    loaded = torch.export.load(str(bundle.path / "model.pt2"))
    assert {str(v.dtype) for n in loaded.graph.nodes if isinstance(v := n.meta.get("val"), torch.Tensor)} <= {
        "torch.float32",
        "torch.uint8",
    }


def test_an_export_that_fails_is_named_with_its_error(
    tmp_path: Path, lowering: Lowering, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "export_for_lowering", _raises)
    assert _refusal(tmp_path, make_chunk_policy, precision="f16") == "torch.export at f16 failed: RuntimeError: cannot"
    monkeypatch.setattr(torch.export, "export", _raises)
    assert _refusal(tmp_path, make_chunk_policy) == "torch.export failed: RuntimeError: cannot"
    assert lowering.calls == []


# --- lower_program around ExecuTorch's lowering --------------------------------------------------


class _Edge:
    """What ``to_edge_transform_and_lower`` returns, as far as ``lower_program`` reads it."""

    def __init__(self, buffer: bytes | Exception) -> None:
        self.buffer = buffer

    def to_executorch(self) -> Any:
        if isinstance(self.buffer, Exception):
            raise self.buffer
        return type("Program", (), {"buffer": self.buffer})()


def _stand_in_lowering(monkeypatch: pytest.MonkeyPatch, result: Any) -> list[Any]:
    import executorch.exir

    calls: list[Any] = []

    def lower(exported: Any, partitioner: Any) -> Any:
        calls.append((exported, partitioner))
        if isinstance(result, Exception):
            raise result
        return result

    monkeypatch.setattr(executorch.exir, "to_edge_transform_and_lower", lower)
    return calls


def test_lower_program_hands_the_device_to_the_partitioner_and_checks_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    edge = _Edge(b"program bytes")
    calls = _stand_in_lowering(monkeypatch, edge)
    checked: list[Any] = []
    monkeypatch.setattr(export, "check_lowered", lambda *args: checked.append(args) or [])

    assert export.lower_program("exported", "GPU", input_names=("a",), output_names=("action",)) == b"program bytes"
    ((exported, (partitioner,)),) = calls
    assert exported == "exported"
    specs = partitioner.delegation_spec.compile_specs
    assert [(s.key, bytes(s.value)) for s in specs] == [("device", b"GPU")]
    assert checked == [(edge, "GPU", ("a",), ("action",))]


def test_lower_program_refuses_what_the_checks_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.export.lowering_checks import Finding

    _stand_in_lowering(monkeypatch, _Edge(b"never written"))
    monkeypatch.setattr(export, "check_lowered", lambda *args: [Finding(True, "output 0 is input 0")])
    with pytest.raises(ExportError) as err:
        export.lower_program("exported", "CPU")
    assert str(err.value) == (
        "the CPU program: refusing a program OpenVINO would run with wrong results and no error: output 0 is input 0"
    )


def test_a_failed_lowering_names_the_device_and_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in_lowering(monkeypatch, RuntimeError("unsupported op"))
    with pytest.raises(ExportError) as err:
        export.lower_program("exported", "NPU")
    assert str(err.value) == "lowering for NPU failed: RuntimeError: unsupported op"

    _stand_in_lowering(monkeypatch, _Edge(ValueError("bad memory plan")))
    monkeypatch.setattr(export, "check_lowered", lambda *args: [])
    with pytest.raises(ExportError) as err:
        export.lower_program("exported", "CPU")
    assert str(err.value) == "lowering for CPU failed: ValueError: bad memory plan"


# --- operands cast to their op's dtype ----------------------------------------------------------------


def _node(graph: Any, target: Any, args: tuple[Any, ...], val: Any, **kwargs: Any) -> Any:
    node = graph.call_function(target, args, kwargs or None)
    node.meta["val"] = val
    return node


def test_float_operands_are_cast_to_their_ops_dtype_where_autocast_left_them_mixed() -> None:
    aten = torch.ops.aten
    bf16, f32 = torch.empty(3, dtype=torch.bfloat16), torch.empty(3)
    g = torch.fx.Graph()
    a, w, b = g.placeholder("a"), g.placeholder("w"), g.placeholder("b")
    a.meta["val"], w.meta["val"], b.meta["val"] = bf16, f32, f32
    n = g.placeholder("n")
    n.meta["val"] = 3  # not a tensor (a size)
    steps = _node(g, aten.arange.default, (3,), torch.empty(3, dtype=torch.int64), dtype=torch.int64)
    add = _node(g, aten.add.Tensor, (a, w), bf16)  # a bf16 result of bf16 and float32 operands
    # a tuple result: the first is the op's dtype (layer_norm's normalised output; its statistics float32)
    norm = _node(g, aten.native_layer_norm.default, (add, [3], w, b, 1e-5), (bf16, f32, f32))
    out0 = _node(g, operator.getitem, (norm, 0), bf16)
    scaled = _node(g, aten.mul.Tensor, (out0, n), bf16)
    g.output((scaled, w, steps)).meta["val"] = [bf16, f32, torch.empty(3, dtype=torch.int64)]
    gm = torch.fx.GraphModule(torch.nn.Module(), g)

    export._unify_operand_dtypes(gm)

    def cast_of(node: Any) -> Any:
        assert node.target is aten._to_copy.default, node
        assert node.kwargs == {"dtype": torch.bfloat16} and node.meta["val"].dtype == torch.bfloat16
        (source,) = node.args
        return source

    assert add.args[0] is a and cast_of(add.args[1]) is w  # what is already bf16 is not cast
    assert norm.args[0] is add and cast_of(norm.args[2]) is w and cast_of(norm.args[3]) is b
    assert scaled.args == (out0, n)  # a non-tensor operand is left alone
    output = next(x for x in gm.graph.nodes if x.op == "output")
    assert output.args[0] == (scaled, w, steps)  # the program's outputs keep their dtypes
    casts = [x for x in gm.graph.nodes if x.target is aten._to_copy.default]
    assert len(casts) == 3
    # the graph still runs, in bf16 where the op computes
    x = torch.tensor([1.0, 2.0, 4.0], dtype=torch.bfloat16)
    got, weight, _ = gm(x, torch.tensor([0.5, 1.0, 2.0]), torch.zeros(3), 2)
    assert got.dtype == torch.bfloat16 and weight.dtype == torch.float32


def test_a_factory_file_is_importable_by_its_own_module_name(tmp_path: Path) -> None:
    f = tmp_path / "with_dataclass.py"
    f.write_text(
        "from dataclasses import dataclass\n\n"
        "@dataclass\nclass Settings:\n    width: int = 4\n\n"
        "def make():\n    return Settings()\n"
    )
    assert load_factory(f"{f}:make")().width == 4  # a dataclass needs its module in sys.modules


def test_the_tools_that_made_a_bundle_are_recorded_by_their_installed_versions() -> None:
    import platform

    from runtime import __version__

    assert export.tool_versions() == {
        "lerobot_runtime": __version__,
        "torch": importlib.metadata.version("torch"),
        "executorch": importlib.metadata.version("executorch"),
        "openvino": importlib.metadata.version("openvino"),
        "nncf": importlib.metadata.version("nncf"),
        "python": platform.python_version(),
    }


def test_a_program_that_is_not_one_is_named_by_its_file() -> None:
    from runtime.errors import BundleError

    with pytest.raises(BundleError) as err:
        _program_entry(b"not a program at all", "CPU", "program_cpu.pte", "f32")
    assert str(err.value).startswith("program_cpu.pte: not an ExecuTorch program: ")


def test_lowering_without_executorchs_openvino_backend_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.errors import MissingDependencyError

    monkeypatch.setitem(sys.modules, "executorch.backends.openvino.partitioner", None)
    with pytest.raises(MissingDependencyError) as err:
        export.lower_program("exported", "CPU")
    assert str(err.value) == (
        "lowering needs executorch with its OpenVINO backend and nncf (import of "
        "executorch.backends.openvino.partitioner halted; None in sys.modules): pip install 'lerobot-runtime[export]'"
    )
