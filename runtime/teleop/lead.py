"""The station's lead: how long before the loop's tick it reads its leader and sends the target, from
what its trips really take, measured on its own clock.

A target must be in the loop's hands before the tick it is for; one that comes after waits a whole
period for the next. For each target the station measures how long the leader read took, from when it
was due (waking late for it delays the target as much), and the round trip of ``teleop.target``
(durations on its own clock: it never compares two machines' clocks), keeps the newest :data:`WINDOW`
of each, and leads by

    p99(read) + p99(round trip) / 2 + MARGIN_MS + MISS_MS x (misses among the newest WINDOW targets)

at most half a period (a window holding a few stalled trips would otherwise keep every read most of a
tick early, the pose the loop acts on that much older; such trips show up as misses instead); the
margin is its floor. Until :data:`MIN_SAMPLES` targets are measured it
leads by the configured lead (``teleop --lead-ms``, :data:`~runtime.teleop.config.LEAD_MS` by default),
which a fixed lead (``teleop --fixed-lead``) keeps for good.

A miss is a target that reached the loop after the tick it was placed before: the daemon got it after
that tick (the reply's ``next_tick_ms`` says so), or in time but the loop took it only after (the
reply's ``late``: the hop past the reply, which the round trip does not include). The station counts
both (:class:`~runtime.teleop.station.Station`) and hands them here, where each widens the lead for as
long as it is among the newest :data:`WINDOW` targets.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from runtime.teleop.config import LEAD_MS

#: targets the lead is measured over: about 3 s at 30 Hz, so it follows a change of load within seconds,
#: while its p99 is that of 100 trips (the second longest), not of one
WINDOW = 100
#: targets measured before the measured lead replaces the configured one (its p99 is then about the
#: longest of 20: a first estimate, widened by any miss)
MIN_SAMPLES = 20
#: what the two measurements leave out, and the lead's floor: a round trip split unevenly (the request's
#: leg longer than half), the daemon's own time before it hands the target to the loop (inside the
#: round trip, after the half), and the one trip in a hundred past each p99; on one machine over TCP
#: loopback the round trip's p99 is about a ms (``bench teleop``), so its uneven split is less than
#: that. What the margin does not cover shows up as misses, which widen the lead
MARGIN_MS = 1.0
#: the widening per miss among the newest WINDOW targets: a miss costs its target a whole period, a ms
#: more lead costs every target a ms; the lead narrows again as the misses leave the window
MISS_MS = 1.0


class Lead:
    """The lead in use: the configured one until trips are measured (or for good, with ``fixed``),
    then the measured one."""

    def __init__(self, configured_ms: float = LEAD_MS, *, fixed: bool = False) -> None:
        if not (math.isfinite(configured_ms) and configured_ms >= 0):
            raise ValueError(f"lead: expected a finite number of ms >= 0, got {configured_ms!r}")
        self.configured_ms = float(configured_ms)
        self.fixed = fixed
        self._read_ms: deque[float] = deque(maxlen=WINDOW)
        self._rtt_ms: deque[float] = deque(maxlen=WINDOW)
        self._missed: deque[int] = deque(maxlen=WINDOW)
        #: misses since the start, for the status line
        self.misses = 0
        self._measured_ms = math.nan

    @property
    def samples(self) -> int:
        """Targets measured in the window (at most :data:`WINDOW`)."""
        return len(self._read_ms)

    @property
    def measured(self) -> bool:
        """Whether the lead in use is the measured one."""
        return not self.fixed and self.samples >= MIN_SAMPLES

    def add(self, read_ms: float, rtt_ms: float, missed: int = 0) -> None:
        """One target's leader read and round trip (ms, the station's clock), and the misses its reply
        showed (its own, and any the daemon counted since the last reply)."""
        self._read_ms.append(read_ms)
        self._rtt_ms.append(rtt_ms)
        self._missed.append(missed)
        self.misses += missed
        if self.samples >= MIN_SAMPLES:
            self._measured_ms = (
                float(np.percentile(self._read_ms, 99))
                + float(np.percentile(self._rtt_ms, 99)) / 2
                + MARGIN_MS
                + MISS_MS * sum(self._missed)
            )

    def ms(self, period_s: float) -> float:
        """The lead in ms for a loop of ``period_s``: measured, at most half the period, or the
        configured one."""
        if not self.measured:
            return self.configured_ms
        return min(self._measured_ms, period_s * 1e3 / 2)
