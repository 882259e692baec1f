"""The write clock on its own: each write's stamp and period error, the 5 ms bound, the ring, the
status figures; values worked by hand (tests/control/test_writetime.py compares the stamps with
what the simulated servos received)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from runtime.control.writetime import OFF_MS, WriteClock, summarize_errors


def test_the_capacity_must_hold_two_writes() -> None:
    with pytest.raises(ValueError) as err:
        WriteClock(0.02, 1)
    assert str(err.value) == "WriteClock capacity: expected at least 2 writes, got 1"
    assert WriteClock(0.02, 2).capacity == 2


def test_a_new_write_clock_has_measured_nothing() -> None:
    c = WriteClock(0.25, 3)
    assert (c.period, c.capacity, c.writes, c.periods, c.off, c.last_at) == (0.25, 3, 0, 0, 0, 0.0)
    assert math.isnan(c.last_error_ms)
    assert list(c.stamps) == [0.0, 0.0, 0.0]
    assert np.isnan(c.errors_ms).all() and len(c.errors_ms) == 3
    stamps, errors = c.recent()
    assert len(stamps) == 0 and len(errors) == 0


@pytest.mark.parametrize("tick", [0, 1, 3])
def test_the_first_write_measures_no_period_whichever_tick_it_is(tick: int) -> None:
    c = WriteClock(0.25, 4)
    assert math.isnan(c.stamp(tick, 0.25))
    assert (c.writes, c.periods, c.off, c.last_at) == (1, 0, 0, 0.25)
    assert math.isnan(c.last_error_ms)


def test_a_period_error_is_the_time_since_the_previous_ticks_write_minus_the_period() -> None:
    c = WriteClock(0.25, 4)
    c.stamp(7, 10.0)
    assert c.stamp(8, 10.25) == 0.0
    assert c.stamp(9, 10.5 + 0.00390625) == pytest.approx(3.90625)  # 2^-8 s late
    assert c.last_error_ms == pytest.approx(3.90625)
    assert c.stamp(10, 10.75) == pytest.approx(-3.90625)  # early, after a late one
    assert (c.writes, c.periods, c.off, c.last_at) == (4, 3, 0, 10.75)


def test_a_tick_without_a_write_breaks_the_chain() -> None:
    c = WriteClock(0.25, 4)
    c.stamp(1, 10.0)
    assert math.isnan(c.stamp(3, 10.5))
    assert math.isnan(c.last_error_ms)
    assert (c.writes, c.periods) == (2, 0)
    assert c.stamp(4, 10.75) == 0.0  # measured from tick 3's write
    assert c.periods == 1


def test_more_than_5_ms_off_either_way_is_counted_and_5_ms_is_not() -> None:
    assert OFF_MS == 5.0
    c = WriteClock(0.0, 8)  # a zero period: the error is the gap itself, exact in binary
    c.stamp(0, 0.0)
    assert c.stamp(1, 0.005) == 5.0
    assert c.off == 0
    c = WriteClock(0.0, 8)
    c.stamp(0, 0.0)
    assert c.stamp(1, -0.005) == -5.0
    assert c.off == 0
    c = WriteClock(0.25, 8)
    c.stamp(0, 10.0)
    c.stamp(1, 10.25 + 0.0078125)  # 7.8 ms late
    c.stamp(2, 10.5)  # 7.8 ms early
    c.stamp(3, 10.75 + 0.00390625)  # 3.9 ms: not counted
    assert (c.periods, c.off) == (3, 2)


def test_the_ring_keeps_the_newest_writes_oldest_first() -> None:
    c = WriteClock(0.25, 3)
    c.stamp(1, 1.0)
    stamps, errors = c.recent()
    assert list(stamps) == [1.0] and math.isnan(errors[0])
    c.stamp(2, 1.25)
    c.stamp(3, 1.5 + 0.0078125)
    c.stamp(4, 1.75)
    c.stamp(6, 2.25)
    stamps, errors = c.recent()
    assert list(stamps) == [1.5 + 0.0078125, 1.75, 2.25]
    assert errors[0] == pytest.approx(7.8125) and errors[1] == pytest.approx(-7.8125) and math.isnan(errors[2])
    assert c.writes == 5 and c.capacity == 3
    # copies: changing them changes nothing in the ring
    stamps[0] = -1.0
    errors[1] = -1.0
    again_stamps, again_errors = c.recent()
    assert again_stamps[0] == 1.5 + 0.0078125 and again_errors[1] == pytest.approx(-7.8125)


def test_stats_are_over_the_ring_and_the_counts_since_the_start() -> None:
    c = WriteClock(0.25, 3)
    c.stamp(1, 1.0)
    c.stamp(2, 1.25 + 0.0078125)  # +7.8125 ms: off, then pushed out of the ring
    c.stamp(3, 1.5 + 0.001953125)  # -5.859375 ms: off
    c.stamp(4, 1.75 + 0.00390625)  # +1.953125 ms
    c.stamp(5, 2.0)  # -3.90625 ms
    stats = c.stats()
    assert stats["p50"] == pytest.approx(3.90625)
    assert stats["p99"] == pytest.approx(3.90625 + 0.98 * (5.859375 - 3.90625))
    assert stats["max"] == pytest.approx(5.859375)
    assert (stats["periods"], stats["off_5ms"]) == (4, 2)  # since the start, not only the ring's


def test_summarize_errors_counts_the_finite_errors_when_not_told() -> None:
    errors = np.array([np.nan, -6.0, 1.0, 2.0, np.nan, 5.0, -3.0])
    s = summarize_errors(errors)
    assert s["p50"] == 3.0
    assert s["p99"] == pytest.approx(5.0 + 0.96 * 1.0)
    assert s["max"] == 6.0
    assert (s["periods"], s["off_5ms"]) == (5, 1)
    assert isinstance(s["off_5ms"], int) and isinstance(s["p50"], float)
    told = summarize_errors(errors, periods=40, off=9)
    assert (told["periods"], told["off_5ms"]) == (40, 9)
    assert told["max"] == 6.0


def test_summarize_errors_of_nothing_measured() -> None:
    assert summarize_errors(np.array([np.nan, np.nan])) == {
        "p50": None,
        "p99": None,
        "max": None,
        "periods": 0,
        "off_5ms": 0,
    }
