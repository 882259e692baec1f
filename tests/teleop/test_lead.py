"""The station's lead from the trips it measured: the configured lead until enough are, then p99 of the
leader read plus half the p99 round trip plus the margin and a margin per miss in the window, at most
half a period and never below the margin; a fixed lead keeps the configured one."""

from __future__ import annotations

import math

import pytest

from runtime.teleop.config import LEAD_MS
from runtime.teleop.lead import MARGIN_MS, MIN_SAMPLES, MISS_MS, WINDOW, Lead

PERIOD = 1 / 30  # half: 16.67 ms


def fed(lead: Lead, n: int, read_ms: float = 2.0, rtt_ms: float = 3.0, missed: int = 0) -> Lead:
    for _ in range(n):
        lead.add(read_ms, rtt_ms, missed)
    return lead


def test_the_numbers_the_lead_is_made_of() -> None:
    assert (WINDOW, MIN_SAMPLES, MARGIN_MS, MISS_MS) == (100, 20, 1.0, 1.0)
    assert LEAD_MS == 8.0


def test_a_new_lead_is_the_configured_one() -> None:
    lead = Lead()
    assert (lead.configured_ms, lead.fixed, lead.samples, lead.measured, lead.misses) == (8.0, False, 0, False, 0)
    assert lead.ms(PERIOD) == 8.0
    assert Lead(12.5).ms(PERIOD) == 12.5


def test_until_enough_trips_are_measured_the_configured_lead_is_used() -> None:
    lead = fed(Lead(8.0), MIN_SAMPLES - 1)
    assert lead.samples == MIN_SAMPLES - 1 and not lead.measured and lead.ms(PERIOD) == 8.0
    lead.add(2.0, 3.0)
    assert lead.measured and lead.ms(PERIOD) == 2.0 + 3.0 / 2 + MARGIN_MS  # 4.5 ms


def test_the_lead_is_the_p99_read_plus_half_the_p99_round_trip_plus_the_margin() -> None:
    lead = Lead()
    for i in range(WINDOW):  # reads 0.1 .. 10 ms, round trips 0.2 .. 20 ms, in opposite orders
        lead.add((i + 1) / 10, (WINDOW - i) / 5)
    p99_read, p99_rtt = 9.901, 19.802  # numpy's interpolated p99 of 100 samples
    assert lead.ms(1.0) == pytest.approx(p99_read + p99_rtt / 2 + MARGIN_MS, abs=1e-9)


def test_only_the_newest_window_of_trips_counts() -> None:
    lead = fed(Lead(), WINDOW, read_ms=9.0, rtt_ms=10.0)
    assert lead.ms(1.0) == 9.0 + 5.0 + 1.0
    fed(lead, WINDOW - 1, read_ms=1.0, rtt_ms=1.0)
    assert lead.ms(1.0) == pytest.approx(1.0 + 0.5 + 1.0 + 0.01 * (8.0 + 4.5))  # one slow trip left: p99 leans on it
    lead.add(1.0, 1.0)
    assert lead.samples == WINDOW and lead.ms(1.0) == 1.0 + 0.5 + 1.0


def test_the_lead_is_at_most_half_a_period() -> None:
    lead = fed(Lead(), MIN_SAMPLES, read_ms=12.0, rtt_ms=20.0)  # 12 + 10 + 1 = 23 ms
    assert lead.ms(PERIOD) == pytest.approx(PERIOD * 1e3 / 2)
    assert lead.ms(0.1) == 23.0  # at 10 Hz there is room for it


def test_the_margin_is_the_floor_of_the_measured_lead() -> None:
    lead = fed(Lead(8.0), MIN_SAMPLES, read_ms=0.0, rtt_ms=0.0)
    assert lead.ms(PERIOD) == MARGIN_MS == 1.0


def test_each_miss_in_the_window_widens_the_lead_until_it_leaves_the_window() -> None:
    lead = fed(Lead(), MIN_SAMPLES)  # 4.5 ms
    lead.add(2.0, 3.0, missed=1)
    lead.add(2.0, 3.0, missed=2)  # a reply may show more than one (the daemon's, since the last)
    assert lead.misses == 3 and lead.ms(PERIOD) == 4.5 + 3 * MISS_MS
    fed(lead, WINDOW - 1)  # the first has left the window; the second is its oldest
    assert lead.ms(PERIOD) == 4.5 + 2 * MISS_MS
    lead.add(2.0, 3.0)
    assert lead.ms(PERIOD) == 4.5 and lead.misses == 3  # narrowed again; the count stays


def test_misses_widen_up_to_half_a_period() -> None:
    lead = fed(Lead(), MIN_SAMPLES, missed=1)  # 4.5 + 20 ms
    assert lead.ms(PERIOD) == pytest.approx(PERIOD * 1e3 / 2)


def test_misses_before_enough_samples_count_once_they_are() -> None:
    lead = Lead()
    lead.add(2.0, 3.0, missed=1)
    assert lead.ms(PERIOD) == 8.0 and lead.misses == 1
    fed(lead, MIN_SAMPLES - 1)
    assert lead.ms(PERIOD) == 4.5 + MISS_MS


def test_a_fixed_lead_keeps_the_configured_one_and_still_counts_misses() -> None:
    lead = fed(Lead(6.0, fixed=True), WINDOW, read_ms=0.5, rtt_ms=0.5, missed=1)
    assert not lead.measured and lead.ms(PERIOD) == 6.0 and lead.misses == WINDOW
    assert Lead(30.0, fixed=True).ms(PERIOD) == 30.0  # the operator's, past half a period too


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_a_configured_lead_must_be_a_finite_number_of_ms(bad: float) -> None:
    with pytest.raises(ValueError, match=rf"lead: expected a finite number of ms >= 0, got {bad!r}"):
        Lead(bad)
