"""What the CPU computes a bundle at, asked of the engine: tests that depend on the CPU hold results to
that, never to one CPU kind's behaviour (OpenVINO's CPU plugin defaults to bf16 where the CPU has it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def executorch_arithmetic(bundle: Path, device: str = "CPU") -> str:
    """The arithmetic ExecuTorch's OpenVINO backend computes the bundle's program at on this machine,
    read back as the executorch engine reads it."""
    from runtime.bundle.bundle import Bundle
    from runtime.bundle.pte import parse_program
    from runtime.engine.executorch_engine import ExecuTorchEngine

    b = Bundle.open(bundle)
    method = parse_program(b.read_program(device), str(bundle))["forward"]
    return ExecuTorchEngine.read_back(method, device)[0]


def executorch_lowers(bundle: Path, device: str = "CPU") -> bool:
    """True when the executorch engine would compute the bundle's program below its precision here
    (an f32 program on a CPU with native bf16), so loading it there needs accept_lower_arithmetic."""
    from runtime.bundle.bundle import Bundle
    from runtime.engine.executorch_engine import lower_arithmetic

    program = Bundle.open(bundle).manifest.programs[device].precision
    return lower_arithmetic(program, executorch_arithmetic(bundle, device))


def executorch_options(bundle: Path) -> dict[str, bool]:
    """EngineConfig options with which the executorch engine loads the bundle on this CPU, whichever kind."""
    return {"accept_lower_arithmetic": True} if executorch_lowers(bundle) else {}


def load_on_this_cpu(bundle: Path, engine: str) -> tuple[Any, Any]:
    """Load ``bundle`` on ``engine`` as the daemon would, accepting the executorch engine's lower
    arithmetic where this CPU gives it one (the refusal itself is tested in test_engines.py); the
    caller holds outputs to ``engine.info.precision``. The loader pins the calling thread to the
    inference CPUs: the test's own affinity is put back. Returns the engine and its LoadReport."""
    import os

    from runtime.engine.config import EngineConfig
    from runtime.engine.loader import LoadReport, load_engine

    before = os.sched_getaffinity(0)
    options = executorch_options(bundle) if engine == "executorch" else {}
    report = LoadReport()
    try:
        config = EngineConfig(bundle=str(bundle), engine=engine, warmup_runs=0, **options)  # type: ignore[arg-type]
        loaded = load_engine(config, report=report)
    finally:
        os.sched_setaffinity(0, before)
    return loaded, report


def action_scale(bundle: Path) -> Any:
    """The bundle's test-case scale of its action (what one normalised unit is, per joint)."""
    import json

    import numpy as np

    return np.asarray(json.loads((bundle / "manifest.json").read_text())["test_case"]["scale"]["action"])


def bundle_tolerance(bundle: Path, precision: str) -> float:
    """The tolerance the bundle's gate holds ``precision`` to (for f32: measured when it was exported, from
    the reference's own rounding and what the lowered program computed)."""
    from runtime.bundle.bundle import Bundle

    return float(Bundle.open(bundle).manifest.test_case.tolerance[precision])


def normalised_error(got: Any, want: Any, scale: Any, shape: tuple[int, ...]) -> float:
    """The largest action error in normalised units; both chunks must have ``shape``."""
    import numpy as np

    assert got.shape == want.shape == shape
    return float((np.abs(got - want) / scale).max())
