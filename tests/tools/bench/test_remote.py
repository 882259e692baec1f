"""What bench remote reads in the servos' log (:func:`tools.bench.remote.hold_after`)."""

from __future__ import annotations

import numpy as np

from tools.bench.remote import hold_after


def test_the_hold_the_torque_off_and_nothing_after_it() -> None:
    period = 1 / 30
    times = np.arange(20) * period
    goals = np.zeros((20, 2))
    goals[:8, 0] = np.arange(8)  # moving until write 7, then the same goal
    goals[8:, 0] = 7.0
    t = times[5] - 0.001
    out = hold_after(times, goals, [times[15] + 0.001], t, period)
    assert out["hold_after_ms"] == round((times[8] - t) * 1e3, 1)
    assert out["moving_writes_before_hold"] == 3 and out["hold_writes"] == 8 and out["hold_kept_deg"] == 0.0
    assert out["torque_off_after_ms"] == round((times[15] + 0.001 - t) * 1e3, 1)
    assert out["goal_writes_after_torque_off"] == 4  # the servos received these after torque went off
    until = hold_after(times, goals, [times[15] + 0.001], t, period, end=times[17])
    assert until["goal_writes_after_torque_off"] == 1  # up to the next start


def test_no_hold_and_no_torque_off_are_said() -> None:
    times = np.arange(5) * 0.1
    goals = np.arange(10, dtype=float).reshape(5, 2)
    out = hold_after(times, goals, [], 0.0, 0.1)
    assert out["hold_after_ms"] is None and out["torque_off_after_ms"] is None
    assert out["goal_writes_after_torque_off"] is None and out["moving_writes_before_hold"] == 5
