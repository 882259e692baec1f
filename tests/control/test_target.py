"""The teleop goal source: targets stored newest-first (out of order dropped and counted), those that
land after the tick they were in time for counted, the deadman's edge (:class:`TeleopTarget`), and both
hand-overs (:class:`Handover`) worked tick by tick on numbers
exact in binary (a step of 3 degrees)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.control.target import Handover, Target, TeleopTarget
from runtime.teleop.config import TeleopConfig

#: 24 deg/s at 8 Hz: 3 degrees per tick, exactly
PERIOD = 0.125
SPEED = 24.0


def land(joints: int = 2, **kw: float) -> TeleopTarget:
    return TeleopTarget(joints, TeleopConfig(handover_speed_deg_s=SPEED, **kw))  # type: ignore[arg-type]


def move(**kw: float) -> Handover:
    return Handover(TeleopConfig(handover_speed_deg_s=SPEED, **kw), PERIOD)  # type: ignore[arg-type]


def test_a_fresh_source_tracks_has_no_target_and_counts_nothing() -> None:
    t = TeleopTarget(3, TeleopConfig(deadman_ms=250.0))
    assert (t.joints, t.received, t.out_of_order, t.late) == (3, 0, 0, 0)
    assert t.deadman_s == 0.25
    assert t.fresh(0.0) is None
    h = Handover(TeleopConfig(), PERIOD)
    assert (h.phase, h.handover_ticks) == ("tracking", 0)


def test_each_newer_target_replaces_the_last_and_is_counted() -> None:
    t = land()
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    assert t.put(1, a, now=10.0) is True
    assert t.put(2, b, now=10.05) is True
    assert t.received == 2 and t.out_of_order == 0
    assert t.fresh(10.1) == Target(2, b, 10.05)


def test_a_target_not_newer_than_the_last_is_dropped_and_counted() -> None:
    t = land()
    newest = np.array([1.0, 2.0])
    assert t.put(5, newest, now=10.0)
    assert t.put(5, np.array([9.0, 9.0]), now=10.01) is False  # the same seq again
    assert t.put(4, np.array([8.0, 8.0]), now=10.02) is False
    assert (t.received, t.out_of_order) == (1, 2)
    got = t.fresh(10.03)
    assert got is not None and got.seq == 5 and got.positions is newest and got.received_at == 10.0


def test_clear_forgets_the_target_and_a_new_session_may_start_its_seq_over() -> None:
    t = land()
    t.put(7, np.array([1.0, 2.0]), now=1.0)
    t.clear()
    assert t.fresh(1.0) is None
    assert t.put(1, np.array([3.0, 4.0]), now=2.0) is True
    got = t.fresh(2.0)
    assert got is not None and got.seq == 1


def test_a_target_received_before_a_tick_was_due_that_lands_after_that_tick_read_the_slot_is_late() -> None:
    t = land()
    assert t.fresh(10.002, due=10.0) is None  # the tick due at 10.0 read the slot (empty)
    assert t.put(1, np.array([1.0, 2.0]), now=9.999)  # received before it was due, landed after its read
    assert t.late == 1 and t.received == 1
    assert t.put(2, np.array([1.0, 2.0]), now=10.0)  # received as it was due: meant for the next tick
    assert t.put(3, np.array([1.0, 2.0]), now=10.05)
    assert t.late == 1
    got = t.fresh(10.127, due=10.125)
    assert got is not None and got.seq == 3  # a late target is used all the same, at the next tick
    assert t.put(4, np.array([1.0, 2.0]), now=10.1)  # overwritten before any tick reads it: late too
    assert not t.put(4, np.array([1.0, 2.0]), now=10.1)  # out of order: dropped, not late
    assert (t.late, t.out_of_order, t.received) == (2, 1, 4)


def test_only_a_tick_that_says_when_it_was_due_moves_the_line_and_clear_keeps_the_count() -> None:
    t = land()
    t.put(1, np.array([1.0, 2.0]), now=5.0)
    t.fresh(6.0)  # no due time: a reader that is not a tick (status, tests) sets no line
    assert t.put(2, np.array([1.0, 2.0]), now=5.5) and t.late == 0
    t.fresh(6.0, due=6.0)
    t.put(3, np.array([1.0, 2.0]), now=5.9)
    t.clear()
    assert t.late == 1 and t.fresh(6.0) is None


def test_a_target_is_fresh_up_to_the_deadman_and_stale_after() -> None:
    t = land(deadman_ms=250.0)
    t.put(1, np.array([1.0, 2.0]), now=1.0)
    assert t.fresh(1.25) is not None  # exactly deadman_ms old: still fresh
    assert t.fresh(1.2500001) is None
    assert t.fresh(1.0) is not None


def test_tracking_passes_the_target_through() -> None:
    t = move()
    target = np.array([50.0, -50.0])
    assert t.goal(target, np.zeros(2), np.zeros(2)) is target
    assert t.phase == "tracking" and t.handover_ticks == 0


def test_move_hand_over_steps_each_joint_at_the_set_speed_then_tracks() -> None:
    t = move()
    t.handover_ticks = 9
    t.begin()
    assert (t.phase, t.handover_ticks) == ("handover", 0)
    target = np.array([10.0, -4.0])
    present = np.array([100.0, 100.0])  # move ignores the present pose: it steps from the last goal
    last = np.zeros(2)
    expected = [
        ([3.0, -3.0], "handover"),
        ([6.0, -4.0], "handover"),
        ([9.0, -4.0], "handover"),
        ([10.0, -4.0], "tracking"),
    ]
    for n, (goal, phase) in enumerate(expected, start=1):
        last = t.goal(target, last, present)
        assert last.tolist() == goal and t.phase == phase and t.handover_ticks == n
    # tracking: no more hand-over ticks
    assert t.goal(target, last, present) is target and t.handover_ticks == 4


def test_move_hand_over_within_one_step_tracks_at_once() -> None:
    t = move()
    t.begin()
    target = np.array([3.0, -3.0])  # exactly one step away on both joints
    assert t.goal(target, np.zeros(2), np.zeros(2)) is target
    assert t.phase == "tracking" and t.handover_ticks == 1


def test_move_hand_over_one_joint_far_steps_only_that_far() -> None:
    t = move()
    t.begin()
    out = t.goal(np.array([0.5, -20.0]), np.zeros(2), np.zeros(2))
    assert out.tolist() == [0.5, -3.0] and t.phase == "handover"


def test_the_step_is_the_speed_times_the_period() -> None:
    t = Handover(TeleopConfig(handover_speed_deg_s=20.0), 0.25)  # 5 per tick
    t.begin()
    assert t.goal(np.array([12.0]), np.zeros(1), np.zeros(1)).tolist() == [5.0]


def test_wait_hand_over_holds_the_last_goal_until_the_leader_is_within_tolerance_of_the_follower() -> None:
    t = Handover(TeleopConfig(handover="wait", handover_tolerance_deg=2.0), PERIOD)
    t.begin()
    last = np.array([7.0, 7.0])
    present = np.array([10.0, -10.0])
    # compared with the present pose, not the last goal: the leader is at the last goal but far from the arm
    assert t.goal(np.array([7.0, 7.0]), last, present) is last and t.phase == "handover"
    # one joint within tolerance is not enough
    assert t.goal(np.array([10.0, -12.5]), last, present) is last and t.phase == "handover"
    assert t.handover_ticks == 2
    target = np.array([8.0, -8.0])  # every joint exactly at the tolerance
    assert t.goal(target, last, present) is target
    assert t.phase == "tracking" and t.handover_ticks == 3


@pytest.mark.parametrize("handover", ["move", "wait"])
def test_begin_starts_a_hand_over_again_after_tracking(handover: str) -> None:
    t = Handover(TeleopConfig(handover=handover, handover_speed_deg_s=SPEED), PERIOD)  # type: ignore[arg-type]
    t.begin()
    t.goal(np.array([0.0]), np.zeros(1), np.zeros(1))
    assert t.phase == "tracking"
    t.begin()
    assert t.phase == "handover"
    assert t.goal(np.array([30.0]), np.zeros(1), np.zeros(1)).tolist() == ([3.0] if handover == "move" else [0.0])
