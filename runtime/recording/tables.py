"""The parquet tables of a dataset, built with pyarrow in the exact types LeRobot 0.4.x writes.

LeRobot writes frames through Hugging Face ``datasets``: a vector column is a fixed-size list of
float32, each file carries the ``datasets`` feature description under the ``huggingface`` schema
metadata key, and ``meta/tasks.parquet`` is a pandas frame indexed by the task text (its pandas
metadata tells ``pandas.read_parquet`` to restore that index). Every file is written to a
temporary name and renamed over the old one, so a crash leaves the previous whole file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from runtime.errors import MissingDependencyError
from runtime.recording.layout import STAT_KEYS
from runtime.recording.stats import Stats


def pa() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as e:
        raise MissingDependencyError("recording needs pyarrow: pip install 'lerobot-runtime[record]'") from e
    return pyarrow


_ARROW_SCALARS = {"float32": "float32", "float64": "float64", "int64": "int64", "bool": "bool_", "string": "string"}
#: the dtypes of a feature stored in the data files (a "video" feature is stored in its own files)
SCALAR_DTYPES = tuple(_ARROW_SCALARS)


def _arrow_type(ft: Mapping[str, Any]) -> Any:
    arrow = pa()
    scalar = getattr(arrow, _ARROW_SCALARS[ft["dtype"]])()
    shape = list(ft["shape"])
    if shape == [1]:
        return scalar
    return arrow.list_(scalar, shape[0])


def _hf_feature(ft: Mapping[str, Any]) -> dict[str, Any]:
    value = {"dtype": ft["dtype"], "_type": "Value"}
    if list(ft["shape"]) == [1]:
        return value
    return {"feature": value, "length": int(ft["shape"][0]), "_type": "List"}


def frame_columns(features: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The data file's columns: every feature but the video ones, in feature order."""
    return [k for k, ft in features.items() if ft["dtype"] != "video"]


def data_schema(features: Mapping[str, Mapping[str, Any]]) -> Any:
    arrow = pa()
    columns = frame_columns(features)
    hf = {"info": {"features": {k: _hf_feature(features[k]) for k in columns}}}
    return arrow.schema(
        [arrow.field(k, _arrow_type(features[k])) for k in columns],
        metadata={"huggingface": json.dumps(hf)},
    )


def data_table(features: Mapping[str, Mapping[str, Any]], columns: Mapping[str, npt.NDArray[Any] | list[Any]]) -> Any:
    """One episode's frames as a table; vectors are (frames, dims) arrays."""
    arrow = pa()
    schema = data_schema(features)
    arrays = []
    for field in schema:
        values = columns[field.name]
        if isinstance(field.type, arrow.FixedSizeListType):
            flat = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
            arrays.append(
                arrow.FixedSizeListArray.from_arrays(arrow.array(flat, arrow.float32()), field.type.list_size)
            )
        else:
            arrays.append(arrow.array(values, type=field.type))
    return arrow.Table.from_arrays(arrays, schema=schema)


def _stat_type(dtype: str, stat: str, ndim: int) -> Any:
    arrow = pa()
    if stat == "count":
        return arrow.list_(arrow.int64())
    if stat in ("min", "max") and dtype == "int64":
        leaf = arrow.int64()
    elif stat in ("min", "max") and dtype == "bool":
        leaf = arrow.bool_()
    else:
        leaf = arrow.float64()
    t = arrow.list_(leaf)
    for _ in range(ndim - 1):
        t = arrow.list_(t)
    return t


def episodes_schema(features: Mapping[str, Mapping[str, Any]]) -> Any:
    """``meta/episodes`` columns in LeRobot's order: identity, data span, video spans, statistics,
    then where this row itself lives."""
    arrow = pa()
    fields = [
        arrow.field("episode_index", arrow.int64()),
        arrow.field("tasks", arrow.list_(arrow.string())),
        arrow.field("length", arrow.int64()),
        arrow.field("data/chunk_index", arrow.int64()),
        arrow.field("data/file_index", arrow.int64()),
        arrow.field("dataset_from_index", arrow.int64()),
        arrow.field("dataset_to_index", arrow.int64()),
    ]
    for key, ft in features.items():
        if ft["dtype"] == "video":
            fields += [
                arrow.field(f"videos/{key}/chunk_index", arrow.int64()),
                arrow.field(f"videos/{key}/file_index", arrow.int64()),
                arrow.field(f"videos/{key}/from_timestamp", arrow.float64()),
                arrow.field(f"videos/{key}/to_timestamp", arrow.float64()),
            ]
    for key, ft in stats_features(features).items():
        ndim = 3 if ft["dtype"] == "video" else 1
        fields += [arrow.field(f"stats/{key}/{s}", _stat_type(ft["dtype"], s, ndim)) for s in STAT_KEYS]
    fields += drop_fields(features)
    fields += [
        arrow.field("meta/episodes/chunk_index", arrow.int64()),
        arrow.field("meta/episodes/file_index", arrow.int64()),
    ]
    return arrow.schema(fields)


def stats_features(features: Mapping[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Features that have statistics (all but strings), cameras first as LeRobot orders them."""
    videos = {k: ft for k, ft in features.items() if ft["dtype"] == "video"}
    rest = {k: ft for k, ft in features.items() if ft["dtype"] not in ("video", "string")}
    return {**videos, **rest}


DROPS_PREFIX = "recording/"  # this recorder's own episode columns; LeRobot reads past them


def drop_fields(features: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """Episode columns counting the ticks left out because a camera's encoder was behind."""
    arrow = pa()
    fields = [
        arrow.field(f"{DROPS_PREFIX}frames_dropped", arrow.int64()),
        arrow.field(f"{DROPS_PREFIX}drop_rate", arrow.float64()),
        arrow.field(f"{DROPS_PREFIX}drops_over_limit", arrow.bool_()),
    ]
    for key, ft in features.items():
        if ft["dtype"] == "video":
            fields.append(arrow.field(f"{DROPS_PREFIX}{key}/frames_dropped", arrow.int64()))
    return fields


def drop_columns(image_keys: Sequence[str], drops: Any) -> dict[str, Any]:
    """The drop columns' values for one episode (``drops``: an ``EpisodeDrops``, None: none counted)."""
    row: dict[str, Any] = {
        f"{DROPS_PREFIX}frames_dropped": drops.ticks if drops else 0,
        f"{DROPS_PREFIX}drop_rate": drops.rate if drops else 0.0,
        f"{DROPS_PREFIX}drops_over_limit": drops.over_limit if drops else False,
    }
    for key in image_keys:
        row[f"{DROPS_PREFIX}{key}/frames_dropped"] = drops.per_camera.get(key, 0) if drops else 0
    return row


def episode_row(meta: Mapping[str, Any], stats: Mapping[str, Stats]) -> dict[str, Any]:
    row = dict(meta)
    for key, s in stats.items():
        for name in STAT_KEYS:
            row[f"stats/{key}/{name}"] = np.asarray(s[name]).tolist()
    return row


def episodes_table(features: Mapping[str, Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]) -> Any:
    arrow = pa()
    schema = episodes_schema(features)
    return arrow.Table.from_pylist([dict(r) for r in rows], schema=schema)


def tasks_table(tasks: Sequence[str]) -> Any:
    """``meta/tasks.parquet``: column ``task_index``, indexed by the task text (pandas metadata)."""
    arrow = pa()
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": arrow.__version__},
    }
    schema = arrow.schema(
        [arrow.field("task_index", arrow.int64()), arrow.field("__index_level_0__", arrow.string())],
        metadata={"pandas": json.dumps(pandas_meta)},
    )
    return arrow.Table.from_arrays(
        [arrow.array(range(len(tasks)), arrow.int64()), arrow.array(list(tasks), arrow.string())], schema=schema
    )


def read_tasks(path: Path) -> list[str]:
    """Task texts in task_index order."""
    table = pa().parquet.read_table(path)
    by_index = dict(
        zip(table.column("task_index").to_pylist(), table.column("__index_level_0__").to_pylist(), strict=True)
    )
    return [by_index[i] for i in range(len(by_index))]


def write_table(table: Any, path: Path) -> None:
    """Write with LeRobot's settings (snappy, dictionary encoding), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pa().parquet.write_table(table, tmp, compression="snappy", use_dictionary=True)
    os.replace(tmp, path)


def write_json(data: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=4, ensure_ascii=False)
    os.replace(tmp, path)
