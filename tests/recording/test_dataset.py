"""Recorded episodes land on disk in the LeRobot v3.0 layout and read back as they were recorded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from runtime.errors import ConfigError, RecordingError
from runtime.recording import DatasetWriter, EpisodeRecorder, RecordingFeatures
from runtime.recording.check import check_dataset
from runtime.recording.reader import DatasetReader
from tests.recording.conftest import Tick, add, frame_image, ticks


def record(root: Path, features: RecordingFeatures, episodes: list[tuple[str, list[Tick]]]) -> None:
    with EpisodeRecorder(DatasetWriter(root, features), features) as recorder:
        for task, frames in episodes:
            recorder.start_episode(task)
            for tick in frames:
                assert add(recorder, tick)
            assert recorder.end_episode()
        assert recorder.flush()
        assert recorder.status().episodes_written == len(episodes)


def test_layout_and_files(root: Path, features: RecordingFeatures) -> None:
    record(root, features, [("pick the cube", ticks(12, seed=1)), ("place the cube", ticks(9, seed=2))])
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [
        "data/chunk-000/file-000.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "meta/info.json",
        "meta/stats.json",
        "meta/tasks.parquet",
        "videos/observation.images.front/chunk-000/file-000.mp4",
    ]
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (2, 21, 2)
    assert info["splits"] == {"train": "0:2"}
    assert info["features"]["observation.images.front"]["info"]["video.codec"] == "av1"
    assert list(info["features"])[-5:] == ["timestamp", "frame_index", "episode_index", "index", "task_index"]
    schema = pq.read_schema(root / "data/chunk-000/file-000.parquet")
    assert str(schema.field("observation.state").type) == "fixed_size_list<element: float>[6]"
    assert b"huggingface" in schema.metadata
    report = check_dataset(root)
    assert report.problems == []
    assert (report.episodes, report.frames) == (2, 21)


def test_episodes_read_back_as_recorded(root: Path, features: RecordingFeatures) -> None:
    first, second = ticks(12, seed=1), ticks(9, seed=2, start_frame=12)
    record(root, features, [("pick the cube", first), ("pick the cube", second)])
    reader = DatasetReader(root)
    assert reader.tasks == ["pick the cube"]
    for index, recorded in enumerate((first, second)):
        ep = reader.episode(index)
        n = len(recorded)
        assert ep.length == n and ep.tasks == ["pick the cube"]
        np.testing.assert_array_equal(ep.columns["observation.state"], np.stack([t.state for t in recorded]))
        np.testing.assert_array_equal(ep.columns["action"], np.stack([t.action for t in recorded]))
        np.testing.assert_array_equal(ep.columns["request.action"], np.stack([t.requested for t in recorded]))
        assert ep.columns["control.source"] == [t.source for t in recorded]
        assert ep.columns["control.intervention"].tolist() == [t.intervention for t in recorded]
        np.testing.assert_allclose(
            ep.columns["control.time_s"], np.array([t.t_s for t in recorded]) - recorded[0].t_s, atol=1e-9
        )
        np.testing.assert_allclose(ep.columns["timestamp"], np.arange(n) / 30, atol=1e-6)
        assert ep.columns["frame_index"].tolist() == list(range(n))
        assert ep.columns["index"].tolist() == list(range(12 * index, 12 * index + n))
        assert ep.columns["episode_index"].tolist() == [index] * n
        frames = ep.images["observation.images.front"]
        assert frames.shape == (n, 48, 64, 3) and frames.dtype == np.uint8
        # the codec is lossy: each decoded frame must be nearest to the frame recorded at its tick
        for k, tick in enumerate(recorded):
            err = np.abs(frames[k].astype(int) - tick.image.astype(int)).mean()
            assert err < 3.0, f"episode {index} frame {k}: mean error {err}"


def test_observations_are_in_the_policys_form(root: Path, features: RecordingFeatures) -> None:
    record(root, features, [("a", ticks(6, seed=1)), ("b", ticks(5, seed=2, start_frame=6))])
    obs = list(DatasetReader(root).observations(stride=2))
    assert len(obs) == 3 + 3
    assert set(obs[0]) == {"observation.state", "observation.images.front"}
    assert obs[0]["observation.state"].dtype == np.float32 and obs[0]["observation.state"].shape == (6,)
    image = obs[3]["observation.images.front"]  # the second episode's first frame
    assert image.dtype == np.uint8 and image.shape == (48, 64, 3)
    assert abs(float(image.mean()) - float(frame_image(6).mean())) < 3
    assert len(list(DatasetReader(root).observations(max_frames=4))) == 4


def test_stats_cover_every_frame(root: Path, features: RecordingFeatures) -> None:
    first, second = ticks(12, seed=1), ticks(9, seed=2)
    record(root, features, [("a", first), ("b", second)])
    stats = json.loads((root / "meta/stats.json").read_text())
    states = np.stack([t.state for t in first + second]).astype(np.float64)
    assert stats["observation.state"]["count"] == [21]
    np.testing.assert_allclose(stats["observation.state"]["min"], states.min(axis=0), rtol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["mean"], states.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["std"], states.std(axis=0), rtol=1e-6)
    assert "control.source" not in stats  # strings have no statistics
    assert stats["control.intervention"]["min"] == [False] and stats["control.intervention"]["max"] == [True]
    image = stats["observation.images.front"]
    assert np.asarray(image["mean"]).shape == (3, 1, 1)
    assert 0 < image["min"][0][0][0] < image["q50"][0][0][0] < image["max"][0][0][0] <= 1


def test_an_existing_dataset_is_continued(root: Path, features: RecordingFeatures) -> None:
    record(root, features, [("a", ticks(5, seed=1))])
    record(root, features, [("b", ticks(4, seed=2, start_frame=5)), ("a", ticks(3, seed=3, start_frame=9))])
    assert check_dataset(root).problems == []
    reader = DatasetReader(root)
    assert reader.num_episodes == 3 and reader.tasks == ["a", "b"]
    assert reader.episode(2).columns["index"].tolist() == [9, 10, 11]
    assert reader.episode(2).columns["task_index"].tolist() == [0, 0, 0]
    frames = reader.episode(1).images["observation.images.front"]
    assert abs(float(frames[0].mean()) - float(frame_image(5).mean())) < 3


def test_a_dataset_with_other_features_is_refused(root: Path, features: RecordingFeatures) -> None:
    record(root, features, [("a", ticks(3, seed=1))])
    other = RecordingFeatures(fps=30, joint_names=features.joint_names, cameras={"wrist": (48, 64)})
    with pytest.raises(RecordingError, match=r"feature 'observation.images.front' differs"):
        DatasetWriter(root, other)
    with pytest.raises(RecordingError, match="dataset fps is 30, recording at 15"):
        DatasetWriter(root, RecordingFeatures(fps=15, joint_names=features.joint_names, cameras=features.cameras))


def test_a_folder_that_is_not_a_dataset_is_refused(tmp_path: Path, features: RecordingFeatures) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(RecordingError, match="not empty and not a dataset"):
        DatasetWriter(tmp_path, features)


def test_files_roll_over_at_the_size_limit(root: Path, features: RecordingFeatures) -> None:
    writer = DatasetWriter(root, features, data_file_size_mb=1e-6, video_file_size_mb=1e-6)
    with EpisodeRecorder(writer, features) as recorder:
        for task, frames in [("a", ticks(4, seed=1)), ("b", ticks(3, seed=2, start_frame=4))]:
            recorder.start_episode(task)
            for tick in frames:
                add(recorder, tick)
            recorder.end_episode()
    assert (root / "data/chunk-000/file-001.parquet").exists()
    assert (root / "videos/observation.images.front/chunk-000/file-001.mp4").exists()
    assert check_dataset(root).problems == []
    frames = DatasetReader(root).episode(1).images["observation.images.front"]
    assert abs(float(frames[0].mean()) - float(frame_image(4).mean())) < 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fps": 0}, "recording.fps: expected an integer rate in \\[1, 1000\\] Hz, got 0"),
        ({"fps": 29.97}, "recording.fps: expected an integer rate"),
        ({"joint_names": ("a", "a")}, "recording.joint_names: names repeat"),
        ({"cameras": {"front": (47, 64)}}, "recording.cameras.front: expected even height and width"),
        ({"cameras": {"a/b": (48, 64)}}, "camera name 'a/b'"),
    ],
)
def test_bad_features_are_named(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"fps": 30, "joint_names": ("a", "b"), **kwargs}
    with pytest.raises(ConfigError, match=message):
        RecordingFeatures(**args)  # type: ignore[arg-type]


def test_one_writer_per_dataset(root: Path, features: RecordingFeatures) -> None:
    first = DatasetWriter(root, features)
    with pytest.raises(RecordingError, match="another recorder is writing this dataset"):
        DatasetWriter(root, features)
    first.close()
    assert not (root / ".recording").exists()
    DatasetWriter(root, features).close()
