"""The numbers a benchmark's claims rest on: its summaries, the CPU it states, the samples it picks.

Every expected value is worked out by hand from the samples written in the test. The field bench's
own measures (write periods at the servos, steal, teleop latency, what reached the servos after a
kill) are in ``tests/tools/bench/field/``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runtime.bench import machine
from runtime.bench.machine import cpu_line, cpu_summary
from runtime.bench.soak import _at
from runtime.bench.stats import pcts, summarize


def test_summarize_rounds_median_p90_p99_mean_and_min() -> None:
    samples = [float(v) for v in range(1, 11)]  # 1..10
    assert summarize(samples) == {"median": 5.5, "p90": 9.1, "p99": 9.91, "mean": 5.5, "min": 1.0}
    assert summarize([1 / 3, 2 / 3], digits=2) == {"median": 0.5, "p90": 0.63, "p99": 0.66, "mean": 0.5, "min": 0.33}
    assert summarize([0.123456]) == {"median": 0.1235, "p90": 0.1235, "p99": 0.1235, "mean": 0.1235, "min": 0.1235}


def test_pcts_leaves_out_nan_and_says_none_when_nothing_is_left() -> None:
    values = [4.0, float("nan"), -10.0, 2.0, 0.0001]
    # finite: -10, 0.0001, 2, 4 -> p50 (0.0001 + 2) / 2, p99 at 0.97 of the way from 2 to 4
    assert pcts(values) == {"p50": 1.0, "p99": 3.94, "max": 4.0}
    # sizes: 0.0001, 2, 4, 10
    assert pcts(values, absolute=True) == {"p50": 3.0, "p99": 9.82, "max": 10.0}
    assert pcts([float("nan"), float("inf")]) == {"p50": None, "p99": None, "max": None}
    assert pcts([]) == {"p50": None, "p99": None, "max": None}
    assert pcts(iter([1.23456])) == {"p50": 1.235, "p99": 1.235, "max": 1.235}


LSCPU = """Architecture:             x86_64
Model name:               Intel(R) Xeon(R) Processor
CPU(s):                   2
Flags:          fpu sse2 avx2 avx512f avx512_vnni avx512_bf16 amx_tile amx_int8 amx_bf16 avx512_fp16 avx_vnni xsave
"""


def _lscpu(monkeypatch: pytest.MonkeyPatch, out: str | Exception) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(args: list[str], **kwargs: Any) -> Any:
        calls.append(args)
        assert kwargs["capture_output"] and kwargs["text"] and kwargs["check"] is False and kwargs["timeout"] > 0
        if isinstance(out, Exception):
            raise out
        return subprocess.CompletedProcess(args, 0, stdout=out, stderr="")

    monkeypatch.setattr(machine.subprocess, "run", run)
    return calls


def test_the_cpu_is_stated_with_the_flags_that_decide_inference_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _lscpu(monkeypatch, LSCPU)
    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: {0, 1})
    got = cpu_summary()
    assert calls == [["lscpu"]]
    assert got == {
        "cpu": "Intel(R) Xeon(R) Processor",
        "cpu_flags": [
            "amx_bf16",
            "amx_int8",
            "amx_tile",
            "avx2",
            "avx512_bf16",
            "avx512_fp16",
            "avx512_vnni",
            "avx512f",
            "avx_vnni",
        ],
        "cpus": 2,
    }
    assert cpu_line() == (
        "Intel(R) Xeon(R) Processor; "
        "amx_bf16 amx_int8 amx_tile avx2 avx512_bf16 avx512_fp16 avx512_vnni avx512f avx_vnni"
    )


def test_a_cpu_without_the_flags_or_without_lscpu_still_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: {3})
    _lscpu(monkeypatch, "Model name:   AMD EPYC\nFlags: fpu sse2 avx\n")
    assert cpu_summary() == {"cpu": "AMD EPYC", "cpu_flags": [], "cpus": 1}
    assert cpu_line() == "AMD EPYC; no AVX2"
    _lscpu(monkeypatch, FileNotFoundError(2, "No such file or directory"))
    assert cpu_summary() == {"cpu": "unknown", "cpu_flags": [], "cpus": 1}
    _lscpu(monkeypatch, subprocess.TimeoutExpired(["lscpu"], 10))
    assert cpu_line() == "unknown; no AVX2"
    assert cpu_line({"cpu": "given", "cpu_flags": ["avx2"], "cpus": 1}) == "given; avx2"


def test_a_soak_sample_is_the_first_at_or_after_the_moment_else_the_last() -> None:
    samples = [{"t_s": 0.0}, {"t_s": 10.0}, {"t_s": 20.0}]
    assert _at(samples, 10.0) is samples[1]
    assert _at(samples, 10.1) is samples[2]
    assert _at(samples, -1.0) is samples[0]
    assert _at(samples, 99.0) is samples[2]


def test_a_model_name_with_a_colon_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    _lscpu(monkeypatch, "Model name:  Vendor CPU: rev 2 : fast\nFlags: avx2\n")
    assert cpu_summary()["cpu"] == "Vendor CPU: rev 2 : fast"
    _lscpu(monkeypatch, "Architecture: x86_64\nFlags: avx2\n")  # lscpu ran, but names no model
    assert cpu_summary()["cpu"] == "unknown"


def test_every_benchmark_states_the_cpu_its_vector_flags_and_how_many_cpus_it_may_use() -> None:
    got = cpu_summary()
    flags = set(Path("/proc/cpuinfo").read_text().split())  # the kernel's own list, not lscpu's
    assert set(got) == {"cpu", "cpu_flags", "cpus"} and got["cpus"] == len(os.sched_getaffinity(0))
    assert ("avx2" in got["cpu_flags"]) == ("avx2" in flags)
    assert ("avx512_bf16" in got["cpu_flags"]) == ("avx512_bf16" in flags)
    assert got["cpu_flags"] == sorted(got["cpu_flags"]) and got["cpu"] != ""
