"""The parity gate: replay the bundle's test case and compare with the eager reference.

Errors are measured in the units of the test case's ``scale`` (for a LeRobot policy, normalised
action units: the error divided by the action's normalisation statistic), so one tolerance means the
same for a gripper in [0, 100] as for a joint in radians.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
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
    units: str = "absolute"  # what max_abs_err is measured in (the test case's scale_source)

    def to_json(self) -> dict[str, Any]:
        return {
            "units": self.units,
            "max_abs_err": self.max_abs_err,
            "tolerance": self.tolerance,
            "ok": self.ok,
            "output": self.output,
            "index": list(self.index),
            "got": self.got,
            "expected": self.expected,
        }

    def describe(self) -> str:
        units = "" if self.units == "absolute" else f" in units of {self.units}"
        return (
            f"max abs error {self.max_abs_err:.3g}{units} in output {self.output!r} at {list(self.index)} "
            f"(got {self.got:.6g}, reference {self.expected:.6g}, absolute difference "
            f"{abs(self.got - self.expected):.3g}; tolerance {self.tolerance:.3g})"
        )


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
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        if scale and name in scale:
            diff = diff / np.asarray(scale[name], dtype=np.float64)
        if diff.size == 0:
            continue
        # argmax returns the first NaN when there is one: a NaN (engine or reference) fails the gate
        # and is what the report points at
        flat = int(np.argmax(diff))
        err = float(diff.flat[flat])
        idx = tuple(int(i) for i in np.unravel_index(flat, diff.shape))
        # NaN ranks worst of all: a NaN in one output must not be hidden by a finite error in the next
        if worst is None or (not math.isnan(worst.max_abs_err) and not err <= worst.max_abs_err):
            worst = ParityResult(err, tolerance, err <= tolerance, name, idx, float(got[idx]), float(ref[idx]), units)
    if worst is None:
        return ParityResult(0.0, tolerance, True, "", (), 0.0, 0.0, units)
    return worst


def run_parity(engine: Engine, case: TestCase) -> ParityResult:
    """Run the test case through ``engine``; the tolerance is the one for the precision it really runs."""
    program = engine.manifest.programs.get(engine.info.device)
    # an int8 program is held to the bound its accuracy gate used, whatever float precision runs the rest
    key = "int8" if program is not None and program.precision == "int8" else engine.info.precision
    tolerance = case.tolerance.get(key, case.tolerance.get("f32", 2e-5))
    outputs = engine.infer(case.inputs)
    return compare(outputs, case.outputs, tolerance, case.scale, case.scale_source)
