"""The systemd watchdog follows the inference worker's progress, not just the main thread's."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pytest

from runtime.client import PolicyClient
from runtime.config import DaemonConfig, DaemonSettings
from runtime.daemon import Daemon
from runtime.liveness import Heartbeat, LivenessRegistry
from runtime.sdnotify import SystemdNotifier
from runtime.server import ServerConfig
from runtime.server.synthetic import DEMO, STATE, example_observation
from tests.daemon.conftest import FreezingEngine, NotifyListener, run_in_thread


def test_heartbeat_reports_how_long_and_what() -> None:
    now = [100.0]
    registry = LivenessRegistry(clock=lambda: now[0])
    beat = registry.register("worker", deadline_s=2.0)
    beat.beat("running request 3")
    now[0] = 101.5
    assert registry.check() == []
    now[0] = 103.0
    (stall,) = registry.check()
    assert stall.name == "worker" and stall.seconds == pytest.approx(3.0) and stall.doing == "running request 3"
    beat.beat("idle")
    assert registry.check() == []
    registry.unregister(beat)
    assert registry.names == []
    with pytest.raises(ValueError, match="deadline_s"):
        Heartbeat("x", 0)


def test_a_frozen_inference_stops_the_watchdog_and_is_logged_once(
    notify_listener: NotifyListener, short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0, inference_stall_s=1.0),
    )
    engine = FreezingEngine(freeze_s=4.0)
    daemon = Daemon(
        config, engine_factory=lambda: engine, notifier=SystemdNotifier(notify_listener.path, watchdog_usec=200_000)
    )
    thread, _ = run_in_thread(daemon.run)
    try:
        notify_listener.wait_for("READY=1")
        notify_listener.wait_for("WATCHDOG=1")
        obs = example_observation(DEMO, seed=3)
        obs[STATE] = obs[STATE].copy()
        obs[STATE][0] = 99.0
        with PolicyClient(f"ipc://{short_tmp}/policy.sock", timeout_s=20) as client:
            sent = time.monotonic()
            reply = client.infer(obs)  # returns after the freeze
            back = time.monotonic()
        assert reply.actions.shape == (DEMO.chunk, 6)
        assert back - sent >= 3.5
        stalled_at = notify_listener.wait_for("STATUS=STALLED: inference worker")
        # no ping from a little after the deadline until the worker is back
        pings = [at for at, text in list(notify_listener.messages) if text == "WATCHDOG=1"]
        assert not [at for at in pings if stalled_at < at < back - 0.2], (stalled_at, back, pings)
        assert [at for at in pings if sent < at < sent + 0.8], "pings before the deadline"
        # and pings resume afterwards
        deadline = time.monotonic() + 10
        while not [at for at, t in list(notify_listener.messages) if t == "WATCHDOG=1" and at > back]:
            assert time.monotonic() < deadline, "watchdog pings did not resume"
            time.sleep(0.05)
    finally:
        daemon.should_exit = True
        thread.join(30)
    stall_lines = [r.getMessage() for r in caplog.records if "stalled: no progress" in r.getMessage()]
    assert len(stall_lines) == 1, stall_lines
    assert "inference worker" in stall_lines[0] and "while running request" in stall_lines[0]
    assert any("making progress again" in r.getMessage() for r in caplog.records)


def test_idle_worker_keeps_the_watchdog_going(notify_listener: NotifyListener, short_tmp: Path) -> None:
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0, inference_stall_s=0.5),
    )
    daemon = Daemon(
        config,
        engine_factory=lambda: FreezingEngine(0.0),
        notifier=SystemdNotifier(notify_listener.path, watchdog_usec=200_000),
    )
    thread, _ = run_in_thread(daemon.run)
    try:
        ready = notify_listener.wait_for("READY=1")
        time.sleep(2.0)
        pings = [at for at, t in list(notify_listener.messages) if t == "WATCHDOG=1" and at > ready]
        assert len(pings) >= 8, pings  # one per 0.1 s asked; a loaded machine may lose some
        assert not any("STALLED" in t for t in notify_listener.texts())
    finally:
        daemon.should_exit = True
        thread.join(30)
    np.testing.assert_equal(daemon.failed, False)
