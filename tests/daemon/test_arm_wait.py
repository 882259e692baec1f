"""An arm that appears after the daemon starts (late USB adapter) is waited for, within a limit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from drivers.calibration import load_calibration
from drivers.config import ArmConfig
from drivers.errors import BusError
from drivers.sim.simulator import ServoSimulator
from runtime.client import PolicyClient
from runtime.config import DaemonConfig, DaemonSettings
from runtime.daemon import Daemon
from runtime.paths import configs_dir
from runtime.sdnotify import SystemdNotifier
from runtime.server import ServerConfig
from runtime.server.synthetic import DEMO, SyntheticEngine
from tests.daemon.conftest import NotifyListener, run_in_thread

CALIBRATION = configs_dir() / "calibration" / "so101_sim.toml"


def _simulator(port: Path) -> ServoSimulator:
    joints = load_calibration(CALIBRATION).joints.values()
    return ServoSimulator(
        "feetech",
        [j.id for j in joints],
        positions={j.id: round(j.mid) for j in joints},
        homing_offsets={j.id: j.homing_offset for j in joints},
        link=port,
    )


def _config(tmp: Path, port: Path, wait_s: float) -> DaemonConfig:
    return DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{tmp}/policy.sock",)),
        arm=ArmConfig(kind="feetech", port=str(port), calibration=str(CALIBRATION)),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0, arm_wait_s=wait_s),
    )


def test_ready_waits_for_a_late_arm(notify_listener: NotifyListener, short_tmp: Path) -> None:
    port = short_tmp / "ttyACM0"
    sim = _simulator(port).start()
    sim.unplug()  # the adapter has not enumerated yet
    daemon = Daemon(
        _config(short_tmp, port, 60),
        engine_factory=lambda: SyntheticEngine(DEMO),
        notifier=SystemdNotifier(notify_listener.path),
    )
    thread, result = run_in_thread(daemon.run)
    try:
        notify_listener.wait_for(f"STATUS=waiting for the arm on {port}")
        time.sleep(1.5)
        assert thread.is_alive() and not any("READY=1" in t for t in notify_listener.texts())
        sim.replug()
        notify_listener.wait_for("READY=1", timeout=30)
        with PolicyClient(f"ipc://{short_tmp}/policy.sock", timeout_s=10) as client:
            arm = client.hello().arm
            assert arm is not None and arm["healthy"] is True
    finally:
        daemon.should_exit = True
        thread.join(30)
        sim.stop()
    assert result == [0]


def test_gives_up_after_the_limit(notify_listener: NotifyListener, short_tmp: Path) -> None:
    port = short_tmp / "ttyACM0"
    daemon = Daemon(
        _config(short_tmp, port, 1.0),
        engine_factory=lambda: SyntheticEngine(DEMO),
        notifier=SystemdNotifier(notify_listener.path),
    )
    started = time.monotonic()
    with pytest.raises(BusError, match=rf"no arm on {port} after waiting 1 s \(daemon.arm_wait_s\)"):
        daemon.run()
    assert time.monotonic() - started < 30
    assert not any("READY=1" in t for t in notify_listener.texts())
    assert any("STOPPING=1" in t for t in notify_listener.texts())
