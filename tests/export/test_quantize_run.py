"""``quantize_bundle`` whole, and the gate child's ``_run_blob``, without NNCF, a lowering or OpenVINO.

The source bundle is exported for real from a tiny torch model, with the lowering stood in for (as in
``tests/export/test_export_rules.py``); NNCF's ``quantize_model`` is a stand-in that records what it was
handed and gives the module back, and the accuracy gate one that records its observations. What is left
is what ``quantize_bundle`` decides: the refusals before any work, the calibration and held-out split, the
quantizer's options, the fallback without bias correction, stdout kept for ``--json``, the INT8 bundle's
files and manifest, and nothing left at the output when a step fails. The real quantisation and gate on
an exported ACT policy are in ``tests/engine/test_quantize.py``.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import runtime.export.quantize as quantize
from runtime.bundle.bundle import Bundle, sha256_bytes
from runtime.errors import BundleError, ExportError, ParityError
from runtime.export import export, prove
from runtime.export.export import export_bundle
from tests.bundle import programs
from tests.export.test_export_rules import Lowering, gate_found, make_chunk_policy

torch = pytest.importorskip("torch")
quantizer = pytest.importorskip("executorch.backends.openvino.quantizer")

GATE = {"ok": True, "max_error": 0.125, "mean_error": 0.0625, "units": "action std", "held_out_observations": 3}


class Quantizer:
    """Stands in for NNCF's ``quantize_model``: records each call, fails as told, returns the module."""

    def __init__(self, fail: list[BaseException] | None = None, say: str = "") -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = list(fail or [])
        self.say = say

    def __call__(self, module: Any, data: list[Any], **options: Any) -> Any:
        self.calls.append({"module": module, "data": data, **options})
        if self.say:
            print(self.say)
        if self.fail:
            raise self.fail.pop(0)
        return module


class Gate:
    def __init__(self, refuse: str = "") -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.refuse = refuse

    def __call__(self, src: Any, stage: Path, file: str, held: list[Any], scale: Any, source: str, bound: float) -> Any:
        self.calls.append((src.path, stage, file, held, scale, source, bound, (stage / file).read_bytes()))
        if self.refuse:
            raise ParityError(self.refuse)
        return dict(GATE)


@pytest.fixture
def lowering(monkeypatch: pytest.MonkeyPatch) -> Lowering:
    """The lowering stood in for, and the export's load gate (a hand-built program does not run)."""
    stand_in = Lowering()
    monkeypatch.setattr(export, "lower_program", stand_in)
    monkeypatch.setattr(export, "present_devices", lambda: ["CPU"])
    monkeypatch.setattr(prove, "measure", lambda stage, device: gate_found())
    return stand_in


@pytest.fixture
def source(tmp_path: Path, lowering: Lowering) -> Path:
    export_bundle(make_chunk_policy, tmp_path / "f32")
    return tmp_path / "f32"


def _observations(root: Path, n: int) -> Path:
    """``n`` observations as a recorder writes them, observation k's state all k."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for k in range(n):
        np.savez(
            root / f"{k:03d}.npz",
            **{
                "observation.state": np.full(6, k, np.float32),
                "cam": rng.integers(0, 256, (4, 4, 3), dtype=np.uint8),
            },
        )
    return root


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> tuple[Quantizer, Gate]:
    q, g = Quantizer(), Gate()
    monkeypatch.setattr(quantizer, "quantize_model", q)
    monkeypatch.setattr(quantize, "accuracy_gate", g)
    return q, g


def test_an_int8_bundle_is_written_from_the_float_one_with_its_gate_and_where_it_came_from(
    source: Path, tmp_path: Path, stand_ins: tuple[Quantizer, Gate], lowering: Lowering
) -> None:
    q, g = stand_ins
    calib = _observations(tmp_path / "recorded", 8)
    bundle = quantize.quantize_bundle(source, calib, tmp_path / "int8", max_error=0.5)

    # 25 % held out (2 of 8, the last ones), the first 6 calibrate
    (call,) = q.calls
    assert [float(d[0][0]) for d in call["data"]] == [0, 1, 2, 3, 4, 5]
    assert all(isinstance(t, torch.Tensor) for d in call["data"] for t in d)
    assert call["mode"] == quantizer.QuantizationMode.INT8_TRANSFORMER
    assert (call["subset_size"], call["fold_quantize"]) == (6, False)
    assert "fast_bias_correction" not in call and "extra_quantizer_options" not in call
    (gated,) = g.calls
    src_path, _stage, file, held, scale, scale_source, bound, program = gated
    assert src_path == source and file == "program_cpu.pte" and program == lowering.program
    src = Bundle.open(source)
    case = src.test_case()
    assert [float(o["observation.state"][0]) for o in held[:2]] == [6, 7]
    assert held[2] is not None and np.array_equal(held[2]["observation.state"], case.inputs["observation.state"])
    assert (scale, scale_source, bound) == (case.scale["action"], case.scale_source, 0.5)
    assert (lowering.calls[-1]["device"], lowering.calls[-1]["snippets"]) == ("CPU", True)  # INT8 keeps snippets
    assert "torch.float32" in lowering.dtypes[-1]  # the quantised module's graph, not nothing

    m = bundle.manifest
    assert set(m.programs) == {"CPU"}
    cpu = m.programs["CPU"]
    assert (cpu.file, cpu.precision) == ("program_cpu.pte", "int8")
    assert m.test_case.tolerance == {**src.manifest.test_case.tolerance, "int8": 0.5}
    assert (m.test_case.scale, m.test_case.scale_source) == (src.manifest.test_case.scale, case.scale_source)
    assert (bundle.path / "test_case.npz").read_bytes() == (source / "test_case.npz").read_bytes()
    assert m.portable_program is not None
    assert m.portable_program.sha256 == sha256_bytes((bundle.path / "model.pt2").read_bytes())
    assert m.quantization == {
        "method": "NNCF post-training INT8 (ExecuTorch OpenVINO quantizer, INT8_TRANSFORMER)",
        "calibration": str(calib.resolve()),
        "calibration_observations": 6,
        "bias_correction": True,
        "from_bundle": str(source.resolve()),
        "gate": GATE,
    }
    assert (m.inputs, m.outputs, m.action_names) == (
        src.manifest.inputs,
        src.manifest.outputs,
        src.manifest.action_names,
    )
    assert m.created_utc.endswith("+00:00")
    assert sorted(p.name for p in bundle.path.iterdir()) == [
        "manifest.json",
        "model.pt2",
        "program_cpu.pte",
        "test_case.npz",
    ]
    # the portable program is the quantised module, loadable and giving the float model's answer here
    loaded = torch.export.load(str(bundle.path / "model.pt2")).module()
    want = Bundle.open(source).test_case().outputs["action"]
    got = loaded(*(torch.from_numpy(case.inputs[s.name]) for s in m.inputs)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_each_slow_step_is_told_and_the_result_said(
    source: Path, tmp_path: Path, stand_ins: tuple[Quantizer, Gate], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="runtime.export"):
        quantize.quantize_bundle(
            source, _observations(tmp_path / "recorded", 4), tmp_path / "int8", held_out_fraction=0.5
        )
    said = [r.getMessage() for r in caplog.records]
    starts = [line for line in said if line.startswith("[") and line.endswith(" ...")]
    assert starts == [
        "[1/4] calibrating INT8 on 2 observations ...",
        "[2/4] lowering the INT8 program for CPU ...",
        "[3/4] accuracy gate on 2 held-out observations ...",
        "[4/4] writing the test case and manifest ...",
    ]
    assert said[-1] == (
        f"INT8 bundle written to {tmp_path / 'int8'}: held-out action error max 0.125, mean 0.0625 action std "
        "(bound 0.2)"  # the default bound
    )


@pytest.mark.parametrize("fraction", [0.0, 1.0, 1.5, -0.25])
def test_a_held_out_fraction_outside_zero_to_one_is_refused_before_anything(
    source: Path, tmp_path: Path, stand_ins: tuple[Quantizer, Gate], fraction: float
) -> None:
    with pytest.raises(ExportError) as err:
        quantize.quantize_bundle(source, tmp_path / "nowhere", tmp_path / "int8", held_out_fraction=fraction)
    assert str(err.value) == f"--held-out: expected a fraction between 0 and 1, got {fraction}"
    assert stand_ins[0].calls == [] and not (tmp_path / "int8").exists()


def test_one_held_out_observation_at_least(source: Path, tmp_path: Path, stand_ins: tuple[Quantizer, Gate]) -> None:
    quantize.quantize_bundle(source, _observations(tmp_path / "r", 5), tmp_path / "int8", held_out_fraction=0.05)
    q, g = stand_ins
    assert len(q.calls[0]["data"]) == 4 and len(g.calls[0][3]) == 2  # 1 held out + the test case


def test_a_bundle_without_a_portable_program_or_an_f32_cpu_program_is_refused(
    source: Path, tmp_path: Path, stand_ins: tuple[Quantizer, Gate]
) -> None:
    calib = _observations(tmp_path / "r", 4)
    manifest = json.loads((source / "manifest.json").read_text())
    manifest["programs"]["CPU"]["precision"] = "bf16"
    (source / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ExportError) as err:
        quantize.quantize_bundle(source, calib, tmp_path / "int8")
    assert str(err.value) == f"{source}: quantising starts from an f32 CPU program; the bundle has {{'CPU': 'bf16'}}"
    manifest["programs"]["CPU"]["precision"] = "f32"
    manifest["programs"]["GPU"] = dict(manifest["programs"].pop("CPU"))
    (source / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ExportError) as err:
        quantize.quantize_bundle(source, calib, tmp_path / "int8")
    assert str(err.value) == f"{source}: quantising starts from an f32 CPU program; the bundle has {{'GPU': 'f32'}}"
    manifest.pop("portable_program")
    (source / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ExportError) as err:
        quantize.quantize_bundle(source, calib, tmp_path / "int8")
    assert str(err.value) == f"{source}: no portable program (model.pt2) to quantise; re-export the bundle"
    assert stand_ins[0].calls == [] and not (tmp_path / "int8").exists()


def test_a_changed_source_bundle_is_refused(source: Path, tmp_path: Path, stand_ins: tuple[Quantizer, Gate]) -> None:
    (source / "model.pt2").write_bytes((source / "model.pt2").read_bytes() + b"\0")
    with pytest.raises(BundleError, match=r"model\.pt2: sha256 "):
        quantize.quantize_bundle(source, _observations(tmp_path / "r", 4), tmp_path / "int8")
    assert stand_ins[0].calls == []


def test_without_bias_correction_when_nncfs_fails_on_it(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    q = Quantizer(fail=[TypeError("iteration over a 0-d tensor")])
    monkeypatch.setattr(quantizer, "quantize_model", q)
    monkeypatch.setattr(quantize, "accuracy_gate", Gate())
    with caplog.at_level(logging.WARNING, logger="runtime.export.quantize"):
        m = quantize.quantize_bundle(source, _observations(tmp_path / "r", 4), tmp_path / "int8").manifest
    assert len(q.calls) == 2 and "fast_bias_correction" not in q.calls[0]
    assert q.calls[1]["fast_bias_correction"] is None
    assert m.quantization["bias_correction"] is False
    assert [r.getMessage() for r in caplog.records] == [
        "NNCF bias correction failed (iteration over a 0-d tensor); quantising without it"
    ]


@pytest.mark.parametrize(
    "fail",
    [[RuntimeError("no kernel")], [TypeError("first"), ValueError("second")]],
    ids=["once", "without bias correction too"],
)
def test_a_quantizer_that_fails_is_named_and_leaves_nothing(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: list[BaseException]
) -> None:
    monkeypatch.setattr(quantizer, "quantize_model", Quantizer(fail=fail))
    with pytest.raises(ExportError) as err:
        quantize.quantize_bundle(source, _observations(tmp_path / "r", 4), tmp_path / "int8")
    last = fail[-1]
    assert str(err.value) == f"INT8 quantisation failed: {type(last).__name__}: {last}"
    assert not (tmp_path / "int8").exists()


def test_a_gate_that_refuses_leaves_nothing_and_an_old_bundle_stays(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quantizer, "quantize_model", Quantizer())
    monkeypatch.setattr(quantize, "accuracy_gate", Gate())
    out = tmp_path / "int8"
    quantize.quantize_bundle(source, _observations(tmp_path / "r", 4), out)
    before = (out / "manifest.json").read_bytes()
    monkeypatch.setattr(quantize, "accuracy_gate", Gate(refuse="INT8 refused: too far"))
    with pytest.raises(ParityError, match="INT8 refused: too far"):
        quantize.quantize_bundle(source, _observations(tmp_path / "r", 4), out)
    assert (out / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f32", "int8", "r"]


def test_stdout_stays_the_commands_own(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # NNCF prints its progress and logs to stdout: both go to stderr, stdout is for --json
    monkeypatch.setattr(quantizer, "quantize_model", Quantizer(say="Statistics collection: 100%"))
    monkeypatch.setattr(quantize, "accuracy_gate", Gate())
    nncf = logging.getLogger("nncf")
    handler = logging.StreamHandler(sys.stdout)
    nncf.addHandler(handler)
    try:
        quantize.quantize_bundle(source, _observations(tmp_path / "r", 4), tmp_path / "int8")
        assert handler.stream is sys.stderr
    finally:
        nncf.removeHandler(handler)
    out, err = capsys.readouterr()
    assert out == "" and "Statistics collection: 100%" in err


class _Masked(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.head = torch.nn.Linear(6, 12)

    def forward(self, state: Any, mask: Any) -> Any:
        return torch.where(mask, self.head(state), 0.0).reshape(2, 6)


def make_masked_policy() -> tuple[Any, dict[str, Any]]:
    return _Masked(), {"observation.state": torch.linspace(0, 1, 6), "mask": torch.ones(12, dtype=torch.bool)}


def test_a_boolean_mask_is_left_out_of_the_quantisation(
    tmp_path: Path, lowering: Lowering, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nncf

    q = Quantizer()
    monkeypatch.setattr(quantizer, "quantize_model", q)
    monkeypatch.setattr(quantize, "accuracy_gate", Gate())
    export_bundle(make_masked_policy, tmp_path / "f32")
    calib = tmp_path / "r"
    calib.mkdir()
    for k in range(4):
        np.savez(calib / f"{k}.npz", **{"observation.state": np.full(6, k, np.float32), "mask": np.ones(12, bool)})
    quantize.quantize_bundle(tmp_path / "f32", calib, tmp_path / "int8")
    scope = q.calls[0]["extra_quantizer_options"]["ignored_scope"]
    assert isinstance(scope, nncf.IgnoredScope)
    assert scope.names == quantize.boolean_consumers(q.calls[0]["module"]) and scope.names
    assert scope.validate is False


def test_without_the_openvino_quantizer_it_says_what_is_needed(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "executorch.backends.openvino.quantizer", None)
    with pytest.raises(ExportError) as err:
        quantize.quantize_bundle(source, tmp_path / "r", tmp_path / "int8")
    assert str(err.value).startswith("quantizing needs ExecuTorch's OpenVINO quantizer and nncf (")


# --- the gate child's body ---------------------------------------------------------------------------


def test_the_gate_child_runs_each_observation_in_number_order_and_keeps_the_output_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import openvino

    import runtime.engine.openvino_engine as engine
    import runtime.engine.precision as precision

    asked: list[Any] = []

    class Request:
        """Writes each run's outputs into the same buffers, as OpenVINO's infer request does."""

        def __init__(self) -> None:
            self.outputs = [np.zeros(1), np.zeros(1)]

        def infer(self, values: list[np.ndarray]) -> list[np.ndarray]:
            asked.append([v.tolist() for v in values])
            self.outputs[1][:] = values[1] * 10
            return self.outputs

    class Compiled:
        def create_infer_request(self) -> Request:
            return Request()

    def import_blob(core: Any, payload: bytes, device: str, props: dict[str, Any]) -> tuple[Any, Any]:
        asked.append((type(core).__name__, payload, device, props))
        return Compiled(), None

    monkeypatch.setattr(engine, "import_blob", import_blob)
    monkeypatch.setattr(
        precision, "executed_precision", lambda compiled: "bf16" if isinstance(compiled, Compiled) else "?"
    )
    program = tmp_path / "p.pte"
    program.write_bytes(programs.build(inline=[b"the blob"]))
    obs = tmp_path / "obs"
    obs.mkdir()
    for k in (0, 1, 2, 10):  # 10 after 2, not after 1
        np.savez(obs / f"{k}.npz", a=np.array([float(k)]), b=np.array([-1.0]))
    out = tmp_path / "out.npz"
    quantize._run_blob(str(program), {"INFERENCE_PRECISION_HINT": "f32"}, ["b", "a"], 1, str(obs), str(out))
    assert asked[0] == (openvino.Core.__name__, b"the blob", "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    assert asked[1:] == [[[-1.0], [float(k)]] for k in (0, 1, 2, 10)]  # the inputs in the order named
    with np.load(out) as got:
        assert sorted(got.files) == ["0", "1", "2", "3", "arithmetic"]
        assert str(got["arithmetic"]) == "bf16"
        # output 1, the second input (a) times 10, each run's own though the request reuses its buffers
        assert [got[str(i)].tolist() for i in range(4)] == [[0.0], [10.0], [20.0], [100.0]]


def test_the_gate_child_refuses_an_observation_holding_pickled_objects_and_names_a_broken_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runtime.engine.openvino_engine as engine

    class Compiled:
        def create_infer_request(self) -> Any:
            return type("Request", (), {"infer": lambda self, values: [values[0]]})()

    monkeypatch.setattr(engine, "import_blob", lambda core, payload, device, props: (Compiled(), None))
    monkeypatch.setattr("runtime.engine.precision.executed_precision", lambda compiled: "f32")
    program = tmp_path / "p.pte"
    program.write_bytes(programs.build())
    obs = tmp_path / "obs"
    obs.mkdir()
    np.savez(obs / "0.npz", a=np.array([{"not": "numbers"}], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        quantize._run_blob(str(program), {}, ["a"], 0, str(obs), str(tmp_path / "out.npz"))
    broken = tmp_path / "broken.pte"
    broken.write_bytes(b"not a program")
    with pytest.raises(Exception, match=str(broken).replace(".", r"\.")):
        quantize._run_blob(str(broken), {}, ["a"], 0, str(obs), str(tmp_path / "out.npz"))


def test_the_calibration_frames_asked_reach_the_dataset_reader(
    source: Path, tmp_path: Path, stand_ins: tuple[Quantizer, Gate], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []
    read = quantize.load_observations

    def reading(calibration: Any, manifest: Any, max_frames: int = -1) -> Any:
        asked.append(max_frames)
        return read(calibration, manifest, max_frames=max_frames)

    monkeypatch.setattr(quantize, "load_observations", reading)
    quantize.quantize_bundle(source, _observations(tmp_path / "r", 4), tmp_path / "int8", calibration_frames=123)
    quantize.quantize_bundle(source, _observations(tmp_path / "r", 4), tmp_path / "int8b")
    assert asked == [123, quantize.DEFAULT_DATASET_FRAMES]


def test_a_language_policys_tokenizer_goes_along_and_the_int8_bundle_says_when_and_with_what_it_was_made(
    tmp_path: Path, lowering: Lowering, stand_ins: tuple[Quantizer, Gate], monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime as dt
    import types

    tokenizer = json.dumps({"model": {"type": "WordLevel"}})
    export_bundle(
        "tests.export.test_export_rules:make_tasked_policy",
        tmp_path / "f32",
        input_roles={"tokens": "language", "mask": "language"},
        language={"definition": tokenizer, "tokens_input": "tokens", "mask_input": "mask", "max_length": 4},
    )
    calib = tmp_path / "r"
    calib.mkdir()
    for k in range(4):
        np.savez(
            calib / f"{k}.npz",
            **{
                "observation.state": np.full(6, k, np.float32),
                "tokens": np.array([5, 9, 0, 0]),
                "mask": np.ones(4, bool),
            },
        )
    made_at = dt.datetime(2031, 2, 3, 4, 5, 6, 789, tzinfo=dt.UTC)

    class Clock(dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            assert tz is dt.UTC
            return made_at

    monkeypatch.setattr(quantize, "_dt", types.SimpleNamespace(datetime=Clock, UTC=dt.UTC))
    monkeypatch.setattr(export, "tool_versions", lambda: {"the": "tools of now"})
    m = quantize.quantize_bundle(tmp_path / "f32", calib, tmp_path / "int8").manifest
    assert (tmp_path / "int8" / "tokenizer.json").read_text() == tokenizer
    assert m.language == Bundle.open(tmp_path / "f32").manifest.language
    assert m.created_utc == "2031-02-03T04:05:06+00:00"
    assert m.tools == {"the": "tools of now"}
