"""The parity gate: replay the bundle's test case and compare with the eager reference.

The case is replayed several times in a row on the engine that will serve, each result checked:
OpenVINO has known ways of returning right numbers on the first inference and wrong ones later
(state carried between inferences), which a single replay cannot see. A non-finite output (NaN,
Inf) always fails, whatever the reference says.

Errors are measured in the units of the test case's ``scale`` (for a LeRobot policy, normalised
action units: the error divided by the action's normalisation statistic), so one tolerance means the
same for a gripper in [0, 100] as for a joint in radians.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from runtime.bundle.bundle import TestCase
from runtime.engine.base import Engine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ParityResult:
    max_abs_err: float
    tolerance: float
    ok: bool
    output: str  # the output with the largest error
    index: tuple[int, ...]  # where in that output
    got: float
    expected: float
    units: str = "absolute"  # what max_abs_err is measured in (the test case's scale_source)
    runs: int = 1  # replays checked
    failed_run: int = 0  # the first replay (1-based) that failed; 0 when none did

    def to_json(self) -> dict[str, Any]:
        return {
            "max_abs_err": self.max_abs_err,
            "tolerance": self.tolerance,
            "ok": self.ok,
            "output": self.output,
            "index": list(self.index),
            "got": self.got,
            "expected": self.expected,
            "units": self.units,
            "runs": self.runs,
            "failed_run": self.failed_run,
        }

    def describe(self) -> str:
        finite = math.isfinite(self.got)
        units = "" if self.units == "absolute" else f" in units of {self.units}"
        what = f"max abs error {self.max_abs_err:.3g}{units}" if finite else f"non-finite value {self.got}"
        text = (
            f"{what} in output {self.output!r} at {list(self.index)} "
            f"(got {self.got:.6g}, reference {self.expected:.6g}, absolute difference "
            f"{abs(self.got - self.expected):.3g}; tolerance {self.tolerance:.3g})"
        )
        if self.failed_run:
            text += f" on replay {self.failed_run} of {self.runs}"
        elif self.runs > 1:
            text += f" over {self.runs} replays"
        return text


def compare(
    outputs: dict[str, np.ndarray],
    reference: dict[str, np.ndarray],
    tolerance: float,
    scale: Mapping[str, Sequence[float]] | None = None,
    units: str = "absolute",
) -> ParityResult:
    """The largest error over all outputs; ``scale[name]`` divides the error along the last axis."""
    worst: ParityResult | None = None
    for name, ref in reference.items():
        got = outputs[name]
        if got.shape != ref.shape:
            return ParityResult(float("inf"), tolerance, False, name, (), float("nan"), float("nan"), units)
        with np.errstate(invalid="ignore"):  # inf - inf: flagged as non-finite below
            diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        if scale and name in scale:
            diff = diff / np.asarray(scale[name], dtype=np.float64)
        if diff.size == 0:
            continue
        # A NaN or Inf the program returns is an error of unbounded size, even where the reference
        # has one too: such a value must never reach the arm.
        bad = ~np.isfinite(got) | np.isnan(diff)
        if bad.any():
            flat = int(np.argmax(bad))
            err = float("nan") if np.isnan(diff.flat[flat]) else math.inf
        else:
            flat = int(np.argmax(diff))
            err = float(diff.flat[flat])
        idx = tuple(int(i) for i in np.unravel_index(flat, diff.shape))
        if worst is None or _worse(err, worst.max_abs_err):
            worst = ParityResult(err, tolerance, err <= tolerance, name, idx, float(got[idx]), float(ref[idx]), units)
    if worst is None:
        return ParityResult(0.0, tolerance, True, "", (), 0.0, 0.0, units)
    return worst


def _worse(a: float, b: float) -> bool:
    """NaN ranks worst of all, then the larger error."""
    return (math.isnan(a) and not math.isnan(b)) or (not math.isnan(b) and a > b)


def case_tolerance(engine: Engine, case: TestCase) -> float:
    """The tolerance for the precision ``engine`` really runs."""
    program = engine.manifest.programs.get(engine.info.device)
    # an int8 program is held to the bound its accuracy gate used, whatever float precision runs the rest
    key = "int8" if program is not None and program.precision == "int8" else engine.info.precision
    return case.tolerance.get(key, case.tolerance.get("f32", 2e-5))


def judge(engine: Engine, case: TestCase, outputs: dict[str, np.ndarray]) -> ParityResult:
    """``outputs`` of ``engine`` for ``case``'s inputs against the reference: the one comparison that the
    load gate and the serving canary both make, in the case's units and at the engine's tolerance.

    Errors are divided by the case's ``scale`` (normalised units for a LeRobot policy): holding an
    absolute error in degrees to a tolerance meant for normalised units would fail every real-size
    policy whose actions are tens of degrees.
    """
    return compare(outputs, case.outputs, case_tolerance(engine, case), case.scale, case.scale_source)


def check_once(engine: Engine, case: TestCase) -> ParityResult:
    """One replay of the test case through ``engine``, compared with the reference.

    The inputs are copied first: engines read them in place, and a program that writes into its
    input buffers (a known OpenVINO failure) must not corrupt the case for the next replay.
    """
    inputs = {k: v.copy() for k, v in case.inputs.items()}
    return judge(engine, case, engine.infer(inputs))


def run_parity(engine: Engine, case: TestCase, runs: int = 1) -> ParityResult:
    """Replay the test case ``runs`` times in a row; the first failing replay, else the worst one."""
    return _replay(engine, case, 1, runs, runs, None)


def _replay(
    engine: Engine,
    case: TestCase,
    first: int,
    last: int,
    runs: int,
    worst: ParityResult | None,
    beat: Callable[[str], None] | None = None,
) -> ParityResult:
    """Replays ``first`` to ``last`` of a gate of ``runs``, ``worst`` the worst of those before."""
    for n in range(first, last + 1):
        if beat is not None:
            beat(f"parity gate: replay {n} of {runs}")
        result = check_once(engine, case)
        if not result.ok:
            return replace(result, runs=runs, failed_run=n)
        if worst is None or result.max_abs_err > worst.max_abs_err:
            worst = result
    assert worst is not None, "runs must be >= 1"
    return replace(worst, runs=runs)


@dataclass
class PendingGate:
    """The replays of a parity gate still to run after the first ``passed`` of ``runs`` passed.

    The daemon says it is ready once those first replays passed; the inference worker runs these
    before it takes its first request, so no chunk is computed before the whole gate passed.
    ``result``: the gate so far (the whole gate's once :meth:`finish` ran: its worst replay, or the
    one that failed).
    """

    engine: Engine
    case: TestCase
    passed: int
    runs: int
    result: ParityResult

    @property
    def done(self) -> bool:
        """Every replay ran, or one failed."""
        return self.passed >= self.runs or not self.result.ok

    def describe(self) -> str:
        return f"{self.passed} of {self.runs} replays passed"

    def finish(self, beat: Callable[[str], None] | None = None) -> ParityResult:
        """Run the remaining replays (the first failing one ends the gate); the gate's result."""
        while not self.done:  # one replay at a time, so ``passed`` says how far it is meanwhile
            n = self.passed + 1
            self.result = _replay(self.engine, self.case, n, n, self.runs, self.result, beat)
            if self.result.ok:
                self.passed = n
        return self.result
