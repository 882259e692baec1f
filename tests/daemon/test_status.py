"""``lerobot-runtime status`` asks the running daemon; the same figures reach Prometheus."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from drivers.config import ArmConfig
from runtime.cli import main
from runtime.client import PolicyClient
from runtime.config import DaemonConfig, DaemonSettings
from runtime.daemon import Daemon
from runtime.sdnotify import SystemdNotifier
from runtime.server import ServerConfig
from runtime.server.synthetic import DEMO, SyntheticEngine, example_observation
from tests.daemon.conftest import NotifyListener, run_in_thread


def test_status_reports_what_the_daemon_runs(
    notify_listener: NotifyListener, short_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"ipc://{short_tmp}/policy.sock"
    config = DaemonConfig(
        server=ServerConfig(endpoints=(endpoint,)),
        arm=ArmConfig(kind="sim"),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0),
    )
    daemon = Daemon(
        config, engine_factory=lambda: SyntheticEngine(DEMO), notifier=SystemdNotifier(notify_listener.path)
    )
    thread, _ = run_in_thread(daemon.run)
    try:
        notify_listener.wait_for("READY=1")
        with PolicyClient(endpoint, timeout_s=10) as client:
            for seed in range(5):
                client.infer(example_observation(DEMO, seed))
        capsys.readouterr()
        assert main(["status", "--endpoint", endpoint, "--json"]) == 0
        s = json.loads(capsys.readouterr().out)
        assert s["policy"] == "synthetic-96x128" and s["engine"] and s["device"] == "CPU"
        assert s["precision"] and s["threads"] >= 1
        observed = {int(c) for c in s["cpus_observed"]}
        assert sum(s["cpus_observed"].values()) == 5 and observed <= set(os.sched_getaffinity(0))
        assert s["clients"] == 2  # the infer client and this status client
        assert s["latency_ms"]["infer"]["count"] == 5 and s["queue"]["capacity"] == 4
        assert s["arm"]["kind"] == "sim" and s["arm"]["healthy"] is True and s["arm"]["estop"] is False
        assert set(s["arm"]["temperature_c"]) >= {"gripper"}
        assert main(["status", "--endpoint", endpoint]) == 0
        text = capsys.readouterr().out
        assert "inference ran on CPU" in text and "e-stop released" in text and "latency    infer" in text
    finally:
        daemon.should_exit = True
        thread.join(30)


def test_status_without_a_daemon_says_so(short_tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    endpoint = f"ipc://{short_tmp}/nobody.sock"
    assert main(["status", "--endpoint", endpoint, "--timeout-s", "0.3"]) == 2
    assert f"no daemon answers at {endpoint}" in caplog.text
