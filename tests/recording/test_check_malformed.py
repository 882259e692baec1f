"""The format checker on malformed metadata: each problem reported by file and field, never a crash.

Before these checks, a feature without a shape, a statistics entry that is not a table, an episodes
column of strings or nulls, or a missing index column raised from inside the checker (IndexError,
TypeError, KeyError) instead of saying what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runtime.cli import main
from runtime.recording.check import check_dataset

EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def edit_json(path: Path, edit: Any) -> None:
    doc = json.loads(path.read_text())
    path.write_text(json.dumps(edit(doc)))


def edit_table(path: Path, column: str, values: pa.Array | None) -> None:
    """Replace a column's values (keeping its name), or drop it with ``values=None``."""
    table = pq.read_table(path)
    i = table.column_names.index(column)
    table = table.remove_column(i) if values is None else table.set_column(i, column, values)
    pq.write_table(table, path)


def test_an_info_file_that_is_not_a_json_object(dataset: Path) -> None:
    (dataset / "meta/info.json").write_text("[1, 2]")
    assert check_dataset(dataset).problems == ["meta/info.json: expected a JSON object, found list"]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (7, "expected a table with dtype and shape, found 7"),
        ({"dtype": "float32"}, "shape: expected a non-empty list of positive integers, found None"),
        ({"dtype": "float32", "shape": []}, "shape: expected a non-empty list of positive integers, found []"),
        ({"dtype": "float32", "shape": [6, 0]}, "shape: expected a non-empty list of positive integers, found [6, 0]"),
        ({"dtype": "float32", "shape": [True]}, "shape: expected a non-empty list of positive integers, found [True]"),
        (
            {"dtype": "float16", "shape": [6]},
            "dtype: expected one of ['video', 'float32', 'float64', 'int64', 'bool', 'string'], found 'float16'",
        ),
        (
            {"dtype": "video", "shape": [48, 64]},
            "shape: expected [height, width, channels] for a video, found [48, 64]",
        ),
    ],
)
def test_a_feature_without_a_dtype_or_shape_it_can_store_is_named(dataset: Path, entry: Any, problem: str) -> None:
    edit_json(dataset / "meta/info.json", lambda info: info["features"].update({"observation.state": entry}) or info)
    assert check_dataset(dataset).problems == [f"meta/info.json: features.observation.state: {problem}"]


def test_statistics_that_are_not_tables_of_numbers(dataset: Path) -> None:
    def edit(stats: dict[str, Any]) -> dict[str, Any]:
        stats["action"] = "x"
        stats["observation.state"]["min"] = [[1.0], 2.0]
        stats["observation.state"]["count"] = None
        return stats

    edit_json(dataset / "meta/stats.json", edit)
    assert check_dataset(dataset).problems == [
        "meta/stats.json: observation.state.min: expected numbers of shape (6,), found [[1.0], 2.0]",
        "meta/stats.json: observation.state.count: expected shape (1,), found ()",
        "meta/stats.json: action: expected a table of statistics, found 'x'",
    ]


def test_a_stats_file_that_is_not_json(dataset: Path) -> None:
    (dataset / "meta/stats.json").write_text("{")
    (problem,) = check_dataset(dataset).problems
    assert problem.startswith("meta/stats.json: not readable JSON (")
    (dataset / "meta/stats.json").write_text("3")
    assert check_dataset(dataset).problems == ["meta/stats.json: expected a JSON object, found int"]


@pytest.mark.parametrize(
    ("column", "values", "problem"),
    [
        ("length", pa.array(["x", "y"]), "column 'length': expected int64, found string"),
        ("episode_index", pa.nulls(2, pa.int64()), "column 'episode_index': 2 null values, expected none"),
        ("tasks", pa.array([1, 2]), "column 'tasks': expected list<item: string>, found int64"),
        (
            "videos/observation.images.front/from_timestamp",
            pa.array(["0", "0.1"]),
            "column 'videos/observation.images.front/from_timestamp': expected double, found string",
        ),
        ("meta/episodes/chunk_index", None, "column 'meta/episodes/chunk_index' missing"),
    ],
)
def test_an_episodes_column_of_the_wrong_kind_is_named(
    dataset: Path, column: str, values: pa.Array | None, problem: str
) -> None:
    edit_table(dataset / EPISODES, column, values)
    assert check_dataset(dataset).problems == [f"{EPISODES}: {problem}"]


def test_an_episodes_file_without_its_tasks_column_is_read(dataset: Path) -> None:
    # LeRobot's readers do not need it; the check goes on to the data and the videos
    edit_table(dataset / EPISODES, "tasks", None)
    assert check_dataset(dataset).problems == []


def test_task_indices_that_are_null(dataset: Path) -> None:
    edit_table(dataset / "meta/tasks.parquet", "task_index", pa.nulls(2, pa.int64()))
    assert check_dataset(dataset).problems == ["meta/tasks.parquet: column 'task_index': 2 null values, expected none"]


def test_the_command_reports_a_malformed_dataset_and_fails(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edit_json(dataset / "meta/info.json", lambda info: info["features"].update({"action": {"dtype": "x"}}) or info)
    assert main(["dataset", "check", str(dataset)]) == 1
    out = capsys.readouterr().out
    assert "meta/info.json: features.action: dtype: expected one of" in out
    assert "meta/info.json: features.action: shape: expected a non-empty list of positive integers, found None" in out
