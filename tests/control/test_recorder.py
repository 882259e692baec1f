"""The flight recorder: its ring's size and initial rows, each row field by field (a missing value
written as NaN or no clamp, over what the ring held before), the order rows come back in, the
newest lateness, and the dump's file name, metadata and arrays."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from runtime.control import recorder as recorder_module
from runtime.control.mode import Mode
from runtime.control.recorder import MODE_CODE, MODES, FlightRecorder, load_flight

NAN = float("nan")


def same(a: np.ndarray, b: list[object]) -> bool:
    return bool(np.array_equal(a, np.array(b, dtype=np.float64), equal_nan=True))


def test_mode_codes_are_the_mode_members_in_order() -> None:
    assert MODES == ("idle", "running", "holding", "resting", "estopped", "teleop")
    assert MODE_CODE == {
        Mode.IDLE: 0,
        Mode.RUNNING: 1,
        Mode.HOLDING: 2,
        Mode.RESTING: 3,
        Mode.ESTOPPED: 4,
        Mode.TELEOP: 5,
    }


@pytest.mark.parametrize(
    ("seconds", "rate_hz", "capacity"),
    [(1.0, 30.0, 30), (0.27, 10.0, 3), (0.24, 10.0, 2), (0.01, 30.0, 2), (0.0, 30.0, 2)],
)
def test_the_ring_holds_the_seconds_asked_rounded_and_at_least_two_rows(
    seconds: float, rate_hz: float, capacity: int
) -> None:
    rec = FlightRecorder(("a", "b"), rate_hz, seconds)
    assert rec.capacity == capacity
    assert rec.rate_hz == rate_hz and rec.joints == ("a", "b")


def test_a_new_recorder_holds_no_rows_and_nan_where_nothing_was_recorded() -> None:
    rec = FlightRecorder(["a", "b"], 10.0, 0.3)
    assert rec.rows == 0 and rec.joints == ("a", "b")
    assert rec.t.shape == (3,) and not rec.t.any() and not rec.tick.any() and not rec.mode.any()
    for name in ("present", "goal", "requested"):
        assert getattr(rec, name).shape == (3, 2) and np.isnan(getattr(rec, name)).all()
    assert rec.clamps.shape == (3, 2) and not rec.clamps.any()
    assert not rec.queue_depth.any() and not rec.late_ms.any()
    for name in ("latency_ticks", "write_ms", "write_err_ms"):
        assert getattr(rec, name).shape == (3,) and np.isnan(getattr(rec, name)).all()
    snap = rec.snapshot()
    assert all(len(v) == 0 for v in snap.values())
    assert snap["present"].shape == (0, 2)
    assert len(rec.recent_late_ms(5)) == 0


def test_a_row_is_recorded_field_by_field() -> None:
    rec = FlightRecorder(("a", "b"), 10.0, 1.0)
    rec.record(
        5.5,
        7,
        MODE_CODE[Mode.RUNNING],
        np.array([1.0, 2.0]),
        np.array([1.5, 2.5]),
        np.array([9.0, 2.5]),
        np.array([0, 3], np.int8),
        4,
        2.0,
        0.75,
        3.25,
        -1.5,
    )
    s = rec.snapshot()
    assert rec.rows == 1
    assert list(s) == [
        "t",
        "tick",
        "mode",
        "present",
        "goal",
        "requested",
        "clamps",
        "queue_depth",
        "latency_ticks",
        "late_ms",
        "write_ms",
        "write_err_ms",
    ]
    assert list(s["t"]) == [5.5] and list(s["tick"]) == [7] and list(s["mode"]) == [1]
    assert s["present"].tolist() == [[1.0, 2.0]]
    assert s["goal"].tolist() == [[1.5, 2.5]]
    assert s["requested"].tolist() == [[9.0, 2.5]]
    assert s["clamps"].tolist() == [[0, 3]]
    assert list(s["queue_depth"]) == [4] and list(s["latency_ticks"]) == [2.0] and list(s["late_ms"]) == [0.75]
    assert list(s["write_ms"]) == [3.25] and list(s["write_err_ms"]) == [-1.5]
    dtypes = {k: v.dtype for k, v in s.items()}
    assert dtypes["tick"] == np.int64 and dtypes["mode"] == np.int8 and dtypes["clamps"] == np.int8
    assert dtypes["queue_depth"] == np.int32 and dtypes["t"] == np.float64 and dtypes["present"] == np.float64


def test_a_row_without_write_times_has_nan_for_them() -> None:
    rec = FlightRecorder(("a",), 10.0, 1.0)
    rec.record(1.0, 1, 2, np.array([1.0]), None, None, None, 0, NAN, 0.0)
    s = rec.snapshot()
    assert np.isnan(s["write_ms"]).all() and np.isnan(s["write_err_ms"]).all()


def test_missing_values_overwrite_what_the_ring_held_with_nan_and_no_clamp() -> None:
    rec = FlightRecorder(("a", "b"), 10.0, 0.2)  # 2 rows
    full = (np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0]), np.array([1, 2], np.int8))
    rec.record(0.1, 1, 1, *full, 3, 1.0, 0.5, 2.0, 0.5)
    rec.record(0.2, 2, 1, *full, 3, 1.0, 0.5, 2.0, 0.5)
    rec.record(0.3, 3, 2, None, None, None, None, 0, NAN, 0.25)  # into the first row's slot
    s = rec.snapshot()
    assert list(s["tick"]) == [2, 3]
    assert same(s["present"], [[1.0, 2.0], [NAN, NAN]])
    assert same(s["goal"], [[3.0, 4.0], [NAN, NAN]])
    assert same(s["requested"], [[5.0, 6.0], [NAN, NAN]])
    assert s["clamps"].tolist() == [[1, 2], [0, 0]]
    assert same(s["write_ms"], [2.0, NAN]) and same(s["latency_ticks"], [1.0, NAN])


def test_rows_come_back_oldest_first_before_and_after_the_ring_wraps() -> None:
    rec = FlightRecorder(("a",), 10.0, 0.3)  # 3 rows
    for k in range(2):
        rec.record(k * 0.1, k, 0, None, None, None, None, k, NAN, float(k))
    assert list(rec.snapshot()["tick"]) == [0, 1] and rec.rows == 2
    for k in range(2, 7):
        rec.record(k * 0.1, k, 0, None, None, None, None, k, NAN, float(k))
    s = rec.snapshot()
    assert list(s["tick"]) == [4, 5, 6] and list(s["queue_depth"]) == [4, 5, 6] and rec.rows == 3
    s["tick"][0] = 99  # a copy
    assert list(rec.snapshot()["tick"]) == [4, 5, 6]


def test_recent_lateness_is_newest_first_and_at_most_what_was_recorded() -> None:
    rec = FlightRecorder(("a",), 10.0, 0.3)  # 3 rows
    for k in range(5):
        rec.record(0.0, k, 0, None, None, None, None, 0, NAN, float(k))
    assert list(rec.recent_late_ms(2)) == [4.0, 3.0]
    assert list(rec.recent_late_ms(10)) == [4.0, 3.0, 2.0]
    rec = FlightRecorder(("a",), 10.0, 0.3)
    rec.record(0.0, 0, 0, None, None, None, None, 0, NAN, 1.5)
    assert list(rec.recent_late_ms(3)) == [1.5]
    assert list(rec.recent_late_ms(0)) == []


@pytest.fixture
def epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dump's stamp at 2026-03-04 05:06:07 UTC."""
    at = time.gmtime(1772600767)
    assert time.strftime("%Y%m%dT%H%M%S", at) == "20260304T050607"
    monkeypatch.setattr(recorder_module.time, "gmtime", lambda *a: at)


@pytest.mark.parametrize(
    ("reason", "name"),
    [
        ("e-stop: Hand in the way!", "flight-20260304T050607-e-stop--hand-in-the-way.npz"),
        ("Servo 3 OVERLOAD", "flight-20260304T050607-servo-3-overload.npz"),
        ("  ", "flight-20260304T050607-request.npz"),
        ("", "flight-20260304T050607-request.npz"),
        ("x" * 39 + " tail", "flight-20260304T050607-" + "x" * 39 + ".npz"),
        ("a" * 50, "flight-20260304T050607-" + "a" * 40 + ".npz"),
    ],
)
def test_the_dump_is_named_after_its_time_and_reason(epoch: None, tmp_path: Path, reason: str, name: str) -> None:
    rec = FlightRecorder(("a",), 10.0, 1.0)
    path = rec.dump(tmp_path, reason)
    assert path == tmp_path / name
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file left


def test_a_second_dump_in_the_same_second_gets_a_number(epoch: None, tmp_path: Path) -> None:
    rec = FlightRecorder(("a",), 10.0, 1.0)
    names = [rec.dump(tmp_path / "new" / "dir", "stall").name for _ in range(3)]
    assert names == [
        "flight-20260304T050607-stall.npz",
        "flight-20260304T050607-stall-2.npz",
        "flight-20260304T050607-stall-3.npz",
    ]


def test_the_dump_holds_the_meta_and_every_row(tmp_path: Path) -> None:
    rec = FlightRecorder(("a", "b"), 25.0, 0.08)  # 2 rows
    for k in range(3):
        rec.record(k * 0.04, k, k, np.array([k, -k]), None, np.array([1.0, 1.0]), None, k, 1.0, 0.5, 2.0, NAN)
    before = time.monotonic()
    path = rec.dump(tmp_path, "asked", {"tick": 2, "reason": "overridden"})
    after = time.monotonic()
    meta, arrays = load_flight(path)
    written = meta.pop("written_at_monotonic")
    assert before <= written <= after
    assert meta == {
        "reason": "overridden",
        "joints": ["a", "b"],
        "rate_hz": 25.0,
        "modes": list(MODES),
        "tick": 2,
    }
    assert set(arrays) == set(rec.snapshot())
    assert list(arrays["tick"]) == [1, 2] and list(arrays["mode"]) == [1, 2]
    assert arrays["present"].tolist() == [[1.0, -1.0], [2.0, -2.0]]
    assert np.isnan(arrays["goal"]).all() and np.isnan(arrays["write_err_ms"]).all()
    assert arrays["tick"].dtype == np.int64 and arrays["clamps"].dtype == np.int8


def test_a_dump_without_extra_meta(tmp_path: Path) -> None:
    rec = FlightRecorder(("a",), 10.0, 1.0)
    meta, arrays = load_flight(str(rec.dump(tmp_path, "r")))
    assert sorted(meta) == ["joints", "modes", "rate_hz", "reason", "written_at_monotonic"]
    assert meta["reason"] == "r" and len(arrays["t"]) == 0


def test_a_pickled_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "flight.npz"
    np.savez(path, meta=np.array(json.dumps({"reason": "x"})), t=np.array([object()], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        load_flight(path)
