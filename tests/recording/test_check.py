"""The format checker finds what LeRobot would trip over, and says where."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runtime.cli import main
from runtime.recording import DatasetWriter, EpisodeRecorder, RecordingFeatures
from runtime.recording.check import check_dataset
from tests.recording.conftest import add, ticks


def rewrite_data(root: Path, column: str, values: list[object]) -> None:
    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    i = table.column_names.index(column)
    table = table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))
    pq.write_table(table, path)


def test_timestamps_off_the_frame_grid(dataset: Path) -> None:
    frame_index = [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4]
    # row 8 is episode 1's frame 2, written 10 ms late (a wall-clock time instead of frame_index / fps)
    rewrite_data(dataset, "timestamp", [k / 30 + (0.01 if row == 8 else 0.0) for row, k in enumerate(frame_index)])
    problems = check_dataset(dataset).problems
    assert any(
        p.startswith("data/chunk-000/file-000.parquet: episode 1: timestamp of frame 2") and "frame_index / fps" in p
        for p in problems
    ), problems


def test_a_missing_video(dataset: Path) -> None:
    (dataset / "videos/observation.images.front/chunk-000/file-000.mp4").unlink()
    assert check_dataset(dataset).problems == [
        "videos/observation.images.front/chunk-000/file-000.mp4: missing (episodes [0, 1] live there)"
    ]


def test_a_video_short_of_frames(dataset: Path, features: RecordingFeatures, tmp_path: Path) -> None:
    # a video with only the first episode's frames, where the dataset expects both
    other = tmp_path / "other"
    with EpisodeRecorder(DatasetWriter(other, features), features) as recorder:
        recorder.start_episode("a")
        for t in ticks(6, seed=6):
            add(recorder, t)
    video = "videos/observation.images.front/chunk-000/file-000.mp4"
    (dataset / video).write_bytes((other / video).read_bytes())
    problems = check_dataset(dataset).problems
    assert problems == [f"{video}: episode 1: no frame at 0.2000 s (frame 0); 5 of 5 frames missing"]


def test_totals_that_disagree(dataset: Path) -> None:
    info_path = dataset / "meta/info.json"
    info = json.loads(info_path.read_text())
    info["total_frames"] = 12
    info_path.write_text(json.dumps(info))
    problems = check_dataset(dataset).problems
    assert "meta/episodes: episode lengths add up to 11, info.json total_frames is 12" in problems
    assert "meta/stats.json: observation.state.count: 11, info.json total_frames is 12" in problems


def test_a_stat_of_the_wrong_shape(dataset: Path) -> None:
    stats_path = dataset / "meta/stats.json"
    stats = json.loads(stats_path.read_text())
    stats["observation.images.front"]["mean"] = [0.5, 0.5, 0.5]
    del stats["action"]["q99"]
    stats_path.write_text(json.dumps(stats))
    assert check_dataset(dataset).problems == [
        "meta/stats.json: observation.images.front.mean: expected shape (3, 1, 1), found (3,)",
        "meta/stats.json: action.q99: missing",
    ]


def test_a_data_column_of_the_wrong_type(dataset: Path) -> None:
    path = dataset / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    i = table.column_names.index("frame_index")
    table = table.set_column(i, "frame_index", table.column(i).cast(pa.int32()))
    pq.write_table(table, path)
    problems = check_dataset(dataset).problems
    assert "data/chunk-000/file-000.parquet: column 'frame_index': expected int64, found int32" in problems


def test_the_command(dataset: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["dataset", "check", str(dataset)]) == 0
    assert "OK, 2 episodes, 11 frames, cameras: observation.images.front" in capsys.readouterr().out
    assert main(["dataset", "check", str(tmp_path / "nowhere")]) == 1
    assert "meta/info.json: missing: this folder is not a LeRobot dataset" in capsys.readouterr().out


def test_bench_record_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "record", "--json", "--height", "48", "--width", "64", "--seconds", "0.5", "--fps", "20"]
    assert main([*args, "--codecs", "libx264", "--cameras", "1,2"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [(r["codec"], r["cameras"]) for r in result["rows"]] == [("libx264", 1), ("libx264", 2)]
    for row in result["rows"]:
        assert row["ticks"] == 10 and row["overruns"] == 0
        assert row["frames_written"] + round(row["drop_rate"] * 10) == 10
        assert row["encoder_ms_per_frame"] > 0 and set(row["add_frame_ms"]) >= {"median", "p99"}
    assert set(result["auto"]) == {"1", "2"}
