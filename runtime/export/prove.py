"""An export proves its own bundle: the load gate run on it in a child, and its f32 tolerance measured.

Before an export says "bundle written", the daemon's own load (runtime.engine.loader: device choice,
pinning, the parity replays) runs on the staged bundle in a fresh Python process, so a native crash
of OpenVINO ends that process and not the export, exactly as the robot will run it. The same replays
measure the lowered program's error against the reference on this machine; with the reference's own
float32 rounding (measured when tracing, runtime.export.trace.reference_spread), that gives the f32
tolerance the bundle carries: ``F32_MARGIN`` times the larger of the two, never below the fixed floor
and never above ``F32_CEILING`` (runtime.bundle.manifest). An error over the ceiling is not rounding:
the export is refused, naming the error and the one remedy that changes the outcome.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime.bundle.manifest import DEFAULT_TOLERANCE, F32_CEILING, F32_MARGIN, ToleranceBasis
from runtime.errors import ExportError

log = logging.getLogger(__name__)

GATE_REPORT = "gate.json"


def run_gate(bundle: str, device: str, report_path: str) -> None:
    """In a child process: load ``bundle`` as the daemon does (parity replays included) and write what the
    gate found to ``report_path``. A failed parity is reported, not raised: the parent decides."""
    from runtime.engine.config import EngineConfig
    from runtime.engine.devices import cpu_flags
    from runtime.engine.executorch_engine import lower_arithmetic
    from runtime.engine.loader import LoadReport, load_engine

    # the parent says what the gate found; the loader's "serving anyway" would be misleading here
    logging.getLogger("runtime.engine.loader").setLevel(logging.ERROR)
    report = LoadReport()
    config = EngineConfig(
        bundle=bundle, devices=(device,), warmup_runs=0, allow_parity_failure=True, accept_lower_arithmetic=True
    )
    engine = load_engine(config, report=report)
    try:
        info = engine.info
        parity = report.parity
        assert parity is not None, "load_engine runs the parity gate"
        program = engine.manifest.programs[info.device].precision
        out = {
            "engine": info.engine,
            "device": info.device,
            "precision": info.precision,
            "program_precision": program,
            # the executorch engine ran a float program below its precision: the daemon's default refuses that
            "below_program": info.engine == "executorch" and lower_arithmetic(program, info.precision),
            "parity": parity.to_json(),
            "describe": parity.describe(),
            "cpu": cpu_flags(),
            "ready_ms": report.timing_ms.get("ready"),
        }
    finally:
        engine.close()
    Path(report_path).write_text(json.dumps(out))


def measure(stage: Path, device: str) -> dict[str, Any]:
    """The load gate on the staged bundle, in a child process; what it found."""
    from runtime.export.quantize import NativeCrash, run_isolated

    report = stage.parent / f"{stage.name}.{GATE_REPORT}"
    report.unlink(missing_ok=True)
    try:
        run_isolated(run_gate, str(stage), device, str(report))
    except NativeCrash as e:
        raise ExportError(
            f"the load gate crashed OpenVINO ({e.signal_name}) running the exported program on this machine; "
            "nothing was written"
        ) from e
    except ExportError as e:
        raise ExportError(
            f"the load gate failed on the exported bundle (see the output above); nothing was written: {e}"
        ) from e
    try:
        found: dict[str, Any] = json.loads(report.read_text())
    finally:
        report.unlink(missing_ok=True)
    return found


def derive(
    found: Mapping[str, Any], spread: float | None, given: Mapping[str, float], traced_by: str
) -> tuple[dict[str, float], dict[str, ToleranceBasis]]:
    """The tolerances the bundle carries and their basis, from the gate's measurement and the trace's spread.

    Raises ExportError when the program misses its reference by more than any tolerance may allow.
    """
    tolerance = dict(DEFAULT_TOLERANCE)
    tolerance.update(given)
    basis: dict[str, ToleranceBasis] = {}
    parity = found["parity"]
    precision = str(found["precision"])
    error = float(parity["max_abs_err"])
    lowered_by = f"{found['engine']} engine at {precision} on {found['device']} ({found['cpu']})"
    if not math.isfinite(error):
        raise ExportError(
            f"the exported program fails its own load gate on this machine: {found['describe']}; nothing was "
            "written; the program returns a non-finite value: it cannot be served"
        )
    if "f32" in given:
        basis["f32"] = ToleranceBasis(
            "given",
            reference_spread=spread,
            lowered_error=error if precision == "f32" else None,
            lowered_by=lowered_by if precision == "f32" else "",
            traced_by=traced_by,
        )
    else:
        lowered = error if precision == "f32" else None
        measured = max(v for v in (spread, lowered, 0.0) if v is not None)
        f32 = max(DEFAULT_TOLERANCE["f32"], F32_MARGIN * measured)
        if f32 > F32_CEILING:
            which = (
                "the lowered program on this machine"
                if lowered is not None and lowered >= (spread or 0)
                else ("the reference's own float32 rounding (float32 against float64)")
            )
            raise ExportError(
                f"the program does not reproduce its reference closely enough to be f32 rounding: {which} differs by "
                f"{measured:.3g} in units of the test case's scale, and {F32_MARGIN:g} x that is over the "
                f"{F32_CEILING:g} an f32 program may differ by ({found['describe']}). Nothing was written. If this "
                f"model is known to be that sensitive, export it with --tolerance f32={F32_MARGIN * measured:.2g}"
            )
        tolerance["f32"] = f32
        basis["f32"] = ToleranceBasis(
            "measured",
            reference_spread=spread,
            lowered_error=lowered,
            lowered_by=lowered_by if lowered is not None else "",
            traced_by=traced_by,
        )
    limit = tolerance.get(precision, tolerance["f32"]) if precision != "int8" else tolerance["int8"]
    if not error <= limit and int(parity.get("failed_run", 0)) > 1:
        raise ExportError(
            f"the exported program fails its own load gate on this machine: {found['describe']}: its answers "
            f"change from one inference to the next (right before replay {parity['failed_run']}), state carried "
            "between inferences that no tolerance makes right; nothing was written"
        )
    if not error <= limit and found.get("below_program"):
        # what this machine computes is not what the bundle serves by default (the daemon refuses it unless
        # engine.accept_lower_arithmetic): said, not a reason to refuse a program other machines run at its precision
        log.warning(
            "the executorch engine runs this %s program at %s on this machine (ExecuTorch's OpenVINO backend "
            "passes no precision), where it misses its reference: %s; the daemon here refuses to serve it at %s "
            "unless engine.accept_lower_arithmetic, and would then refuse it at the load gate",
            found["program_precision"],
            precision,
            found["describe"],
            precision,
        )
    elif not error <= limit:
        raise ExportError(
            f"the exported program fails its own load gate on this machine: {found['describe']} "
            f"(the {found['engine']} engine computed at {precision}); nothing was written; export it with "
            f"--tolerance {precision}={2 * error:.2g} if that error is acceptable for this policy"
        )
    return tolerance, basis
