"""``lerobot-runtime dataset check`` (the report, exit 1 on a problem) and ``bench record``'s options and
the lists it parses (codecs and camera counts, blanks left out)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import runtime.bench.record
import runtime.recording.check
from runtime.cli import main
from tests.commands.parsers import actions, defaults, options


def _report(**kw: Any) -> SimpleNamespace:
    return SimpleNamespace(**{"root": "/data/ds", "episodes": 3, "frames": 900, "cameras": [], "problems": [], **kw})


def test_the_options() -> None:
    assert actions("dataset") == {"check": "check every file of a dataset against the format"}
    assert options("dataset", "check") == [
        ("root", None, None, None, True, "DIR", "the dataset folder (holds meta/info.json)")
    ]
    assert options("bench", "record") == [
        ("--json", False, None, None, False, None, "print the result as JSON"),
        ("--cameras", "1,2", None, None, False, None, "camera counts to record, comma-separated (default 1,2)"),
        (
            "--codecs",
            "libsvtav1,libx264",
            None,
            None,
            False,
            None,
            "video encoders, comma-separated (default libsvtav1,libx264)",
        ),
        ("--height", 480, int, None, False, None, "frame height in pixels (default 480)"),
        ("--width", 640, int, None, False, None, "frame width in pixels (default 640)"),
        ("--fps", 30, int, None, False, None, "control rate in Hz (default 30)"),
        ("--seconds", 6.0, float, None, False, None, "recorded loop length per row (default 6)"),
    ]
    assert defaults("dataset", "check", "/d") == {"command": "dataset", "dataset_command": "check", "root": "/d"}


@pytest.mark.parametrize(
    ("cameras", "said"),
    [(["front", "wrist"], "front, wrist"), ([], "none")],
)
def test_a_good_dataset_is_one_line_and_exit_0(
    cameras: list[str], said: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    checked: list[str] = []
    monkeypatch.setattr(
        runtime.recording.check, "check_dataset", lambda root: checked.append(root) or _report(ok=True, cameras=cameras)
    )
    assert main(["dataset", "check", "/data/ds"]) == 0
    assert checked == ["/data/ds"]
    assert capsys.readouterr().out == f"/data/ds: OK, 3 episodes, 900 frames, cameras: {said}\n"


def test_each_problem_is_listed_and_exit_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    problems = ["meta/info.json: fps: expected an integer, got 'x'", "data/chunk-000/file-000.parquet: missing"]
    monkeypatch.setattr(runtime.recording.check, "check_dataset", lambda root: _report(ok=False, problems=problems))
    assert main(["dataset", "check", "/data/ds"]) == 1
    assert capsys.readouterr().out == (
        "/data/ds: 2 problems\n"
        "  meta/info.json: fps: expected an integer, got 'x'\n"
        "  data/chunk-000/file-000.parquet: missing\n"
    )


def test_bench_record_runs_each_codec_and_camera_count_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs: list[dict[str, Any]] = []
    monkeypatch.setattr(runtime.bench.record, "run_bench", lambda **kw: runs.append(kw) or "result")
    monkeypatch.setattr(runtime.bench.record, "format_table", lambda result: f"table of {result}")
    monkeypatch.setattr(runtime.bench.record, "as_dict", lambda result: {"rows": [result]})
    assert main(["bench", "record"]) == 0
    argv = ["--codecs", " libx264 ,, h264_vaapi,", "--cameras", "2, 1,", "--height", "96", "--width", "128"]
    assert main(["bench", "record", *argv, "--fps", "10", "--seconds", "0.5", "--json"]) == 0
    assert runs == [
        {"codecs": ["libsvtav1", "libx264"], "cameras": [1, 2], "height": 480, "width": 640, "fps": 30, "seconds": 6.0},
        {"codecs": ["libx264", "h264_vaapi"], "cameras": [2, 1], "height": 96, "width": 128, "fps": 10, "seconds": 0.5},
    ]
    assert capsys.readouterr().out == 'table of result\n{\n  "rows": [\n    "result"\n  ]\n}\n'


def test_an_action_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["dataset"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "usage: lerobot-runtime dataset [-h] ACTION ...\n"
        "lerobot-runtime dataset: error: the following arguments are required: ACTION\n"
    )
