"""``python -m tools.bench.rtc``: its options and what it runs, its analysis of a made-up run, its quantile."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import tools.bench.rtc
from tests.commands.parsers import options
from tools.bench.rtc import _q, analyse, build_parser, main


def test_the_options() -> None:
    assert options(root=build_parser()) == [
        ("--seconds", 15.0, float, None, False, None, "measured seconds per run (default 15)"),
        ("--rate-hz", 100.0, float, None, False, None, "control rate (default 100)"),
        (
            "--infer-ms",
            60.0,
            float,
            None,
            False,
            None,
            "hold each inference to at least this long (default 60: a delay of several ticks, as a robot's "
            "SmolVLA has; the tiny one takes a few ms)",
        ),
        (
            "--train-steps",
            3000,
            int,
            None,
            False,
            None,
            "training steps of the tiny SmolVLA when the bundle is built (once, then reused; default 3000)",
        ),
        ("--json", False, None, None, False, None, "print the result as JSON"),
    ]


def test_it_runs_with_the_settings_given(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    runs: list[dict[str, Any]] = []
    monkeypatch.setattr(tools.bench.rtc, "run_rtc_bench", lambda **kw: runs.append(kw) or {"rows": 2})
    monkeypatch.setattr(tools.bench.rtc, "format_table", lambda result: f"table {result}")
    assert main([]) == 0
    assert main(["--seconds", "1", "--rate-hz", "50", "--infer-ms", "5", "--train-steps", "10", "--json"]) == 0
    assert runs == [
        {"seconds": 15.0, "rate_hz": 100.0, "infer_ms": 60.0, "train_steps": 3000},
        {"seconds": 1.0, "rate_hz": 50.0, "infer_ms": 5.0, "train_steps": 10},
    ]
    assert capsys.readouterr().out == "table {'rows': 2}\n{\n  \"rows\": 2\n}\n"


def test_the_bench_finds_boundaries_in_the_recording_and_measures_them_at_the_servos() -> None:
    """The analysis on a made-up run at 100 Hz: a ramp whose chunk merged at tick 50 turns;
    a tick skipped at 30 (an overrun) is one write spanning two periods, not a step change."""
    from runtime.control.mode import Mode
    from runtime.control.recorder import MODE_CODE, MODES

    n, period = 100, 0.01
    ticks = np.array([k for k in range(n) if k != 30])  # tick 30 never ran
    pan = np.where(ticks < 50, 0.5 * ticks, 24.5 - 0.5 * (ticks - 49))  # turns at the merge
    goals = np.zeros((len(ticks), 6))
    goals[:, 0] = pan
    t = 1000.0 + ticks * period
    depth = 40 - (ticks % 50)  # a chunk merged at 0 and at 50: the queue deepens there
    rows = {
        "t": t,
        "mode": np.full(len(ticks), MODE_CODE[Mode.RUNNING]),
        "queue_depth": depth,
        "requested": goals.copy(),
        "late_ms": np.zeros(len(ticks)),
        "write_ms": np.full(len(ticks), 0.5),
        "latency_ticks": np.full(len(ticks), 6.0),
    }
    meta = {"modes": list(MODES), "rate_hz": 1 / period}
    r = analyse(rows, meta, t + 0.0005, goals, t[0], t[-1])
    assert r["boundaries"] == 1 and r["delay_ticks"] == {"p50": 6.0, "max": 6.0}
    assert r["boundary_step_change_deg"]["max"] == pytest.approx(1.0)  # +0.5 per tick to -0.5
    assert r["within_chunk_step_change_deg"]["max"] == pytest.approx(0.0)  # the skipped tick is no step


def test_a_quantile_leaves_out_nan_and_is_nan_of_nothing() -> None:
    assert _q(np.array([1.0, np.nan, 3.0, 2.0]), 0.5) == 2.0
    assert _q(np.array([1.0, np.nan, 3.0]), 1.0) == 3.0
    assert _q(np.array([0.0, 10.0]), 0.25) == 2.5
    assert math.isnan(_q(np.array([np.nan]), 0.5)) and math.isnan(_q(np.array([]), 1.0))
