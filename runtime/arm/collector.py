"""The arm process's garbage collection: never on its own, only right after a tick's goal write.

CPython collects when allocations outnumber frees by a threshold, in whichever thread allocates next,
holding the interpreter lock throughout. In the arm process that thread may be the loop's, between
its wake and its write (decoding the link's messages allocates), or the main thread, while the loop
waits for the lock to return from its write call: either way a write leaves late. So automatic
collection is off here (``gc.disable()`` after ``gc.freeze()`` at start), and the loop's thread
collects in its slack, after the write and the tick's messages: the young generations every second,
everything every minute. Each collection is timed; ``control status`` shows the counts and the worst.
"""

from __future__ import annotations

import gc
import time
from typing import Any


class Collector:
    def __init__(self, rate_hz: float, *, young_every_s: float = 1.0, full_every_s: float = 60.0) -> None:
        self._young_every = max(1, round(rate_hz * young_every_s))
        self._full_every = max(self._young_every, round(rate_hz * full_every_s))
        self._ticks = 0
        self.collections = 0
        self.full_collections = 0
        self.freed = 0
        self.last_ms = 0.0
        self.max_ms = 0.0
        self.full_max_ms = 0.0

    @staticmethod
    def take_over() -> None:
        """From now on nothing collects unless :meth:`after_write` does (what exists now is frozen:
        it is never scanned again)."""
        gc.collect()
        gc.freeze()
        gc.disable()

    def after_write(self) -> None:
        """Called once a tick, after its write: a collection when one is due."""
        self._ticks += 1
        if self._ticks % self._young_every:
            return
        full = self._ticks % self._full_every == 0
        started = time.perf_counter()
        self.freed += gc.collect(2 if full else 1)
        ms = (time.perf_counter() - started) * 1e3
        self.collections += 1
        self.last_ms = ms
        self.max_ms = max(self.max_ms, ms)
        if full:
            self.full_collections += 1
            self.full_max_ms = max(self.full_max_ms, ms)

    def status(self) -> dict[str, Any]:
        return {
            "automatic": gc.isenabled(),
            "collections": self.collections,
            "full_collections": self.full_collections,
            "freed": self.freed,
            "last_ms": round(self.last_ms, 3),
            "max_ms": round(self.max_ms, 3),
            "full_max_ms": round(self.full_max_ms, 3),
        }
