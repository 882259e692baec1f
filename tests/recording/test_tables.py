"""The parquet tables in the types LeRobot 0.4.x writes: each column's arrow type, the ``datasets``
feature description, ``meta/episodes`` columns in order, the tasks' pandas index, and every file
written whole under its name (a crash leaves the previous file)."""

from __future__ import annotations

import builtins
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runtime.errors import MissingDependencyError
from runtime.recording import tables

FEATURES: dict[str, dict[str, Any]] = {
    "observation.images.front": {"dtype": "video", "shape": [4, 6, 3], "names": ["height", "width", "channels"]},
    "observation.state": {"dtype": "float32", "shape": [2], "names": ["a", "b"]},
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "next.done": {"dtype": "bool", "shape": [1], "names": None},
    "note": {"dtype": "string", "shape": [1], "names": None},
    "observation.images.wrist": {"dtype": "video", "shape": [4, 6, 3], "names": ["height", "width", "channels"]},
    "score": {"dtype": "float64", "shape": [1], "names": None},
}
SCALARS = ["observation.state", "timestamp", "frame_index", "next.done", "note", "score"]
QUANTILES = ["q01", "q10", "q50", "q90", "q99"]


def test_the_data_columns_are_every_feature_but_the_videos_in_order() -> None:
    assert tables.frame_columns(FEATURES) == SCALARS
    assert tables.SCALAR_DTYPES == ("float32", "float64", "int64", "bool", "string")


def test_the_data_schema_in_lerobots_types_with_the_datasets_features() -> None:
    schema = tables.data_schema(FEATURES)
    assert schema.names == SCALARS
    assert [schema.field(k).type for k in SCALARS] == [
        pa.list_(pa.float32(), 2),
        pa.float32(),
        pa.int64(),
        pa.bool_(),
        pa.string(),
        pa.float64(),
    ]
    assert set(schema.metadata) == {b"huggingface"}
    assert json.loads(schema.metadata[b"huggingface"]) == {
        "info": {
            "features": {
                "observation.state": {"feature": {"dtype": "float32", "_type": "Value"}, "length": 2, "_type": "List"},
                "timestamp": {"dtype": "float32", "_type": "Value"},
                "frame_index": {"dtype": "int64", "_type": "Value"},
                "next.done": {"dtype": "bool", "_type": "Value"},
                "note": {"dtype": "string", "_type": "Value"},
                "score": {"dtype": "float64", "_type": "Value"},
            }
        }
    }


def test_a_vector_of_one_is_a_scalar_and_a_longer_one_a_fixed_size_list() -> None:
    schema = tables.data_schema(
        {
            "one": {"dtype": "float32", "shape": (1,), "names": None},
            "three": {"dtype": "float32", "shape": (3,), "names": None},
        }
    )
    assert schema.field("one").type == pa.float32()
    assert schema.field("three").type == pa.list_(pa.float32(), 3)
    hf = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    assert hf["one"] == {"dtype": "float32", "_type": "Value"}
    assert hf["three"] == {"feature": {"dtype": "float32", "_type": "Value"}, "length": 3, "_type": "List"}


def test_an_episodes_frames_as_a_table() -> None:
    columns = {
        "observation.state": np.array([[1.5, -2.0], [3.25, 4.0], [5.0, 6.5]], dtype=np.float64),
        "timestamp": np.array([0.0, 0.5, 1.0], dtype=np.float32),
        "frame_index": np.array([0, 1, 2]),
        "next.done": [False, False, True],
        "note": ["a", "b", "c"],
        "score": [0.25, 0.5, 0.75],
    }
    table = tables.data_table(FEATURES, columns)
    assert table.schema == tables.data_schema(FEATURES)
    assert table.schema.metadata == tables.data_schema(FEATURES).metadata
    assert table.num_rows == 3
    assert table.column("observation.state").to_pylist() == [[1.5, -2.0], [3.25, 4.0], [5.0, 6.5]]
    assert table.column("timestamp").to_pylist() == [0.0, 0.5, 1.0]
    assert table.column("frame_index").to_pylist() == [0, 1, 2]
    assert table.column("next.done").to_pylist() == [False, False, True]
    assert table.column("note").to_pylist() == ["a", "b", "c"]
    assert table.column("score").to_pylist() == [0.25, 0.5, 0.75]


def test_a_vector_column_is_taken_from_a_non_contiguous_array_row_by_row() -> None:
    features = {"v": {"dtype": "float32", "shape": [2], "names": None}}
    wide = np.array([[1.0, 9.0, 2.0], [3.0, 9.0, 4.0]], dtype=np.float32)
    table = tables.data_table(features, {"v": wide[:, ::2]})
    assert table.column("v").to_pylist() == [[1.0, 2.0], [3.0, 4.0]]
    assert table.column("v").type == pa.list_(pa.float32(), 2)


def test_the_statistics_types() -> None:
    f64 = pa.list_(pa.float64())
    assert tables._stat_type("float32", "count", 1) == pa.list_(pa.int64())
    assert tables._stat_type("video", "count", 3) == pa.list_(pa.int64())
    assert tables._stat_type("int64", "min", 1) == pa.list_(pa.int64())
    assert tables._stat_type("int64", "max", 1) == pa.list_(pa.int64())
    assert tables._stat_type("int64", "mean", 1) == f64
    assert tables._stat_type("bool", "min", 1) == pa.list_(pa.bool_())
    assert tables._stat_type("bool", "max", 1) == pa.list_(pa.bool_())
    assert tables._stat_type("bool", "std", 1) == f64
    assert tables._stat_type("float32", "min", 1) == f64
    assert tables._stat_type("float32", "q50", 1) == f64
    assert tables._stat_type("video", "mean", 3) == pa.list_(pa.list_(f64))
    assert tables._stat_type("video", "max", 2) == pa.list_(f64)


def test_the_features_with_statistics_cameras_first_and_no_strings() -> None:
    got = tables.stats_features(FEATURES)
    assert list(got) == [
        "observation.images.front",
        "observation.images.wrist",
        "observation.state",
        "timestamp",
        "frame_index",
        "next.done",
        "score",
    ]
    assert got["observation.state"] is FEATURES["observation.state"]


def test_the_episodes_columns_in_lerobots_order() -> None:
    schema = tables.episodes_schema(FEATURES)
    i64, f64 = pa.int64(), pa.float64()
    expected: list[tuple[str, Any]] = [
        ("episode_index", i64),
        ("tasks", pa.list_(pa.string())),
        ("length", i64),
        ("data/chunk_index", i64),
        ("data/file_index", i64),
        ("dataset_from_index", i64),
        ("dataset_to_index", i64),
    ]
    for cam in ("observation.images.front", "observation.images.wrist"):
        expected += [
            (f"videos/{cam}/chunk_index", i64),
            (f"videos/{cam}/file_index", i64),
            (f"videos/{cam}/from_timestamp", f64),
            (f"videos/{cam}/to_timestamp", f64),
        ]
    image = pa.list_(pa.list_(pa.list_(f64)))
    for cam in ("observation.images.front", "observation.images.wrist"):
        expected += [(f"stats/{cam}/{s}", image) for s in ("min", "max", "mean", "std")]
        expected += [(f"stats/{cam}/count", pa.list_(i64))]
        expected += [(f"stats/{cam}/{q}", image) for q in QUANTILES]
    for key, minmax in (
        ("observation.state", f64),
        ("timestamp", f64),
        ("frame_index", i64),
        ("next.done", pa.bool_()),
        ("score", f64),
    ):
        expected += [(f"stats/{key}/min", pa.list_(minmax)), (f"stats/{key}/max", pa.list_(minmax))]
        expected += [(f"stats/{key}/mean", pa.list_(f64)), (f"stats/{key}/std", pa.list_(f64))]
        expected += [(f"stats/{key}/count", pa.list_(i64))]
        expected += [(f"stats/{key}/{q}", pa.list_(f64)) for q in QUANTILES]
    expected += [
        ("recording/frames_dropped", i64),
        ("recording/drop_rate", f64),
        ("recording/drops_over_limit", pa.bool_()),
        ("recording/observation.images.front/frames_dropped", i64),
        ("recording/observation.images.wrist/frames_dropped", i64),
        ("meta/episodes/chunk_index", i64),
        ("meta/episodes/file_index", i64),
    ]
    assert [(f.name, f.type) for f in schema] == expected
    assert schema.metadata is None


def test_the_drop_columns_of_an_episode() -> None:
    assert tables.DROPS_PREFIX == "recording/"
    drops = SimpleNamespace(ticks=3, rate=0.25, over_limit=True, per_camera={"observation.images.front": 2})
    cams = ["observation.images.front", "observation.images.wrist"]
    assert tables.drop_columns(cams, drops) == {
        "recording/frames_dropped": 3,
        "recording/drop_rate": 0.25,
        "recording/drops_over_limit": True,
        "recording/observation.images.front/frames_dropped": 2,
        "recording/observation.images.wrist/frames_dropped": 0,
    }
    none = tables.drop_columns(cams, None)
    assert none == {
        "recording/frames_dropped": 0,
        "recording/drop_rate": 0.0,
        "recording/drops_over_limit": False,
        "recording/observation.images.front/frames_dropped": 0,
        "recording/observation.images.wrist/frames_dropped": 0,
    }
    assert type(none["recording/drop_rate"]) is float and none["recording/drops_over_limit"] is False


def stats(values: list[float]) -> dict[str, np.ndarray]:
    out = {k: np.array(values) for k in ("min", "max", "mean", "std", *QUANTILES)}
    out["count"] = np.array([len(values)])
    return out


def test_an_episode_row_and_its_table_read_back() -> None:
    features = {
        "observation.images.front": {"dtype": "video", "shape": [4, 6, 3], "names": None},
        "observation.state": {"dtype": "float32", "shape": [2], "names": ["a", "b"]},
        "note": {"dtype": "string", "shape": [1], "names": None},
    }
    meta = {
        "episode_index": 4,
        "tasks": ["pick"],
        "length": 3,
        "data/chunk_index": 0,
        "data/file_index": 1,
        "dataset_from_index": 10,
        "dataset_to_index": 13,
        "videos/observation.images.front/chunk_index": 0,
        "videos/observation.images.front/file_index": 2,
        "videos/observation.images.front/from_timestamp": 1.5,
        "videos/observation.images.front/to_timestamp": 1.6,
        "meta/episodes/chunk_index": 0,
        "meta/episodes/file_index": 0,
        **tables.drop_columns(["observation.images.front"], None),
    }
    image = {k: np.full((3, 1, 1), 0.5) for k in ("min", "max", "mean", "std", *QUANTILES)}
    image["count"] = np.array([3])
    row = tables.episode_row(meta, {"observation.images.front": image, "observation.state": stats([1.0, 2.0])})
    assert meta["episode_index"] == 4 and "stats/observation.state/min" not in meta  # the meta is not changed
    assert row["stats/observation.state/min"] == [1.0, 2.0]
    assert row["stats/observation.state/count"] == [2]
    assert row["stats/observation.images.front/mean"] == [[[0.5]], [[0.5]], [[0.5]]]
    assert type(row["stats/observation.state/q99"]) is list
    assert row["episode_index"] == 4
    table = tables.episodes_table(features, [row])
    assert table.schema == tables.episodes_schema(features)
    back = table.to_pylist()[0]
    assert back == {**row, "stats/observation.state/count": [2]}
    assert back["videos/observation.images.front/to_timestamp"] == 1.6


def test_the_tasks_table_is_a_pandas_frame_indexed_by_the_task(tmp_path: Path) -> None:
    path = tmp_path / "meta" / "tasks.parquet"
    tables.write_table(tables.tasks_table(["pick the cube", "place it", "é"]), path)
    frame = pd.read_parquet(path)
    assert list(frame.index) == ["pick the cube", "place it", "é"]
    assert frame.index.name is None
    assert list(frame.columns) == ["task_index"]
    assert list(frame["task_index"]) == [0, 1, 2]
    assert frame["task_index"].dtype == np.int64
    assert tables.read_tasks(path) == ["pick the cube", "place it", "é"]


def test_the_tasks_tables_pandas_metadata_whole() -> None:
    table = tables.tasks_table(["a", "b"])
    assert table.schema.names == ["task_index", "__index_level_0__"]
    assert [f.type for f in table.schema] == [pa.int64(), pa.string()]
    assert set(table.schema.metadata) == {b"pandas"}
    assert json.loads(table.schema.metadata[b"pandas"]) == {
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
        "creator": {"library": "pyarrow", "version": pa.__version__},
    }
    assert tables.tasks_table([]).num_rows == 0


def test_tasks_are_read_in_task_index_order(tmp_path: Path) -> None:
    path = tmp_path / "tasks.parquet"
    pq.write_table(
        pa.table({"task_index": pa.array([2, 0, 1], pa.int64()), "__index_level_0__": ["c", "a", "b"]}), path
    )
    assert tables.read_tasks(path) == ["a", "b", "c"]


def test_a_table_is_written_with_lerobots_settings_over_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "data" / "chunk-000" / "file-000.parquet"
    tables.write_table(pa.table({"x": ["same", "same", "same"]}), path)
    tables.write_table(pa.table({"x": ["new", "new", "new"]}), path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["file-000.parquet"]
    assert pq.read_table(path).column("x").to_pylist() == ["new", "new", "new"]
    column = pq.ParquetFile(path).metadata.row_group(0).column(0)
    assert column.compression == "SNAPPY"
    assert column.has_dictionary_page


def test_a_failed_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "file.parquet"
    tables.write_table(pa.table({"x": [1]}), path)
    monkeypatch.setattr(tables.os, "replace", lambda *_: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(OSError, match="disk gone"):
        tables.write_table(pa.table({"x": [2]}), path)
    assert pq.read_table(path).column("x").to_pylist() == [1]
    assert (tmp_path / "file.parquet.tmp").exists()  # written beside it, never over it
    with pytest.raises(OSError, match="disk gone"):
        tables.write_json({"x": 2}, tmp_path / "info.json")
    assert not (tmp_path / "info.json").exists()
    assert json.loads((tmp_path / "info.json.tmp").read_text()) == {"x": 2}


def test_json_is_written_indented_in_utf8_over_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "new" / "meta" / "info.json"  # folders made, more than one deep
    tables.write_json({"old": 1}, path)
    tables.write_json({"task": "é", "n": [1]}, path)
    assert path.read_bytes() == '{\n    "task": "é",\n    "n": [\n        1\n    ]\n}'.encode()
    assert sorted(p.name for p in path.parent.iterdir()) == ["info.json"]


def test_without_pyarrow_the_refusal_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_pyarrow(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("pyarrow"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(MissingDependencyError) as e:
        tables.pa()
    assert str(e.value) == "recording needs pyarrow: pip install 'lerobot-runtime[record]'"
    assert isinstance(e.value.__cause__, ImportError)


def test_pyarrow_with_its_parquet_module() -> None:
    assert tables.pa() is pa
    assert tables.pa().parquet is pq
    assert "pyarrow.parquet" in sys.modules
