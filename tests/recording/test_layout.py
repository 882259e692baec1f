"""Where LeRobot v3.0 looks for each file: the templates and the roll-over from file to file."""

from __future__ import annotations

from pathlib import Path

from runtime.recording import layout


def test_paths_are_lerobots() -> None:
    root = Path("/ds")
    assert layout.data_file(root, 2, 17) == Path("/ds/data/chunk-002/file-017.parquet")
    assert layout.video_file(root, "observation.images.front", 0, 3) == Path(
        "/ds/videos/observation.images.front/chunk-000/file-003.mp4"
    )
    assert layout.episodes_file(root, 1, 0) == Path("/ds/meta/episodes/chunk-001/file-000.parquet")
    assert layout.INFO_PATH == "meta/info.json"
    assert layout.STATS_PATH == "meta/stats.json"
    assert layout.TASKS_PATH == "meta/tasks.parquet"
    assert layout.CODEBASE_VERSION == "v3.0"


def test_next_file_fills_a_chunk_of_1000() -> None:
    assert layout.next_file(0, 0) == (0, 1)
    assert layout.next_file(4, 997) == (4, 998)
    assert layout.next_file(4, 998) == (4, 999)
    assert layout.next_file(4, 999) == (5, 0)


def test_stat_keys_and_index_columns() -> None:
    assert layout.STAT_KEYS == ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
    assert list(layout.INDEX_FEATURES) == ["timestamp", "frame_index", "episode_index", "index", "task_index"]
    assert layout.INDEX_FEATURES["timestamp"] == {"dtype": "float32", "shape": [1], "names": None}
    assert layout.INDEX_FEATURES["index"] == {"dtype": "int64", "shape": [1], "names": None}
