"""The INT8 gate's own process: a program that crashes OpenVINO ends a child, not ``quantize``; its
float layers are tried at the CPU's default, then at f32, and what ran and what crashed is recorded.
Stand-in programs here (a child that kills itself, a runner that crashes on cue); the gate on real
exported programs is in tests/engine/test_quantize.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.errors import ExportError
from runtime.export.quantize import FLOAT_TRIES, NativeCrash, first_that_runs, gate_summary, run_isolated


def _die(signal_number: int) -> None:
    os.kill(os.getpid(), signal_number)


def _fail() -> None:
    raise RuntimeError("not a crash")


def _write(path: str) -> None:
    Path(path).write_text("ran")


def test_a_child_killed_by_a_signal_is_a_native_crash_named_by_its_signal() -> None:
    with pytest.raises(NativeCrash) as e:
        run_isolated(_die, signal.SIGFPE)
    assert e.value.signal_name == "SIGFPE"
    with pytest.raises(NativeCrash) as e:
        run_isolated(_die, signal.SIGSEGV)
    assert e.value.signal_name == "SIGSEGV"


def test_a_child_that_fails_otherwise_is_an_export_error_and_one_that_runs_returns(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"^running the INT8 program in a child process failed \(exit status 1\)"):
        run_isolated(_fail)
    run_isolated(_write, str(tmp_path / "out"))
    assert (tmp_path / "out").read_text() == "ran"


class Runner:
    """Runs the INT8 program with each try's properties; crashes on the precisions named."""

    def __init__(self, crash_on: set[str | None]) -> None:
        self.crash_on = crash_on
        self.asked: list[dict[str, Any]] = []

    def __call__(self, props: dict[str, Any]) -> tuple[list[np.ndarray], str]:
        self.asked.append(props)
        hint = props.get("INFERENCE_PRECISION_HINT")
        if hint in self.crash_on:
            raise NativeCrash("SIGFPE")
        return [np.full(2, len(self.asked), np.float32)], hint or "bf16"


def test_the_cpu_default_runs_first_and_nothing_is_recorded_when_it_does() -> None:
    run = Runner(crash_on=set())
    got, arithmetic, asked, crashed = first_that_runs(run, "bf16")
    assert run.asked == [{}]
    assert (arithmetic, asked, crashed) == ("bf16", None, {})
    np.testing.assert_array_equal(got[0], [1, 1])


def test_a_crash_at_the_default_falls_back_to_f32_and_is_recorded_by_precision() -> None:
    run = Runner(crash_on={None})
    got, arithmetic, asked, crashed = first_that_runs(run, "bf16")
    assert run.asked == [{}, {"INFERENCE_PRECISION_HINT": "f32"}]
    assert (arithmetic, asked, crashed) == ("f32", "f32", {"bf16": "SIGFPE"})
    np.testing.assert_array_equal(got[0], [2, 2])  # the outputs of the try that ran


def test_a_crash_at_every_precision_is_refused_naming_each() -> None:
    run = Runner(crash_on={None, "f32"})
    with pytest.raises(ExportError) as e:
        first_that_runs(run, "bf16")
    assert len(run.asked) == len(FLOAT_TRIES) == 2
    assert str(e.value).startswith("INT8 refused: the INT8 program crashes OpenVINO ")
    assert str(e.value).endswith(
        "on this CPU with its float layers at every precision tried (bf16: SIGFPE, f32: SIGFPE); keep the float bundle"
    )


def test_the_summary_says_what_the_float_layers_run_at_when_the_default_crashed() -> None:
    gate = {"max_error": 0.05, "mean_error": 0.01, "units": "action std", "held_out_observations": 9, "bound": 0.2}
    plain = "INT8 gate: max 0.05, mean 0.01 in units of action std on 9 held-out observations (bound 0.2)"
    assert gate_summary({"gate": gate}) == plain
    crashed = {**gate, "crashed": {"bf16": "SIGFPE"}, "float_precision": "f32"}
    assert gate_summary({"gate": crashed}) == plain + "; float layers at f32 (OpenVINO crashed at bf16: SIGFPE)"
    assert gate_summary({}) == ""


def test_a_script_without_a_main_guard_can_run_the_gate_child(tmp_path: Path) -> None:
    """Called from a plain script (no ``if __name__ == "__main__"``), as a user's quantising script is:
    the child is a fresh interpreter, so the script is not run again in it."""
    import subprocess
    import sys

    script = tmp_path / "quantise.py"
    script.write_text(
        "from runtime.export.quantize import run_isolated\n"
        "from tests.export.test_quantize import _write\n"
        f"run_isolated(_write, {str(tmp_path / 'out')!r})\n"
        f"open({str(tmp_path / 'runs')!r}, 'a').write('x')\n"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, str(script)], cwd=root, env={"PYTHONPATH": str(root)}, check=True)
    assert (tmp_path / "out").read_text() == "ran"
    assert (tmp_path / "runs").read_text() == "x"  # the script ran once
