"""The simulated servo's goal and torque logs stay bounded in memory however long the arm runs."""

from __future__ import annotations

import itertools
import tracemalloc

from drivers.sim.dialect import FEETECH
from drivers.sim.servo import LOG_LENGTH, SimServo

WRITES = 10_000  # five minutes of goals at 30 Hz
MAX_LOG_BYTES = 512 * 1024  # per servo: a demo arm has six


def test_goal_and_torque_logs_stop_growing() -> None:
    ticks = itertools.count()
    servo = SimServo(1, FEETECH, clock=lambda: next(ticks) * 0.033)
    goal = FEETECH.table["Goal_Position"]
    torque = FEETECH.table["Torque_Enable"]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(WRITES):
            servo.write(goal.address, goal.pack(1000 + i % 2000))
            servo.write(torque.address, torque.pack(i % 2))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(servo.goal_log) == len(servo.torque_log) == LOG_LENGTH < WRITES
    assert servo.goal_log[-1][1] == 1000 + (WRITES - 1) % 2000  # the newest are kept
    assert grown < MAX_LOG_BYTES, f"the logs of one servo hold {grown} bytes after {WRITES} writes"
