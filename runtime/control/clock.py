"""Drift-free ticking on the monotonic clock, and the control thread's CPU and scheduling class.

Deadlines are absolute: tick k is due at ``t0 + k * period``, each computed from the start, never
from when the previous tick ended, so lateness does not accumulate. A tick that wakes more than a
whole period late skips the missed deadlines and counts them as overruns instead of running them
back to back.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from runtime.engine.affinity import pin_current_thread

log = logging.getLogger(__name__)


class Ticker:
    def __init__(
        self,
        period_s: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.period = period_s
        self._clock = clock
        self._sleep = sleep
        self.t0 = 0.0
        self.tick = 0
        self.overruns = 0

    def start(self) -> float:
        self.t0 = self._clock()
        self.tick = 0
        return self.t0

    def deadline(self, tick: int) -> float:
        return self.t0 + tick * self.period

    def wait(self) -> tuple[int, float, float]:
        """Sleep until the next deadline; returns (tick, its deadline, seconds woken late)."""
        self.tick += 1
        due = self.deadline(self.tick)
        now = self._clock()
        if now < due:
            self._sleep(due - now)
            now = self._clock()
        late = now - due
        if late >= self.period:
            missed = int(late // self.period)
            self.overruns += missed
            self.tick += missed
            due = self.deadline(self.tick)
            late = now - due
        return self.tick, due, late


def pin_thread(cpu: int) -> bool:
    """Pin the calling thread to ``cpu``; False (logged) when that CPU is not available."""
    try:
        pin_current_thread([cpu])
    except OSError as e:
        log.warning("control loop: cannot pin to CPU %d (%s); running on %s", cpu, e, sorted(os.sched_getaffinity(0)))
        return False
    return True


def request_realtime(priority: int) -> str:
    """Ask for SCHED_FIFO at ``priority`` for the calling thread; returns what was granted, in words."""
    if priority <= 0:
        return "SCHED_OTHER (rt_priority = 0)"
    try:
        # RESET_ON_FORK: threads and processes this thread starts run SCHED_OTHER, so nothing it
        # spawns can hog the control CPU at real-time priority.
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(priority))
    except OSError as e:
        return (
            f"SCHED_OTHER: SCHED_FIFO {priority} refused ({e.strerror}); grant it with LimitRTPRIO= "
            "(the systemd unit does) or CAP_SYS_NICE"
        )
    return f"SCHED_FIFO {priority}"
