"""``bench teleop``'s figures from samples written here, each worked out by hand: the moves found in the
servo's goal log, the trip (leader read and half the round trip), the goal held to each lead's own
trips, the stations' reports joined per lead, and the lines a person reads."""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.bench.teleop import LEADS, ROUNDS, lead_summary, lines, merge

TICK_MS = 32.0


def report(**kw: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "lead": "measured",
        # two moves: to 1 degree at 10.0 s, back to 0 at 10.5 s; a third the log never shows
        "moves": [[10.0, 1.0], [10.5, 0.0], [11.0, 1.0]],
        "reads": [10.004, 10.036, 10.504],
        "read_ms": [1.0, 2.0, 0.5, 3.0],
        "rtt_ms": [2.0, 2.0, 1.0, 4.0],
        "lead_ms": [8.0, 4.0, 4.0, 4.0],
        "woke_late_ms": [0.25, 0.5, 0.0, 0.25],
        "misses": 1,
    }
    r.update(kw)
    return r


#: the goals the servo received: 0 until 10.020, 1 degree from 10.020 (the first move's write), 0 from
#: 10.530 (the second's); 0.02 degrees off counts as the same position (within a servo step)
TIMES = np.array([9.99, 10.02, 10.05, 10.53, 10.56])
GOALS = np.array([0.0, 1.02, 1.0, 0.0, 0.0])


def test_each_move_is_timed_to_the_first_goal_write_that_carries_it() -> None:
    got = lead_summary(report(), TIMES, GOALS, TICK_MS)
    assert (got["lead"], got["samples"], got["missed"], got["misses"]) == ("measured", 2, 1, 1)
    assert got["move_to_write_ms"]["p50"] == 25.0 and got["move_to_write_ms"]["max"] == 30.0  # 20 and 30 ms
    # from the first read after the move to that write: 16 ms and 26 ms
    assert got["read_to_write_ms"]["p50"] == 21.0 and got["read_to_write_ms"]["max"] == 26.0


def test_the_trip_is_the_leader_read_and_half_the_round_trip_and_the_goal_is_held_to_it() -> None:
    got = lead_summary(report(), TIMES, GOALS, TICK_MS)
    assert got["trip_ms"]["max"] == 5.0  # 2, 3, 1, 5 ms
    p99 = got["trip_ms"]["p99"]
    assert p99 == 4.94  # 3 + 0.97 x 2, interpolated
    assert got["goal_p99_ms"] == TICK_MS + p99 + 2.0
    assert got["move_to_write_ms"]["p99"] == 29.9 and got["goal_met"] is True
    assert (got["leader_read_ms"]["max"], got["station_rtt_ms"]["max"], got["lead_ms"]["p50"]) == (3.0, 4.0, 4.0)
    assert got["station_woke_late_ms"]["max"] == 0.5
    slow = lead_summary(report(), TIMES + np.array([0, 0.02, 0.02, 0, 0]), GOALS, 4.0)  # a 4 ms tick
    assert slow["move_to_write_ms"]["p99"] > slow["goal_p99_ms"] and slow["goal_met"] is False


def test_nothing_measured_meets_no_goal() -> None:
    got = lead_summary(report(moves=[], read_ms=[], rtt_ms=[]), TIMES, GOALS, TICK_MS)
    assert (got["samples"], got["goal_p99_ms"], got["goal_met"]) == (0, None, False)


def test_the_rounds_of_one_lead_are_joined() -> None:
    into: dict[str, Any] = {}
    merge(into, report(misses=2))
    merge(into, report(moves=[[20.0, 1.0]], misses=1))
    assert into["lead"] == "measured" and into["misses"] == 3
    assert into["moves"] == [[10.0, 1.0], [10.5, 0.0], [11.0, 1.0], [20.0, 1.0]] and len(into["read_ms"]) == 8
    assert (LEADS, ROUNDS) == (("fixed", "measured"), 3)


def test_the_lines_say_each_lead_its_goal_and_the_ratio() -> None:
    measured = lead_summary(report(), TIMES, GOALS, TICK_MS)
    fixed = lead_summary(report(lead="fixed", misses=0), TIMES, GOALS, TICK_MS)
    result = {
        "rate_hz": 31.25,
        "transport": "tcp 127.0.0.1, station in its own process",
        "tick_ms": TICK_MS,
        "leads": {"fixed": fixed, "measured": measured},
        "p99_measured_over_fixed": 1.0,
        "cpu": "Intel(R) Xeon(R) Processor; avx2",
    }
    out = lines(result)
    assert out[0] == (
        "teleop at 31.25 Hz over tcp 127.0.0.1, station in its own process; one tick 32.00 ms; "
        "CPU Intel(R) Xeon(R) Processor; avx2"
    )
    assert out[2] == (
        "measured lead 4.00 ms (max 8.00): leader move -> follower goal write p50 25.00, p99 29.90, max 30.00 ms; "
        "trip p99 4.94 ms (leader read 2.97, round trip 3.94); goal p99 <= one tick + trip p99 + 2 ms = 38.94 ms: "
        "met; 2 moves, 1 targets missed their tick"
    )
    assert out[1].startswith("fixed lead 4.00 ms") and out[1].endswith("2 moves, 0 targets missed their tick")
    assert out[3] == "p99 measured / fixed lead: 1.000"
    empty = lead_summary(report(moves=[]), TIMES, GOALS, TICK_MS)
    assert lines({**result, "leads": {"fixed": empty}, "p99_measured_over_fixed": None})[1:] == [
        "fixed lead: nothing measured (0 moves, 0 not found)"
    ]
