"""The machine a benchmark ran on, stated beside its numbers: the CPU model, the vector extensions that
decide what inference (f32, bf16, INT8) and video encoding cost, and how many CPUs the process may use.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from runtime.engine.devices import ARITHMETIC_FLAGS

# The vector extensions that decide what inference (f32, bf16, INT8) and video encoding cost: those
# that decide what OpenVINO's kernels compute (said with every tolerance measured), and two more.
CPU_FLAGS = (*ARITHMETIC_FLAGS, "avx_vnni", "amx_tile")


def cpu_summary() -> dict[str, Any]:
    """The CPU model and the vector flags that decide what inference costs, as ``lscpu`` reports them,
    and how many CPUs this process may use: stated beside every benchmark's numbers."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    model = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "")
    flags = sorted({f for f in CPU_FLAGS if f in out.split()})
    return {"cpu": model or "unknown", "cpu_flags": flags, "cpus": len(os.sched_getaffinity(0))}


def cpu_line(summary: dict[str, Any] | None = None) -> str:
    """``cpu_summary`` on one line: ``"<model>; <flags>"`` (``no AVX2`` when it has none of them)."""
    s = summary if summary is not None else cpu_summary()
    return f"{s['cpu']}; {' '.join(s['cpu_flags']) or 'no AVX2'}"
