"""The parity gate: replay the bundle's test case and compare with the eager reference."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
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

    def to_json(self) -> dict[str, Any]:
        return {
            "max_abs_err": self.max_abs_err,
            "tolerance": self.tolerance,
            "ok": self.ok,
            "output": self.output,
            "index": list(self.index),
            "got": self.got,
            "expected": self.expected,
        }

    def describe(self) -> str:
        return (
            f"max abs error {self.max_abs_err:.3g} in output {self.output!r} at {list(self.index)} "
            f"(got {self.got:.6g}, reference {self.expected:.6g}; tolerance {self.tolerance:.3g})"
        )


def compare(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray], tolerance: float) -> ParityResult:
    worst: ParityResult | None = None
    for name, ref in reference.items():
        got = outputs[name]
        if got.shape != ref.shape:
            return ParityResult(float("inf"), tolerance, False, name, (), float("nan"), float("nan"))
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        if diff.size == 0:
            continue
        # argmax returns the first NaN when there is one: a NaN (engine or reference) fails the gate
        # and is what the report points at
        flat = int(np.argmax(diff))
        err = float(diff.flat[flat])
        idx = tuple(int(i) for i in np.unravel_index(flat, diff.shape))
        # NaN ranks worst of all: a NaN in one output must not be hidden by a finite error in the next
        if worst is None or (not math.isnan(worst.max_abs_err) and not err <= worst.max_abs_err):
            worst = ParityResult(err, tolerance, err <= tolerance, name, idx, float(got[idx]), float(ref[idx]))
    if worst is None:
        return ParityResult(0.0, tolerance, True, "", (), 0.0, 0.0)
    return worst


def run_parity(engine: Engine, case: TestCase) -> ParityResult:
    """Run the test case through ``engine``; the tolerance is the one for the precision it really runs."""
    tolerance = case.tolerance.get(engine.info.precision, case.tolerance.get("f32", 2e-5))
    outputs = engine.infer(case.inputs)
    return compare(outputs, case.outputs, tolerance)
