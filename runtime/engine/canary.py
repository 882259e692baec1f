"""The serving canary: replay the bundle's test case between requests, and stop serving on a wrong answer.

OpenVINO can return right numbers at load and wrong ones later, with no error. The parity gate sees
the first replays only; the canary keeps checking while serving. Only the thread that owns the
engine may call :meth:`Canary.check` (engines are not thread-safe); other threads read
:attr:`Canary.state`, an immutable snapshot replaced whole after each check.

Once a check fails the canary stays failed: nothing the engine returns afterwards can be trusted,
so serving stops until the policy is loaded again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from runtime.bundle.bundle import TestCase
from runtime.engine.base import Engine
from runtime.engine.parity import ParityResult, case_tolerance, judge

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CanaryState:
    """What the canary has seen: the ``verification`` part of ``stats`` and the status line."""

    interval_s: float
    checks: int = 0
    last_max_abs_err: float | None = None
    worst_max_abs_err: float | None = None
    tolerance: float | None = None
    units: str | None = None  # what the errors are measured in: the test case's scale, as at load
    last_check_ms: float | None = None
    max_check_ms: float | None = None
    failed: bool = False
    failure: str | None = None  # why, with the size of the error; None while healthy

    def to_wire(self) -> dict[str, Any]:
        return {
            "interval_s": self.interval_s,
            "checks": self.checks,
            "last_max_abs_err": self.last_max_abs_err,
            "worst_max_abs_err": self.worst_max_abs_err,
            "tolerance": self.tolerance,
            "units": self.units,
            "last_check_ms": self.last_check_ms,
            "max_check_ms": self.max_check_ms,
            "failed": self.failed,
            "failure": self.failure,
        }


class Canary:
    """Replays ``case`` on the serving engine every ``interval_s`` seconds, preferably when idle.

    A check is one inference. It is due once ``interval_s`` has passed since the last one and the
    engine has nothing queued; under a load that never leaves the queue empty it runs anyway between
    two requests once it is a whole period late, so a steady stream cannot starve it. Either way a
    real request waits for at most one check.
    """

    def __init__(
        self, case: TestCase, interval_s: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"canary interval: expected > 0 seconds, got {interval_s}")
        self._case = case
        self._clock = clock
        # The replay reads private copies refreshed before each check: engines read inputs in place,
        # and a program that writes into its input buffers must not corrupt the reference inputs.
        self._inputs = {k: v.copy() for k, v in case.inputs.items()}
        self._next = clock() + interval_s
        self.interval_s = interval_s
        self.state = CanaryState(interval_s)
        # a program served despite a failed gate is held to what it computed at load: said in a failure
        self._against = "" if case.baseline == "the reference" else f" (against {case.baseline})"

    @property
    def failure(self) -> str | None:
        return self.state.failure

    def seconds_until_due(self) -> float | None:
        """How long the owner may wait for work before checking; None once failed (no more checks)."""
        if self.state.failed:
            return None
        return max(0.0, self._next - self._clock())

    def due(self, *, idle: bool) -> bool:
        if self.state.failed:
            return False
        late = self._clock() - self._next
        return late >= 0 and (idle or late >= self.interval_s)

    def check(self, engine: Engine) -> bool:
        """Run one check now on ``engine`` (the caller owns it); False when it failed, now or before."""
        if self.state.failed:
            return False  # failed stays failed, and is logged once
        started = self._clock()
        tolerance = case_tolerance(engine, self._case)
        result: ParityResult | None = None
        try:
            for name, src in self._case.inputs.items():
                np.copyto(self._inputs[name], src)
            result = judge(engine, self._case, engine.infer(self._inputs))
            error: str | None = None if result.ok else result.describe()
        except Exception as e:
            # An engine that cannot run its own test case any more is not fit to serve either; and
            # the worker thread running this must survive whatever the engine raises.
            error = f"the test case no longer runs: {type(e).__name__}: {e}"
        done = self._clock()
        self._next = done + self.interval_s
        self._record(result, tolerance, (done - started) * 1e3, error)
        return error is None

    def _record(self, result: ParityResult | None, tolerance: float, ms: float, error: str | None) -> None:
        s = self.state
        err = result.max_abs_err if result is not None else None
        worst = s.worst_max_abs_err
        if err is not None and (worst is None or err > worst):
            worst = err
        state = replace(
            s,
            checks=s.checks + 1,
            last_max_abs_err=err,
            worst_max_abs_err=worst,
            tolerance=tolerance,
            units=result.units if result is not None else s.units,
            last_check_ms=round(ms, 3),
            max_check_ms=round(max(ms, s.max_check_ms or 0.0), 3),
        )
        if error is not None:
            failure = (
                f"verification failed on canary check {state.checks}: {error}{self._against}; "
                "the engine's answers can no longer be trusted, reload the policy"
            )
            state = replace(state, failed=True, failure=failure)
            log.error("%s", failure)
        self.state = state
