"""The action queue: actions keyed by the control tick they are meant for.

A chunk computed from the observation taken at tick ``t`` holds the actions for ticks ``t, t+1, ...``.
When it arrives at tick ``now``, actions for ticks already past are dropped (counted: the measured
inference delay), the rest are merged into the queue. Where chunks overlap, ``aggregate`` decides:
``latest`` replaces, ``average`` keeps the running mean, ``temporal_ensemble`` is ACT's online
exponential weighting (weight ``exp(-coeff * i)`` for the i-th prediction of a tick, i = 0 the
oldest, as LeRobot's ``ACTTemporalEnsembler``). Storage is a preallocated ring indexed by tick, so
the control tick allocates nothing here. :meth:`ActionQueue.leftover` is the plan a real-time
chunking request continues (read only when a chunk is asked for).
"""

from __future__ import annotations

import math

import numpy as np

from runtime.control.config import Aggregate


class ActionQueue:
    def __init__(self, n_joints: int, horizon: int, aggregate: Aggregate = "latest", coeff: float = 0.01) -> None:
        """``horizon``: the most ticks ahead an action can be queued (ring size)."""
        self.size = max(8, horizon)
        self.aggregate = aggregate
        self.coeff = 0.0 if aggregate == "average" else coeff
        self._values = np.zeros((self.size, n_joints))
        self._wsum = np.zeros(self.size)
        self._count = np.zeros(self.size, dtype=np.int64)
        self._tick = np.full(self.size, -1, dtype=np.int64)
        self._last = -1  # the last tick that has an action
        self._taken = -1  # the last tick whose action was taken (its value stays in its slot)
        self.dropped = 0  # actions that arrived for ticks already past
        self.merged = 0

    def clear(self) -> None:
        self._tick[:] = -1
        self._last = -1
        self._taken = -1

    def depth(self, now: int) -> int:
        """Actions queued for ticks ``now`` and later."""
        return max(0, self._last - now + 1)

    def merge(self, chunk: np.ndarray, first_tick: int, now: int) -> int:
        """Merge ``chunk`` (actions for ticks ``first_tick...``); returns how many were dropped as past."""
        k = len(chunk)
        skip = max(0, now - first_tick)
        self.dropped += min(skip, k)
        if skip >= k:
            return min(skip, k)
        ticks = np.arange(first_tick + skip, first_tick + k)
        ticks = ticks[ticks < now + self.size]  # never wrap onto a tick still queued
        slots = ticks % self.size
        new = chunk[skip : skip + len(ticks)]
        fresh = self._tick[slots] != ticks
        if self.aggregate == "latest":
            self._values[slots] = new
            self._count[slots] = 1
        else:
            count = np.where(fresh, 0, self._count[slots])
            wsum = np.where(fresh, 0.0, self._wsum[slots])
            w = np.exp(-self.coeff * count) if self.coeff else np.ones(len(slots))
            old = np.where(fresh[:, None], 0.0, self._values[slots])
            self._values[slots] = (old * wsum[:, None] + new * w[:, None]) / (wsum + w)[:, None]
            self._wsum[slots] = wsum + w
            self._count[slots] = count + 1
        if self.aggregate == "latest":
            self._wsum[slots] = 1.0
        self._tick[slots] = ticks
        self._last = max(self._last, int(ticks[-1])) if len(ticks) else self._last
        self.merged += len(ticks)
        return skip

    def take(self, tick: int) -> np.ndarray | None:
        """The action for ``tick`` (removed from the queue), or None when none is due."""
        slot = tick % self.size
        if self._tick[slot] != tick:
            return None
        self._tick[slot] = -1
        self._taken = tick
        action: np.ndarray = self._values[slot]
        return action

    def leftover(self, tick: int, most: int) -> np.ndarray | None:
        """The plan from ``tick`` on: its action (taken or not) and the queued ones after it, in tick
        order up to the first tick without one, at most ``most`` (float32 ``[steps, joints]``); None
        when there is no action for ``tick``."""
        ticks = []
        for t in range(tick, tick + min(most, self.size)):
            slot = t % self.size
            if self._tick[slot] != t and not (t == self._taken and self._tick[slot] == -1):
                break
            ticks.append(slot)
        if not ticks:
            return None
        return self._values[ticks].astype(np.float32)

    @staticmethod
    def ensemble_weights(n: int, coeff: float) -> list[float]:
        """The weights ``temporal_ensemble`` gives n predictions of one tick, oldest first (for docs and tests)."""
        return [math.exp(-coeff * i) for i in range(n)]
