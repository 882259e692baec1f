"""What a crash left in a dataset that ``meta/info.json`` does not count, dropped before it is continued.

The writer finishes an episode file by file and writes ``info.json`` last (``writer.py``): a crash in
between leaves the episode's data rows, video frames, episodes row, task and statistics on disk while
the totals still describe the dataset before it. Continuing from the totals as they are would give the
next episode the same index, put its rows after the stale ones and count both in the statistics. So
the files are cut back to what the totals count first: rows past ``total_frames`` and
``total_episodes``, video frames past the last counted episode's span, files begun after it, tasks past
``total_tasks``, and the statistics combined again from the counted episodes when they count more.
Each step is idempotent: a crash during this leaves ``info.json`` as it was, and the next start does
the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from runtime.recording import layout, tables
from runtime.recording.stats import Stats, combine, to_json


def drop_uncounted(root: Path, info: Mapping[str, Any], image_keys: tuple[str, ...]) -> list[str]:
    """Cut the dataset at ``root`` back to what ``info`` counts; what was dropped, in words (empty: nothing)."""
    pa = tables.pa()
    episodes, frames = int(info["total_episodes"]), int(info["total_frames"])
    features = info["features"]
    dropped: list[str] = []

    rows: list[dict[str, Any]] = []
    for path in sorted((root / layout.EPISODES_DIR).glob("*/*.parquet")):
        file_rows = pa.parquet.read_table(path).to_pylist()
        keep = [r for r in file_rows if r["episode_index"] < episodes]
        if len(keep) < len(file_rows):
            stale = sorted({r["episode_index"] for r in file_rows} - {r["episode_index"] for r in keep})
            dropped.append(f"episodes {stale} from {path.relative_to(root)}")
            _replace_or_remove(path, tables.episodes_table(features, keep) if keep else None)
        rows += keep
    last = rows[-1] if rows else None

    data_from = (last["data/chunk_index"], last["data/file_index"]) if last else None
    stale_rows = False
    for path in _files_from(root / layout.DATA_DIR, "*/*.parquet", data_from):
        # the index column alone, on every start: the whole file (up to 100 MB) only when it must be cut
        index = pa.parquet.read_table(path, columns=["index"]).column("index").to_numpy()
        if (index < frames).all():
            continue
        stale_rows = True
        dropped.append(f"{int((index >= frames).sum())} rows from {path.relative_to(root)}")
        keep = index < frames
        _replace_or_remove(path, pa.parquet.read_table(path).filter(pa.array(keep)) if keep.any() else None)

    # an episode's camera files are appended after its data rows: without uncounted rows there are no
    # uncounted frames either, and the (large) camera files are not read at all
    for key in image_keys if stale_rows else ():
        video_from = (last[f"videos/{key}/chunk_index"], last[f"videos/{key}/file_index"]) if last else None
        for path in _files_from(root / layout.VIDEOS_DIR / key, "*/*.mp4", video_from):
            counted = round(float(last[f"videos/{key}/to_timestamp"]) * int(info["fps"])) if last else 0
            if video_from is None or path != layout.video_file(root, key, *video_from):
                counted = 0  # begun after the last counted episode
            dropped += _cut_video(root, path, counted, int(info["fps"]))

    tasks_path = root / layout.TASKS_PATH
    if tasks_path.exists():
        tasks = tables.read_tasks(tasks_path)
        counted_tasks = int(info.get("total_tasks", 0))
        if len(tasks) > counted_tasks:
            dropped.append(f"tasks {tasks[counted_tasks:]}")
            if counted_tasks:
                tables.write_table(tables.tasks_table(tasks[:counted_tasks]), tasks_path)
            else:
                tasks_path.unlink()

    stats_path = root / layout.STATS_PATH
    if stats_path.exists():
        with open(stats_path, encoding="utf-8") as f:
            # a camera's count is its own (frames left out while encoding are not in it): the joints' say
            counts = {
                int(np.asarray(s.get("count", [frames])).reshape(-1)[0])
                for key, s in json.load(f).items()
                if key not in image_keys
            }
        if counts - {frames}:
            dropped.append(
                f"statistics of {sorted(counts - {frames})} frames, combined again from the counted episodes"
            )
            if rows:
                tables.write_json(to_json(combine([_row_stats(r) for r in rows])), stats_path)
            else:
                stats_path.unlink()
    return dropped


def _files_from(directory: Path, pattern: str, first: tuple[int, int] | None) -> list[Path]:
    """The files of ``directory`` from chunk/file ``first`` on (all of them when None), in order."""
    files = sorted(directory.glob(pattern))
    if first is None:
        return files
    start = layout.CHUNK_FILE.format(chunk_index=first[0], file_index=first[1])
    return [f for f in files if f"{f.parent.name}/{f.stem}" >= start]


def _replace_or_remove(path: Path, table: Any) -> None:
    if table is None:
        path.unlink()
    else:
        tables.write_table(table, path)


def _cut_video(root: Path, path: Path, counted: int, fps: int) -> list[str]:
    from runtime.recording.video import frame_times, keep_frames

    have = len(frame_times(path))
    if have <= counted:
        return []
    if counted == 0:
        path.unlink()
    else:
        keep_frames(path, counted, fps)
    return [f"{have - counted} video frames from {path.relative_to(root)}"]


def _row_stats(row: Mapping[str, Any]) -> dict[str, Stats]:
    """One episode's statistics as its episodes row holds them (``stats/<feature>/<stat>``)."""
    out: dict[str, Stats] = {}
    for column, value in row.items():
        if column.startswith("stats/") and value is not None:
            key, name = column[len("stats/") :].rsplit("/", 1)
            out.setdefault(key, {})[name] = np.asarray(value)
    return out
