"""Where things live in a LeRobot v3.0 dataset, and the constants the format fixes.

A dataset is a folder: ``meta/info.json`` (features, fps, totals, path templates), ``meta/stats.json``
(statistics over every frame), ``meta/tasks.parquet`` (task text -> task_index),
``meta/episodes/chunk-XXX/file-XXX.parquet`` (one row per episode: where its rows and video spans
are, its own statistics), ``data/chunk-XXX/file-XXX.parquet`` (one row per frame, many episodes per
file) and ``videos/<camera key>/chunk-XXX/file-XXX.mp4`` (many episodes per file, one after the
other). These names and templates are what LeRobot 0.4.x writes and reads; changing any of them
makes a dataset LeRobot cannot open.
"""

from __future__ import annotations

from pathlib import Path

CODEBASE_VERSION = "v3.0"

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
DATA_DIR = "data"
VIDEOS_DIR = "videos"

CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = DATA_DIR + "/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = VIDEOS_DIR + "/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = EPISODES_DIR + "/" + CHUNK_FILE + ".parquet"

# Files per chunk folder, and the size at which a data or video file is closed and the next one begun.
CHUNKS_SIZE = 1000
DATA_FILE_SIZE_MB = 100
VIDEO_FILE_SIZE_MB = 200

# Columns every dataset has, in the order LeRobot appends them after the recorded features.
INDEX_FEATURES: dict[str, dict[str, object]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}

# The per-feature statistics, in the order LeRobot writes them; quantiles are the q01..q99 keys.
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)
STAT_KEYS = ("min", "max", "mean", "std", "count", *QUANTILE_KEYS)

# A video frame is found by time: LeRobot accepts a decoded frame within this many seconds of the
# time it asked for (its default ``tolerance_s``).
TIMESTAMP_TOLERANCE_S = 1e-4


def next_file(chunk_index: int, file_index: int) -> tuple[int, int]:
    """The (chunk, file) after this one: files fill a chunk folder up to ``CHUNKS_SIZE``."""
    if file_index >= CHUNKS_SIZE - 1:
        return chunk_index + 1, 0
    return chunk_index, file_index + 1


def data_file(root: Path, chunk_index: int, file_index: int) -> Path:
    return root / DATA_PATH.format(chunk_index=chunk_index, file_index=file_index)


def video_file(root: Path, video_key: str, chunk_index: int, file_index: int) -> Path:
    return root / VIDEO_PATH.format(video_key=video_key, chunk_index=chunk_index, file_index=file_index)


def episodes_file(root: Path, chunk_index: int, file_index: int) -> Path:
    return root / EPISODES_PATH.format(chunk_index=chunk_index, file_index=file_index)
