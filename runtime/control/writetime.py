"""What the servos see of the loop's timing: when each sync write completed, and how far apart.

The tick's wake jitter says when the loop woke; the servos act on the goal when the write reaches
them, after the read, the policy step and the envelope, each of which can be late on its own. So each
write is stamped on the loop's clock right after the bus write returns, and the period error is the
time between two writes on consecutive ticks minus the control period (a tick that wrote nothing
breaks the chain: holding writes once, not every tick).

Stamps and errors live in a preallocated ring, so stamping allocates nothing; :meth:`stats` and
:meth:`recent` copy the ring off the tick (on the reader's thread). A reader may see a row the loop
is writing mid-copy: these are statistics, and each value is one aligned float.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: a period more than this many ms off is counted (``off``, status' ``off_5ms``): at 30 Hz, 15 % of a period
OFF_MS = 5.0


class WriteClock:
    def __init__(self, period_s: float, capacity: int) -> None:
        if capacity < 2:
            raise ValueError(f"WriteClock capacity: expected at least 2 writes, got {capacity}")
        self.period = period_s
        self.capacity = capacity
        self.stamps = np.zeros(capacity)  # completion time of each write, loop clock
        self.errors_ms = np.full(capacity, np.nan)  # vs the previous tick's write; NaN: no such write
        self._next = 0
        self.writes = 0
        #: periods measured (writes on consecutive ticks), and those more than OFF_MS off
        self.periods = 0
        self.off = 0
        self.last_error_ms = math.nan
        self._last_tick = -2
        #: the newest write's completion (0.0 before one)
        self.last_at = 0.0

    def stamp(self, tick: int, at: float) -> float:
        """A write of ``tick`` completed at ``at``; returns its period error in ms (NaN if unmeasured)."""
        error = math.nan
        if tick == self._last_tick + 1:
            error = (at - self.last_at - self.period) * 1e3
            self.periods += 1
            if abs(error) > OFF_MS:
                self.off += 1
        i = self._next
        self.stamps[i] = at
        self.errors_ms[i] = error
        self._next = (i + 1) % self.capacity
        self.writes += 1
        self._last_tick, self.last_at = tick, at
        self.last_error_ms = error
        return error

    def recent(self) -> tuple[np.ndarray, np.ndarray]:
        """(completion stamps, period errors in ms) of the writes in the ring, oldest first."""
        n = min(self.writes, self.capacity)
        idx = (self._next - n + np.arange(n)) % self.capacity
        return self.stamps[idx].copy(), self.errors_ms[idx].copy()

    def stats(self) -> dict[str, Any]:
        """The ``write_period_error_ms`` map of status: p50/p99/max of the absolute period error over
        the writes in the ring (None before two consecutive ones), and the counts since the start."""
        _, errors = self.recent()
        return summarize_errors(errors, self.periods, self.off)


def summarize_errors(errors_ms: np.ndarray, periods: int | None = None, off: int | None = None) -> dict[str, Any]:
    """p50/p99/max of |period error| over the finite ``errors_ms``, with the measured and off counts
    (counted from ``errors_ms`` itself unless given)."""
    err = np.abs(errors_ms[np.isfinite(errors_ms)])
    return {
        "p50": float(np.percentile(err, 50)) if len(err) else None,
        "p99": float(np.percentile(err, 99)) if len(err) else None,
        "max": float(err.max()) if len(err) else None,
        "periods": len(err) if periods is None else periods,
        "off_5ms": int((err > OFF_MS).sum()) if off is None else off,
    }
