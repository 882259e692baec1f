"""Stalls: holding the last safe goal while no goal is due, then the stall action once, after a while.

A stall has a key (``starved``, ``priming``, ``deadman``, ``untrusted``, ``stale:<streams>``): a new
key is a new reason, reported once; the clock runs from the first stalled tick until motion resumes,
whatever the reason meanwhile. After ``stall_timeout_s`` the stall action (hold, rest, torque off) is
due once per stall. Starvation of a running policy and the teleop deadman share this one path.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StallTick:
    #: the stall started this tick (hold the last safe goal from now)
    began: bool
    #: the reason changed this tick (report it, unless it is priming)
    new_reason: bool
    #: the stall action is due this tick (once per stall)
    act: bool
    waited: float


class Stall:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.since: float | None = None
        self.key = ""
        self.reason = ""
        self.acted = False

    def tick(self, now: float, key: str, reason: str) -> StallTick:
        """A tick without a goal due, for ``reason``."""
        began = self.since is None
        if self.since is None:
            self.since = now
        new_reason = self.key != key
        if new_reason:
            self.key, self.reason = key, reason
        waited = now - self.since
        act = waited > self.timeout_s and not self.acted
        if act:
            self.acted = True
        return StallTick(began, new_reason, act, waited)

    def resume(self, now: float) -> float | None:
        """Motion resumed: seconds stalled, if there was a stall worth reporting (not priming)."""
        stalled = now - self.since if self.since is not None and self.key != "priming" else None
        self.clear()
        return stalled

    def clear(self) -> None:
        self.since = None
        self.key = ""
        self.reason = ""
        self.acted = False
