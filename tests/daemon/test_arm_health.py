"""Arm health and the e-stop state reach clients (hello, stats) and systemd (STATUS=) as they change."""

from __future__ import annotations

import time
from pathlib import Path

from drivers.config import ArmConfig
from runtime.client import PolicyClient
from runtime.config import DaemonConfig, DaemonSettings
from runtime.daemon import Daemon
from runtime.sdnotify import SystemdNotifier
from runtime.server import ServerConfig
from runtime.server.synthetic import DEMO, SyntheticEngine
from tests.daemon.conftest import NotifyListener, run_in_thread


def test_arm_fault_and_estop_are_visible_at_once(notify_listener: NotifyListener, short_tmp: Path) -> None:
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        arm=ArmConfig(kind="sim"),
        # stats lines (which also carry the arm) only once a minute: STATUS= must not wait for them
        daemon=DaemonSettings(tick_s=0.05, arm_poll_s=0.1, stats_log_interval_s=60),
    )
    notifier = SystemdNotifier(notify_listener.path)
    daemon = Daemon(config, engine_factory=lambda: SyntheticEngine(DEMO), notifier=notifier)
    thread, _ = run_in_thread(daemon.run)
    try:
        notify_listener.wait_for("READY=1")
        assert daemon.arm is not None and daemon.arm.sim is not None
        sim_arm = daemon.arm.sim  # the simulated arm the daemon started: the test pulls its plug
        with PolicyClient(f"ipc://{short_tmp}/policy.sock", timeout_s=10) as client:
            arm = client.hello().arm
            assert arm is not None and arm["healthy"] is True and arm["estop"] is False
            assert arm["kind"] == "sim" and set(arm["temperature_c"]) >= {"gripper", "shoulder_pan"}
            stats = client.stats().arm
            assert stats is not None and stats["healthy"] is True

            unplugged = time.monotonic()
            sim_arm.simulator.unplug()
            at = notify_listener.wait_for("STATUS=arm FAILING", timeout=10)
            assert at - unplugged < 5  # the next poll, not the next stats line
            stats = client.stats().arm
            assert stats is not None and stats["healthy"] is False and stats["last_error"]
            assert client.hello().arm["healthy"] is False  # type: ignore[index]

            sim_arm.simulator.replug()
            notify_listener.wait_for("STATUS=arm ok")
            assert daemon.arm is not None
            daemon.arm.set_estop(True, "button pressed")
            notify_listener.wait_for("STATUS=arm E-STOP: button pressed")
            arm = client.hello().arm
            assert arm is not None and arm["estop"] is True and arm["estop_reason"] == "button pressed"
    finally:
        daemon.should_exit = True
        thread.join(30)
