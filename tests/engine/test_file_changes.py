"""A loaded engine is not exposed to its program file changing: rewritten in place or truncated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# In a subprocess: a mapping of the file would end this process with SIGBUS on truncation.
_SCRIPT = """
import os, sys
import numpy as np
from runtime.bundle.bundle import Bundle
from runtime.engine.config import EngineConfig
from runtime.engine.loader import load_engine
bundle = sys.argv[1]
# whatever arithmetic this CPU runs the program at: the point is the same numbers after the change
engine = load_engine(EngineConfig(bundle=bundle, engine=sys.argv[2], devices=("CPU",), warmup_runs=0,
                                  accept_lower_arithmetic=True))
b = Bundle.open(bundle)
case = b.test_case()
name = b.manifest.action_output
program = os.path.join(bundle, b.manifest.programs["CPU"].file)
first = engine.infer(case.inputs)[name]
print("parity", int(engine.info.precision != "f32" or float(np.abs(first - case.outputs[name]).max()) < 2e-5))
def check(when):
    got = engine.infer(case.inputs)[name]
    print(when, float(np.abs(got - first).max()), flush=True)
check("loaded")
size = os.path.getsize(program)
with open(program, "r+b") as f:  # rewritten in place, as cp or an editor would
    f.write(np.full(size // 4, 1e26, np.float32).tobytes())
check("rewritten")
os.truncate(program, 0)
check("truncated")
"""


@pytest.mark.parametrize("engine", ["openvino", "executorch"])
def test_engine_keeps_its_program_when_the_file_changes(bundle_copy: Path, engine: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(bundle_copy), engine], cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout}{done.stderr[-2000:]}"
    steps = ("loaded", "rewritten", "truncated")
    errors = dict(line.split() for line in done.stdout.splitlines() if line.split()[0] in steps)
    assert set(errors) == {"loaded", "rewritten", "truncated"}, done.stdout
    assert all(float(e) == 0 for e in errors.values()), errors  # the program it loaded, unchanged
    assert "parity 1" in done.stdout  # and that program is the right one
