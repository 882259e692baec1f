"""A dataset read back: episodes in index order from every episodes file, an episode's rows found by
its first index in a shared data file, each column in its feature's type, each camera's frames asked
of the video at the episode's span, and observations as the policy takes them. The dataset is written
in the test with pyarrow; the video decoder is a stand-in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runtime.errors import RecordingError
from runtime.recording import reader as reader_module
from runtime.recording.reader import DatasetReader, Episode

FRONT = "observation.images.front"
DEPTH = "depth.top"  # a video feature that is not a policy's camera input
FEATURES: dict[str, dict[str, Any]] = {
    FRONT: {"dtype": "video", "shape": [4, 6, 3], "names": None},
    "observation.state": {"dtype": "float32", "shape": [2], "names": ["a", "b"]},
    "action": {"dtype": "float64", "shape": [2], "names": ["a", "b"]},
    DEPTH: {"dtype": "video", "shape": [4, 6, 3], "names": None},
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "note": {"dtype": "string", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
}
LENGTHS = (3, 2, 4)  # episodes 0 and 1 share data file 0; episode 2 is alone in data file 1


def state(i: int) -> list[float]:
    return [float(i), -0.5 * i]


def write_dataset(root: Path, *, fps: Any = 10) -> None:
    (root / "meta").mkdir(parents=True)
    episodes = len(LENGTHS)
    (root / "meta" / "info.json").write_text(json.dumps({"fps": fps, "features": FEATURES, "total_episodes": episodes}))
    pq.write_table(
        pa.table({"task_index": pa.array([1, 0], pa.int64()), "__index_level_0__": ["place", "pick"]}),
        root / "meta" / "tasks.parquet",
    )
    rows, starts = [], np.cumsum((0, *LENGTHS))
    for e, length in enumerate(LENGTHS):
        rows.append(
            {
                "episode_index": e,
                "tasks": ["pick", "place"][: e + 1],
                "length": length,
                "data/chunk_index": 0,
                "data/file_index": 0 if e < 2 else 1,
                "dataset_from_index": int(starts[e]),
                "dataset_to_index": int(starts[e + 1]),
                f"videos/{FRONT}/chunk_index": 0,
                f"videos/{FRONT}/file_index": e,
                f"videos/{FRONT}/from_timestamp": 0.5 * e,
                f"videos/{DEPTH}/chunk_index": 1,
                f"videos/{DEPTH}/file_index": 0,
                f"videos/{DEPTH}/from_timestamp": 2.0 + e,
                "stats/observation.state/min": [0.0, 0.0],
            }
        )
    # episode 2 in the first episodes file, 0 and 1 in the next: the reader sorts by index
    for name, part in (("file-000", [rows[2]]), ("file-001", rows[:2])):
        path = root / "meta" / "episodes" / "chunk-000" / f"{name}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(part), path)
    for file_index, episode_ids in ((0, (0, 1)), (1, (2,))):
        index = [i for e in episode_ids for i in range(int(starts[e]), int(starts[e + 1]))]
        table = pa.table(
            {
                "observation.state": pa.FixedSizeListArray.from_arrays(
                    pa.array([v for i in index for v in state(i)], pa.float32()), 2
                ),
                "action": pa.FixedSizeListArray.from_arrays(
                    pa.array([v for i in index for v in state(10 * i)], pa.float32()), 2
                ),
                "timestamp": pa.array([0.1 * i for i in index], pa.float32()),
                "note": [f"n{i}" for i in index],
                "index": pa.array(index, pa.int64()),
            }
        )
        path = root / "data" / "chunk-000" / f"file-{file_index:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, row_group_size=2)  # a column read back in several chunks


class Decoder:
    """A stand-in for ``decode_frames``: each frame filled with its video's file index and frame number."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, int, Any, Any]] = []

    def __call__(self, path: Path, start_s: float, count: int, fps: int, keep: Any = None) -> np.ndarray:
        self.calls.append((str(path), start_s, count, fps, keep))
        frames = np.zeros((count, 4, 6, 3), np.uint8)
        for k in range(count):
            frames[k] = 10 * int(path.stem[-1]) + k
        return frames


@pytest.fixture
def decoder(monkeypatch: pytest.MonkeyPatch) -> Decoder:
    d = Decoder()
    monkeypatch.setattr(reader_module, "decode_frames", d)
    return d


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    write_dataset(tmp_path / "ds")
    return tmp_path / "ds"


def test_a_folder_without_info_is_not_a_dataset(tmp_path: Path) -> None:
    with pytest.raises(RecordingError) as e:
        DatasetReader(tmp_path)
    assert str(e.value) == f"{tmp_path}: not a dataset (meta/info.json is missing)"


def test_what_the_metadata_says(dataset: Path) -> None:
    reader = DatasetReader(str(dataset))
    assert reader.root == dataset
    assert reader.fps == 10 and reader.features == FEATURES
    assert reader.info["total_episodes"] == 3
    assert reader.tasks == ["pick", "place"]  # in task_index order
    assert reader.num_episodes == 3
    assert [reader.episode_length(i) for i in range(3)] == [3, 2, 4]
    assert reader.camera_keys == [FRONT, DEPTH]


def test_an_episode_out_of_range_is_refused_naming_the_range(dataset: Path) -> None:
    reader = DatasetReader(dataset)
    for index in (-1, 3):
        with pytest.raises(RecordingError) as e:
            reader.episode_length(index)
        assert str(e.value) == f"episode {index}: the dataset has episodes 0..2"
        with pytest.raises(RecordingError) as e:
            reader.episode(index, images=False)
        assert str(e.value) == f"episode {index}: the dataset has episodes 0..2"


def test_an_empty_dataset_has_no_tasks_file_to_read(tmp_path: Path) -> None:
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text(json.dumps({"fps": 30, "features": {}, "total_episodes": 0}))
    reader = DatasetReader(tmp_path)
    assert reader.tasks == [] and reader.num_episodes == 0 and reader.camera_keys == []
    with pytest.raises(RecordingError, match=r"^episode 0: the dataset has episodes 0\.\.-1$"):
        reader.episode(0)
    assert list(reader.observations()) == []


def test_fps_is_an_integer(tmp_path: Path, decoder: Decoder) -> None:
    write_dataset(tmp_path / "ds", fps=10.0)
    reader = DatasetReader(tmp_path / "ds")
    assert reader.fps == 10 and type(reader.fps) is int
    reader.episode(0)
    assert all(type(c[3]) is int for c in decoder.calls)


def test_an_episode_sharing_its_data_file_is_its_own_rows(dataset: Path, decoder: Decoder) -> None:
    episode = DatasetReader(dataset).episode(1)
    assert (episode.index, episode.tasks, episode.length) == (1, ["pick", "place"], 2)
    assert list(episode.columns) == ["observation.state", "action", "timestamp", "note", "index"]
    np.testing.assert_array_equal(episode.columns["index"], [3, 4])
    assert episode.columns["index"].dtype == np.int64
    assert episode.columns["note"] == ["n3", "n4"]
    state_col = episode.columns["observation.state"]
    assert state_col.dtype == np.float32 and state_col.shape == (2, 2)
    np.testing.assert_array_equal(state_col, [state(3), state(4)])
    action = episode.columns["action"]
    assert action.dtype == np.float64 and action.shape == (2, 2)  # the feature's dtype, not the file's
    np.testing.assert_array_equal(action, [state(30), state(40)])
    np.testing.assert_array_equal(episode.columns["timestamp"], np.array([0.3, 0.4], np.float32))


def test_an_episode_alone_in_its_file_and_the_first_of_a_file(dataset: Path, decoder: Decoder) -> None:
    reader = DatasetReader(dataset)
    last = reader.episode(2, images=False)
    assert (last.index, last.tasks, last.length) == (2, ["pick", "place"], 4)
    np.testing.assert_array_equal(last.columns["index"], [5, 6, 7, 8])
    np.testing.assert_array_equal(last.columns["observation.state"], [state(i) for i in (5, 6, 7, 8)])
    assert last.images == {} and decoder.calls == []
    first = reader.episode(0, images=False)
    assert first == Episode(0, ["pick"], 3, first.columns, {})
    np.testing.assert_array_equal(first.columns["index"], [0, 1, 2])


def test_each_cameras_frames_are_asked_of_its_video_at_the_episodes_span(dataset: Path, decoder: Decoder) -> None:
    episode = DatasetReader(dataset).episode(1, keep=[0, 1])
    assert decoder.calls == [
        (str(dataset / "videos" / FRONT / "chunk-000" / "file-001.mp4"), 0.5, 2, 10, [0, 1]),
        (str(dataset / "videos" / DEPTH / "chunk-001" / "file-000.mp4"), 3.0, 2, 10, [0, 1]),
    ]
    assert list(episode.images) == [FRONT, DEPTH]
    assert episode.images[FRONT][:, 0, 0, 0].tolist() == [10, 11]
    decoder.calls.clear()
    DatasetReader(dataset).episode(2)
    assert [c[1:] for c in decoder.calls] == [(1.0, 4, 10, None), (4.0, 4, 10, None)]


def test_observations_as_the_policy_takes_them(dataset: Path, decoder: Decoder) -> None:
    observations = list(DatasetReader(dataset).observations())
    assert len(observations) == sum(LENGTHS)
    for i, obs in enumerate(observations):
        assert list(obs) == ["observation.state", FRONT]  # only the policy's cameras
        assert obs["observation.state"].dtype == np.float32
        np.testing.assert_array_equal(obs["observation.state"], state(i))
        assert obs[FRONT].shape == (4, 6, 3) and obs[FRONT].dtype == np.uint8
    frames = [int(obs[FRONT][0, 0, 0]) for obs in observations]
    assert frames == [0, 1, 2, 10, 11, 20, 21, 22, 23]


def test_every_strideth_frame_of_each_episode_up_to_max_frames(dataset: Path, decoder: Decoder) -> None:
    reader = DatasetReader(dataset)
    states = [obs["observation.state"][0] for obs in reader.observations(stride=2)]
    assert states == [0.0, 2.0, 3.0, 5.0, 7.0]  # each episode from its first frame
    assert [obs["observation.state"][0] for obs in reader.observations(max_frames=4)] == [0.0, 1.0, 2.0, 3.0]
    assert len(list(reader.observations(max_frames=9))) == 9
    assert list(reader.observations(max_frames=0)) == []


def test_a_stride_below_one_is_refused(dataset: Path) -> None:
    reader = DatasetReader(dataset)
    with pytest.raises(ValueError) as e:
        next(reader.observations(stride=0))
    assert str(e.value) == "stride: expected >= 1, got 0"


def test_max_frames_reached_at_an_episodes_end_decodes_no_further_episode(dataset: Path, decoder: Decoder) -> None:
    assert len(list(DatasetReader(dataset).observations(max_frames=3))) == 3
    assert [Path(c[0]).parent.parent.name for c in decoder.calls] == [FRONT, DEPTH]  # episode 0's videos only
    assert [c[1] for c in decoder.calls] == [0.0, 2.0]


def test_a_column_that_is_not_a_feature_is_read_as_it_is(dataset: Path) -> None:
    path = dataset / "data" / "chunk-000" / "file-001.parquet"
    table = pq.read_table(path)
    pq.write_table(table.append_column("extra", pa.array([7, 8, 9, 10], pa.int64())), path)
    episode = DatasetReader(dataset).episode(2, images=False)
    assert episode.columns["extra"].tolist() == [7, 8, 9, 10]
    assert episode.columns["extra"].dtype == np.int64
    np.testing.assert_array_equal(episode.columns["index"], [5, 6, 7, 8])
