"""The plan: dropping it empties the queue and makes a chunk in flight stale."""

from __future__ import annotations

import numpy as np

from runtime.control.actions import ActionQueue
from runtime.control.plan import Plan


def queued(n: int = 3) -> Plan:
    plan = Plan(ActionQueue(2, horizon=20))
    plan.queue.merge(np.zeros((n, 2)), 0, 0)
    return plan


def test_drop_empties_the_queue_and_makes_the_chunk_in_flight_stale() -> None:
    plan = queued()
    asked_under = plan.gen
    assert plan.queue.depth(0) == 3
    plan.drop()
    assert plan.queue.depth(0) == 0
    assert not plan.is_current(asked_under) and plan.is_current(plan.gen)


def test_restart_is_a_new_run() -> None:
    plan = queued()
    plan.got_first, plan.new_history = True, False
    plan.restart()
    assert plan.queue.depth(0) == 0 and not plan.got_first and plan.new_history


def test_a_stalled_request_is_forgotten_but_the_queue_kept() -> None:
    plan = queued()
    plan.inflight_since = 1.0
    asked_under = plan.gen
    plan.forget_request()
    assert plan.inflight_since is None and not plan.is_current(asked_under)
    assert plan.queue.depth(0) == 3  # what was merged before is still the plan
