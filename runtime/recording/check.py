"""Checks a dataset folder, file by file, against the LeRobot v3.0 format.

``check_dataset(root)`` reads everything a LeRobot 0.4.x reader relies on and returns a report
whose ``problems`` each name the file, the field, what was expected and what was found; an empty
list means the dataset is whole. It needs pyarrow and PyAV only. What it checks:

- ``meta/info.json``: version, path templates, totals, splits, the index features, video ``info``;
- ``meta/tasks.parquet``: task indices 0..n-1, the task text as the pandas index;
- ``meta/episodes``: episode indices 0..n-1, lengths and frame spans that tile the data, tasks
  that exist, a statistics column of the right shape for every feature that has statistics;
- ``data``: column types per feature, every episode's rows where its span says, ``frame_index``
  0..length-1, ``timestamp`` = frame_index / fps, ``index``, ``episode_index``, ``task_index``;
- ``videos``: codec stream, frame size, one frame at ``from_timestamp + k / fps`` for every row;
- ``meta/stats.json``: every statistic of every feature that has statistics, in the right shape.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from runtime.recording import layout, tables
from runtime.recording.video import frame_times


@dataclass
class CheckReport:
    root: Path
    episodes: int = 0
    frames: int = 0
    cameras: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")


def _stat_shape(ft: Mapping[str, Any]) -> tuple[int, ...]:
    return (3, 1, 1) if ft["dtype"] == "video" else (int(ft["shape"][0]),)


def check_dataset(root: str | Path) -> CheckReport:
    report = CheckReport(Path(root))
    info = _check_info(report)
    if info is None:
        return report
    tasks = _check_tasks(report, info)
    episodes = _check_episodes(report, info, tasks)
    if episodes is not None:
        _check_data(report, info, episodes)
        _check_videos(report, info, episodes)
    _check_stats(report, info)
    return report


def _check_info(report: CheckReport) -> dict[str, Any] | None:
    where = layout.INFO_PATH
    path = report.root / where
    if not path.exists():
        report.add(where, "missing: this folder is not a LeRobot dataset")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            info: dict[str, Any] = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        report.add(where, f"not readable JSON ({e})")
        return None
    if not isinstance(info, dict):
        report.add(where, f"expected a JSON object, found {type(info).__name__}")
        return None
    expected_types = {
        "codebase_version": str,
        "total_episodes": int,
        "total_frames": int,
        "total_tasks": int,
        "chunks_size": int,
        "fps": int,
        "splits": dict,
        "data_path": str,
        "features": dict,
    }
    for key, kind in expected_types.items():
        if not isinstance(info.get(key), kind):
            report.add(where, f"{key}: expected {kind.__name__}, found {info.get(key)!r}")
    if report.problems:
        return None
    for key, ft in info["features"].items():
        _check_feature(report, key, ft)
    if report.problems:  # what follows reads every feature's dtype and shape
        return None
    if info["codebase_version"] != layout.CODEBASE_VERSION:
        report.add(where, f"codebase_version: expected {layout.CODEBASE_VERSION!r}, found {info['codebase_version']!r}")
    if info["data_path"] != layout.DATA_PATH:
        report.add(where, f"data_path: expected {layout.DATA_PATH!r}, found {info['data_path']!r}")
    features: dict[str, Any] = info["features"]
    videos = [k for k, ft in features.items() if ft.get("dtype") == "video"]
    report.cameras = videos
    if videos and info.get("video_path") != layout.VIDEO_PATH:
        report.add(where, f"video_path: expected {layout.VIDEO_PATH!r}, found {info.get('video_path')!r}")
    for key, ft in layout.INDEX_FEATURES.items():
        have = features.get(key)
        if have is None or have.get("dtype") != ft["dtype"] or list(have.get("shape", [])) != ft["shape"]:
            report.add(where, f"features.{key}: expected {ft}, found {have}")
    for key, ft in features.items():
        if "/" in key:
            report.add(where, f"features.{key}: a feature name may not contain '/'")
        if ft.get("dtype") == "video":
            vinfo = ft.get("info")
            if info["total_episodes"] and not isinstance(vinfo, dict):
                report.add(where, f"features.{key}.info: missing (the video's codec, size and fps)")
            elif isinstance(vinfo, dict) and vinfo.get("video.fps") != info["fps"]:
                report.add(
                    where, f"features.{key}.info.video.fps: expected {info['fps']}, found {vinfo.get('video.fps')}"
                )
    expected_split = {"train": f"0:{info['total_episodes']}"} if info["total_episodes"] else {}
    if info["splits"] != expected_split:
        report.add(where, f"splits: expected {expected_split}, found {info['splits']}")
    report.episodes = info["total_episodes"]
    report.frames = info["total_frames"]
    return info


def _check_feature(report: CheckReport, key: str, ft: Any) -> None:
    """One entry of info.json's features: a table with a dtype this format stores and its shape, a
    non-empty list of positive integers (height, width, channels for a video)."""
    where = f"{layout.INFO_PATH}: features.{key}"
    if not isinstance(ft, dict):
        report.add(where, f"expected a table with dtype and shape, found {ft!r}")
        return
    dtypes = ["video", *tables.SCALAR_DTYPES]
    if ft.get("dtype") not in dtypes:
        report.add(where, f"dtype: expected one of {dtypes}, found {ft.get('dtype')!r}")
    shape = ft.get("shape")
    if (
        not isinstance(shape, list)
        or not shape
        or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape)
    ):
        report.add(where, f"shape: expected a non-empty list of positive integers, found {shape!r}")
    elif ft.get("dtype") == "video" and len(shape) != 3:
        report.add(where, f"shape: expected [height, width, channels] for a video, found {shape!r}")


def _check_tasks(report: CheckReport, info: dict[str, Any]) -> list[str] | None:
    """The task texts by task_index; None when they cannot be read (the problem is reported)."""
    where = layout.TASKS_PATH
    path = report.root / where
    if not path.exists():
        if info["total_episodes"]:
            report.add(where, "missing")
            return None
        return []
    pq = tables.pa().parquet
    table = pq.read_table(path)
    meta = table.schema.metadata or {}
    if b"pandas" not in meta:
        report.add(where, "no pandas metadata: pandas.read_parquet would not restore the task text as the index")
    else:
        index_columns = json.loads(meta[b"pandas"]).get("index_columns")
        if index_columns != ["__index_level_0__"]:
            report.add(where, f"pandas index_columns: expected ['__index_level_0__'], found {index_columns}")
    if set(table.column_names) != {"task_index", "__index_level_0__"}:
        report.add(where, f"columns: expected task_index and the task text index, found {table.column_names}")
        return None
    arrow = tables.pa()
    before = len(report.problems)  # problems elsewhere do not stop the tasks being read
    _check_column(report, where, table, "task_index", arrow.int64())
    _check_column(report, where, table, "__index_level_0__", arrow.string())
    if len(report.problems) > before:
        return None
    indices = table.column("task_index").to_pylist()
    texts = table.column("__index_level_0__").to_pylist()
    if sorted(indices) != list(range(len(indices))):
        report.add(where, f"task_index: expected 0..{len(indices) - 1}, found {indices}")
    if len(set(texts)) != len(texts):
        report.add(where, "task texts repeat")
    if len(texts) != info["total_tasks"]:
        report.add(where, f"{len(texts)} tasks, but info.json total_tasks is {info['total_tasks']}")
    by_index = dict(zip(indices, texts, strict=True))
    return [by_index.get(i, "") for i in range(len(indices))]


def _check_episodes(report: CheckReport, info: dict[str, Any], tasks: list[str] | None) -> list[dict[str, Any]] | None:
    features = info["features"]
    files = sorted((report.root / layout.EPISODES_DIR).glob("*/*.parquet"))
    if not files:
        if info["total_episodes"]:
            report.add(layout.EPISODES_DIR, "no episodes file")
        return [] if not info["total_episodes"] else None
    pq = tables.pa().parquet
    expected = tables.episodes_schema(features)
    rows: list[dict[str, Any]] = []
    before = len(report.problems)  # problems of other files do not stop these rows being read
    for path in files:
        where = str(path.relative_to(report.root))
        table = pq.read_table(path)
        file_before = len(report.problems)
        for name in expected.names:
            # the drop columns are this recorder's own: a dataset LeRobot wrote has none
            if name.startswith(("stats/", tables.DROPS_PREFIX)) or name in ("tasks",):
                continue
            if name not in table.column_names:
                report.add(where, f"column {name!r} missing")
        for name in expected.names:
            if name in table.column_names and not name.startswith("stats/"):
                _check_column(report, where, table, name, expected.field(name).type)
        for key, ft in tables.stats_features(features).items():
            for stat in layout.STAT_KEYS:
                col = f"stats/{key}/{stat}"
                if col not in table.column_names:
                    report.add(where, f"column {col!r} missing")
                    continue
                want = (1,) if stat == "count" else _stat_shape(ft)
                for value in table.column(col).to_pylist():
                    got = np.asarray(value).shape
                    if got != want:
                        report.add(where, f"{col}: expected shape {want}, found {got}")
                        break
        if len(report.problems) > file_before:  # the rows below are read by these columns
            continue
        names = [n for n in table.column_names if not n.startswith("stats/")]
        for row in table.select(names).to_pylist():
            expected_place = (row.get("meta/episodes/chunk_index"), row.get("meta/episodes/file_index"))
            if layout.episodes_file(report.root, *expected_place) != path:
                report.add(where, f"episode {row.get('episode_index')}: meta/episodes indices say {expected_place}")
            rows.append(row)
    if len(report.problems) > before:
        return None
    rows.sort(key=lambda r: r["episode_index"])
    where = layout.EPISODES_DIR
    indices = [r["episode_index"] for r in rows]
    if indices != list(range(info["total_episodes"])):
        report.add(where, f"episode_index: expected 0..{info['total_episodes'] - 1}, found {indices}")
    position = 0
    for r in rows:
        ep = f"episode {r['episode_index']}"
        if r["length"] < 1:
            report.add(where, f"{ep}: length {r['length']}, expected >= 1")
        if r["dataset_from_index"] != position or r["dataset_to_index"] != position + r["length"]:
            report.add(
                where,
                f"{ep}: frames [{r['dataset_from_index']}, {r['dataset_to_index']}), expected "
                f"[{position}, {position + r['length']}) (length {r['length']} after the episodes before it)",
            )
        position += r["length"]
        for task in r.get("tasks") or []:
            if tasks is not None and task not in tasks:
                report.add(where, f"{ep}: task {task!r} is not in {layout.TASKS_PATH}")
    if position != info["total_frames"]:
        report.add(where, f"episode lengths add up to {position}, info.json total_frames is {info['total_frames']}")
    return rows


def _check_column(report: CheckReport, where: str, table: Any, name: str, want: Any) -> None:
    """A metadata column of the kind LeRobot writes (any integer width for an integer, any float or
    integer for a float, a list of strings for a list of strings, else the type itself), no nulls."""
    types = tables.pa().types
    got = table.schema.field(name).type
    if types.is_integer(want):
        ok = types.is_integer(got)
    elif types.is_floating(want):
        ok = types.is_floating(got) or types.is_integer(got)
    elif types.is_list(want):
        ok = (types.is_list(got) or types.is_large_list(got)) and (
            types.is_string(got.value_type) or types.is_large_string(got.value_type)
        )
    elif types.is_string(want):
        ok = types.is_string(got) or types.is_large_string(got)
    else:
        ok = got == want
    if not ok:
        report.add(where, f"column {name!r}: expected {want}, found {got}")
    elif table.column(name).null_count:
        report.add(where, f"column {name!r}: {table.column(name).null_count} null values, expected none")


def _check_data(report: CheckReport, info: dict[str, Any], episodes: list[dict[str, Any]]) -> None:
    features = info["features"]
    fps = info["fps"]
    pq = tables.pa().parquet
    expected = tables.data_schema(features)
    by_file: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in episodes:
        by_file[(r["data/chunk_index"], r["data/file_index"])].append(r)
    seen = set()
    for (chunk, file), eps in sorted(by_file.items()):
        path = layout.data_file(report.root, chunk, file)
        where = str(path.relative_to(report.root))
        seen.add(path)
        if not path.exists():
            report.add(where, f"missing (episodes {[e['episode_index'] for e in eps]} live there)")
            continue
        table = pq.read_table(path)
        for f in expected:
            if f.name not in table.column_names:
                report.add(where, f"column {f.name!r} missing")
            elif not table.schema.field(f.name).type.equals(f.type):
                report.add(where, f"column {f.name!r}: expected {f.type}, found {table.schema.field(f.name).type}")
        extra = set(table.column_names) - set(expected.names)
        if extra:
            report.add(where, f"columns not in info.json features: {sorted(extra)}")
        if b"huggingface" not in (table.schema.metadata or {}):
            report.add(where, "no 'huggingface' schema metadata (the datasets feature description)")
        if any(p.startswith(where) for p in report.problems):
            continue
        index = table.column("index").to_numpy()
        for r in eps:
            ep = f"episode {r['episode_index']}"
            start = int(np.searchsorted(index, r["dataset_from_index"]))
            part = table.slice(start, r["length"])
            n = r["length"]
            if part.num_rows != n or not np.array_equal(
                part.column("index").to_numpy(), np.arange(r["dataset_from_index"], r["dataset_to_index"])
            ):
                report.add(
                    where, f"{ep}: rows with index {r['dataset_from_index']}..{r['dataset_to_index'] - 1} missing"
                )
                continue
            checks = {
                "episode_index": np.full(n, r["episode_index"]),
                "frame_index": np.arange(n),
            }
            for name, want in checks.items():
                got = part.column(name).to_numpy()
                if not np.array_equal(got, want):
                    report.add(where, f"{ep}: {name} expected {want[:5].tolist()}..., found {got[:5].tolist()}...")
            ts = part.column("timestamp").to_numpy().astype(np.float64)
            off = np.abs(ts - np.arange(n) / fps)
            if off.max(initial=0.0) > layout.TIMESTAMP_TOLERANCE_S:
                k = int(off.argmax())
                report.add(
                    where,
                    f"{ep}: timestamp of frame {k} is {ts[k]:.6f} s, expected frame_index / fps = {k / fps:.6f} s "
                    "(video frames are found by this time)",
                )
            task_index = part.column("task_index").to_numpy()
            if task_index.min(initial=0) < 0 or task_index.max(initial=0) >= info["total_tasks"]:
                report.add(where, f"{ep}: task_index outside 0..{info['total_tasks'] - 1}")
    for path in sorted((report.root / layout.DATA_DIR).glob("*/*.parquet")):
        if path not in seen:
            report.add(str(path.relative_to(report.root)), "no episode refers to this data file")


def _check_videos(report: CheckReport, info: dict[str, Any], episodes: list[dict[str, Any]]) -> None:
    fps = info["fps"]
    for key in report.cameras:
        ft = info["features"][key]
        by_file: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
        for r in episodes:
            chunk = r.get(f"videos/{key}/chunk_index")
            if chunk is None:
                report.add(layout.EPISODES_DIR, f"episode {r['episode_index']}: no videos/{key} columns")
                continue
            by_file[(chunk, r[f"videos/{key}/file_index"])].append(r)
        for (chunk, file), eps in sorted(by_file.items()):
            path = layout.video_file(report.root, key, chunk, file)
            where = str(path.relative_to(report.root))
            if not path.exists():
                report.add(where, f"missing (episodes {[e['episode_index'] for e in eps]} live there)")
                continue
            try:
                from runtime.recording.video import video_info

                vinfo = video_info(path)
                times = np.array(frame_times(path))
            except Exception as e:
                report.add(where, f"not a readable video ({e})")
                continue
            height, width = int(ft["shape"][0]), int(ft["shape"][1])
            if (vinfo["video.height"], vinfo["video.width"]) != (height, width):
                report.add(
                    where,
                    f"frame size {vinfo['video.height']}x{vinfo['video.width']}, features say {height}x{width}",
                )
            for r in eps:
                ep = f"episode {r['episode_index']}"
                start = float(r[f"videos/{key}/from_timestamp"])
                end = float(r[f"videos/{key}/to_timestamp"])
                if abs((end - start) - r["length"] / fps) > layout.TIMESTAMP_TOLERANCE_S + 1 / fps:
                    report.add(where, f"{ep}: video span {start:.4f}..{end:.4f} s does not hold {r['length']} frames")
                want = start + np.arange(r["length"]) / fps
                if len(times) == 0:
                    report.add(where, "no frames")
                    break
                nearest = np.abs(times[np.clip(np.searchsorted(times, want), 0, len(times) - 1)] - want)
                before = np.abs(times[np.clip(np.searchsorted(times, want) - 1, 0, len(times) - 1)] - want)
                miss = np.minimum(nearest, before) > layout.TIMESTAMP_TOLERANCE_S
                if miss.any():
                    k = int(np.flatnonzero(miss)[0])
                    report.add(
                        where,
                        f"{ep}: no frame at {want[k]:.4f} s (frame {k}); {int(miss.sum())} of {r['length']} "
                        "frames missing",
                    )


def _check_stats(report: CheckReport, info: dict[str, Any]) -> None:
    where = layout.STATS_PATH
    path = report.root / where
    if not path.exists():
        if info["total_episodes"]:
            report.add(where, "missing")
        return
    try:
        with open(path, encoding="utf-8") as f:
            stats = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        report.add(where, f"not readable JSON ({e})")
        return
    if not isinstance(stats, dict):
        report.add(where, f"expected a JSON object, found {type(stats).__name__}")
        return
    for key, ft in tables.stats_features(info["features"]).items():
        if key not in stats:
            report.add(where, f"{key}: no statistics")
            continue
        if not isinstance(stats[key], dict):
            report.add(where, f"{key}: expected a table of statistics, found {stats[key]!r:.60}")
            continue
        count = None
        for stat in layout.STAT_KEYS:
            if stat not in stats[key]:
                report.add(where, f"{key}.{stat}: missing")
                continue
            want = (1,) if stat == "count" else _stat_shape(ft)
            try:
                value = np.asarray(stats[key][stat], dtype=np.float64)
            except (TypeError, ValueError):
                report.add(where, f"{key}.{stat}: expected numbers of shape {want}, found {stats[key][stat]!r:.60}")
                continue
            if value.shape != want:
                report.add(where, f"{key}.{stat}: expected shape {want}, found {value.shape}")
            elif stat == "count":
                count = stats[key][stat][0]
        if ft["dtype"] != "video" and count is not None and count != info["total_frames"]:
            report.add(where, f"{key}.count: {count}, info.json total_frames is {info['total_frames']}")
