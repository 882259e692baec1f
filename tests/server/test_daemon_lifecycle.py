"""The daemon's lifecycle in-process: what systemd hears, when, and in which order.

A recording notifier stands in for the socket here (the socket itself is exercised in
test_sdnotify.py and test_daemon.py); it snapshots the daemon's state at each message, so a READY=1
sent before the arm is connected, or a watchdog pinged at the wrong pace, fails a test.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from drivers.config import ArmConfig
from runtime.config import DaemonConfig, DaemonSettings
from runtime.daemon import Daemon
from runtime.engine.base import Engine
from runtime.sdnotify import SystemdNotifier
from runtime.server import ServerConfig

SO101_SIM = Path(__file__).resolve().parents[2] / "configs" / "calibration" / "so101_sim.toml"


class RecordingNotifier(SystemdNotifier):
    def __init__(self, watchdog_usec: int | None = None) -> None:
        super().__init__("@unused", watchdog_usec)
        self.daemon: Daemon | None = None
        #: (fields, arm connected and healthy at that moment, server running at that moment)
        self.sent: list[tuple[tuple[str, ...], bool, bool]] = []

    def notify(self, *fields: str) -> bool:
        d = self.daemon
        arm_ok = d is not None and d.arm is not None and d.arm.bus is not None and d.arm.healthy
        serving = d is not None and d.server is not None and d.server.running
        self.sent.append((fields, arm_ok, serving))
        return True

    def first(self, key: str) -> int:
        return next(i for i, (f, _, _) in enumerate(self.sent) if any(x.startswith(key) for x in f))

    def fields(self) -> list[str]:
        return [x.split("=")[0] for f, _, _ in self.sent for x in f if not x.startswith("STATUS=")]


def make_daemon(
    engine: Engine, short_tmp: Path, arm: ArmConfig, watchdog_usec: int | None = None
) -> tuple[Daemon, RecordingNotifier]:
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        arm=arm,
        daemon=DaemonSettings(tick_s=0.05, graceful_timeout_s=1.0, stats_log_interval_s=0),
    )
    notifier = RecordingNotifier(watchdog_usec)
    daemon = Daemon(config, engine_factory=lambda: engine, notifier=notifier)
    notifier.daemon = daemon
    return daemon, notifier


def test_ready_comes_only_after_the_arm_is_connected(engine: Engine, short_tmp: Path) -> None:
    daemon, notifier = make_daemon(engine, short_tmp, ArmConfig(kind="sim", calibration=str(SO101_SIM)))
    try:
        daemon.startup()
    finally:
        daemon.shutdown()
    ready = notifier.first("READY=1")
    fields, arm_ok, serving = notifier.sent[ready]
    assert arm_ok and serving, "READY=1 went out before the arm was connected and the server running"
    assert notifier.first("STATUS=connecting the arm") < ready
    assert any("arm sim" in f for f in fields)
    assert notifier.fields() == ["READY", "STOPPING"]


def test_no_ready_when_the_arm_cannot_be_reached(engine: Engine, short_tmp: Path) -> None:
    arm = ArmConfig(kind="feetech", port=str(short_tmp / "ttyACM9"), calibration=str(SO101_SIM))
    daemon, notifier = make_daemon(engine, short_tmp, arm)
    with pytest.raises(Exception, match="ttyACM9"):
        try:
            daemon.startup()
        finally:
            daemon.shutdown()
    assert "READY" not in notifier.fields()
    assert notifier.fields()[-1] == "STOPPING"


def test_no_arm_ready_says_so(engine: Engine, short_tmp: Path) -> None:
    daemon, notifier = make_daemon(engine, short_tmp, ArmConfig(kind="none"))
    try:
        daemon.startup()
        assert daemon.arm is None
    finally:
        daemon.shutdown()
    fields = notifier.sent[notifier.first("READY=1")][0]
    assert any(f.startswith("STATUS=serving") and f.endswith("; no arm") for f in fields)


@pytest.mark.parametrize("timeout_s", [1.0, 3.0])
def test_watchdog_is_pinged_at_half_the_systemd_timeout(engine: Engine, short_tmp: Path, timeout_s: float) -> None:
    # A simulated clock: on_tick takes the time, so the pace is checked exactly, not against a busy CPU.
    daemon, notifier = make_daemon(engine, short_tmp, ArmConfig(kind="none"), watchdog_usec=int(timeout_s * 1e6))
    daemon._last_watchdog = 0.0
    pings: list[float] = []
    for k in range(1, 401):  # 20 s of 50 ms ticks
        now = k / 20
        before = len(notifier.sent)
        daemon.on_tick(now)
        if len(notifier.sent) > before and notifier.sent[-1][0] == ("WATCHDOG=1",):
            pings.append(now)
    gaps = [b - a for a, b in zip([0.0, *pings], pings, strict=False)]
    assert len(pings) == round(20 / (timeout_s / 2))
    assert all(timeout_s / 2 <= g <= timeout_s / 2 + 0.05 + 1e-9 for g in gaps), gaps


def test_no_watchdog_without_watchdog_usec(engine: Engine, short_tmp: Path) -> None:
    daemon, notifier = make_daemon(engine, short_tmp, ArmConfig(kind="none"))
    for k in range(1, 200):
        daemon.on_tick(k / 20)
    assert notifier.sent == []


def test_signals_set_flags_only() -> None:
    d = Daemon(DaemonConfig(arm=ArmConfig(kind="none")), notifier=RecordingNotifier())
    d.handle_exit(signal.SIGTERM, None)
    assert d.should_exit and not d.force_exit
    d.handle_exit(signal.SIGTERM, None)  # a second SIGTERM is still graceful; only SIGINT forces
    assert not d.force_exit
    d.handle_exit(signal.SIGINT, None)
    assert d.force_exit
