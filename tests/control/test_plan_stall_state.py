"""The plan's and the stall's state from their first tick to a reset, field by field: what a new run
starts from, what a drop or a given-up request leaves behind, and that a cleared stall starts over."""

from __future__ import annotations

import numpy as np

from runtime.control.actions import ActionQueue
from runtime.control.plan import Plan
from runtime.control.stall import Stall, StallTick


def _queued(horizon: int = 20) -> Plan:
    plan = Plan(ActionQueue(2, horizon=horizon))
    plan.queue.merge(np.ones((5, 2)), 0, 0)
    assert plan.queue.depth(0) == 5
    return plan


def test_a_new_plan_has_nothing_in_flight_and_starts_a_history() -> None:
    plan = Plan(ActionQueue(2, horizon=20))
    assert (plan.gen, plan.inflight_since, plan.got_first, plan.new_history) == (0, None, False, True)
    assert plan.is_current(0) and not plan.is_current(1)


def test_a_drop_empties_the_queue_and_makes_the_chunk_in_flight_stale() -> None:
    plan = _queued()
    plan.got_first, plan.new_history = True, False
    plan.drop()
    assert plan.gen == 1 and plan.queue.depth(0) == 0
    assert not plan.is_current(0) and plan.is_current(1)
    assert (plan.got_first, plan.new_history) == (True, False)  # the same run
    plan.drop()
    assert plan.gen == 2


def test_a_restart_is_a_drop_and_a_new_run() -> None:
    plan = _queued()
    plan.got_first, plan.new_history = True, False
    plan.restart()
    assert plan.gen == 1 and plan.queue.depth(0) == 0
    assert (plan.got_first, plan.new_history) == (False, True)


def test_a_forgotten_request_is_stale_and_a_new_one_may_be_asked_the_queue_kept() -> None:
    plan = _queued()
    plan.inflight_since = 12.5
    plan.forget_request()
    assert plan.inflight_since is None and plan.gen == 1
    assert plan.queue.depth(0) == 5
    plan.forget_request()
    assert plan.gen == 2


def test_a_new_stall_has_no_reason_and_acts_once_after_its_timeout() -> None:
    stall = Stall(1.0)
    assert (stall.timeout_s, stall.since, stall.key, stall.reason, stall.acted) == (1.0, None, "", "", False)
    assert stall.tick(10.0, "starved", "no action due") == StallTick(True, True, False, 0.0)
    assert (stall.since, stall.key, stall.reason) == (10.0, "starved", "no action due")
    assert stall.tick(11.0, "starved", "no action due") == StallTick(False, False, False, 1.0)
    assert stall.tick(11.5, "starved", "no action due") == StallTick(False, False, True, 1.5)
    assert stall.acted
    assert stall.tick(12.0, "deadman", "no target") == StallTick(False, True, False, 2.0)
    assert (stall.key, stall.reason) == ("deadman", "no target")


def test_a_cleared_stall_starts_over() -> None:
    stall = Stall(0.5)
    stall.tick(1.0, "starved", "no action due")
    stall.tick(2.0, "starved", "no action due")
    assert stall.acted
    assert stall.resume(3.0) == 2.0
    assert (stall.since, stall.key, stall.reason, stall.acted) == (None, "", "", False)
    # the same reason again is a new stall, reported and acted on again
    assert stall.tick(5.0, "starved", "no action due") == StallTick(True, True, False, 0.0)
    assert stall.tick(6.0, "starved", "no action due").act
    assert stall.resume(6.0) == 1.0
