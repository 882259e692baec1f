"""The parity gate: replay the bundle's test case and compare with the eager reference.

The case is replayed several times in a row on the engine that will serve, each result checked:
OpenVINO has known ways of returning right numbers on the first inference and wrong ones later
(state carried between inferences), which a single replay cannot see. A non-finite output (NaN,
Inf) always fails, whatever the reference says.
"""

from __future__ import annotations

import logging
import math
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
            "runs": self.runs,
            "failed_run": self.failed_run,
        }

    def describe(self) -> str:
        finite = math.isfinite(self.got)
        what = f"max abs error {self.max_abs_err:.3g}" if finite else f"non-finite value {self.got}"
        text = (
            f"{what} in output {self.output!r} at {list(self.index)} "
            f"(got {self.got:.6g}, reference {self.expected:.6g}; tolerance {self.tolerance:.3g})"
        )
        if self.failed_run:
            text += f" on replay {self.failed_run} of {self.runs}"
        elif self.runs > 1:
            text += f" over {self.runs} replays"
        return text


def compare(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray], tolerance: float) -> ParityResult:
    worst: ParityResult | None = None
    for name, ref in reference.items():
        got = outputs[name]
        if got.shape != ref.shape:
            return ParityResult(float("inf"), tolerance, False, name, (), float("nan"), float("nan"))
        with np.errstate(invalid="ignore"):  # inf - inf: flagged as non-finite below
            diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
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
            worst = ParityResult(err, tolerance, err <= tolerance, name, idx, float(got[idx]), float(ref[idx]))
    if worst is None:
        return ParityResult(0.0, tolerance, True, "", (), 0.0, 0.0)
    return worst


def _worse(a: float, b: float) -> bool:
    """NaN ranks worst of all, then the larger error."""
    return (math.isnan(a) and not math.isnan(b)) or (not math.isnan(b) and a > b)


def case_tolerance(engine: Engine, case: TestCase) -> float:
    """The tolerance for the precision ``engine`` really runs."""
    return case.tolerance.get(engine.info.precision, case.tolerance.get("f32", 2e-5))


def check_once(engine: Engine, case: TestCase) -> ParityResult:
    """One replay of the test case through ``engine``, compared with the reference.

    The inputs are copied first: engines read them in place, and a program that writes into its
    input buffers (a known OpenVINO failure) must not corrupt the case for the next replay.
    """
    inputs = {k: v.copy() for k, v in case.inputs.items()}
    return compare(engine.infer(inputs), case.outputs, case_tolerance(engine, case))


def run_parity(engine: Engine, case: TestCase, runs: int = 1) -> ParityResult:
    """Replay the test case ``runs`` times in a row; the first failing replay, else the worst one."""
    worst: ParityResult | None = None
    for n in range(1, runs + 1):
        result = check_once(engine, case)
        if not result.ok:
            return replace(result, runs=runs, failed_run=n)
        if worst is None or result.max_abs_err > worst.max_abs_err:
            worst = result
    assert worst is not None, "runs must be >= 1"
    return replace(worst, runs=runs)
