"""The field bench's measures (:mod:`tools.bench.field.measures`): write periods and their errors at the
servos, the worst writes, teleop latency, and what reached the servos after a kill.

Every expected value is worked out by hand from the writes written in the test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tools.bench.field.measures import after_kill, period_errors_ms, teleop_latency, worst_writes, write_periods
from tools.bench.field.servos import ServoLog


def test_period_errors_are_ms_off_the_period_and_nan_where_a_write_is_missing() -> None:
    stamps = np.array([0.0, 0.010, 0.021, 0.029, 0.049, 0.065])  # period 10 ms
    errors = period_errors_ms(stamps, 0.010)
    # gaps 10, 11, 8, then 20 and 16 (1.5 periods or more: a missing write)
    np.testing.assert_allclose(errors[[0, 1, 2]], [0.0, 1.0, -2.0], atol=1e-9)
    assert math.isnan(errors[3]) and math.isnan(errors[4])
    np.testing.assert_allclose(period_errors_ms(np.array([0.0, 0.0149]), 0.010), [4.9], atol=1e-9)


def test_write_periods_counts_each_missing_period_and_the_writes_off_by_more_than_5_ms() -> None:
    # period 30 ms: gaps 30, 36 (6 ms late), 24 (6 ms early), 90 (two writes missing), 30,
    # 75 (one missing: 2.5 periods rounds to 2), 34.9 (4.9 ms late: not counted)
    stamps = np.cumsum([0.0, 0.030, 0.036, 0.024, 0.090, 0.030, 0.075, 0.0349])
    r = write_periods(stamps, 0.030)
    assert r["writes"] == 8 and r["periods"] == 5
    assert r["off_5ms"] == 2
    assert r["missing_periods"] == 3
    assert r["period_error_ms"] == {"p50": 4.9, "p99": 6.0, "max": 6.0}
    assert r["max_gap_ms"] == 90.0
    assert write_periods(np.array([1.0]), 0.010) == {
        "writes": 1,
        "period_error_ms": {"p50": None, "p99": None, "max": None},
        "periods": 0,
        "off_5ms": 0,
        "missing_periods": 0,
        "max_gap_ms": None,
    }


P = 1 / 30  # the control period of the servo logs below


def _log(writes: list[tuple[float, list[int]]], torque: list[tuple[float, int]] | None = None) -> ServoLog:
    """Six servos (ids 1-6) that heard ``writes`` (time, one goal per servo) and ``torque`` (time, value)."""
    goals = {i + 1: np.array([[t, g[i]] for t, g in writes], dtype=np.float64).reshape(-1, 2) for i in range(6)}
    torques = {i + 1: np.array(torque or [], dtype=np.float64).reshape(-1, 2) for i in range(6)}
    return ServoLog("SCHED_FIFO 40", goals, torques)


def _kill_log() -> ServoLog:
    before = [(0.0, [2000] * 6), (P, [2001] * 6)]
    hold = [(2 * P, [2001] * 6)]
    rest = [(3 * P + k * P, [2001, 2001, 2010 + 10 * k, 2001, 2001, 2001]) for k in range(3)]
    still = [(6 * P, [2001, 2001, 2031, 2001, 2001, 2001])]
    return _log(before + hold + rest + still, [(0.01, 1), (0.5, 0)])


def test_what_reached_the_servos_after_a_kill_field_by_field() -> None:
    # killed at 1.5 periods: the last goal before it at one period; then a hold at the next tick, three
    # steps toward the rest pose (joint 3 to 2030), a write a tick off the last one; torque off at 0.5 s
    assert after_kill(_kill_log(), 1.5 * P, P, {3: 2030, 9: 0}) == {
        "writes_after": 5,
        "torque_writes_after": 6,  # one per servo after the kill; the ones before it not counted
        "torque_off_after_ms": 450.0,
        "last_write_before_ms": -16.7,
        "first": {
            "after_kill_ms": 16.7,
            "after_last_write_ms": 33.3,
            "at_next_tick": True,
            "is_hold": True,
            "max_diff_from_last_goal_ticks": 0,
        },
        "runs": [
            {"kind": "hold", "writes": 1, "from_ms": 16.7, "to_ms": 16.7},
            {"kind": "rest", "writes": 3, "from_ms": 50.0, "to_ms": 116.7},
            {"kind": "still", "writes": 1, "from_ms": 150.0, "to_ms": 150.0},
        ],
        "rest_reached": True,  # within a tick of the rest pose
        "verdict": "hold x1, then rest x3, then still x1, then torque off at 450 ms",
    }


def test_a_kill_judged_to_the_tick_names_the_last_write_other() -> None:
    r = after_kill(_kill_log(), 1.5 * P, P, {3: 2030}, tolerance_ticks=0)
    assert [(run["kind"], run["writes"]) for run in r["runs"]] == [("hold", 1), ("rest", 3), ("other", 1)]
    assert r["rest_reached"] is False


def test_writes_after_a_kill_with_none_before_it_have_no_hold_to_compare_with() -> None:
    log = _log([(0.01, [2000] * 6), (0.05, [2001] * 6), (0.06, [2010] * 6)], [(-0.5, 0), (0.05, 1)])
    assert after_kill(log, 0.0, P, {}) == {
        "writes_after": 3,
        "torque_writes_after": 6,  # torque on: counted, not torque off
        "torque_off_after_ms": None,
        "last_write_before_ms": None,
        "first": {
            "after_kill_ms": 10.0,
            "after_last_write_ms": None,
            "at_next_tick": False,
            "is_hold": False,
            "max_diff_from_last_goal_ticks": None,
        },
        "runs": [
            {"kind": "other", "writes": 1, "from_ms": 10.0, "to_ms": 10.0},
            {"kind": "still", "writes": 1, "from_ms": 50.0, "to_ms": 50.0},
            {"kind": "other", "writes": 1, "from_ms": 60.0, "to_ms": 60.0},
        ],
        "rest_reached": False,  # no rest pose given
        "verdict": "other x1, then still x1, then other x1",
    }


def test_no_write_after_a_kill_says_whether_torque_went_off() -> None:
    log = _log([(0.0, [2000] * 6), (P, [2001] * 6)], [(0.2, 0)])
    assert after_kill(log, 0.05, P, {3: 2200}) == {
        "writes_after": 0,
        "torque_writes_after": 6,
        "torque_off_after_ms": 150.0,
        "last_write_before_ms": -16.7,
        "verdict": "no write after the kill, torque off",
        "first": None,
        "runs": [],
    }


def test_teleop_latency_per_move_from_the_first_target_carrying_it_to_the_first_write_carrying_it() -> None:
    moves = [(1.0, 1.0), (2.0, 0.0), (3.0, 5.0), (4.0, 7.0)]
    # the move to 5 is never sent; the move to 7 is sent but never written
    sends = [(0.99, 0.0), (1.01, 1.0), (1.04, 1.0), (2.02, 0.0), (4.01, 7.0)]
    times = np.array([1.0, 1.0333, 1.0666, 2.0, 2.0333, 4.5])
    values = np.array([0.0, 1.0, 1.0, 1.0, 0.0, 6.9])
    r = teleop_latency(times, values, moves, sends, 0.05)
    assert r == {
        "moves": 4,
        "measured": 2,
        "missed": 2,
        "send_to_write_ms": pytest.approx({"p50": 18.3, "p99": 23.2, "max": 23.3}, abs=1e-3),
        "move_to_write_ms": pytest.approx({"p50": 33.3, "p99": 33.3, "max": 33.3}, abs=1e-3),
    }
    # within the tolerance on both sides: a target or a goal 0.03 off still carries the move
    r = teleop_latency(np.array([1.5]), np.array([1.03]), [(1.0, 1.0)], [(1.2, 0.97)], 0.05)
    assert (r["measured"], r["send_to_write_ms"]["max"], r["move_to_write_ms"]["max"]) == (1, 300.0, 500.0)


# --- edges, on times a binary float holds exactly (a period of 0.25 s) -----------------------------------

Q = 0.25


def test_a_gap_of_exactly_one_and_a_half_periods_is_a_missing_write() -> None:
    assert math.isnan(period_errors_ms(np.array([0.0, 0.375]), Q)[0])
    r = write_periods(np.array([0.0, 0.375, 0.6253456]), Q)
    assert r["missing_periods"] == 1 and r["periods"] == 1
    assert r["max_gap_ms"] == 375.0
    assert write_periods(np.array([0.0, 0.0123456]), Q)["max_gap_ms"] == 12.346


def test_teleop_latency_counts_a_target_and_a_write_at_the_same_instant_and_at_the_tolerance() -> None:
    # sent and written at the very instant of the move, each exactly the tolerance off the value
    r = teleop_latency(np.array([1.0]), np.array([1.5]), [(1.0, 1.0)], [(1.0, 0.5)], 0.5)
    assert (r["measured"], r["missed"], r["move_to_write_ms"]["max"]) == (1, 0, 0.0)
    # never sent, never sent, sent but never written, then one measured
    moves = [(1.0, 5.0), (2.0, 6.0), (3.0, 7.0), (4.0, 8.0)]
    sends = [(3.25, 7.0), (4.25, 8.0)]
    r = teleop_latency(np.array([4.5]), np.array([8.0]), moves, sends, 0.1)
    assert (r["moves"], r["measured"], r["missed"]) == (4, 1, 3)
    assert r["send_to_write_ms"]["max"] == 250.0 and r["move_to_write_ms"]["max"] == 500.0


def _servos(writes: list[tuple[float, int]], torque: list[tuple[float, int]] | None = None) -> ServoLog:
    """Six servos that heard the same goal at each write."""
    return _log([(t, [g] * 6) for t, g in writes], torque)


def test_a_write_and_a_torque_write_at_the_instant_of_the_kill_count_as_after_it() -> None:
    r = after_kill(_servos([(-1.0, 2000), (0.5, 2000)], [(0.5, 0)]), 0.5, Q, {})
    assert (r["writes_after"], r["torque_writes_after"], r["torque_off_after_ms"]) == (1, 6, 0.0)
    assert r["last_write_before_ms"] == -1500.0 and r["first"]["after_kill_ms"] == 0.0
    r = after_kill(_servos([(0.0, 2000), (1.12371, 2000)], [(1.12371, 0)]), 1.0, Q, {})
    assert r["torque_off_after_ms"] == 123.7 and r["first"]["after_kill_ms"] == 123.7


def test_the_first_write_after_a_kill_is_at_the_next_tick_only_within_half_a_period() -> None:
    for gap, at_next in ((0.25, True), (0.375, False), (0.5, False), (0.125, False)):
        r = after_kill(_servos([(0.0, 2000), (gap, 2000)]), 0.01, Q, {})
        assert r["first"]["at_next_tick"] is at_next, gap


def test_each_write_after_a_kill_is_classed_against_the_hold_the_rest_pose_and_the_write_before() -> None:
    # rest at 1970 for servos 1 and 2. The last goal 2000; a tick off it (a hold); two off the write
    # before and away from rest (still); toward rest (rest); as far from rest as the write before (not
    # toward it: other); three off the write before, away from rest (other); two off, twice (still)
    writes = [(0.0, 2000), (1.0, 2001), (2.0, 2003), (3.0, 1995), (4.0, 1945), (5.0, 1942), (6.0, 1940), (7.0, 1938)]
    r = after_kill(_servos(writes), 0.5, 1.0, {1: 1970, 2: 1970})
    assert r["first"]["is_hold"] is True and r["first"]["max_diff_from_last_goal_ticks"] == 1
    assert [(run["kind"], run["writes"], run["from_ms"], run["to_ms"]) for run in r["runs"]] == [
        ("hold", 1, 500.0, 500.0),
        ("still", 1, 1500.0, 1500.0),
        ("rest", 1, 2500.0, 2500.0),
        ("other", 2, 3500.0, 4500.0),
        ("still", 2, 5500.0, 6500.0),
    ]
    # the rest pose is reached within a tick per rest joint
    near = after_kill(_servos([(0.0, 2000), (1.0, 2029)]), 0.5, 1.0, {1: 2030, 2: 2030})
    assert near["rest_reached"] is True
    far = after_kill(_servos([(0.0, 2000), (1.0, 2028)]), 0.5, 1.0, {1: 2030, 2: 2030})
    assert far["rest_reached"] is False


def test_without_a_hold_to_compare_a_write_two_ticks_off_the_last_goal_is_still_not_a_hold() -> None:
    r = after_kill(_servos([(0.0, 2000), (1.0, 2002)]), 0.5, 1.0, {})
    assert r["first"]["is_hold"] is False and r["first"]["max_diff_from_last_goal_ticks"] == 2
    assert r["verdict"] == "still x1"


def test_the_worst_writes_inside_the_window_its_edges_included_worst_first() -> None:
    # period 0.25: writes every period from 1.0, with errors of +0.0001 and +0.0002 ms apart that round
    # to the same ms, so the earlier is named first; seven writes off, five named by default
    stamps = np.array([0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5])
    stamps[3] += 0.0020001
    stamps[6] += 0.0020002
    rows = worst_writes(stamps, Q, (1.0, 3.25), None, None)
    assert len(rows) == 5
    # seconds into the window of each late write and of the on-time write after it
    assert [r["at_s"] for r in rows[:4]] == [0.502, 0.75, 1.252, 1.5]
    assert [r["period_error_ms"] for r in rows[:4]] == [2.0, -2.0, 2.0, -2.0]
    everything = worst_writes(stamps, Q, (1.0, 3.25), None, None, n=20)
    assert len(everything) == 9  # the periods inside the window, both edges included, none outside it
    # ordered by the error rounded to the microsecond: 2.4 ms before 2.1 ms, though both round to 2 ms
    late = np.array([0.0, 0.25, 0.5021, 0.75, 1.0024, 1.25])
    assert [r["period_error_ms"] for r in worst_writes(late, Q, (0.0, 2.0), None, None, n=2)] == [2.4, -2.4]


def test_a_worst_write_is_matched_to_the_loops_tick_within_half_a_period() -> None:
    stamps = np.array([0.0, 0.25, 0.5, 0.7524])  # the last write 2.4 ms late
    # the loop's tick stamps: deadline t plus write_ms after it, less late_ms
    flight = {
        "t": np.array([0.0, 0.25, 0.5, 0.75]),
        "late_ms": np.array([0.0, 0.0, 0.0, 0.12346]),
        "write_ms": np.array([0.0, 0.0, 0.0, 1.12236]),
    }
    (row,) = worst_writes(stamps, Q, (0.0, 1.0), flight, lambda a, b: 0.0, n=1)
    assert row == {
        "at_s": 0.752,
        "period_error_ms": 2.4,
        "loop_woke_late_ms": 0.123,
        "loop_write_after_deadline_ms": 1.122,
        "arrived_after_loop_stamp_ms": 1.401,
        "steal_ms_around": 0.0,
    }
    # the last tick alone, its stamp (0.7509989 s) moved off the write the servos heard at 0.7524 s
    for offset, matched in ((0.1, True), (0.2, False)):
        moved = {k: v[3:] for k, v in flight.items()}
        moved["t"] = moved["t"] + offset
        (row,) = worst_writes(stamps, Q, (0.0, 1.0), moved, None, n=1)
        assert ("loop_woke_late_ms" in row) is matched, offset


def test_write_periods_count_missing_writes_apart_from_late_ones() -> None:
    stamps = np.arange(10) * P
    stamps[4] += 0.006  # one write 6 ms late: two periods 6 ms off
    stamps = np.delete(stamps, [7, 8])  # two writes missing
    r = write_periods(stamps, P)
    assert r["writes"] == 8 and r["missing_periods"] == 2
    assert r["periods"] == 6 and r["off_5ms"] == 2
    assert r["period_error_ms"]["max"] == pytest.approx(6.0, abs=1e-6)
    assert r["max_gap_ms"] == pytest.approx(3000 / 30, abs=1e-3)


def test_worst_writes_name_the_tick_the_loop_stamped_and_the_steal_around_it() -> None:
    stamps = np.arange(20) * P
    stamps[10] += 0.004  # 4 ms late: +4 then -4
    stamps[15] += 0.002
    # the flight recording: each tick woke at t (late_ms after its deadline) and wrote write_ms after it
    late = np.full(20, 0.1)
    write = np.full(20, 0.3)
    write[10] = 4.3
    flight = {"t": stamps - 0.0002 + late / 1e3 - write / 1e3 + 0.0002, "late_ms": late, "write_ms": write}
    seen: list[tuple[float, float]] = []

    def steal(a: float, b: float) -> float:
        seen.append((a, b))
        return 7.0

    rows = worst_writes(stamps, P, (0.0, 1.0), flight, steal, n=3)
    assert [r["period_error_ms"] for r in rows] == pytest.approx([4.0, -4.0, 2.0], abs=1e-6)
    assert rows[0]["at_s"] == pytest.approx(stamps[10], abs=1e-3)
    assert rows[0]["loop_write_after_deadline_ms"] == pytest.approx(4.3) and rows[0]["loop_woke_late_ms"] == 0.1
    assert rows[0]["arrived_after_loop_stamp_ms"] == pytest.approx(0.0, abs=1e-6)
    assert rows[0]["steal_ms_around"] == 7.0
    assert seen[0] == pytest.approx((stamps[10] - 2 * P, stamps[10] + P))
    assert worst_writes(stamps, P, (0.0, 1.0), None, None, n=1) == [
        {"at_s": pytest.approx(stamps[10], abs=1e-3), "period_error_ms": pytest.approx(4.0, abs=1e-6)}
    ]


def test_teleop_latency_takes_the_first_target_and_the_first_write_that_carry_the_move() -> None:
    moves = [(1.0, 1.0), (2.0, 0.0)]
    sends = [(0.99, 0.0), (1.01, 1.0), (1.04, 1.0), (2.02, 0.0)]
    times = np.array([1.0, 1.0333, 1.0666, 2.0, 2.0333])
    values = np.array([0.0, 1.0, 1.0, 1.0, 0.0])
    r = teleop_latency(times, values, moves, sends, 0.05)
    assert r["measured"] == 2 and r["missed"] == 0
    assert r["send_to_write_ms"]["p50"] == pytest.approx((23.3 + 13.3) / 2, abs=0.1)
    assert r["move_to_write_ms"]["max"] == pytest.approx(33.3, abs=0.1)
    assert teleop_latency(times, values, [(3.0, 5.0)], sends, 0.05)["missed"] == 1


def test_after_kill_says_when_nothing_was_written() -> None:
    r = after_kill(_log([(0.0, [2000] * 6), (P, [2001] * 6)]), 0.05, P, {3: 2200})
    assert r["verdict"] == "no write after the kill" and r["writes_after"] == 0 and r["first"] is None


def test_after_kill_classes_hold_then_rest_then_torque_off() -> None:
    before = [(0.0, [2000] * 6), (P, [2001] * 6)]
    hold = [(2 * P, [2001] * 6)]
    rest = [(3 * P + k * P, [2001, 2001, 2010 + 10 * k, 2001, 2001, 2001]) for k in range(3)]
    still = [(6 * P, [2001, 2001, 2031, 2001, 2001, 2001])]  # the present pose held, a tick off the goal
    r = after_kill(_log(before + hold + rest + still, [(0.5, 0)]), 1.5 * P, P, {3: 2030})
    assert r["first"]["is_hold"] and r["first"]["at_next_tick"]
    assert [(run["kind"], run["writes"]) for run in r["runs"]] == [("hold", 1), ("rest", 3), ("still", 1)]
    assert r["rest_reached"] and r["torque_off_after_ms"] == pytest.approx((0.5 - 1.5 * P) * 1e3, abs=0.1)
    assert r["verdict"] == "hold x1, then rest x3, then still x1, then torque off at 450 ms"


def test_after_kill_names_a_write_that_is_neither_hold_rest_nor_still() -> None:
    writes = [(0.0, [2000] * 6), (P, [2100] * 6)]
    r = after_kill(_log(writes), 0.5 * P, P, {3: 2030})
    assert not r["first"]["is_hold"] and r["first"]["max_diff_from_last_goal_ticks"] == 100
    assert r["verdict"] == "other x1"
