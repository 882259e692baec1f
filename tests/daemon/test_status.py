"""``lerobot-runtime status`` asks the running daemon; the same figures reach Prometheus."""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from pathlib import Path

import pytest

from drivers.config import ArmConfig
from runtime.cli import main
from runtime.client import PolicyClient
from runtime.config import DaemonConfig, DaemonSettings
from runtime.daemon import Daemon
from runtime.metrics import MetricsConfig
from runtime.sdnotify import SystemdNotifier
from runtime.server import ServerConfig
from runtime.server.synthetic import DEMO, SyntheticEngine, example_observation
from tests.daemon.conftest import NotifyListener, run_in_thread


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_status_reports_what_the_daemon_runs(
    notify_listener: NotifyListener, short_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"ipc://{short_tmp}/policy.sock"
    port = _free_port()
    config = DaemonConfig(
        server=ServerConfig(endpoints=(endpoint,)),
        arm=ArmConfig(kind="sim"),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0),
        metrics=MetricsConfig(port=port),
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
        assert main(["status", "--connect", endpoint, "--json"]) == 0
        s = json.loads(capsys.readouterr().out)
        assert s["policy"] == "synthetic-96x128" and s["engine"] and s["device"] == "CPU"
        assert s["precision"] and s["threads"] >= 1
        observed = {int(c) for c in s["cpus_observed"]}
        assert sum(s["cpus_observed"].values()) == 5 and observed <= set(os.sched_getaffinity(0))
        assert s["clients"] == 2  # the infer client and this status client
        assert s["latency_ms"]["infer"]["count"] == 5 and s["queue"]["capacity"] == 4
        assert s["arm"]["kind"] == "sim" and s["arm"]["healthy"] is True and s["arm"]["estop"] is False
        assert set(s["arm"]["temperature_c"]) >= {"gripper"}
        assert main(["status", "--connect", endpoint]) == 0
        text = capsys.readouterr().out
        assert "inference ran on CPU" in text and "e-stop released" in text and "latency    infer" in text

        scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        metrics = _samples(scraped)
        assert metrics['lerobot_runtime_requests_total{kind="infer"}'] == 5
        assert metrics['lerobot_runtime_latency_milliseconds{quantile="0.5",stage="infer"}'] > 0
        assert sum(v for k, v in metrics.items() if k.startswith("lerobot_runtime_inference_cpu_total")) == 5
        assert metrics["lerobot_runtime_arm_healthy"] == 1 and metrics["lerobot_runtime_arm_estop"] == 0
        assert metrics['lerobot_runtime_arm_temperature_celsius{joint="gripper"}'] > 0
        assert metrics["lerobot_runtime_queue_capacity"] == 4
        assert metrics["lerobot_runtime_clients"] == 3  # the infer client and the two status calls
        assert any(k.startswith("lerobot_runtime_policy_info{") and 'device="CPU"' in k for k in metrics)
    finally:
        daemon.should_exit = True
        thread.join(30)


def test_status_without_a_daemon_says_so(short_tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    endpoint = f"ipc://{short_tmp}/nobody.sock"
    assert main(["status", "--connect", endpoint, "--timeout-s", "0.3"]) == 2
    assert f"no daemon answers at {endpoint}" in caplog.text
