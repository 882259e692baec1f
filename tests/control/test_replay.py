"""``lerobot-runtime replay``'s summary of a flight recording, figure by figure and line by line, on
recordings written by the recorder or by hand (an older one without write times)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from runtime.control.recorder import MODES, FlightRecorder
from runtime.control.replay import format_summary, mode_changes, summarize

NAN = float("nan")


def test_mode_changes_are_the_first_row_and_every_change_from_the_start() -> None:
    t = np.array([10.0, 10.5, 11.0, 11.5, 12.0])
    assert mode_changes(t, np.array([1, 1, 2, 2, 1]), list(MODES)) == [
        (0.0, "running"),
        (1.0, "holding"),
        (2.0, "running"),
    ]
    assert mode_changes(t[:1], np.array([4]), list(MODES)) == [(0.0, "estopped")]
    assert mode_changes(np.array([]), np.array([], dtype=np.int8), list(MODES)) == []


def recording(tmp_path: Path) -> Path:
    """Four ticks of two joints at 4 Hz, numbers worked by hand."""
    rec = FlightRecorder(("pan", "lift"), 4.0, 1.0)
    rows = [
        # present, goal, clamps, latency, late_ms, write_err_ms
        ([0.0, 5.0], [1.0, 5.0], [0, 0], NAN, -2.0, NAN),
        ([1.0, 5.0], [4.0, 5.5], [3, 0], 2.0, 1.0, 1.0),  # pan: limit and step
        ([2.0, 6.0], [2.5, NAN], [2, 8], 3.0, 0.5, -7.0),  # lift: nothing written
        ([3.0, 4.0], [3.0, 4.0], [0, 0], NAN, 4.0, 2.0),
    ]
    for k, (present, goal, clamps, lat, late, err) in enumerate(rows):
        rec.record(
            10.0 + k * 0.25,
            k,
            1 if k < 2 else 2,
            np.array(present),
            np.array(goal),
            None,
            np.array(clamps, np.int8),
            3,
            lat,
            late,
            1.0,
            err,
        )
    return rec.dump(tmp_path, "asked by ana")


def test_the_summary_of_a_recording(tmp_path: Path) -> None:
    path = recording(tmp_path)
    s = summarize(path)
    assert s == {
        "file": str(path),
        "reason": "asked by ana",
        "rate_hz": 4.0,
        "ticks": 4,
        "seconds": 0.75,
        "modes": [{"at_s": 0.0, "mode": "running"}, {"at_s": 0.5, "mode": "holding"}],
        "jitter_ms": {"p50": 1.5, "p99": pytest.approx(2.0 + 0.97 * 2.0), "max": 4.0},
        "write_period_error_ms": {
            "p50": 2.0,
            "p99": pytest.approx(2.0 + 0.98 * 5.0),
            "max": 7.0,
            "periods": 3,
            "off_5ms": 1,
        },
        "ticks_with_goal": 3,
        "inference_latency_ticks_max": 3.0,
        "joints": {
            "pan": {"interventions": {"limit": 1, "step": 2}, "max_goal_minus_present": 3.0, "range": [0.0, 3.0]},
            "lift": {"interventions": {"nonfinite": 1}, "max_goal_minus_present": 0.5, "range": [4.0, 6.0]},
        },
    }


def test_the_summary_in_words(tmp_path: Path) -> None:
    path = recording(tmp_path)
    assert format_summary(summarize(path)) == "\n".join(
        [
            f"{path}: 4 ticks over 0.75 s at 4.0 Hz",
            "written because: asked by ana",
            "modes: running at 0.00 s, holding at 0.50 s",
            "tick lateness ms: p50 1.500, p99 3.940, max 4.000",
            "write period error ms: p50 2.000, p99 6.900, max 7.000 (3 periods, 1 more than 5 ms off)",
            "ticks that wrote a goal: 3; inference latency max 3.0 ticks",
            "  pan            present       0.0..3.0   safety interventions: limit 1, step 2",
            "  lift           present       4.0..6.0   safety interventions: nonfinite 1",
        ]
    )


def test_one_tick_lasts_no_time(tmp_path: Path) -> None:
    rec = FlightRecorder(("pan",), 4.0, 1.0)
    rec.record(10.0, 0, 0, np.array([1.0]), None, None, None, 0, NAN, 0.5)
    s = summarize(rec.dump(tmp_path, "one"))
    assert (s["ticks"], s["seconds"], s["ticks_with_goal"]) == (1, 0.0, 0)
    assert s["joints"]["pan"] == {"interventions": {}, "max_goal_minus_present": None, "range": [1.0, 1.0]}
    assert s["inference_latency_ticks_max"] is None
    assert s["jitter_ms"] == {"p50": 0.5, "p99": 0.5, "max": 0.5}
    assert s["write_period_error_ms"] == {"p50": None, "p99": None, "max": None, "periods": 0, "off_5ms": 0}


def test_an_empty_recording_is_summarised_with_nothing_measured(tmp_path: Path) -> None:
    s = summarize(FlightRecorder(("pan",), 4.0, 1.0).dump(tmp_path, "empty"))
    assert (s["ticks"], s["seconds"], s["modes"], s["ticks_with_goal"]) == (0, 0.0, [], 0)
    assert s["jitter_ms"] == {"p50": None, "p99": None, "max": None}
    assert s["joints"]["pan"] == {"interventions": {}, "max_goal_minus_present": None, "range": None}
    text = format_summary(s)
    assert "tick lateness ms: p50 -, p99 -, max -\n" in text
    assert "write period error ms: p50 -, p99 -, max - (0 periods, 0 more than 5 ms off)\n" in text
    assert text.endswith("\n  pan            present              -   safety interventions: none")


def test_an_older_recording_without_write_times_or_reason(tmp_path: Path) -> None:
    path = tmp_path / "old.npz"
    meta = {"joints": ["pan"], "modes": ["idle", "running"]}
    np.savez_compressed(
        path,
        meta=np.array(json.dumps(meta)),
        t=np.array([0.0, 0.5]),
        tick=np.array([0, 1]),
        mode=np.array([0, 1], np.int8),
        present=np.array([[1.0], [2.0]]),
        goal=np.array([[1.0], [2.0]]),
        requested=np.array([[1.0], [2.0]]),
        clamps=np.zeros((2, 1), np.int8),
        queue_depth=np.zeros(2, np.int32),
        latency_ticks=np.array([NAN, NAN]),
        late_ms=np.array([1.0, 3.0]),
    )
    s = summarize(path)
    assert s["reason"] == "" and s["rate_hz"] is None and s["write_period_error_ms"] is None
    assert s["modes"] == [{"at_s": 0.0, "mode": "idle"}, {"at_s": 0.5, "mode": "running"}]
    assert s["jitter_ms"] == {"p50": 2.0, "p99": pytest.approx(1.0 + 0.99 * 2.0), "max": 3.0}
    lines = format_summary(s).splitlines()
    assert lines[1] == "written because: "
    assert lines[4] == "write period error ms: not recorded"
    assert lines[5] == "ticks that wrote a goal: 2; inference latency max None ticks"


def test_two_ticks_last_the_time_between_them_and_mode_changes_keep_milliseconds(tmp_path: Path) -> None:
    rec = FlightRecorder(("pan",), 3.0, 1.0)
    rec.record(10.0, 0, 1, np.array([1.0]), None, None, None, 0, NAN, 0.0)
    rec.record(10.0 + 1 / 3, 1, 2, np.array([1.0]), None, None, None, 0, NAN, 0.0)
    s = summarize(rec.dump(tmp_path, "two"))
    assert s["ticks"] == 2
    assert s["seconds"] == pytest.approx(1 / 3)
    assert s["modes"] == [{"at_s": 0.0, "mode": "running"}, {"at_s": 0.333, "mode": "holding"}]
