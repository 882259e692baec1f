"""``python -m runtime.bench.start``: a fresh process's start phase by phase, staged as the daemon starts
and with the whole gate before ready (the demo bundle on OpenVINO)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest


def start(bundle: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "runtime.bench.start", str(bundle), "--cpus", "1", "--threads", "1", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("whole", [False, True])
def test_each_phase_is_timed_and_the_gate_is_split_as_the_daemon_splits_it(demo_bundle: Path, whole: bool) -> None:
    out = start(demo_bundle, *(["--whole-gate"] if whole else []), "--launched-at", repr(time.time()))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert (result["engine"], result["cpus"], result["threads"]) == ("openvino", [1], 1)
    assert result["staged"] is not whole and result["parity_ok"] and result["replays"] == 16
    assert result["replays_before_ready"] == (16 if whole else 2)
    ms = result["ms"]
    assert set(ms) == {
        "interpreter", "import", "open", "compile", "replays_before_ready", "warmup", "tokenizer", "ready",
        "replays_after_ready", "first_chunk",
    }  # fmt: skip
    assert ms["interpreter"] > 0 and ms["tokenizer"] == 0.0  # the demo policy takes no task
    assert ms["ready"] >= ms["interpreter"] + ms["import"] + ms["open"] + ms["compile"] + ms["replays_before_ready"]
    assert ms["first_chunk"] > ms["ready"] + ms["replays_after_ready"]
    assert (ms["replays_after_ready"] > 0.1) is not whole
    assert result["torch_imported"] is False and result["rss_mb"] > 0


def test_a_bad_cpu_list_is_a_usage_error(demo_bundle: Path) -> None:
    out = start(demo_bundle, "--cpus", "one")
    assert out.returncode == 2 and "--cpus: expected CPU numbers separated by commas, got 'one'" in out.stderr
