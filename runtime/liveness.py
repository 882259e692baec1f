"""Liveness: proof that the threads doing the daemon's real work are still making progress.

systemd's watchdog only proves that whoever sends ``WATCHDOG=1`` is alive. The daemon's main thread
would keep sending it while the inference thread hangs inside OpenVINO, so each working thread
holds a :class:`Heartbeat` that it beats between units of work (the inference worker: per job and
while idle), and the daemon sends ``WATCHDOG=1`` only while no heartbeat in the
:class:`LivenessRegistry` is older than its deadline. A stall is logged once, with how long and what
the thread was doing; systemd then restarts the service when its ``WatchdogSec`` runs out.

A new worker (the control loop, for instance) joins with::

    beat = registry.register("control loop", deadline_s=0.5)
    while running:
        beat.beat("tick")  # at least once per deadline_s
        ...
    registry.unregister(beat)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stall:
    name: str
    seconds: float  # since the last beat
    doing: str  # what the thread said it was doing at that beat


class Heartbeat:
    """One thread's proof of progress: ``beat(doing)`` at least every ``deadline_s`` seconds."""

    def __init__(self, name: str, deadline_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not deadline_s > 0:
            raise ValueError(f"heartbeat {name!r}: deadline_s must be > 0, got {deadline_s}")
        self.name = name
        self.deadline_s = deadline_s
        self._clock = clock
        # One tuple, replaced whole: readers on another thread never see a half-updated beat.
        self._last: tuple[float, str] = (clock(), "starting")

    def beat(self, doing: str) -> None:
        """Record progress; ``doing`` says what the thread does next (shown if it stalls there)."""
        self._last = (self._clock(), doing)

    def stalled(self, now: float) -> tuple[float, str] | None:
        """``(seconds since the last beat, what it was doing)`` past the deadline, else None."""
        at, doing = self._last
        late = now - at
        return (late, doing) if late > self.deadline_s else None


class LivenessRegistry:
    """The heartbeats the daemon checks before each ``WATCHDOG=1``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._beats: list[Heartbeat] = []
        self._logged: set[str] = set()  # names whose current stall was already logged

    def register(self, name: str, deadline_s: float) -> Heartbeat:
        beat = Heartbeat(name, deadline_s, self._clock)
        with self._lock:
            self._beats.append(beat)
        return beat

    def unregister(self, beat: Heartbeat) -> None:
        with self._lock:
            if beat in self._beats:
                self._beats.remove(beat)
            self._logged.discard(beat.name)

    def check(self, now: float | None = None) -> list[Stall]:
        """The stalled heartbeats; each stall is logged once when found and once when it ends."""
        now = self._clock() if now is None else now
        with self._lock:
            beats = list(self._beats)
        stalls: list[Stall] = []
        for beat in beats:
            late = beat.stalled(now)
            if late is None:
                if beat.name in self._logged:
                    self._logged.discard(beat.name)
                    log.warning("%s is making progress again", beat.name)
                continue
            stall = Stall(beat.name, late[0], late[1])
            stalls.append(stall)
            if beat.name not in self._logged:
                self._logged.add(beat.name)
                log.error(
                    "%s stalled: no progress for %.1f s (deadline %.1f s) while %s; "
                    "withholding the systemd watchdog ping",
                    beat.name,
                    stall.seconds,
                    beat.deadline_s,
                    stall.doing,
                )
        return stalls

    @property
    def names(self) -> list[str]:
        with self._lock:
            return [b.name for b in self._beats]
