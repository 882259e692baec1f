"""A crash while an episode is being finished: its data, video frames, episodes row, task and statistics may
be on disk while ``meta/info.json`` still has the totals from before it (the writer writes it last).
Continuing such a dataset drops what the totals do not count first (``runtime/recording/uncounted.py``),
so the next episode takes the uncounted one's index, its rows and frames follow the counted ones and the
statistics count only what is counted. Each crash is made by putting back files from before the episode.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from runtime.recording import layout
from runtime.recording.check import check_dataset
from runtime.recording.features import RecordingFeatures
from runtime.recording.frames import FrameSlot
from runtime.recording.video import VideoSettings, frame_times
from runtime.recording.writer import DatasetWriter

JOINTS = RecordingFeatures(fps=10, joint_names=("a", "b"))
CAMERA = RecordingFeatures(fps=10, joint_names=("a", "b"), cameras={"front": (16, 16)})
X264 = VideoSettings(codec="libx264", gop_frames=2, threads=1)
VIDEO = "videos/observation.images.front/chunk-000/file-000.mp4"


def record(w: DatasetWriter, task: str, n: int, level: int = 0) -> None:
    w.begin_episode(task)
    for k in range(n):
        slot = FrameSlot(w.features, images=True)
        slot.t_s = float(k)
        slot.state[:] = (k, -k)
        for image in slot.images.values():
            image[:] = level
        w.write_frame(slot)
    w.finish_episode()


def snapshot(root: Path, *paths: str) -> dict[str, bytes]:
    return {p: (root / p).read_bytes() for p in paths if (root / p).exists()}


def put_back(root: Path, saved: dict[str, bytes]) -> None:
    for p, data in saved.items():
        (root / p).write_bytes(data)


def crash_in_episode(root: Path, features: RecordingFeatures, counted: list[int], cut: int, **writer: object) -> None:
    """Episodes of ``counted`` frames, then one of ``cut`` frames whose totals never reached info.json."""
    w = DatasetWriter(root, features, video=X264, **writer)  # type: ignore[arg-type]
    for k, n in enumerate(counted):
        record(w, "pick", n, level=40 * k)
    before = snapshot(root, layout.INFO_PATH)
    record(w, "place", cut, level=200)
    w.close()
    put_back(root, before)


def stats(root: Path) -> dict[str, dict[str, list[float]]]:
    with open(root / layout.STATS_PATH, encoding="utf-8") as f:
        return json.load(f)  # type: ignore[no-any-return]


def test_an_episode_cut_short_before_its_totals_leaves_a_whole_dataset(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "d"
    crash_in_episode(root, JOINTS, [3], 2)
    with caplog.at_level(logging.WARNING, logger="runtime.recording.writer"):
        w = DatasetWriter(root, JOINTS)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said == [
        f"{root}: dropped what a run that stopped while finishing episode 1 left without counting it: "
        "episodes [1] from meta/episodes/chunk-000/file-000.parquet; 2 rows from data/chunk-000/file-000.parquet; "
        "tasks ['place']; statistics of [5] frames, combined again from the counted episodes"
    ]
    record(w, "pick", 4)
    w.close()
    assert check_dataset(root).problems == []
    s = stats(root)
    assert s["observation.state"]["count"] == [7]
    assert s["observation.state"]["max"] == [3.0, 0.0] and s["observation.state"]["min"] == [0.0, -3.0]
    info = json.loads((root / layout.INFO_PATH).read_text())
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (2, 7, 1)


def test_a_dataset_whose_first_episode_was_cut_short_starts_afresh(tmp_path: Path) -> None:
    root = tmp_path / "d"
    crash_in_episode(root, JOINTS, [], 5)
    w = DatasetWriter(root, JOINTS)
    assert w.total_episodes == 0
    record(w, "stack", 2)
    w.close()
    assert check_dataset(root).problems == []
    assert stats(root)["observation.state"]["count"] == [2]
    info = json.loads((root / layout.INFO_PATH).read_text())
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (1, 2, 1)


def test_the_uncounted_episodes_video_frames_are_cut_from_its_camera_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "d"
    crash_in_episode(root, CAMERA, [3, 2], 4)
    assert len(frame_times(root / VIDEO)) == 9
    with caplog.at_level(logging.WARNING, logger="runtime.recording.writer"):
        w = DatasetWriter(root, CAMERA, video=X264)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"{root}: dropped what a run that stopped while finishing episode 2 left without counting it: "
        "episodes [2] from meta/episodes/chunk-000/file-000.parquet; 4 rows from data/chunk-000/file-000.parquet; "
        f"4 video frames from {VIDEO}; tasks ['place']; statistics of [9] frames, combined again from the counted "
        "episodes"
    ]
    assert len(frame_times(root / VIDEO)) == 5  # the counted episodes' frames only
    record(w, "pick", 3, level=120)
    w.close()
    assert check_dataset(root).problems == []
    times = frame_times(root / VIDEO)
    assert len(times) == 8
    np.testing.assert_allclose(times, np.arange(8) / 10, atol=1e-3)
    from runtime.recording.video import decode_frames

    grey = [round(float(f.mean()) / 40) * 40 for f in decode_frames(root / VIDEO, 0.0, 8, 10)]
    assert grey == [0, 0, 0, 40, 40, 120, 120, 120]  # the last episode, not the uncounted one's 200


def test_files_begun_for_the_uncounted_episode_are_removed(tmp_path: Path) -> None:
    # a tiny size limit: every episode starts new data and episodes files
    root = tmp_path / "d"
    crash_in_episode(root, JOINTS, [3], 2, data_file_size_mb=1e-6)
    assert (root / "data/chunk-000/file-001.parquet").exists()
    DatasetWriter(root, JOINTS, data_file_size_mb=1e-6).close()
    assert sorted(p.name for p in (root / "data/chunk-000").iterdir()) == ["file-000.parquet"]
    assert sorted(p.name for p in (root / layout.EPISODES_DIR / "chunk-000").iterdir()) == ["file-000.parquet"]
    w = DatasetWriter(root, JOINTS, data_file_size_mb=1e-6)
    record(w, "pick", 4)
    w.close()
    assert check_dataset(root).problems == []


def test_rows_written_before_the_episodes_row_are_dropped_and_the_statistics_kept(tmp_path: Path) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, JOINTS)
    record(w, "pick", 3)
    saved = snapshot(
        root,
        layout.INFO_PATH,
        layout.STATS_PATH,
        layout.TASKS_PATH,
        "meta/episodes/chunk-000/file-000.parquet",
    )
    record(w, "pick", 2)
    w.close()
    put_back(root, saved)  # the crash came after the data rows, before the episodes row
    before = (root / layout.STATS_PATH).read_bytes()
    DatasetWriter(root, JOINTS).close()
    assert (root / layout.STATS_PATH).read_bytes() == before  # they counted what info.json counts
    import pyarrow.parquet as pq

    assert pq.read_table(root / "data/chunk-000/file-000.parquet").column("index").to_pylist() == [0, 1, 2]
    assert check_dataset(root).problems == []


def test_a_whole_dataset_is_continued_untouched(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "d"
    w = DatasetWriter(root, CAMERA, video=X264)
    record(w, "pick", 3)
    w.close()
    files = sorted(p for p in root.rglob("*") if p.is_file() and ".recording" not in p.parts)
    before = {p: p.read_bytes() for p in files}
    with caplog.at_level(logging.WARNING, logger="runtime.recording.writer"):
        DatasetWriter(root, CAMERA, video=X264).close()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert {p: p.read_bytes() for p in files} == before


def test_a_dataset_emptied_by_a_crash_has_no_statistics_left(tmp_path: Path) -> None:
    root = tmp_path / "d"
    crash_in_episode(root, CAMERA, [], 3)
    DatasetWriter(root, CAMERA, video=X264).close()
    assert not (root / layout.STATS_PATH).exists() and not (root / layout.TASKS_PATH).exists()
    assert not (root / VIDEO).exists()
    assert not list((root / "data").rglob("*.parquet")) and not list((root / layout.EPISODES_DIR).rglob("*.parquet"))
    assert check_dataset(root).problems == []


def test_an_uncounted_episode_of_one_frame_is_dropped(tmp_path: Path) -> None:
    root = tmp_path / "d"
    crash_in_episode(root, JOINTS, [3], 1)  # its one row has index 3, total_frames 3
    w = DatasetWriter(root, JOINTS)
    record(w, "pick", 2)
    w.close()
    assert check_dataset(root).problems == []
    assert stats(root)["observation.state"]["count"] == [5]


def test_camera_files_of_counted_episodes_before_the_last_one_are_kept(tmp_path: Path) -> None:
    # every episode in a camera file of its own (a tiny size limit): only the uncounted one's goes
    root = tmp_path / "d"
    crash_in_episode(root, CAMERA, [3, 2], 4, video_file_size_mb=1e-6)
    videos = root / "videos/observation.images.front/chunk-000"
    assert sorted(p.name for p in videos.iterdir()) == ["file-000.mp4", "file-001.mp4", "file-002.mp4"]
    DatasetWriter(root, CAMERA, video=X264, video_file_size_mb=1e-6).close()
    assert sorted(p.name for p in videos.iterdir()) == ["file-000.mp4", "file-001.mp4"]
    assert [len(frame_times(videos / f)) for f in ("file-000.mp4", "file-001.mp4")] == [3, 2]
    assert check_dataset(root).problems == []
