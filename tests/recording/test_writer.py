"""The dataset writer: a dataset created, continued or refused; each episode's rows, metadata,
statistics and totals; files rolled over at their size limits; the lock; aborted and empty
episodes. The video calls are stand-ins (the test sees what the writer asks of them); camera
files are a few bytes of the test's own, so file sizes are exact."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from runtime.errors import ConfigError, RecordingError
from runtime.recording import writer as writer_module
from runtime.recording.encoder_process import EncodedVideo
from runtime.recording.features import RecordingFeatures
from runtime.recording.frames import FrameSlot
from runtime.recording.video import VideoSettings
from runtime.recording.writer import DatasetWriter, EpisodeDrops, EpisodeSummary

FPS = 10
FRONT = "observation.images.front"
WRIST = "observation.images.wrist"
STAT_NAMES = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
VECTOR = {"dtype": "float32", "shape": [2], "names": ["a", "b"]}
SCALAR_FEATURES = {
    "control.source": {"dtype": "string", "shape": [1], "names": None},
    "control.intervention": {"dtype": "bool", "shape": [1], "names": None},
    "control.time_s": {"dtype": "float64", "shape": [1], "names": None},
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}


def features(cameras: dict[str, tuple[int, int]] | None = None, **kwargs: Any) -> RecordingFeatures:
    return RecordingFeatures(fps=FPS, joint_names=("a", "b"), cameras=cameras or {}, **kwargs)


def with_front() -> RecordingFeatures:
    return features({"front": (16, 32)}, robot_type="so101_follower")


class StandInVideo:
    """The writer's per-episode encoder: what it was made with, the frames it was given."""

    def __init__(self, videos: Videos, path: Path, fps: int, height: int, width: int, settings: Any) -> None:
        if path.name == videos.fail_for:
            raise RuntimeError("no encoder")
        videos.opened.append((path, fps, height, width, settings))
        path.parent.mkdir(parents=True, exist_ok=True)  # as the encoder opens its file
        videos.made.append(self)
        self.path = path
        self.images: list[np.ndarray] = []
        self.aborted = False

    def add(self, image: np.ndarray) -> None:
        self.images.append(image.copy())

    def finish(self) -> Path:
        self.path.write_bytes(b"v" * (10 * len(self.images)))
        return self.path

    def abort(self) -> None:
        self.aborted = True


class Videos:
    """Stand-ins for the writer's video calls; appending concatenates the files' bytes."""

    def __init__(self) -> None:
        self.appended: list[tuple[Path, str, int, int]] = []
        self.infos: list[Path] = []
        self.opened: list[tuple[Path, int, int, int, Any]] = []
        self.made: list[StandInVideo] = []
        self.fail_for = ""

    def append_video(self, dst: Path, src: Path, dst_frames: int, fps: int) -> None:
        self.appended.append((dst, src.name, dst_frames, fps))
        dst.write_bytes(dst.read_bytes() + src.read_bytes())

    def video_info(self, path: Path) -> dict[str, Any]:
        self.infos.append(path)
        return {"video.fps": FPS, "video.codec": "stand-in", "file": path.name}

    def episode_video(self, path: Path, fps: int, height: int, width: int, settings: Any) -> StandInVideo:
        return StandInVideo(self, path, fps, height, width, settings)


@pytest.fixture
def videos(monkeypatch: pytest.MonkeyPatch) -> Videos:
    v = Videos()
    monkeypatch.setattr(writer_module, "append_video", v.append_video)
    monkeypatch.setattr(writer_module, "video_info", v.video_info)
    monkeypatch.setattr(writer_module, "EpisodeVideo", v.episode_video)
    return v


def frame(f: RecordingFeatures, k: int, *, images: bool = False) -> FrameSlot:
    """Frame k: state (k, -k), action (k + 0.5, 0), request (2k, 1) at 100 + k/4 s; odd frames are
    the operator's; every pixel 51 * k."""
    slot = FrameSlot(f, images=images)
    slot.t_s = 100.0 + 0.25 * k
    slot.state[:] = (k, -k)
    slot.action[:] = (k + 0.5, 0)
    slot.requested[:] = (2 * k, 1)
    slot.source = "teleop" if k % 2 else "policy"
    slot.intervention = bool(k % 2)
    for image in slot.images.values():
        image[:] = 51 * k
    return slot


def camera_stats(value: float, frames: int) -> dict[str, np.ndarray]:
    stats = {name: np.full((3, 1, 1), value) for name in STAT_NAMES if name != "count"}
    stats["count"] = np.array([frames])
    return stats


def camera_file(tmp_path: Path, name: str, frames: int, size: int) -> EncodedVideo:
    path = tmp_path / name
    path.write_bytes(b"e" * size)
    return EncodedVideo(path, frames, camera_stats(0.25, frames), 0.0)


def record(
    w: DatasetWriter,
    task: str,
    ks: range,
    *,
    files: dict[str, EncodedVideo] | None = None,
    drops: EpisodeDrops | None = None,
) -> EpisodeSummary | None:
    w.begin_episode(task)
    for k in ks:
        w.write_frame(frame(w.features, k, images=w.encode_video))
    if files is not None:
        w.attach_encoded(files, drops)
    return w.finish_episode()


def read_info(root: Path) -> dict[str, Any]:
    return json.loads((root / "meta/info.json").read_text())


def episode_rows(root: Path, file: int = 0) -> list[dict[str, Any]]:
    return pq.read_table(root / f"meta/episodes/chunk-000/file-{file:03d}.parquet").to_pylist()


def data_column(root: Path, column: str, file: int = 0) -> list[Any]:
    return pq.read_table(root / f"data/chunk-000/file-{file:03d}.parquet").column(column).to_pylist()


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# -- creating, refusing and locking a dataset ------------------------------------------------------


def test_a_new_dataset_starts_with_its_info_file(tmp_path: Path) -> None:
    root = tmp_path / "new" / "dataset"
    w = DatasetWriter(root, with_front(), encode_video=False)
    assert (w.total_episodes, w.total_frames) == (0, 0)
    assert files_under(root) == [".recording/lock", "meta/info.json"]
    info = read_info(root)
    assert info == {
        "codebase_version": "v3.0",
        "robot_type": "so101_follower",
        "total_episodes": 0,
        "total_frames": 0,
        "total_tasks": 0,
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": 10,
        "splits": {},
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": {
            "observation.state": VECTOR,
            "action": VECTOR,
            "request.action": VECTOR,
            FRONT: {"dtype": "video", "shape": [16, 32, 3], "names": ["height", "width", "channels"]},
            **SCALAR_FEATURES,
        },
    }
    assert list(info["features"])[:4] == ["observation.state", "action", "request.action", FRONT]
    w.close()
    assert files_under(root) == ["meta/info.json"]


def test_a_dataset_without_cameras_has_no_video_path(tmp_path: Path) -> None:
    DatasetWriter(tmp_path / "d", features()).close()
    info = read_info(tmp_path / "d")
    assert (info["video_path"], info["robot_type"]) == (None, None)


class Settings:
    def __init__(self) -> None:
        self.checked = 0

    def check_available(self) -> None:
        self.checked += 1
        raise ConfigError("recording.video.codec: this PyAV build has no 'x' encoder; available: []")


def test_the_codec_is_checked_up_front_only_when_the_writer_encodes_cameras(tmp_path: Path) -> None:
    settings = Settings()
    with pytest.raises(ConfigError) as e:
        DatasetWriter(tmp_path / "d", with_front(), video=settings)  # type: ignore[arg-type]
    assert str(e.value) == "recording.video.codec: this PyAV build has no 'x' encoder; available: []"
    assert settings.checked == 1 and not (tmp_path / "d").exists()
    for f, encode in ((with_front(), False), (features(), True)):
        w = DatasetWriter(tmp_path / f"d{encode}", f, video=settings, encode_video=encode)  # type: ignore[arg-type]
        assert w.video is settings and w.encode_video is encode
        w.close()
    assert settings.checked == 1
    w = DatasetWriter(tmp_path / "default", features())
    assert w.video == VideoSettings() and w.encode_video is True
    w.close()


def test_a_folder_that_is_not_a_dataset_is_refused_word_for_word(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(RecordingError) as e:
        DatasetWriter(tmp_path, features())
    assert str(e.value) == (
        f"{tmp_path}: not empty and not a dataset (no meta/info.json); record into a new folder or an existing dataset"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_folder_holding_only_a_crashed_recordings_staging_is_taken_and_its_leftovers_removed(
    tmp_path: Path,
) -> None:
    leftover = tmp_path / ".recording" / "episode-000003"
    leftover.mkdir(parents=True)
    (leftover / f"{FRONT}.mp4").write_bytes(b"half")
    (tmp_path / ".recording" / "keep").write_text("x")
    w = DatasetWriter(tmp_path, features())
    assert sorted(p.name for p in (tmp_path / ".recording").iterdir()) == ["keep", "lock"]
    w.close()


def test_one_writer_at_a_time_and_the_lock_is_released_at_close(tmp_path: Path) -> None:
    first = DatasetWriter(tmp_path / "d", features())
    with pytest.raises(RecordingError) as e:
        DatasetWriter(tmp_path / "d", features())
    assert str(e.value) == f"{tmp_path / 'd'}: another recorder is writing this dataset"
    first.close()
    first.close()  # twice: nothing left to release
    assert not (tmp_path / "d" / ".recording").exists()
    DatasetWriter(tmp_path / "d", features()).close()


def test_the_lock_file_is_readable_by_others(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        w = DatasetWriter(tmp_path / "d", features())
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "d" / ".recording" / "lock").stat().st_mode) == 0o644
    w.close()


def test_a_dataset_without_features_is_refused_naming_the_first(tmp_path: Path) -> None:
    root = tmp_path / "d"
    DatasetWriter(root, features()).close()
    edit_info(root, lambda info: info.pop("features"))
    with pytest.raises(RecordingError) as e:
        DatasetWriter(root, features())
    assert str(e.value) == (
        f"{root}: feature 'action' differs: the dataset has None, this recording "
        "{'dtype': 'float32', 'shape': [2], 'names': ['a', 'b']}; record into a new folder"
    )


def test_a_dataset_refused_on_resume_is_released(tmp_path: Path) -> None:
    DatasetWriter(tmp_path / "d", features()).close()
    other = RecordingFeatures(fps=15, joint_names=("a", "b"))
    with pytest.raises(RecordingError) as e:
        DatasetWriter(tmp_path / "d", other)
    assert str(e.value) == f"{tmp_path / 'd'}: dataset fps is 10, recording at 15"
    assert not (tmp_path / "d" / ".recording").exists()
    DatasetWriter(tmp_path / "d", features()).close()  # the lock was let go


def edit_info(root: Path, edit: Any) -> None:
    info = read_info(root)
    edit(info)
    (root / "meta/info.json").write_text(json.dumps(info))


def test_another_format_version_is_refused_word_for_word(tmp_path: Path) -> None:
    root = tmp_path / "d"
    DatasetWriter(root, features()).close()
    edit_info(root, lambda info: info.update(codebase_version="v2.1"))
    with pytest.raises(RecordingError) as e:
        DatasetWriter(root, features())
    assert str(e.value) == f"{root}: dataset format 'v2.1', this recorder writes 'v3.0'; record into a new folder"
    edit_info(root, lambda info: info.pop("codebase_version"))
    with pytest.raises(RecordingError) as e:
        DatasetWriter(root, features())
    assert str(e.value) == f"{root}: dataset format None, this recorder writes 'v3.0'; record into a new folder"


def test_a_missing_fps_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "d"
    DatasetWriter(root, features()).close()
    edit_info(root, lambda info: info.pop("fps"))
    with pytest.raises(RecordingError) as e:
        DatasetWriter(root, features())
    assert str(e.value) == f"{root}: dataset fps is None, recording at 10"


def test_the_first_feature_that_differs_is_named_with_both_sides(tmp_path: Path) -> None:
    root = tmp_path / "d"
    DatasetWriter(root, with_front(), encode_video=False).close()
    # a joint renamed and a camera of another size: the first in name order is told
    wider = features({"front": (16, 64)}, robot_type="so101_follower")
    with pytest.raises(RecordingError) as e:
        DatasetWriter(root, wider, encode_video=False)
    assert str(e.value) == (
        f"{root}: feature 'observation.images.front' differs: the dataset has "
        "{'dtype': 'video', 'shape': [16, 32, 3], 'names': ['height', 'width', 'channels']}, this recording "
        "{'dtype': 'video', 'shape': [16, 64, 3], 'names': ['height', 'width', 'channels']}; "
        "record into a new folder"
    )
    # a feature only the recording has, and one only the dataset has
    with pytest.raises(RecordingError) as e:
        DatasetWriter(root, features({"front": (16, 32), "wrist": (16, 32)}), encode_video=False)
    assert str(e.value) == (
        f"{root}: feature 'observation.images.wrist' differs: the dataset has None, this recording "
        "{'dtype': 'video', 'shape': [16, 32, 3], 'names': ['height', 'width', 'channels']}; "
        "record into a new folder"
    )
    with pytest.raises(RecordingError) as e:
        DatasetWriter(root, features(), encode_video=False)
    assert str(e.value) == (
        f"{root}: feature 'observation.images.front' differs: the dataset has "
        "{'dtype': 'video', 'shape': [16, 32, 3], 'names': ['height', 'width', 'channels']}, this recording "
        "None; record into a new folder"
    )


def test_a_video_features_info_is_not_a_difference(tmp_path: Path) -> None:
    root = tmp_path / "d"
    DatasetWriter(root, with_front(), encode_video=False).close()
    edit_info(root, lambda info: info["features"][FRONT].update(info={"video.codec": "av1"}))
    w = DatasetWriter(root, with_front(), encode_video=False)
    w.close()


# -- one episode -----------------------------------------------------------------------------------


def test_an_episode_is_written_row_by_row(tmp_path: Path) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, features())
    assert w.begin_episode("pick") == 0
    for k in range(3):
        w.write_frame(frame(w.features, k))
    assert w.finish_episode() == EpisodeSummary(0, 3, "pick", 0.3)
    assert (w.total_episodes, w.total_frames) == (1, 3)
    w.close()
    assert files_under(root) == [
        "data/chunk-000/file-000.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "meta/info.json",
        "meta/stats.json",
        "meta/tasks.parquet",
    ]
    assert data_column(root, "observation.state") == [[0.0, 0.0], [1.0, -1.0], [2.0, -2.0]]
    assert data_column(root, "action") == [[0.5, 0.0], [1.5, 0.0], [2.5, 0.0]]
    assert data_column(root, "request.action") == [[0.0, 1.0], [2.0, 1.0], [4.0, 1.0]]
    assert data_column(root, "control.source") == ["policy", "teleop", "policy"]
    assert data_column(root, "control.intervention") == [False, True, False]
    assert data_column(root, "control.time_s") == [0.0, 0.25, 0.5]
    assert data_column(root, "timestamp") == [0.0, np.float32(0.1), np.float32(0.2)]
    assert data_column(root, "frame_index") == [0, 1, 2]
    assert data_column(root, "episode_index") == [0, 0, 0]
    assert data_column(root, "index") == [0, 1, 2]
    assert data_column(root, "task_index") == [0, 0, 0]
    (row,) = episode_rows(root)
    assert {k: v for k, v in row.items() if not k.startswith("stats/")} == {
        "episode_index": 0,
        "tasks": ["pick"],
        "length": 3,
        "data/chunk_index": 0,
        "data/file_index": 0,
        "dataset_from_index": 0,
        "dataset_to_index": 3,
        "recording/frames_dropped": 0,
        "recording/drop_rate": 0.0,
        "recording/drops_over_limit": False,
        "meta/episodes/chunk_index": 0,
        "meta/episodes/file_index": 0,
    }
    assert row["stats/observation.state/min"] == [0.0, -2.0]
    assert row["stats/observation.state/max"] == [2.0, 0.0]
    assert row["stats/observation.state/mean"] == [1.0, -1.0]
    assert row["stats/observation.state/count"] == [3]
    assert row["stats/control.intervention/max"] == [True]
    assert row["stats/index/max"] == [2]
    assert not any(k.startswith("stats/control.source/") for k in row)
    info = read_info(root)
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (1, 3, 1)
    assert info["splits"] == {"train": "0:1"}


def test_episodes_follow_one_another_and_tasks_are_numbered_once(tmp_path: Path) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, features())
    assert record(w, "pick", range(3)) == EpisodeSummary(0, 3, "pick", 0.3)
    assert record(w, "place", range(3, 5)) == EpisodeSummary(1, 2, "place", 0.2)
    assert record(w, "pick", range(5, 6)) == EpisodeSummary(2, 1, "pick", 0.1)
    assert (w.total_episodes, w.total_frames) == (3, 6)
    w.close()
    assert data_column(root, "index") == [0, 1, 2, 3, 4, 5]
    assert data_column(root, "episode_index") == [0, 0, 0, 1, 1, 2]
    assert data_column(root, "frame_index") == [0, 1, 2, 0, 1, 0]
    assert data_column(root, "task_index") == [0, 0, 0, 1, 1, 0]
    assert data_column(root, "control.time_s") == [0.0, 0.25, 0.5, 0.0, 0.25, 0.0]
    rows = episode_rows(root)
    assert [(r["episode_index"], r["tasks"], r["length"]) for r in rows] == [
        (0, ["pick"], 3),
        (1, ["place"], 2),
        (2, ["pick"], 1),
    ]
    assert [(r["dataset_from_index"], r["dataset_to_index"]) for r in rows] == [(0, 3), (3, 5), (5, 6)]
    tasks = pq.read_table(root / "meta/tasks.parquet").to_pydict()
    assert tasks == {"task_index": [0, 1], "__index_level_0__": ["pick", "place"]}
    info = read_info(root)
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 6, 2)
    assert info["splits"] == {"train": "0:3"}
    stats = json.loads((root / "meta/stats.json").read_text())
    assert stats["observation.state"]["min"] == [0.0, -5.0]
    assert stats["observation.state"]["max"] == [5.0, 0.0]
    assert stats["observation.state"]["mean"] == [2.5, -2.5]
    assert stats["observation.state"]["count"] == [6]
    assert stats["index"]["max"] == [5]
    assert stats["timestamp"]["max"] == [0.20000000298023224]  # float32's 0.2, as the rows hold it
    assert "control.source" not in stats


def test_a_frame_is_copied_when_written(tmp_path: Path) -> None:
    # the recorder reuses its slots: a frame changed after it was written stays as it was
    w = DatasetWriter(tmp_path / "d", features())
    w.begin_episode("pick")
    slot = frame(w.features, 1)
    w.write_frame(slot)
    slot.state[:] = 9
    slot.action[:] = 9
    slot.requested[:] = 9
    w.write_frame(frame(w.features, 2))
    w.finish_episode()
    w.close()
    assert data_column(tmp_path / "d", "observation.state") == [[1.0, -1.0], [2.0, -2.0]]
    assert data_column(tmp_path / "d", "action") == [[1.5, 0.0], [2.5, 0.0]]
    assert data_column(tmp_path / "d", "request.action") == [[2.0, 1.0], [4.0, 1.0]]


@pytest.mark.parametrize("task", ["", "  ", 3, None])
def test_an_episode_needs_a_tasks_text(tmp_path: Path, task: Any) -> None:
    w = DatasetWriter(tmp_path / "d", features())
    with pytest.raises(RecordingError) as e:
        w.begin_episode(task)
    assert str(e.value) == f"task: expected the task's text, got {task!r}"
    assert w.begin_episode("pick") == 0  # nothing was left open
    w.close()


def test_one_episode_open_at_a_time(tmp_path: Path) -> None:
    w = DatasetWriter(tmp_path / "d", features())
    assert record(w, "pick", range(2)) is not None
    assert w.begin_episode("pick") == 1
    with pytest.raises(RecordingError) as e:
        w.begin_episode("place")
    assert str(e.value) == "episode 1 is still open; finish or abort it first"
    w.close()


def test_frames_and_files_need_an_open_episode(tmp_path: Path) -> None:
    w = DatasetWriter(tmp_path / "d", with_front(), encode_video=False)
    with pytest.raises(RecordingError) as e:
        w.write_frame(frame(w.features, 0))
    assert str(e.value) == "write_frame: no episode is open"
    with pytest.raises(RecordingError) as e:
        w.attach_encoded({FRONT: camera_file(tmp_path, "f.mp4", 0, 1)})
    assert str(e.value) == "attach_encoded: no episode is open"
    with pytest.raises(RecordingError) as e:
        w.finish_episode()
    assert str(e.value) == "finish_episode: no episode is open"
    w.abort_episode()  # nothing open: nothing to do
    w.close()


def test_an_episode_without_frames_writes_nothing(tmp_path: Path, videos: Videos) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, with_front())
    w.begin_episode("pick")
    assert (root / ".recording" / "episode-000000").is_dir()
    assert w.finish_episode() is None
    assert videos.made[0].aborted
    assert not (root / ".recording" / "episode-000000").exists()
    assert w.begin_episode("pick") == 0  # closed, and its index not taken
    w.close()
    assert files_under(root) == ["meta/info.json"]
    assert read_info(root)["total_episodes"] == 0


# -- cameras ---------------------------------------------------------------------------------------


def test_the_writer_encodes_each_cameras_frames_into_the_episodes_staging_file(tmp_path: Path, videos: Videos) -> None:
    root = tmp_path / "d"
    settings = VideoSettings(codec="libx264")
    f = with_front()
    w = DatasetWriter(root, f, video=settings)
    w.begin_episode("pick")
    assert videos.opened == [(root / ".recording" / "episode-000000" / f"{FRONT}.mp4", 10, 16, 32, settings)]
    w.write_frame(frame(f, 1, images=True))
    w.write_frame(frame(f, 2, images=True))
    assert [int(image.mean()) for image in videos.made[0].images] == [51, 102]
    w.finish_episode()
    w.close()
    assert (root / f"videos/{FRONT}/chunk-000/file-000.mp4").read_bytes() == b"v" * 20
    assert videos.infos == [root / f"videos/{FRONT}/chunk-000/file-000.mp4"]
    assert read_info(root)["features"][FRONT]["info"] == {
        "video.fps": 10,
        "video.codec": "stand-in",
        "file": "file-000.mp4",
    }
    stats = json.loads((root / "meta/stats.json").read_text())[FRONT]
    # every pixel 51, then 102: a fifth and two fifths of full scale
    assert (stats["min"], stats["max"], stats["count"]) == ([[[0.2]]] * 3, [[[0.4]]] * 3, [2])
    (row,) = episode_rows(root)
    assert row[f"stats/{FRONT}/count"] == [2]
    assert row[f"videos/{FRONT}/chunk_index"] == 0
    assert row[f"videos/{FRONT}/file_index"] == 0
    assert row[f"videos/{FRONT}/from_timestamp"] == 0.0
    assert row[f"videos/{FRONT}/to_timestamp"] == 0.2
    assert row[f"recording/{FRONT}/frames_dropped"] == 0


def test_a_camera_that_cannot_be_opened_closes_the_others_and_leaves_no_episode(tmp_path: Path, videos: Videos) -> None:
    w = DatasetWriter(tmp_path / "d", features({"front": (16, 32), "wrist": (16, 32)}))
    videos.fail_for = f"{WRIST}.mp4"
    with pytest.raises(RuntimeError, match="no encoder"):
        w.begin_episode("pick")
    assert [v.aborted for v in videos.made] == [True]
    videos.fail_for = ""
    assert w.begin_episode("pick") == 0
    w.close()
    assert [v.aborted for v in videos.made] == [True, True, True]


def test_files_encoded_elsewhere_are_attached_one_per_camera(tmp_path: Path, videos: Videos) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, features({"front": (16, 32), "wrist": (16, 32)}), encode_video=False)
    w.begin_episode("pick")
    w.write_frame(frame(w.features, 0))
    w.write_frame(frame(w.features, 1))
    with pytest.raises(RecordingError) as e:
        w.attach_encoded({})
    assert str(e.value) == (
        "attach_encoded: expected a file for every camera, got none for "
        "['observation.images.front', 'observation.images.wrist']"
    )
    with pytest.raises(RecordingError) as e:
        w.attach_encoded({FRONT: camera_file(tmp_path, "f.mp4", 2, 5)})
    assert str(e.value) == "attach_encoded: expected a file for every camera, got none for ['observation.images.wrist']"
    with pytest.raises(RecordingError) as e:
        w.attach_encoded({FRONT: camera_file(tmp_path, "f.mp4", 2, 5), WRIST: camera_file(tmp_path, "w.mp4", 3, 5)})
    assert str(e.value) == f"{WRIST}: expected 2 encoded frames (one per row), got 3"
    drops = EpisodeDrops({WRIST: 4}, 4, 4 / 6, True)
    files = {FRONT: camera_file(tmp_path, "f.mp4", 2, 5), WRIST: camera_file(tmp_path, "w.mp4", 2, 7)}
    w.attach_encoded(files, drops)
    assert w.finish_episode() == EpisodeSummary(0, 2, "pick", 0.2)
    w.close()
    assert (root / f"videos/{FRONT}/chunk-000/file-000.mp4").read_bytes() == b"e" * 5
    assert (root / f"videos/{WRIST}/chunk-000/file-000.mp4").read_bytes() == b"e" * 7
    assert not (tmp_path / "f.mp4").exists() and not (tmp_path / "w.mp4").exists()
    (row,) = episode_rows(root)
    assert row["recording/frames_dropped"] == 4
    assert row["recording/drop_rate"] == 4 / 6
    assert row["recording/drops_over_limit"] is True
    assert row[f"recording/{FRONT}/frames_dropped"] == 0
    assert row[f"recording/{WRIST}/frames_dropped"] == 4
    assert row[f"stats/{WRIST}/mean"] == [[[0.25]]] * 3
    assert json.loads((root / "meta/stats.json").read_text())[WRIST]["count"] == [2]


def test_an_episode_finished_without_its_camera_files_is_refused_and_closed(tmp_path: Path) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, with_front(), encode_video=False)
    w.begin_episode("pick")
    w.write_frame(frame(w.features, 0))
    with pytest.raises(RecordingError) as e:
        w.finish_episode()
    assert str(e.value) == "episode 0: no camera files were attached (attach_encoded)"
    assert w.begin_episode("pick") == 0
    w.close()
    assert files_under(root) == ["meta/info.json"]


def test_an_aborted_episode_leaves_nothing_and_keeps_its_index(tmp_path: Path, videos: Videos) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, with_front(), encode_video=False)
    w.begin_episode("pick")
    w.write_frame(frame(w.features, 0))
    (root / ".recording" / "episode-000000").mkdir()  # where the encoders write
    w.attach_encoded({FRONT: camera_file(tmp_path, "f.mp4", 1, 5)})
    w.abort_episode()
    assert not (tmp_path / "f.mp4").exists()
    assert not (root / ".recording" / "episode-000000").exists()
    assert record(w, "place", range(1), files={FRONT: camera_file(tmp_path, "g.mp4", 1, 5)}) == EpisodeSummary(
        0, 1, "place", 0.1
    )
    w.close()
    assert read_info(root)["total_tasks"] == 1


def test_close_drops_an_episode_still_open(tmp_path: Path, videos: Videos) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, with_front())
    w.begin_episode("pick")
    w.write_frame(frame(w.features, 1, images=True))
    w.close()
    assert videos.made[0].aborted
    assert files_under(root) == ["meta/info.json"]


# -- file sizes: the next file once a file is full -------------------------------------------------


def test_a_video_goes_on_in_its_file_until_the_next_episode_would_fill_it(tmp_path: Path, videos: Videos) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, with_front(), encode_video=False, video_file_size_mb=151 / 2**20)
    record(w, "pick", range(3), files={FRONT: camera_file(tmp_path, "e0.mp4", 3, 100)})
    record(w, "pick", range(2), files={FRONT: camera_file(tmp_path, "e1.mp4", 2, 50)})
    # 150 bytes: under the limit, appended after the first episode's 3 frames
    record(w, "pick", range(1), files={FRONT: camera_file(tmp_path, "e2.mp4", 1, 1)})
    # 151 bytes: at the limit, a new file
    w.close()
    first = root / f"videos/{FRONT}/chunk-000/file-000.mp4"
    assert videos.appended == [(first, "e1.mp4", 3, 10)]
    assert first.read_bytes() == b"e" * 150
    assert (root / f"videos/{FRONT}/chunk-000/file-001.mp4").read_bytes() == b"e"
    assert not (tmp_path / "e2.mp4").exists()
    assert videos.infos == [first]  # the codec's description is read once
    spans = [
        tuple(r[f"videos/{FRONT}/{c}"] for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"))
        for r in episode_rows(root)
    ]
    assert spans == [(0, 0, 0.0, 0.3), (0, 0, 0.3, 0.5), (0, 1, 0.0, 0.1)]


def test_a_video_at_exactly_its_limit_starts_the_next_file(tmp_path: Path, videos: Videos) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, with_front(), encode_video=False, video_file_size_mb=150 / 2**20)
    record(w, "pick", range(3), files={FRONT: camera_file(tmp_path, "e0.mp4", 3, 100)})
    record(w, "pick", range(2), files={FRONT: camera_file(tmp_path, "e1.mp4", 2, 50)})
    w.close()
    assert videos.appended == []
    assert (root / f"videos/{FRONT}/chunk-000/file-001.mp4").read_bytes() == b"e" * 50
    assert [r[f"videos/{FRONT}/file_index"] for r in episode_rows(root)] == [0, 1]


def one_frame_dataset(root: Path) -> tuple[int, int]:
    """A dataset of one one-frame episode; the sizes of its data file and its episodes file."""
    w = DatasetWriter(root, features())
    record(w, "pick", range(1))
    w.close()
    return (
        (root / "data/chunk-000/file-000.parquet").stat().st_size,
        (root / "meta/episodes/chunk-000/file-000.parquet").stat().st_size,
    )


def test_a_data_file_is_full_when_its_rows_so_far_and_the_next_episodes_would_reach_the_limit(
    tmp_path: Path,
) -> None:
    # one row on disk takes the file's size: a second row would take it to twice that
    data_size, _ = one_frame_dataset(tmp_path / "at")
    w = DatasetWriter(tmp_path / "at", features(), data_file_size_mb=2 * data_size / 2**20)
    record(w, "pick", range(1, 2))
    w.close()
    assert data_column(tmp_path / "at", "index") == [0]
    assert data_column(tmp_path / "at", "index", file=1) == [1]
    data_size, _ = one_frame_dataset(tmp_path / "under")
    w = DatasetWriter(tmp_path / "under", features(), data_file_size_mb=(2 * data_size + 1) / 2**20)
    record(w, "pick", range(1, 2))
    w.close()
    assert data_column(tmp_path / "under", "index") == [0, 1]
    assert not (tmp_path / "under/data/chunk-000/file-001.parquet").exists()


def test_a_data_files_rows_so_far_give_the_size_of_each_next_row(tmp_path: Path) -> None:
    # two rows on disk take the file's size, one each half of it: two more would double it
    sizes = {}
    for name in ("at", "under"):
        w = DatasetWriter(tmp_path / name, features())
        record(w, "pick", range(2))
        w.close()
        sizes[name] = (tmp_path / name / "data/chunk-000/file-000.parquet").stat().st_size
    w = DatasetWriter(tmp_path / "at", features(), data_file_size_mb=2 * sizes["at"] / 2**20)
    record(w, "pick", range(2, 4))
    w.close()
    assert data_column(tmp_path / "at", "index", file=1) == [2, 3]
    w = DatasetWriter(tmp_path / "under", features(), data_file_size_mb=(2 * sizes["under"] + 1) / 2**20)
    record(w, "pick", range(2, 4))
    w.close()
    assert data_column(tmp_path / "under", "index") == [0, 1, 2, 3]


def test_an_episodes_file_is_full_at_its_limit(tmp_path: Path) -> None:
    _, episodes_size = one_frame_dataset(tmp_path / "at")
    w = DatasetWriter(tmp_path / "at", features(), data_file_size_mb=episodes_size / 2**20)
    record(w, "pick", range(1, 2))
    w.close()
    assert [r["episode_index"] for r in episode_rows(tmp_path / "at")] == [0]
    assert [
        (r["episode_index"], r["meta/episodes/chunk_index"], r["meta/episodes/file_index"])
        for r in episode_rows(tmp_path / "at", file=1)
    ] == [(1, 0, 1)]
    _, episodes_size = one_frame_dataset(tmp_path / "under")
    w = DatasetWriter(tmp_path / "under", features(), data_file_size_mb=(episodes_size + 1) / 2**20)
    record(w, "pick", range(1, 2))
    w.close()
    assert [r["episode_index"] for r in episode_rows(tmp_path / "under")] == [0, 1]


def test_every_file_rolls_over_when_the_limits_are_tiny(tmp_path: Path, videos: Videos) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, with_front(), encode_video=False, data_file_size_mb=1e-9, video_file_size_mb=1e-9)
    for e in range(3):
        record(w, "pick", range(2), files={FRONT: camera_file(tmp_path, f"e{e}.mp4", 2, 3)})
    w.close()
    for file in range(3):
        assert data_column(root, "episode_index", file=file) == [file, file]
        (row,) = episode_rows(root, file=file)
        assert (row["episode_index"], row["data/file_index"], row[f"videos/{FRONT}/file_index"]) == (file, file, file)
        assert (row["meta/episodes/file_index"], row[f"videos/{FRONT}/from_timestamp"]) == (file, 0.0)
    assert videos.appended == []


# -- continuing a dataset --------------------------------------------------------------------------


def test_a_dataset_is_continued_in_the_files_it_ended_with(tmp_path: Path, videos: Videos) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, with_front(), encode_video=False)
    record(w, "pick", range(3), files={FRONT: camera_file(tmp_path, "e0.mp4", 3, 4)})
    w.close()
    assert videos.infos == [root / f"videos/{FRONT}/chunk-000/file-000.mp4"]
    w = DatasetWriter(root, with_front(), encode_video=False)
    assert (w.total_episodes, w.total_frames) == (1, 3)
    assert w.begin_episode("place") == 1
    for k in range(3, 5):
        w.write_frame(frame(w.features, k))
    w.attach_encoded({FRONT: camera_file(tmp_path, "e1.mp4", 2, 4)})
    assert w.finish_episode() == EpisodeSummary(1, 2, "place", 0.2)
    record(w, "pick", range(5, 6), files={FRONT: camera_file(tmp_path, "e2.mp4", 1, 4)})
    w.close()
    first = root / f"videos/{FRONT}/chunk-000/file-000.mp4"
    assert videos.appended == [(first, "e1.mp4", 3, 10), (first, "e2.mp4", 5, 10)]
    assert videos.infos == [first]  # read when the dataset began, kept in info.json
    assert data_column(root, "index") == [0, 1, 2, 3, 4, 5]
    assert data_column(root, "task_index") == [0, 0, 0, 1, 1, 0]
    rows = episode_rows(root)
    assert [(r["episode_index"], r["dataset_from_index"], r["dataset_to_index"]) for r in rows] == [
        (0, 0, 3),
        (1, 3, 5),
        (2, 5, 6),
    ]
    assert [r[f"videos/{FRONT}/from_timestamp"] for r in rows] == [0.0, 0.3, 0.5]
    info = read_info(root)
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 6, 2)
    assert info["features"][FRONT]["info"]["file"] == "file-000.mp4"
    stats = json.loads((root / "meta/stats.json").read_text())
    assert stats["observation.state"]["count"] == [6]
    assert stats["observation.state"]["min"] == [0.0, -5.0]
    assert stats[FRONT]["count"] == [6]


def test_a_dataset_is_continued_in_the_last_of_its_files(tmp_path: Path, videos: Videos) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, with_front(), encode_video=False, data_file_size_mb=1e-9, video_file_size_mb=1e-9)
    record(w, "pick", range(3), files={FRONT: camera_file(tmp_path, "e0.mp4", 3, 4)})
    record(w, "pick", range(2), files={FRONT: camera_file(tmp_path, "e1.mp4", 2, 4)})
    w.close()
    w = DatasetWriter(root, with_front(), encode_video=False)
    record(w, "pick", range(4), files={FRONT: camera_file(tmp_path, "e2.mp4", 4, 4)})
    w.close()
    second = root / f"videos/{FRONT}/chunk-000/file-001.mp4"
    assert videos.appended == [(second, "e2.mp4", 2, 10)]
    assert data_column(root, "index", file=1) == [3, 4, 5, 6, 7, 8]
    rows = episode_rows(root, file=1)
    assert [r["episode_index"] for r in rows] == [1, 2]
    last = rows[-1]
    assert (last["data/file_index"], last["meta/episodes/file_index"]) == (1, 1)
    assert (last[f"videos/{FRONT}/file_index"], last[f"videos/{FRONT}/from_timestamp"]) == (1, 0.2)
    assert last[f"videos/{FRONT}/to_timestamp"] == 0.6
    assert [r["episode_index"] for r in episode_rows(root)] == [0]


def test_a_continued_dataset_rolls_over_at_its_limits(tmp_path: Path, videos: Videos) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, with_front(), encode_video=False)
    record(w, "pick", range(3), files={FRONT: camera_file(tmp_path, "e0.mp4", 3, 4)})
    w.close()
    w = DatasetWriter(root, with_front(), encode_video=False, data_file_size_mb=1e-9, video_file_size_mb=1e-9)
    record(w, "pick", range(2), files={FRONT: camera_file(tmp_path, "e1.mp4", 2, 4)})
    w.close()
    assert videos.appended == []
    assert data_column(root, "index") == [0, 1, 2]
    assert data_column(root, "index", file=1) == [3, 4]
    (row,) = episode_rows(root, file=1)
    assert (row["data/file_index"], row[f"videos/{FRONT}/file_index"], row[f"videos/{FRONT}/from_timestamp"]) == (
        1,
        1,
        0.0,
    )


def test_a_dataset_without_episodes_is_continued_from_the_start(tmp_path: Path) -> None:
    root = tmp_path / "d"
    DatasetWriter(root, features()).close()
    w = DatasetWriter(root, features())
    assert record(w, "pick", range(2)) == EpisodeSummary(0, 2, "pick", 0.2)
    w.close()
    assert data_column(root, "index") == [0, 1]
    assert [r["episode_index"] for r in episode_rows(root)] == [0]


def test_a_first_episode_cut_short_before_its_totals_is_written_over(tmp_path: Path) -> None:
    # the files of episode 0 were written but info.json still says no episode (a crash in between)
    root = tmp_path / "d"
    DatasetWriter(root, features()).close()
    empty_info = (root / "meta/info.json").read_text()
    w = DatasetWriter(root, features())
    record(w, "pick", range(3))
    w.close()
    (root / "meta/info.json").write_text(empty_info)
    w = DatasetWriter(root, features())
    assert record(w, "place", range(2)) == EpisodeSummary(0, 2, "place", 0.2)
    w.close()
    assert data_column(root, "index") == [0, 1]
    assert [(r["episode_index"], r["tasks"]) for r in episode_rows(root)] == [(0, ["place"])]


def test_closing_twice_releases_the_lock_once_and_closes_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runtime.recording.writer as writer_module

    w = DatasetWriter(tmp_path / "d", features())
    closed: list[int] = []
    real_close = os.close

    def close(fd: int) -> None:
        closed.append(fd)
        if fd > 2:  # never really close the test's own stdio
            real_close(fd)

    monkeypatch.setattr(writer_module.os, "close", close)
    w.close()
    w.close()
    assert w._lock == -1
    assert not {0, 1, 2} & set(closed)  # a second close closes no other descriptor (1 is stdout)
