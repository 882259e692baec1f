"""`dataset check` rule by rule: each problem named by its file and field, word for word, and what
a problem stops the checker reading. The datasets are written in the test by the dataset writer
(two episodes, 3 and 2 frames, at 10 fps) and then altered; video files are stand-ins holding their
frame size and frame times as JSON, read by stand-ins of the video calls."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runtime.recording import check as check_module
from runtime.recording import video as video_module
from runtime.recording import writer as writer_module
from runtime.recording.check import CheckReport, check_dataset
from runtime.recording.encoder_process import EncodedVideo
from runtime.recording.features import RecordingFeatures
from runtime.recording.frames import FrameSlot
from runtime.recording.writer import DatasetWriter

FPS = 10
FRONT = "observation.images.front"
INFO = "meta/info.json"
TASKS = "meta/tasks.parquet"
STATS = "meta/stats.json"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"
DATA = "data/chunk-000/file-000.parquet"
VIDEO = f"videos/{FRONT}/chunk-000/file-000.mp4"
STAT_NAMES = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
INDEX_FEATURE = "{'dtype': 'int64', 'shape': [1], 'names': None}"


def _frame(f: RecordingFeatures, k: int) -> FrameSlot:
    slot = FrameSlot(f, images=False)
    slot.t_s = 100.0 + k / FPS
    slot.state[:] = (k, -k)
    slot.action[:] = (k, 0)
    slot.requested[:] = (k, 1)
    slot.source = "policy"
    return slot


def _write(root: Path, cameras: bool, tmp: Path, lengths: tuple[int, ...] = (3, 2), **limits: float) -> None:
    """Episodes "pick" (3 frames) and "place" (2 frames), or as many as ``lengths`` says; each video
    file then holds the frame times of its episodes, one after the other, as JSON."""
    f = RecordingFeatures(fps=FPS, joint_names=("a", "b"), cameras={"front": (16, 32)} if cameras else {})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(writer_module, "video_info", lambda path: {"video.fps": FPS})
        mp.setattr(writer_module, "append_video", lambda dst, src, frames, fps: None)
        w = DatasetWriter(root, f, encode_video=False, **limits)
        for i, task in enumerate(("pick", "place")[: len(lengths)]):
            ks = range(sum(lengths[:i]), sum(lengths[: i + 1]))
            w.begin_episode(task)
            for k in ks:
                w.write_frame(_frame(f, k))
            if cameras:
                src = tmp / f"episode-{task}.mp4"
                src.write_text("{}")
                stats = {s: np.full((3, 1, 1), 0.5) for s in STAT_NAMES}
                stats["count"] = np.array([len(ks)])
                w.attach_encoded({FRONT: EncodedVideo(src, len(ks), stats, 0.0)})
            w.finish_episode()
        w.close()
    times: dict[Path, list[float]] = {}
    for path in sorted((root / "meta/episodes").glob("*/*.parquet")):
        for row in pq.read_table(path).to_pylist():
            if cameras:
                video = root / f"videos/{FRONT}/chunk-000/file-{row[f'videos/{FRONT}/file_index']:03d}.mp4"
                start = row[f"videos/{FRONT}/from_timestamp"]
                times.setdefault(video, []).extend(start + k / FPS for k in range(row["length"]))
    for video, ts in times.items():
        video.write_text(json.dumps({"size": [16, 32], "times": ts}))


def _write_bases() -> dict[str, Path]:
    base = Path(tempfile.mkdtemp(prefix="check-rules-"))
    atexit.register(shutil.rmtree, base, True)
    out = {"camera": base / "camera", "plain": base / "plain", "rolled": base / "rolled", "long": base / "long"}
    _write(out["camera"], True, base)
    _write(out["plain"], False, base, (3, 1))  # an episode of one frame
    _write(out["long"], False, base, (7,))
    _write(out["rolled"], True, base, data_file_size_mb=1e-9, video_file_size_mb=1e-9)
    return out


# Written once, when the module is imported, and copied by each test: a mutation run forks every
# mutant's tests from a process that imported this module, so no mutant pays for writing them.
BASES = _write_bases()


def stand_in_video_info(path: Path) -> dict[str, Any]:
    height, width = json.loads(path.read_text())["size"]
    return {"video.height": height, "video.width": width}


def stand_in_frame_times(path: Path) -> list[float]:
    return list(json.loads(path.read_text())["times"])


@pytest.fixture
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    monkeypatch.setattr(video_module, "video_info", stand_in_video_info)
    monkeypatch.setattr(check_module, "frame_times", stand_in_frame_times)

    def make(kind: str) -> Path:
        shutil.copytree(BASES[kind], tmp_path / kind)
        return tmp_path / kind

    return make


@pytest.fixture
def ds(copy: Callable[[str], Path]) -> Path:
    """The dataset with one camera, every episode in one data, episodes and video file."""
    return copy("camera")


def edit_json(path: Path, edit: Callable[[Any], Any]) -> None:
    """``edit`` changes the document in place."""
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def edit_table(path: Path, column: str, values: Any) -> None:
    """Replace a column (a list or an arrow array), drop it (None), keeping the schema's metadata."""
    table = pq.read_table(path)
    i = table.column_names.index(column)
    if values is None:
        table = table.remove_column(i)
    else:
        array = values if isinstance(values, pa.Array) else pa.array(values, table.schema.field(i).type)
        table = table.set_column(i, pa.field(column, array.type), array)
    pq.write_table(table, path)


def problems(root: Path) -> list[str]:
    return check_dataset(root).problems


# -- the report ------------------------------------------------------------------------------------


def test_a_whole_dataset_is_reported_with_its_counts(ds: Path, copy: Callable[[str], Path]) -> None:
    report = check_dataset(ds)
    assert (report.problems, report.ok) == ([], True)
    assert (report.root, report.episodes, report.frames, report.cameras) == (ds, 2, 5, [FRONT])
    plain = check_dataset(copy("plain"))
    assert (plain.problems, plain.episodes, plain.frames, plain.cameras) == ([], 2, 4, [])
    assert check_dataset(copy("long")).problems == []
    assert check_dataset(copy("rolled")).problems == []


def test_a_report_with_a_problem_is_not_ok(tmp_path: Path) -> None:
    report = CheckReport(tmp_path)
    assert (report.episodes, report.frames, report.cameras, report.ok) == (0, 0, [], True)
    report.add("meta/info.json", "missing")
    assert (report.problems, report.ok) == (["meta/info.json: missing"], False)


# -- meta/info.json --------------------------------------------------------------------------------


def test_without_an_info_file_nothing_else_is_read(ds: Path) -> None:
    (ds / INFO).unlink()
    report = check_dataset(ds)
    assert report.problems == [f"{INFO}: missing: this folder is not a LeRobot dataset"]
    assert (report.episodes, report.frames, report.cameras) == (0, 0, [])


def test_an_info_file_that_cannot_be_read_is_named_with_the_reason(ds: Path) -> None:
    (ds / INFO).write_text("{")
    assert problems(ds) == [
        f"{INFO}: not readable JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"
    ]
    (ds / INFO).unlink()
    (ds / INFO).mkdir()
    assert problems(ds) == [f"{INFO}: not readable JSON ([Errno 21] Is a directory: '{ds / INFO}')"]


def test_every_missing_info_field_is_named_and_nothing_else_is_read(ds: Path) -> None:
    (ds / INFO).write_text("{}")
    assert problems(ds) == [
        f"{INFO}: codebase_version: expected str, found None",
        f"{INFO}: total_episodes: expected int, found None",
        f"{INFO}: total_frames: expected int, found None",
        f"{INFO}: total_tasks: expected int, found None",
        f"{INFO}: chunks_size: expected int, found None",
        f"{INFO}: fps: expected int, found None",
        f"{INFO}: splits: expected dict, found None",
        f"{INFO}: data_path: expected str, found None",
        f"{INFO}: features: expected dict, found None",
    ]


def test_an_info_field_of_the_wrong_type_stops_the_check(ds: Path) -> None:
    edit_json(ds / INFO, lambda info: info.update(fps="10", splits=["train"]))
    (ds / STATS).unlink()  # not reached
    assert problems(ds) == [f"{INFO}: fps: expected int, found '10'", f"{INFO}: splits: expected dict, found ['train']"]


def test_a_malformed_feature_stops_the_check_before_the_other_files(ds: Path) -> None:
    def edit(info: dict[str, Any]) -> None:
        info["features"]["action"] = {"dtype": "float32", "shape": [0]}
        info["codebase_version"] = "v2.1"
        info["features"]["timestamp"]["shape"] = [-1]

    edit_json(ds / INFO, edit)
    (ds / STATS).unlink()  # not reached
    assert problems(ds) == [
        f"{INFO}: features.action: shape: expected a non-empty list of positive integers, found [0]",
        f"{INFO}: features.timestamp: shape: expected a non-empty list of positive integers, found [-1]",
    ]


def test_a_video_feature_takes_three_dimensions(ds: Path) -> None:
    edit_json(ds / INFO, lambda info: info["features"][FRONT].update(shape=[16, 32, 3, 1]))
    assert problems(ds) == [
        f"{INFO}: features.{FRONT}: shape: expected [height, width, channels] for a video, found [16, 32, 3, 1]"
    ]


def test_another_version_and_data_path_are_named_and_the_check_goes_on(ds: Path) -> None:
    edit_json(ds / INFO, lambda info: info.update(codebase_version="v2.1", data_path="data/{episode_index}.parquet"))
    (ds / STATS).unlink()
    assert problems(ds) == [
        f"{INFO}: codebase_version: expected 'v3.0', found 'v2.1'",
        f"{INFO}: data_path: expected 'data/chunk-{{chunk_index:03d}}/file-{{file_index:03d}}.parquet', "
        "found 'data/{episode_index}.parquet'",
        f"{STATS}: missing",
    ]


def test_a_video_path_is_needed_only_with_cameras(ds: Path, copy: Callable[[str], Path]) -> None:
    edit_json(ds / INFO, lambda info: info.update(video_path="videos/{video_key}.mp4"))
    assert problems(ds) == [
        f"{INFO}: video_path: expected 'videos/{{video_key}}/chunk-{{chunk_index:03d}}/file-{{file_index:03d}}.mp4', "
        "found 'videos/{video_key}.mp4'"
    ]
    edit_json(ds / INFO, lambda info: info.pop("video_path"))
    assert problems(ds) == [
        f"{INFO}: video_path: expected 'videos/{{video_key}}/chunk-{{chunk_index:03d}}/file-{{file_index:03d}}.mp4', "
        "found None"
    ]
    plain = copy("plain")
    edit_json(plain / INFO, lambda info: info.pop("video_path"))
    assert problems(plain) == []


@pytest.mark.parametrize(
    ("entry", "found"),
    [
        (None, "None"),
        ({"dtype": "float64", "shape": [1], "names": None}, "{'dtype': 'float64', 'shape': [1], 'names': None}"),
        ({"dtype": "int64", "shape": [2], "names": None}, "{'dtype': 'int64', 'shape': [2], 'names': None}"),
    ],
)
def test_an_index_feature_of_another_kind_is_named(ds: Path, entry: Any, found: str) -> None:
    def edit(info: dict[str, Any]) -> None:
        if entry is None:
            del info["features"]["frame_index"]
        else:
            info["features"]["frame_index"] = entry

    edit_json(ds / INFO, edit)
    info_problems = [p for p in problems(ds) if p.startswith(INFO)]
    assert info_problems == [f"{INFO}: features.frame_index: expected {INDEX_FEATURE}, found {found}"]


def test_a_feature_name_with_a_slash_is_refused(copy: Callable[[str], Path]) -> None:
    plain = copy("plain")
    edit_json(plain / INFO, lambda info: info["features"].update({"arm/grip": {"dtype": "string", "shape": [1]}}))
    assert [p for p in problems(plain) if p.startswith(INFO)] == [
        f"{INFO}: features.arm/grip: a feature name may not contain '/'"
    ]


def test_a_cameras_video_info_is_needed_once_there_are_episodes(ds: Path, copy: Callable[[str], Path]) -> None:
    edit_json(ds / INFO, lambda info: info["features"][FRONT].pop("info"))
    assert problems(ds) == [f"{INFO}: features.{FRONT}.info: missing (the video's codec, size and fps)"]
    edit_json(ds / INFO, lambda info: info["features"][FRONT].update(info="av1"))
    assert problems(ds) == [f"{INFO}: features.{FRONT}.info: missing (the video's codec, size and fps)"]
    edit_json(ds / INFO, lambda info: info["features"][FRONT].update(info={"video.fps": 30}))
    assert problems(ds) == [f"{INFO}: features.{FRONT}.info.video.fps: expected 10, found 30"]
    edit_json(ds / INFO, lambda info: info["features"][FRONT].update(info={}))
    assert problems(ds) == [f"{INFO}: features.{FRONT}.info.video.fps: expected 10, found None"]


def empty_dataset(root: Path) -> None:
    """The dataset before its first episode: info.json alone."""
    for child in root.iterdir():
        if child.name != "meta":
            shutil.rmtree(child)
    for child in (root / "meta").iterdir():
        if child.name != "info.json":
            shutil.rmtree(child) if child.is_dir() else child.unlink()

    def edit(info: dict[str, Any]) -> None:
        info.update(total_episodes=0, total_frames=0, total_tasks=0, splits={})
        del info["features"][FRONT]["info"]

    edit_json(root / INFO, edit)


def test_a_dataset_without_episodes_needs_no_other_file(ds: Path) -> None:
    empty_dataset(ds)
    report = check_dataset(ds)
    assert (report.problems, report.episodes, report.frames, report.cameras) == ([], 0, 0, [FRONT])
    edit_json(ds / INFO, lambda info: info.update(splits={"train": "0:0"}))
    assert problems(ds) == [f"{INFO}: splits: expected {{}}, found {{'train': '0:0'}}"]


def test_the_split_covers_every_episode(ds: Path) -> None:
    edit_json(ds / INFO, lambda info: info.update(splits={"train": "0:1"}))
    assert problems(ds) == [f"{INFO}: splits: expected {{'train': '0:2'}}, found {{'train': '0:1'}}"]


def test_a_metadata_problem_does_not_hide_the_episodes_data_and_videos_problems(ds: Path) -> None:
    # before, any problem found so far stopped the episodes' rows being read: the report named the
    # split alone, and the data and videos went unchecked
    edit_json(ds / INFO, lambda info: info.update(splits={"train": "0:1"}))
    rewrite_data(ds, "frame_index", [0, 1, 2, 0, 2])
    write_video(ds, [16, 32], [0.0, 0.1, 0.2, 0.3])
    assert problems(ds) == [
        f"{INFO}: splits: expected {{'train': '0:2'}}, found {{'train': '0:1'}}",
        f"{DATA}: episode 1: frame_index expected [0, 1]..., found [0, 2]...",
        f"{VIDEO}: episode 1: no frame at 0.4000 s (frame 1); 1 of 2 frames missing",
    ]


# -- meta/tasks.parquet ----------------------------------------------------------------------------


def test_missing_tasks_are_named_once(ds: Path) -> None:
    (ds / TASKS).unlink()
    assert problems(ds) == [f"{TASKS}: missing"]


def write_tasks(root: Path, table: pa.Table) -> None:
    pq.write_table(table, root / TASKS)


def test_tasks_without_pandas_metadata_are_named(ds: Path) -> None:
    write_tasks(ds, pa.table({"task_index": [0, 1], "__index_level_0__": ["pick", "place"]}))
    assert problems(ds) == [
        f"{TASKS}: no pandas metadata: pandas.read_parquet would not restore the task text as the index"
    ]


def test_tasks_with_another_pandas_index_are_named(ds: Path) -> None:
    table = pq.read_table(ds / TASKS)
    meta = json.loads(table.schema.metadata[b"pandas"])
    meta["index_columns"] = [{"kind": "range", "start": 0, "stop": 2, "step": 1}]
    write_tasks(ds, table.replace_schema_metadata({b"pandas": json.dumps(meta)}))
    assert problems(ds) == [
        f"{TASKS}: pandas index_columns: expected ['__index_level_0__'], "
        "found [{'kind': 'range', 'start': 0, 'stop': 2, 'step': 1}]"
    ]


def test_tasks_with_other_columns_are_named_and_not_read(ds: Path) -> None:
    table = pq.read_table(ds / TASKS)
    write_tasks(ds, table.rename_columns(["task_index", "task"]).replace_schema_metadata(table.schema.metadata))
    assert problems(ds) == [
        f"{TASKS}: columns: expected task_index and the task text index, found ['task_index', 'task']"
    ]


def test_task_columns_of_another_type_are_named_and_not_read(ds: Path) -> None:
    table = pq.read_table(ds / TASKS)
    meta = table.schema.metadata
    write_tasks(
        ds,
        pa.table({"task_index": pa.array([0.0, 1.0]), "__index_level_0__": pa.array([1, 2])}).replace_schema_metadata(
            meta
        ),
    )
    assert problems(ds) == [
        f"{TASKS}: column 'task_index': expected int64, found double",
        f"{TASKS}: column '__index_level_0__': expected string, found int64",
    ]


def test_tasks_of_other_widths_are_taken(ds: Path) -> None:
    table = pq.read_table(ds / TASKS)
    tasks = pa.table(
        {
            "task_index": pa.array([0, 1], pa.int32()),
            "__index_level_0__": pa.array(["pick", "place"], pa.large_string()),
        }
    )
    write_tasks(ds, tasks.replace_schema_metadata(table.schema.metadata))
    assert problems(ds) == []


def rewrite_tasks(root: Path, indices: list[int], texts: list[str]) -> None:
    table = pq.read_table(root / TASKS)
    tasks = pa.table({"task_index": pa.array(indices, pa.int64()), "__index_level_0__": pa.array(texts)})
    write_tasks(root, tasks.replace_schema_metadata(table.schema.metadata))


def test_tasks_are_found_by_their_index_in_any_order(ds: Path) -> None:
    rewrite_tasks(ds, [1, 0], ["place", "pick"])
    assert problems(ds) == []


def test_task_indices_that_skip_repeated_texts_and_a_count_that_disagrees_are_named(ds: Path) -> None:
    rewrite_tasks(ds, [0, 2], ["pick", "place"])
    assert problems(ds) == [
        f"{TASKS}: task_index: expected 0..1, found [0, 2]",
        f"meta/episodes: episode 1: task 'place' is not in {TASKS}",  # no task has index 1
    ]
    rewrite_tasks(ds, [0, 1, 2], ["pick", "place", "pick"])
    assert problems(ds) == [
        f"{TASKS}: task texts repeat",
        f"{TASKS}: 3 tasks, but info.json total_tasks is 2",
        # task_index 2 is pick, the episodes' task_index 0 and 1 lie inside 0..1
    ]


def test_an_episodes_task_that_is_not_a_task_is_named(ds: Path) -> None:
    rewrite_tasks(ds, [0], ["pick"])
    edit_json(ds / INFO, lambda info: info.update(total_tasks=1))
    assert problems(ds) == [
        f"meta/episodes: episode 1: task 'place' is not in {TASKS}",
        f"{DATA}: episode 1: task_index outside 0..0",
    ]


# -- meta/episodes ---------------------------------------------------------------------------------


def test_episodes_without_a_file_stop_the_data_and_video_checks(ds: Path) -> None:
    shutil.rmtree(ds / "meta/episodes")
    assert problems(ds) == ["meta/episodes: no episodes file"]  # its data file is not named as stray


def test_a_dataset_without_episodes_and_a_stray_data_file(ds: Path) -> None:
    data = (ds / DATA).read_bytes()
    empty_dataset(ds)
    (ds / DATA).parent.mkdir(parents=True)
    (ds / DATA).write_bytes(data)
    assert problems(ds) == [f"{DATA}: no episode refers to this data file"]


def test_episode_columns_missing_and_a_statistic_of_the_wrong_shape_stop_the_rows(ds: Path) -> None:
    edit_table(ds / EPISODES, "length", None)
    edit_table(ds / EPISODES, "stats/action/mean", [[1.0], [1.0]])
    edit_table(ds / EPISODES, f"stats/{FRONT}/count", [[3, 1], [2, 1]])
    edit_table(ds / EPISODES, "stats/index/q01", None)
    edit_table(ds / EPISODES, "stats/index/q99", None)  # a second one of the same feature: named too
    edit_table(ds / EPISODES, "tasks", None)  # LeRobot does not need it
    edit_table(ds / EPISODES, "recording/drop_rate", None)  # this recorder's own
    assert problems(ds) == [
        f"{EPISODES}: column 'length' missing",
        f"{EPISODES}: stats/{FRONT}/count: expected shape (1,), found (2,)",
        f"{EPISODES}: stats/action/mean: expected shape (2,), found (1,)",
        f"{EPISODES}: column 'stats/index/q01' missing",
        f"{EPISODES}: column 'stats/index/q99' missing",
    ]


def test_an_episodes_file_with_a_column_missing_does_not_stop_the_next_ones(copy: Callable[[str], Path]) -> None:
    rolled = copy("rolled")
    first, second = "meta/episodes/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-001.parquet"
    edit_table(rolled / first, "length", None)
    edit_table(rolled / second, "dataset_to_index", None)
    assert problems(rolled) == [
        f"{first}: column 'length' missing",
        f"{second}: column 'dataset_to_index' missing",
    ]


def test_a_statistic_of_the_wrong_shape_is_named_once_per_column(ds: Path) -> None:
    edit_table(ds / EPISODES, f"stats/{FRONT}/min", pa.array([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]))
    edit_table(ds / EPISODES, "stats/observation.state/max", pa.array([[1.0, 2.0], [1.0]]))
    assert problems(ds) == [
        f"{EPISODES}: stats/{FRONT}/min: expected shape (3, 1, 1), found (3,)",
        f"{EPISODES}: stats/observation.state/max: expected shape (2,), found (1,)",
    ]


@pytest.mark.parametrize(
    ("column", "values", "problem"),
    [
        ("length", pa.array([3, 2], pa.int32()), None),
        ("dataset_from_index", pa.array([0, 3], pa.uint64()), None),
        (f"videos/{FRONT}/from_timestamp", pa.array([0.0, 0.3], pa.float32()), None),
        ("tasks", pa.array([["pick"], ["place"]], pa.large_list(pa.large_string())), None),
        ("tasks", pa.array([["pick"], ["place"]], pa.list_(pa.large_string())), None),
        ("tasks", pa.array([["pick"], ["place"]], pa.large_list(pa.string())), None),
        ("tasks", pa.array(["pick", "place"]), "column 'tasks': expected list<item: string>, found string"),
        ("tasks", pa.array([[1], [2]]), "column 'tasks': expected list<item: string>, found list<element: int64>"),
        ("length", pa.array([3.0, 2.0]), "column 'length': expected int64, found double"),
        (
            "recording/drops_over_limit",
            pa.array([0, 0]),
            "column 'recording/drops_over_limit': expected bool, found int64",
        ),
        ("length", pa.array([3, None], pa.int64()), "column 'length': 1 null values, expected none"),
        (
            f"videos/{FRONT}/from_timestamp",
            pa.array([0.0, None]),
            f"column 'videos/{FRONT}/from_timestamp': 1 null values, expected none",
        ),
    ],
)
def test_an_episodes_column_is_taken_in_any_width_of_its_kind(
    ds: Path, column: str, values: pa.Array, problem: str | None
) -> None:
    edit_table(ds / EPISODES, column, values)
    assert problems(ds) == ([] if problem is None else [f"{EPISODES}: {problem}"])


def test_an_episode_row_in_the_wrong_episodes_file_is_named(ds: Path) -> None:
    edit_table(ds / EPISODES, "meta/episodes/file_index", [0, 1])
    edit_table(ds / EPISODES, "meta/episodes/chunk_index", [2, 0])
    assert problems(ds) == [
        f"{EPISODES}: episode 0: meta/episodes indices say (2, 0)",
        f"{EPISODES}: episode 1: meta/episodes indices say (0, 1)",
    ]


def test_episode_indices_that_are_not_0_to_n_are_named(ds: Path) -> None:
    edit_table(ds / EPISODES, "episode_index", [0, 2])
    assert [p for p in problems(ds) if p.startswith("meta/episodes")] == [
        "meta/episodes: episode_index: expected 0..1, found [0, 2]"
    ]


def swap_episodes_files(rolled: Path) -> None:
    """Episode 1's row in the first episodes file, episode 0's in the second."""
    first, second = (rolled / f"meta/episodes/chunk-000/file-00{i}.parquet" for i in (0, 1))
    a, b = pq.read_table(first), pq.read_table(second)
    pq.write_table(b, first)
    pq.write_table(a, second)


def test_episodes_are_read_in_index_order_across_files(copy: Callable[[str], Path]) -> None:
    rolled = copy("rolled")
    swap_episodes_files(rolled)
    for i, path in enumerate(sorted((rolled / "meta/episodes").glob("*/*.parquet"))):
        edit_table(path, "meta/episodes/file_index", [i])
    assert problems(rolled) == []


def test_rows_in_the_wrong_episodes_files_are_named_file_by_file(copy: Callable[[str], Path]) -> None:
    rolled = copy("rolled")
    swap_episodes_files(rolled)
    assert problems(rolled) == [
        "meta/episodes/chunk-000/file-000.parquet: episode 1: meta/episodes indices say (0, 1)",
        "meta/episodes/chunk-000/file-001.parquet: episode 0: meta/episodes indices say (0, 0)",
    ]


def test_lengths_and_spans_that_do_not_tile_the_data_are_named(ds: Path) -> None:
    edit_table(ds / EPISODES, "length", [0, 2])
    edit_json(ds / INFO, lambda info: info.update(total_frames=5))
    assert [p for p in problems(ds) if p.startswith("meta/episodes:")] == [
        "meta/episodes: episode 0: length 0, expected >= 1",
        "meta/episodes: episode 0: frames [0, 3), expected [0, 0) (length 0 after the episodes before it)",
        "meta/episodes: episode 1: frames [3, 5), expected [0, 2) (length 2 after the episodes before it)",
        "meta/episodes: episode lengths add up to 2, info.json total_frames is 5",
    ]


def test_a_span_off_at_either_end_is_named(ds: Path) -> None:
    edit_table(ds / EPISODES, "dataset_to_index", [3, 6])
    assert [p for p in problems(ds) if p.startswith("meta/episodes:")] == [
        "meta/episodes: episode 1: frames [3, 6), expected [3, 5) (length 2 after the episodes before it)"
    ]
    edit_table(ds / EPISODES, "dataset_to_index", [3, 5])
    edit_table(ds / EPISODES, "dataset_from_index", [1, 3])
    assert [p for p in problems(ds) if p.startswith("meta/episodes:")] == [
        "meta/episodes: episode 0: frames [1, 3), expected [0, 3) (length 3 after the episodes before it)"
    ]


def test_lengths_that_add_up_to_other_than_the_total_are_named(ds: Path) -> None:
    edit_json(ds / INFO, lambda info: info.update(total_frames=6))
    assert [p for p in problems(ds) if not p.startswith(STATS)] == [
        "meta/episodes: episode lengths add up to 5, info.json total_frames is 6"
    ]


# -- data ------------------------------------------------------------------------------------------


def test_a_whole_number_float_column_may_be_stored_as_integers(copy: Callable[[str], Path]) -> None:
    rolled = copy("rolled")  # every episode starts its own video file, at 0 s
    edit_table(rolled / EPISODES, f"videos/{FRONT}/from_timestamp", pa.array([0], pa.int64()))
    assert problems(rolled) == []


def test_a_missing_data_file_names_the_episodes_living_there(copy: Callable[[str], Path]) -> None:
    rolled = copy("rolled")
    (rolled / "data/chunk-000/file-001.parquet").unlink()
    assert problems(rolled) == ["data/chunk-000/file-001.parquet: missing (episodes [1] live there)"]


def test_data_columns_missing_of_another_type_or_extra_are_named(ds: Path) -> None:
    table = pq.read_table(ds / DATA)
    table = table.drop_columns(["control.time_s"]).append_column("note", pa.array(["x"] * 5))
    i = table.column_names.index("index")
    table = table.set_column(i, "index", table.column(i).cast(pa.int32()))
    pq.write_table(table, ds / DATA)
    assert problems(ds) == [
        f"{DATA}: column 'control.time_s' missing",
        f"{DATA}: column 'index': expected int64, found int32",
        f"{DATA}: columns not in info.json features: ['note']",
    ]


def test_a_missing_data_file_does_not_stop_the_next_ones_being_checked(copy: Callable[[str], Path]) -> None:
    rolled = copy("rolled")
    (rolled / "data/chunk-000/file-000.parquet").unlink()
    rewrite_data(rolled, "frame_index", [1, 2], path="data/chunk-000/file-001.parquet")
    assert problems(rolled) == [
        "data/chunk-000/file-000.parquet: missing (episodes [0] live there)",
        "data/chunk-000/file-001.parquet: episode 1: frame_index expected [0, 1]..., found [1, 2]...",
    ]


def test_a_data_file_with_a_column_problem_does_not_stop_the_next_ones(copy: Callable[[str], Path]) -> None:
    rolled = copy("rolled")
    path = rolled / "data/chunk-000/file-000.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["timestamp"]), path)
    rewrite_data(rolled, "frame_index", [1, 2], path="data/chunk-000/file-001.parquet")
    assert problems(rolled) == [
        "data/chunk-000/file-000.parquet: column 'timestamp' missing",
        "data/chunk-000/file-001.parquet: episode 1: frame_index expected [0, 1]..., found [1, 2]...",
    ]


def test_a_data_file_with_a_column_problem_is_not_read_further(ds: Path) -> None:
    pq.write_table(pq.read_table(ds / DATA).drop_columns(["timestamp", "frame_index"]), ds / DATA)
    assert problems(ds) == [f"{DATA}: column 'timestamp' missing", f"{DATA}: column 'frame_index' missing"]


def test_a_long_episodes_indices_are_shown_five_at_most(copy: Callable[[str], Path]) -> None:
    long = copy("long")
    rewrite_data(long, "frame_index", [0, 1, 2, 3, 4, 5, 7])
    assert problems(long) == [f"{DATA}: episode 0: frame_index expected [0, 1, 2, 3, 4]..., found [0, 1, 2, 3, 4]..."]


def test_a_data_file_without_its_feature_description_is_named(ds: Path) -> None:
    pq.write_table(pq.read_table(ds / DATA).replace_schema_metadata(None), ds / DATA)
    assert problems(ds) == [f"{DATA}: no 'huggingface' schema metadata (the datasets feature description)"]


def rewrite_data(root: Path, column: str, values: list[Any], path: str = DATA) -> None:
    table = pq.read_table(root / path)
    i = table.column_names.index(column)
    table = table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))
    pq.write_table(table, root / path)


def test_an_episodes_rows_are_found_by_index(ds: Path) -> None:
    rewrite_data(ds, "index", [0, 1, 2, 4, 5])
    assert problems(ds) == [f"{DATA}: episode 1: rows with index 3..4 missing"]
    rewrite_data(ds, "index", [0, 1, 2, 3, 7])
    assert problems(ds) == [f"{DATA}: episode 1: rows with index 3..4 missing"]


def test_an_episodes_missing_rows_do_not_stop_the_next_episodes_check(ds: Path) -> None:
    rewrite_data(ds, "index", [0, 1, 1, 3, 4])
    rewrite_data(ds, "frame_index", [0, 1, 2, 1, 2])
    assert problems(ds) == [
        f"{DATA}: episode 0: rows with index 0..2 missing",
        f"{DATA}: episode 1: frame_index expected [0, 1]..., found [1, 2]...",
    ]


def test_an_episodes_rows_cut_short_are_missing(ds: Path) -> None:
    pq.write_table(pq.read_table(ds / DATA).slice(0, 4), ds / DATA)
    assert problems(ds) == [f"{DATA}: episode 1: rows with index 3..4 missing"]


def test_episode_and_frame_indices_are_checked_row_by_row(ds: Path) -> None:
    rewrite_data(ds, "episode_index", [0, 0, 1, 1, 1])
    rewrite_data(ds, "frame_index", [0, 1, 2, 1, 2])
    assert problems(ds) == [
        f"{DATA}: episode 0: episode_index expected [0, 0, 0]..., found [0, 0, 1]...",
        f"{DATA}: episode 1: frame_index expected [0, 1]..., found [1, 2]...",
    ]


def test_a_timestamp_off_the_frame_grid_names_the_worst_frame(ds: Path) -> None:
    # frame 1 of episode 1 off by 0.2 ms, frame 0 by exactly the 0.1 ms tolerance
    rewrite_data(ds, "timestamp", [0.0, 0.1, 0.2, 0.0001, 0.1002])
    assert problems(ds) == [
        f"{DATA}: episode 1: timestamp of frame 1 is 0.100200 s, expected frame_index / fps = 0.100000 s "
        "(video frames are found by this time)"
    ]


def test_a_task_index_outside_the_tasks_is_named(ds: Path) -> None:
    rewrite_data(ds, "task_index", [0, 0, 0, 2, 1])
    rewrite_data(ds, "task_index", [-1, 0, 0, 1, 1])
    assert problems(ds) == [f"{DATA}: episode 0: task_index outside 0..1"]
    rewrite_data(ds, "task_index", [0, 0, 0, 1, 2])
    assert problems(ds) == [f"{DATA}: episode 1: task_index outside 0..1"]


def test_episodes_in_several_data_files_are_each_found_in_theirs(copy: Callable[[str], Path]) -> None:
    rolled = copy("rolled")
    rewrite_data(rolled, "frame_index", [0, 2], path="data/chunk-000/file-001.parquet")
    assert problems(rolled) == [
        "data/chunk-000/file-001.parquet: episode 1: frame_index expected [0, 1]..., found [0, 2]..."
    ]


def test_a_data_file_no_episode_refers_to_is_named(ds: Path) -> None:
    (ds / "data/chunk-001").mkdir()
    shutil.copy(ds / DATA, ds / "data/chunk-001/file-000.parquet")
    assert problems(ds) == ["data/chunk-001/file-000.parquet: no episode refers to this data file"]


# -- videos ----------------------------------------------------------------------------------------


def test_an_episode_without_its_video_columns_is_named(copy: Callable[[str], Path]) -> None:
    rolled = copy("rolled")
    path = rolled / "meta/episodes/chunk-000/file-001.parquet"
    for column in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
        edit_table(path, f"videos/{FRONT}/{column}", None)
    assert problems(rolled) == [
        "meta/episodes/chunk-000/file-001.parquet: column 'videos/observation.images.front/chunk_index' missing",
        "meta/episodes/chunk-000/file-001.parquet: column 'videos/observation.images.front/file_index' missing",
        "meta/episodes/chunk-000/file-001.parquet: column 'videos/observation.images.front/from_timestamp' missing",
        "meta/episodes/chunk-000/file-001.parquet: column 'videos/observation.images.front/to_timestamp' missing",
    ]


def test_a_video_file_missing_or_unreadable_is_named(copy: Callable[[str], Path]) -> None:
    rolled = copy("rolled")
    (rolled / f"videos/{FRONT}/chunk-000/file-000.mp4").unlink()
    (rolled / f"videos/{FRONT}/chunk-000/file-001.mp4").write_text("not a video")
    assert problems(rolled) == [
        f"videos/{FRONT}/chunk-000/file-000.mp4: missing (episodes [0] live there)",
        f"videos/{FRONT}/chunk-000/file-001.mp4: not a readable video (Expecting value: line 1 column 1 (char 0))",
    ]


def write_video(root: Path, size: list[int], times: list[float], path: str = VIDEO) -> None:
    (root / path).write_text(json.dumps({"size": size, "times": times}))


def test_an_unreadable_video_or_one_without_frames_does_not_stop_the_next_files_check(
    copy: Callable[[str], Path],
) -> None:
    rolled = copy("rolled")
    second = f"videos/{FRONT}/chunk-000/file-001.mp4"
    (rolled / f"videos/{FRONT}/chunk-000/file-000.mp4").write_text("not a video")
    write_video(rolled, [32, 16], [0.0, 0.1], path=second)
    assert problems(rolled) == [
        f"videos/{FRONT}/chunk-000/file-000.mp4: not a readable video (Expecting value: line 1 column 1 (char 0))",
        f"{second}: frame size 32x16, features say 16x32",
    ]
    write_video(rolled, [16, 32], [], path=f"videos/{FRONT}/chunk-000/file-000.mp4")
    assert problems(rolled) == [
        f"videos/{FRONT}/chunk-000/file-000.mp4: no frames",
        f"{second}: frame size 32x16, features say 16x32",
    ]


def test_a_video_of_another_frame_size_is_named(ds: Path) -> None:
    write_video(ds, [32, 16], [0.0, 0.1, 0.2, 0.3, 0.4])
    assert problems(ds) == [f"{VIDEO}: frame size 32x16, features say 16x32"]
    write_video(ds, [16, 30], [0.0, 0.1, 0.2, 0.3, 0.4])
    assert problems(ds) == [f"{VIDEO}: frame size 16x30, features say 16x32"]


def test_a_video_without_frames_is_named_once(ds: Path) -> None:
    write_video(ds, [16, 32], [])
    assert problems(ds) == [f"{VIDEO}: no frames"]


def test_frames_are_found_within_the_tolerance_on_either_side(ds: Path) -> None:
    # frame 0 exactly the 0.1 ms tolerance late, frame 2 half of it early
    write_video(ds, [16, 32], [0.0001, 0.1, 0.19995, 0.3, 0.4])
    assert problems(ds) == []
    write_video(ds, [16, 32], [-0.00005, 0.1, 0.2, 0.3, 0.4])  # the file's first frame a little early
    assert problems(ds) == []
    write_video(ds, [16, 32], [0.0, 0.10011, 0.2, 0.3, 0.4])
    assert problems(ds) == [f"{VIDEO}: episode 0: no frame at 0.1000 s (frame 1); 1 of 3 frames missing"]
    write_video(ds, [16, 32], [0.0, 0.1, 0.19989, 0.3, 0.4])
    assert problems(ds) == [f"{VIDEO}: episode 0: no frame at 0.2000 s (frame 2); 1 of 3 frames missing"]


def test_frames_missing_past_the_last_one_are_counted(ds: Path) -> None:
    write_video(ds, [16, 32], [0.0, 0.1, 0.2, 0.3])
    assert problems(ds) == [f"{VIDEO}: episode 1: no frame at 0.4000 s (frame 1); 1 of 2 frames missing"]
    write_video(ds, [16, 32], [0.3, 0.4])
    assert problems(ds) == [f"{VIDEO}: episode 0: no frame at 0.0000 s (frame 0); 3 of 3 frames missing"]


def test_a_video_span_that_cannot_hold_the_episode_is_named(ds: Path) -> None:
    # episode 1's span 0.3..0.5 holds its 2 frames; up to one frame either way is let through
    edit_table(ds / EPISODES, f"videos/{FRONT}/to_timestamp", [0.3, 0.6])
    assert problems(ds) == []
    edit_table(ds / EPISODES, f"videos/{FRONT}/to_timestamp", [0.3, 0.6002])
    assert problems(ds) == [f"{VIDEO}: episode 1: video span 0.3000..0.6002 s does not hold 2 frames"]
    edit_table(ds / EPISODES, f"videos/{FRONT}/to_timestamp", [0.3, 0.3998])
    assert problems(ds) == [f"{VIDEO}: episode 1: video span 0.3000..0.3998 s does not hold 2 frames"]


def test_a_video_span_exactly_one_frame_and_the_tolerance_short_is_let_through(copy: Callable[[str], Path]) -> None:
    rolled = copy("rolled")  # episode 1 alone in its video file, from 0 s: 0.2 s for its 2 frames
    edit_table(rolled / "meta/episodes/chunk-000/file-001.parquet", f"videos/{FRONT}/to_timestamp", [0.0999])
    assert problems(rolled) == []


# -- meta/stats.json -------------------------------------------------------------------------------


def test_missing_statistics_are_needed_only_with_episodes(ds: Path) -> None:
    (ds / STATS).unlink()
    assert problems(ds) == [f"{STATS}: missing"]
    empty_dataset(ds)
    assert problems(ds) == []


def test_a_statistics_file_that_cannot_be_read_is_named_with_the_reason(ds: Path) -> None:
    (ds / STATS).unlink()
    (ds / STATS).mkdir()
    assert problems(ds) == [f"{STATS}: not readable JSON ([Errno 21] Is a directory: '{ds / STATS}')"]


def test_a_feature_without_statistics_is_named(ds: Path) -> None:
    edit_json(ds / STATS, lambda stats: stats.pop(FRONT) and stats.pop("control.intervention") and None)
    assert problems(ds) == [f"{STATS}: {FRONT}: no statistics", f"{STATS}: control.intervention: no statistics"]


def test_a_count_that_disagrees_with_the_total_is_named_but_not_a_cameras(ds: Path) -> None:
    def edit(stats: dict[str, Any]) -> None:
        stats[FRONT]["count"] = [4]
        stats["action"]["count"] = [4]

    edit_json(ds / STATS, edit)
    assert problems(ds) == [f"{STATS}: action.count: 4, info.json total_frames is 5"]


def test_a_missing_statistic_and_one_that_is_a_table_are_named(ds: Path) -> None:
    def edit(stats: dict[str, Any]) -> None:
        del stats["action"]["q01"]
        del stats["action"]["q99"]
        stats["action"]["std"] = {"a": 1}

    edit_json(ds / STATS, edit)
    assert problems(ds) == [
        f"{STATS}: action.std: expected numbers of shape (2,), found {{'a': 1}}",
        f"{STATS}: action.q01: missing",
        f"{STATS}: action.q99: missing",
    ]


def test_a_count_of_the_wrong_shape_is_not_compared(ds: Path) -> None:
    edit_json(ds / STATS, lambda stats: stats["action"].update(count=[4, 1]))
    assert problems(ds) == [f"{STATS}: action.count: expected shape (1,), found (2,)"]


def test_a_statistic_that_is_not_numbers_is_named_cut_short(ds: Path) -> None:
    edit_json(ds / STATS, lambda stats: stats["action"].update(mean="x" * 100))
    assert problems(ds) == [f"{STATS}: action.mean: expected numbers of shape (2,), found '{'x' * 59}"]
    edit_json(ds / STATS, lambda stats: stats.update(action="y" * 100))
    assert problems(ds) == [f"{STATS}: action: expected a table of statistics, found '{'y' * 59}"]
    edit_json(ds / STATS, lambda stats: stats.update({"observation.state": 3}))  # and the next one's too
    assert problems(ds) == [
        f"{STATS}: observation.state: expected a table of statistics, found 3",
        f"{STATS}: action: expected a table of statistics, found '{'y' * 59}",
    ]


def test_each_statistic_is_checked_in_its_own_shape(ds: Path) -> None:
    def edit(stats: dict[str, Any]) -> None:
        stats[FRONT]["count"] = [[5]]
        stats["index"]["q50"] = [1.0, 2.0]

    edit_json(ds / STATS, edit)
    assert problems(ds) == [
        f"{STATS}: {FRONT}.count: expected shape (1,), found (1, 1)",
        f"{STATS}: index.q50: expected shape (1,), found (2,)",
    ]
