"""A small local policy that takes over when the remote one is lost (``[policy] fallback = true``, the
local bundle in ``[engine]``): :class:`Fallback`, the loop's feed's inference in front of both.

Hold first: when the remote's link is lost the loop holds (the feed says the policy is unreachable,
the plan is dropped) for ``policy.fallback_after_s``; then the local policy drives and the loop asks it
as it asked the remote, from a fresh plan. The remote coming back does not take the arm back by
itself: the local policy drives until the next ``control start`` (a new run, whose first request
starts a new observation history), which goes to the remote again if it answers. Which one drives,
and since when, is in status and in the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from runtime.arm_control.feed import Inference
from runtime.bundle.interface import PolicyInterface
from runtime.control.feed import OnDone, Prefix
from runtime.errors import ConfigError

log = logging.getLogger(__name__)


def check_fallback(remote: PolicyInterface, local: PolicyInterface) -> None:
    """ConfigError naming what differs when the local policy cannot stand in for the remote one."""
    for name, a, b in (
        ("observation inputs", remote.observation_inputs, local.observation_inputs),
        ("joints", remote.action_names, local.action_names),
        ("chunk length", remote.chunk_length, local.chunk_length),
        ("control rate", remote.control_rate_hz, local.control_rate_hz),
        ("observation frames", remote.observation_history, local.observation_history),
        ("real-time chunking steps", remote.rtc_chunk_size, local.rtc_chunk_size),
    ):
        if a != b:
            raise ConfigError(
                f"policy.fallback: the local bundle's {name} ({b}) differ from the remote policy's ({a}); the "
                "fallback must take what the remote takes and answer the same chunks for the same joints and rate"
            )


class Fallback:
    def __init__(
        self,
        remote: Inference,
        local: Inference,
        local_name: str,
        after_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.remote, self.local = remote, local
        self.local_name = local_name
        self.after_s = after_s
        self._clock = clock
        self.driving = "remote"
        self._lost_at: float | None = None
        self._since = clock()
        self.takeovers = 0

    @property
    def task(self) -> str:
        return self.remote.task

    @task.setter
    def task(self, value: str) -> None:
        self.remote.task = value
        self.local.task = value

    @property
    def takes_task(self) -> bool:
        return self.remote.takes_task

    def _current(self) -> Inference:
        return self.local if self.driving == "local" else self.remote

    def submit(
        self, inputs: list[np.ndarray], on_done: OnDone, *, reset: bool = False, prefix: Prefix | None = None
    ) -> bool:
        if reset and self.driving == "local" and self.remote.unreachable() is None:
            self._drive("remote", "a new run, and the remote answers")
        return self._current().submit(inputs, on_done, reset=reset, prefix=prefix)

    def observe(self, inputs: list[np.ndarray], *, reset: bool = False) -> None:
        self._current().observe(inputs, reset=reset)

    def failure(self) -> str | None:
        return self._current().failure()

    def pending(self) -> str | None:
        return self._current().pending()

    def unreachable(self) -> str | None:
        if self.driving == "local":
            return None
        lost = self.remote.unreachable()
        now = self._clock()
        if lost is None:
            self._lost_at = None
            return None
        if self._lost_at is None:
            self._lost_at = now
        if now - self._lost_at < self.after_s or self.local.failure() or self.local.pending():
            return lost  # hold first
        self._drive("local", f"the remote is lost ({lost})")
        # a fresh plan from the local policy: the loop dropped the remote's when it held
        return None

    def _drive(self, which: str, why: str) -> None:
        self.driving = which
        self._since = self._clock()
        self._lost_at = None
        if which == "local":
            self.takeovers += 1
            log.warning("policy: the local fallback %s drives now: %s", self.local_name, why)
        else:
            log.warning("policy: the remote policy drives again: %s", why)

    def describe(self) -> dict[str, Any]:
        out = dict(self.remote.describe())
        out["driving"] = "local fallback" if self.driving == "local" else "remote"
        out["driving_for_s"] = round(self._clock() - self._since, 3)
        out["fallback"] = {**self.local.describe(), "name": self.local_name, "takeovers": self.takeovers}
        return out
