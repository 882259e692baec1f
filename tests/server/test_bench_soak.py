"""``bench soak``: it samples the daemon it starts, reports growth, and leaves no process behind."""

from __future__ import annotations

import json

import psutil
import pytest

from runtime.bench.soak import run_soak_bench


@pytest.mark.parametrize("minutes", [0.0, -1.0, 24 * 60 + 1.0])
def test_minutes_are_bounded(minutes: float) -> None:
    with pytest.raises(ValueError, match=r"--minutes: expected 0 < minutes <= 1440, got"):
        run_soak_bench(minutes=minutes)


def test_bench_soak_samples_the_daemon_and_stops_what_it_started(capsys: pytest.CaptureFixture[str]) -> None:
    from runtime.cli import main

    # children the test process had before (multiprocessing's resource tracker, once any test used it)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    assert main(["bench", "soak", "--minutes", "0.2", "--interval", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["replies"] > 0 and r["errors"] == {} and r["server_errors"] == {}
    assert r["ticks"] > 0 and r["mode_at_end"] == "running"
    assert len(r["samples"]) >= 10 and all(s["rss_mb"] > 0 and s["fds"] > 0 for s in r["samples"])
    assert r["rss_mb"]["end"] == r["samples"][-1]["rss_mb"]
    assert r["daemon_exit_status"] == 0  # stopped by SIGTERM, gracefully
    assert [p for p in psutil.Process().children(recursive=True) if p.pid not in before] == []
