"""The INT8 gate's decisions without a quantised program: the observations it calibrates and holds out
on (a directory of ``.npz`` files, a stand-in dataset reader), the action error, the masks the
quantizer leaves alone, the child's files, and the gate's verdict and record on stand-in programs.
The real quantisation and the gate on exported programs are in tests/engine/test_quantize.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import runtime.export.quantize as quantize
from runtime.bundle.manifest import RtcEntry, TensorSpec
from runtime.errors import ExportError, ParityError, RecordingError
from runtime.recording.layout import INFO_PATH
from tests.bundle.manifests import small_manifest

STATE = TensorSpec("observation.state", "float32", (3,), "state")
NOISE = TensorSpec("noise", "float32", (2, 3), "noise")


def _npz(root: Path, name: str, **arrays: np.ndarray) -> None:
    root.mkdir(parents=True, exist_ok=True)
    np.savez(root / name, **arrays)  # type: ignore[arg-type]


def _states(root: Path, n: int) -> None:
    for k in range(n):
        _npz(root, f"{k:02d}.npz", **{"observation.state": np.full(3, k, np.float32)})


# --- load_observations: where they come from and what is refused ---


def test_a_source_that_is_neither_a_dataset_nor_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file.npz").write_bytes(b"")
    with pytest.raises(ExportError) as e:
        quantize.load_observations(tmp_path / "file.npz", small_manifest())
    assert str(e.value) == (
        f"--calibration: {tmp_path / 'file.npz'} is neither a LeRobot dataset (no meta/info.json) nor a directory of "
        "recorded observations (.npz files)"
    )


def test_fewer_than_four_observations_are_refused_counting_them(tmp_path: Path) -> None:
    _states(tmp_path, 3)
    with pytest.raises(ExportError) as e:
        quantize.load_observations(tmp_path, small_manifest())
    assert str(e.value) == (
        f"--calibration: {tmp_path} holds 3 .npz observation(s); at least 4 are needed (some calibrate, the rest "
        "are held out for the accuracy gate); a few hundred from real runs is right"
    )
    _npz(tmp_path, "03.npz", **{"observation.state": np.zeros(3, np.float32)})
    assert len(quantize.load_observations(tmp_path, small_manifest())) == 4


def test_npz_observations_are_read_in_file_order_without_outputs_and_with_test_case_names(tmp_path: Path) -> None:
    for k in (2, 0, 3, 1):
        _npz(
            tmp_path,
            f"{k}.npz",
            **{"input/observation.state": np.full(3, k, np.float32), "output/action": np.ones((2, 3), np.float32)},
        )
    (tmp_path / "notes.txt").write_text("not an observation")
    got = quantize.load_observations(tmp_path, small_manifest())
    assert [list(o) for o in got] == [["observation.state"]] * 4
    for k, o in enumerate(got):
        assert o["observation.state"].dtype == np.float32
        np.testing.assert_array_equal(o["observation.state"], [k, k, k])


def test_each_observation_is_checked_against_the_inputs_naming_its_file(tmp_path: Path) -> None:
    _states(tmp_path, 3)
    _npz(tmp_path, "03.npz", **{"observation.state": np.zeros(4, np.float32)})
    with pytest.raises(ExportError) as e:
        quantize.load_observations(tmp_path, small_manifest())
    assert (
        str(e.value) == f"--calibration: {tmp_path / '03.npz'}: input 'observation.state': expected shape [3], got [4]"
    )


def test_an_npz_that_holds_pickled_objects_or_is_not_an_npz_is_refused_naming_it(tmp_path: Path) -> None:
    _states(tmp_path, 4)
    _npz(tmp_path, "04.npz", **{"observation.state": np.array([{"not": "an array"}], dtype=object)})
    with pytest.raises(ExportError) as e:
        quantize.load_observations(tmp_path, small_manifest())
    assert str(e.value) == (
        f"--calibration: {tmp_path / '04.npz'}: not an .npz of plain arrays (ValueError: Object arrays cannot be "
        "loaded when allow_pickle=False)"
    )
    (tmp_path / "04.npz").write_bytes(b"PK\x03\x04 cut short")
    with pytest.raises(ExportError) as e:
        quantize.load_observations(tmp_path, small_manifest())
    assert str(e.value) == (
        f"--calibration: {tmp_path / '04.npz'}: not an .npz of plain arrays (BadZipFile: File is not a zip file)"
    )


def test_the_noise_input_is_filled_with_seeded_noise_unless_recorded(tmp_path: Path) -> None:
    _states(tmp_path, 3)
    recorded = np.full((2, 3), 7, np.float32)
    _npz(tmp_path, "03.npz", **{"observation.state": np.zeros(3, np.float32), "noise": recorded})
    got = quantize.load_observations(tmp_path, small_manifest(inputs=(STATE, NOISE)))
    assert [list(o) for o in got] == [["observation.state", "noise"]] * 4
    rng = np.random.default_rng(0)
    for o in got[:3]:
        expected = rng.standard_normal((2, 3)).astype(np.float32)
        assert o["noise"].dtype == np.float32
        np.testing.assert_array_equal(o["noise"], expected)
    np.testing.assert_array_equal(got[3]["noise"], recorded)


def test_a_real_time_chunking_policy_gets_the_prefix_inputs_of_a_request_without_a_leftover(tmp_path: Path) -> None:
    rtc = RtcEntry("prefix", "weights", "guidance", 4, 2, "linear", 5.0)
    inputs = (
        STATE,
        TensorSpec("prefix", "float32", (4, 3), "prefix"),
        TensorSpec("weights", "float32", (4,), "prefix_weights"),
        TensorSpec("guidance", "float32", (1,), "guidance"),
    )
    _states(tmp_path, 4)
    weights = np.ones(4, np.float32)
    _npz(tmp_path, "99.npz", **{"observation.state": np.zeros(3, np.float32), "weights": weights})
    got = quantize.load_observations(tmp_path, small_manifest(inputs=inputs, rtc=rtc))
    assert [list(o) for o in got] == [["observation.state", "prefix", "weights", "guidance"]] * 5
    for o in got[:4]:
        assert {k: (a.dtype, a.shape) for k, a in o.items()} == {
            "observation.state": (np.float32, (3,)),
            "prefix": (np.float32, (4, 3)),
            "weights": (np.float32, (4,)),
            "guidance": (np.float32, (1,)),
        }
        np.testing.assert_array_equal(o["prefix"], np.zeros((4, 3)))
        np.testing.assert_array_equal(o["weights"], [0, 0, 0, 0])
        np.testing.assert_array_equal(o["guidance"], [5.0])
    np.testing.assert_array_equal(got[4]["weights"], [1, 1, 1, 1])  # a recorded one is kept


# --- a LeRobot dataset, through a stand-in reader ---


class Reader:
    """Stands in for DatasetReader: episodes of the given lengths; a state column whose values are
    100 * episode + frame, a camera whose frames hold that number; logs what each episode was asked."""

    fail_episode: Exception | None = None

    def __init__(self, root: Path, lengths: list[int], total: int | None = None) -> None:
        self.root = root
        self.lengths = lengths
        self.info = {} if total is None else {"total_frames": total}
        self.asked: list[tuple[int, list[int]]] = []

    @property
    def num_episodes(self) -> int:
        return len(self.lengths)

    def episode_length(self, index: int) -> int:
        return self.lengths[index]

    def episode(self, index: int, *, keep: list[int]) -> Any:
        if self.fail_episode is not None:
            raise self.fail_episode
        self.asked.append((index, list(keep)))
        n = self.lengths[index]
        state = np.array([[100 * index + j, 0, 0] for j in range(n)], np.float32)
        state.flags.writeable = False  # table columns are read-only
        images = np.stack([np.full((2, 2, 3), 10 * index + j, np.uint8) for j in keep])
        columns = {"observation.state": state, "index": np.arange(n)}
        return type("Episode", (), {"index": index, "columns": columns, "images": {"observation.images.top": images}})


@pytest.fixture
def dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A folder with meta/info.json; ``make(lengths, total)`` sets the stand-in reader it opens (``total``
    -1: info.json without ``total_frames``)."""
    import runtime.recording.reader as reader_module

    (tmp_path / INFO_PATH).parent.mkdir(parents=True)
    (tmp_path / INFO_PATH).write_text("{}")
    made: list[Reader] = []

    def make(lengths: list[int], total: int | None = None, fail_open: Exception | None = None) -> list[Reader]:
        def open_reader(root: Path) -> Reader:
            if fail_open is not None:
                raise fail_open
            made.append(Reader(Path(root), lengths, None if total == -1 else sum(lengths) if total is None else total))
            return made[-1]

        monkeypatch.setattr(reader_module, "DatasetReader", open_reader)
        return made

    make.root = tmp_path  # type: ignore[attr-defined]
    return make


CAMERA = TensorSpec("observation.images.top", "uint8", (2, 2, 3), "image")


def test_a_dataset_is_sampled_every_stride_th_frame_of_each_episode(dataset: Any) -> None:
    made = dataset([5, 4, 3])
    root = dataset.root
    got = quantize.load_observations(root, small_manifest(inputs=(STATE, CAMERA)), max_frames=6)
    # 12 frames for 6: every 2nd, from each episode's first
    assert [int(o["observation.state"][0]) for o in got] == [0, 2, 4, 100, 102, 200]
    assert [int(o["observation.images.top"][0, 0, 0]) for o in got] == [0, 2, 4, 10, 12, 20]
    assert made[0].asked == [(0, [0, 2, 4]), (1, [0, 2]), (2, [0])]
    for o in got:
        assert list(o) == ["observation.state", "observation.images.top"]
        assert o["observation.state"].flags.writeable  # a copy: torch wants writable arrays


def test_a_dataset_is_sampled_up_to_max_frames_and_no_episode_past_them_is_read(dataset: Any) -> None:
    made = dataset([4, 4, 4, 4], total=8)
    got = quantize.load_observations(dataset.root, small_manifest(), max_frames=4)
    # total_frames says 8 (stride 2), the episodes hold more: taking stops at 4
    assert [int(o["observation.state"][0]) for o in got] == [0, 2, 100, 102]
    assert [i for i, _ in made[0].asked] == [0, 1]


def test_a_dataset_smaller_than_max_frames_is_taken_whole(dataset: Any) -> None:
    dataset([3, 2])
    got = quantize.load_observations(dataset.root, small_manifest(), max_frames=256)
    assert [int(o["observation.state"][0]) for o in got] == [0, 1, 2, 100, 101]


def test_a_dataset_without_total_frames_takes_every_frame(dataset: Any) -> None:
    made = dataset([3, 2], total=-1)
    got = quantize.load_observations(dataset.root, small_manifest(), max_frames=4)
    assert [int(o["observation.state"][0]) for o in got] == [0, 1, 2, 100]
    assert made[0].asked == [(0, [0, 1, 2]), (1, [0])]


def test_observations_are_named_by_episode_and_frame_in_errors(dataset: Any) -> None:
    dataset([4, 4])
    wrong = small_manifest(inputs=(TensorSpec("observation.state", "float32", (2,), "state"),))
    with pytest.raises(ExportError) as e:
        quantize.load_observations(dataset.root, wrong, max_frames=8)
    assert str(e.value) == (
        f"--calibration: {dataset.root} episode 0 frame 0: input 'observation.state': expected shape [2], got [3]"
    )


def test_with_an_observation_history_each_frame_comes_with_the_ones_before_it(dataset: Any) -> None:
    made = dataset([6, 2])
    history = small_manifest(
        inputs=(
            TensorSpec("observation.state", "float32", (3, 3), "state"),
            TensorSpec("observation.images.top", "uint8", (3, 2, 2, 3), "image"),
        ),
        observation_history=3,
    )
    got = quantize.load_observations(dataset.root, history, max_frames=4)
    # 8 frames for 4: stride 2, frames 0, 2, 4 and the next episode's 0; the first repeated before the start
    assert [o["observation.state"][:, 0].tolist() for o in got[:3]] == [[0, 0, 0], [0, 1, 2], [2, 3, 4]]
    assert [o["observation.images.top"][:, 0, 0, 0].tolist() for o in got[:3]] == [[0, 0, 0], [0, 1, 2], [2, 3, 4]]
    assert got[3]["observation.state"][:, 0].tolist() == [100, 100, 100]
    assert made[0].asked == [(0, [0, 1, 2, 3, 4]), (1, [0])]


def test_a_column_without_history_takes_one_frame_when_a_camera_has_it(dataset: Any) -> None:
    dataset([4])
    history = small_manifest(
        inputs=(
            TensorSpec("observation.state", "float32", (3,), "other"),
            TensorSpec("observation.images.top", "uint8", (2, 2, 2, 3), "image"),
        ),
        observation_history=2,
    )
    got = quantize.load_observations(dataset.root, history, max_frames=4)
    assert [o["observation.state"].tolist() for o in got] == [[0, 0, 0], [1, 0, 0], [2, 0, 0], [3, 0, 0]]
    assert [o["observation.images.top"][:, 0, 0, 0].tolist() for o in got] == [[0, 0], [0, 1], [1, 2], [2, 3]]


def test_an_input_without_history_takes_one_frame_when_others_have_it(dataset: Any) -> None:
    dataset([4])
    history = small_manifest(
        inputs=(
            TensorSpec("observation.state", "float32", (2, 3), "state"),
            TensorSpec("observation.images.top", "uint8", (2, 2, 3), "other"),
        ),
        observation_history=2,
    )
    got = quantize.load_observations(dataset.root, history, max_frames=4)
    assert [o["observation.state"][:, 0].tolist() for o in got] == [[0, 0], [0, 1], [1, 2], [2, 3]]
    assert [int(o["observation.images.top"][0, 0, 0]) for o in got] == [0, 1, 2, 3]


def test_a_dataset_of_fewer_than_four_frames_is_refused_counting_them(dataset: Any) -> None:
    dataset([2, 1])
    with pytest.raises(ExportError) as e:
        quantize.load_observations(dataset.root, small_manifest())
    assert str(e.value) == (
        f"--calibration: {dataset.root} holds 3 sampled dataset observation(s); at least 4 are needed (some "
        "calibrate, the rest are held out for the accuracy gate); a few hundred from real runs is right"
    )


def test_a_calibration_frame_count_below_four_is_refused(dataset: Any) -> None:
    dataset([8])
    with pytest.raises(ExportError) as e:
        quantize.load_observations(dataset.root, small_manifest(), max_frames=3)
    assert str(e.value) == "--calibration-frames: expected at least 4, got 3"
    assert len(quantize.load_observations(dataset.root, small_manifest(), max_frames=4)) == 4


@pytest.mark.parametrize("error", [RecordingError("broken"), KeyError("fps"), ValueError("bad fps")])
def test_a_dataset_that_cannot_be_opened_is_refused_with_the_readers_reason(dataset: Any, error: Exception) -> None:
    dataset([8], fail_open=error)
    with pytest.raises(ExportError) as e:
        quantize.load_observations(dataset.root, small_manifest())
    assert str(e.value) == f"--calibration: {dataset.root}: not a readable LeRobot dataset: {error}"


@pytest.mark.parametrize("error", [RecordingError("no video"), ValueError("bad row"), OSError("gone")])
def test_an_episode_that_cannot_be_read_is_refused_naming_it(
    dataset: Any, error: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset([8])
    monkeypatch.setattr(Reader, "fail_episode", error)
    with pytest.raises(ExportError) as e:
        quantize.load_observations(dataset.root, small_manifest())
    assert str(e.value) == f"--calibration: {dataset.root}: episode 0: {error}"


def test_frames_are_copies_of_one_row_or_a_stack_ending_at_the_frame() -> None:
    values = np.arange(10).reshape(5, 2)
    values.flags.writeable = False
    one = quantize._frames(values, 3, 1)
    assert one.tolist() == [6, 7] and one.flags.writeable
    assert quantize._frames(values, 1, 3).tolist() == [[0, 1], [0, 1], [2, 3]]
    rows = np.array([[1, 1], [2, 2]])
    assert quantize._frames(rows, 7, 1, {7: 1}).tolist() == [2, 2]
    assert quantize._frames(rows, 7, 2, {6: 0, 7: 1}).tolist() == [[1, 1], [2, 2]]


# --- the error measure and the masks ---


def test_the_action_error_is_absolute_or_in_units_of_the_scale() -> None:
    got = np.array([[1.0, 5.0]], np.float32)
    ref = np.array([[2.0, 1.0]], np.float32)
    np.testing.assert_array_equal(quantize.action_error(got, ref, None), [[1.0, 4.0]])
    np.testing.assert_array_equal(quantize.action_error(got, ref, ()), [[1.0, 4.0]])
    scaled = quantize.action_error(got, ref, (0.5, 8.0))
    assert scaled.dtype == np.float64
    np.testing.assert_array_equal(scaled, [[2.0, 0.5]])
    # float64 before the difference: 2**24 + 1 is not a float32
    big = quantize.action_error(np.array([16777217], np.int64), np.array([16777216], np.int64), None)
    np.testing.assert_array_equal(big, [1.0])


def test_nodes_taking_a_boolean_tensor_are_the_ones_named() -> None:
    import torch

    graph = torch.fx.Graph()
    mask = graph.placeholder("mask")
    mask.meta["val"] = torch.zeros(2, dtype=torch.bool)
    x = graph.placeholder("x")
    x.meta["val"] = torch.zeros(2)
    scale = graph.placeholder("scale")  # no "val" at all
    picked = graph.call_function(torch.where, (mask, x, x))
    added = graph.call_function(torch.add, (x, scale))
    graph.call_function(torch.mul, (x, 2.0))
    graph.call_method("logical_not", (mask,))  # a method, not a function: not the quantizer's business
    graph.output((picked, added))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert quantize.boolean_consumers(module) == ["where"]
    second = graph.call_function(torch.logical_and, (x, mask))
    assert second.name == "logical_and"
    assert quantize.boolean_consumers(module) == ["where", "logical_and"]


def test_only_products_with_a_constant_second_operand_are_left_float() -> None:
    import warnings

    import torch

    class Products(torch.nn.Module):  # type: ignore[misc]
        """Every way a matrix product meets a constant: ``x @ C`` (a lifted tensor, a buffer, through
        ``mm``), ``C @ x``, and ``nn.Linear``."""

        def __init__(self) -> None:
            super().__init__()
            self.cols = torch.ones(4, 3)  # a plain tensor attribute: lifted into the graph as a constant
            self.register_buffer("rows", torch.ones(2, 5))
            self.register_buffer("square", torch.ones(3, 3))
            self.head = torch.nn.Linear(3, 3)

        def forward(self, x: Any) -> Any:
            y = torch.matmul(x, self.cols)  # x @ C: named
            z = torch.mm(y, self.square)  # through mm, C a buffer: named
            w = torch.matmul(self.rows, x)  # C @ x: scaled per output row, not named
            both = torch.matmul(y, z.t())  # two activations: not named
            return self.head(z).sum() + w.sum() + both.sum()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.export on a lifted tensor constant warns
        module = torch.export.export(Products(), (torch.ones(5, 4),)).module()
    aten = torch.ops.aten
    products = [n for n in module.graph.nodes if n.target in (aten.matmul.default, aten.mm.default)]
    assert len(products) == 4
    named = quantize.input_channel_weights(module)
    assert len(named) == 2
    targets = {n.name: n.target for n in module.graph.nodes}
    assert {targets[n] for n in named} == {torch.ops.aten.matmul.default, torch.ops.aten.mm.default}
    for name in named:
        node = next(n for n in module.graph.nodes if n.name == name)
        assert node.args[1].op == "get_attr" and node.args[0].op != "get_attr"


# --- the child's files ---


def test_the_int8_outputs_run_in_a_child_on_files_written_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    def child(
        target: Any, program: str, props: dict[str, Any], inputs: list[str], index: int, obs: str, out: str
    ) -> None:
        calls.append((target, program, props, inputs, index, obs, out))
        files = sorted(Path(obs).glob("*.npz"))
        assert [f.name for f in files] == ["0.npz", "1.npz"]
        with np.load(files[1]) as second:
            assert sorted(second.files) == ["a", "b"]  # only the inputs named, not "extra"
            np.testing.assert_array_equal(second["a"], [2.0])
        np.savez(out, arithmetic=np.array("bf16"), **{"0": np.array([10.0]), "1": np.array([20.0])})

    monkeypatch.setattr(quantize, "run_isolated", child)
    held = [
        {"a": np.array([1.0]), "b": np.array([0.0]), "extra": np.array([9.0])},
        {"a": np.array([2.0]), "b": np.array([0.0]), "extra": np.array([9.0])},
    ]
    program = tmp_path / "program_cpu.pte"
    got, arithmetic = quantize.int8_outputs(program, held, ["a", "b"], 1, {"X": "1"}, tmp_path / "work")
    assert [g.tolist() for g in got] == [[10.0], [20.0]]
    assert arithmetic == "bf16"
    work = tmp_path / "work"
    assert calls == [
        (
            quantize._run_blob,
            str(program),
            {"X": "1"},
            ["a", "b"],
            1,
            str(work / "observations"),
            str(work / "outputs.npz"),
        )
    ]
    # a second try (another precision) reuses the files and never reads the first try's outputs
    (work / "observations" / "1.npz").write_bytes((work / "observations" / "1.npz").read_bytes())
    before = (work / "observations" / "0.npz").stat().st_mtime_ns
    monkeypatch.setattr(quantize, "run_isolated", lambda *a: None)
    with pytest.raises(FileNotFoundError):
        quantize.int8_outputs(program, held, ["a", "b"], 1, {}, work)
    assert (work / "observations" / "0.npz").stat().st_mtime_ns == before


def test_a_child_that_exits_with_a_status_is_an_export_error_naming_it() -> None:
    with pytest.raises(ExportError) as e:
        quantize.run_isolated(_exit, 3)
    assert str(e.value) == "running the INT8 program in a child process failed (exit status 3); see its output"


def _exit(status: int) -> None:
    raise SystemExit(status)


# --- the gate's verdict on stand-in programs ---


class Program:
    """Stands in for a parsed .pte's method: one delegate with a payload."""

    def __init__(self, payload: bytes) -> None:
        self.delegates = [type("Delegate", (), {"payload": payload})()]


class Compiled:
    """A float program: its action output is the observation's ``x`` times two (output 1 of 2), written
    into the same output buffers at each call, as OpenVINO's infer request does."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def create_infer_request(self) -> Any:
        compiled = self
        outputs = [np.zeros(1), np.zeros(2, np.float32)]

        class Request:
            def infer(self, values: list[np.ndarray]) -> list[np.ndarray]:
                compiled.log.append(("infer", [v.tolist() for v in values]))
                outputs[1][:] = values[0] * 2
                return outputs

        return Request()


class Core:
    default = "<Type: 'bfloat16'>"

    def get_property(self, device: str, key: str) -> str:
        assert (device, key) == ("CPU", "INFERENCE_PRECISION_HINT")
        return self.default


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """``run(int8, crash_on=...)``: the gate on a float program computing 2x and an INT8 one returning
    ``int8(x)``; returns the gate's record and a log of what was run."""
    import openvino

    import runtime.bundle.pte as pte
    import runtime.engine.openvino_engine as engine

    log: list[Any] = []
    monkeypatch.setattr(openvino, "Core", Core)

    def parse_program(data: bytes, file: str) -> dict[str, Program]:
        log.append(("parse", data, file))
        return {"forward": Program(b"blob")}

    def import_blob(core: Any, payload: bytes, device: str, props: dict[str, Any]) -> tuple[Any, Any]:
        log.append(("import", type(core).__name__, payload, device, props))
        return Compiled(log), None

    monkeypatch.setattr(pte, "parse_program", parse_program)
    monkeypatch.setattr(engine, "import_blob", import_blob)

    manifest = small_manifest(
        inputs=(TensorSpec("x", "float32", (2,), "state"), TensorSpec("y", "float32", (1,), "state")),
        outputs=(TensorSpec("extra", "float32", (1,), "other"), TensorSpec("action", "float32", (2,), "action")),
    )
    src = type("Src", (), {"manifest": manifest, "read_program": lambda self, device: f"{device} bytes".encode()})()

    def run(int8: Any, crash_on: tuple[str | None, ...] = (), scale: Any = (1.0, 4.0), bound: float = 0.5) -> Any:
        def outputs(program: Path, held: list[Any], inputs: list[str], index: int, props: Any, work: Path) -> Any:
            log.append(("int8", program, inputs, index, props, work.name.startswith("lerobot-runtime-gate-")))
            if props.get("INFERENCE_PRECISION_HINT") in crash_on:
                raise quantize.NativeCrash("SIGFPE")
            return [int8(o["x"]) for o in held], props.get("INFERENCE_PRECISION_HINT", "bf16")

        monkeypatch.setattr(quantize, "int8_outputs", outputs)
        held = [{"x": np.array([1.0, 2.0], np.float32), "y": np.array([0.0], np.float32)} for _ in range(2)]
        held[1]["x"] = np.array([3.0, -1.0], np.float32)
        return quantize.accuracy_gate(src, tmp_path, "int8.pte", held, scale, "action std", bound)

    run.log = log  # type: ignore[attr-defined]
    return run


def test_the_gate_records_the_error_against_the_float_program_in_units_of_the_scale(gate: Any, tmp_path: Path) -> None:
    # float: [2, 4] and [6, -2]; INT8 off by [0.25, 1.0] and [0, 0]: errors [0.25, 0.25] and [0, 0]
    record = gate(lambda x: x * 2 + np.array([0.25, 1.0]) * (x[0] == 1))
    assert record == {
        "held_out_observations": 2,
        "max_error": 0.25,
        "mean_error": 0.125,
        "bound": 0.5,
        "units": "action std",
        "ok": True,
        "float_arithmetic": "bf16",
    }
    assert gate.log[:4] == [
        ("parse", b"CPU bytes", "p.pte"),
        ("import", "Core", b"blob", "CPU", {"INFERENCE_PRECISION_HINT": "f32"}),
        ("infer", [[1.0, 2.0], [0.0]]),
        ("infer", [[3.0, -1.0], [0.0]]),
    ]
    assert gate.log[4:] == [("int8", tmp_path / "int8.pte", ["x", "y"], 1, {}, True)]


def test_an_error_exactly_at_the_bound_passes_and_past_it_is_refused_word_for_word(gate: Any) -> None:
    at_bound = gate(lambda x: x * 2 + 0.5, scale=None)
    assert (at_bound["max_error"], at_bound["ok"]) == (0.5, True)
    with pytest.raises(ParityError) as e:
        gate(lambda x: x * 2 + np.array([0.75, 0.0]), scale=None)
    assert str(e.value) == (
        "INT8 refused: on 2 held-out observations the INT8 program's action differs from the float program's by up "
        "to 0.75 (mean 0.375) in units of action std; the bound is 0.5. Calibrate on more (and more varied) "
        "recorded observations, or raise --max-error knowingly"
    )


def test_a_gate_whose_default_precision_crashed_records_what_crashed_and_what_ran(gate: Any) -> None:
    record = gate(lambda x: x * 2, crash_on=(None,))
    assert record["crashed"] == {"bf16": "SIGFPE"}
    assert record["float_precision"] == "f32"
    assert record["float_arithmetic"] == "f32"
    assert record["ok"] is True
    assert [entry[4] for entry in gate.log if entry[0] == "int8"] == [{}, {"INFERENCE_PRECISION_HINT": "f32"}]


def test_the_summary_fills_what_an_older_record_lacks() -> None:
    assert quantize.gate_summary({"gate": {"max_error": 0.1}}) == (
        "INT8 gate: max 0.1, mean nan in units of ? on ? held-out observations (bound nan)"
    )
    assert quantize.gate_summary({"gate": {"units": "action std"}}) == (
        "INT8 gate: max nan, mean nan in units of action std on ? held-out observations (bound nan)"
    )
    assert quantize.gate_summary({"gate": {}}) == ""
    record = {"max_error": 0.1, "crashed": {"bf16": "SIGFPE", "f32": "SIGSEGV"}}
    assert quantize.gate_summary({"gate": record}).endswith(
        "(bound nan); float layers at None (OpenVINO crashed at bf16: SIGFPE, f32: SIGSEGV)"
    )


def test_a_native_crash_reads_as_its_signal() -> None:
    crash = quantize.NativeCrash("SIGFPE")
    assert (str(crash), crash.signal_name) == ("SIGFPE", "SIGFPE")


def test_the_child_finds_what_this_process_imports_from_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target importable here only through ``sys.path`` (a checkout added by a script, not the
    environment's PYTHONPATH) is importable in the child too."""
    import importlib

    (tmp_path / "gate_child_target.py").write_text(
        "import os, pathlib\n"
        "def write(path):\n"
        "    pathlib.Path(path).write_text(os.environ.get('GATE_CHILD_CHECK', 'unset'))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("GATE_CHILD_CHECK", "inherited")
    module = importlib.import_module("gate_child_target")
    quantize.run_isolated(module.write, str(tmp_path / "out"))
    assert (tmp_path / "out").read_text() == "inherited"
