"""The daemon's lifecycle in-process: what systemd hears, when, and in which order.

A recording notifier stands in for the socket here (the socket itself is exercised in
test_sdnotify.py and test_daemon.py); it snapshots the daemon's state at each message, so a READY=1
sent before the arm is connected, or a watchdog pinged at the wrong pace, fails a test.
"""

from __future__ import annotations

import signal
import threading
import time
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
        # the daemon's own bus, or the arm process's reads (which the daemon holds as the arm's source)
        arm_ok = d is not None and d.arm is not None and (d.arm.bus or d.arm.source) is not None and d.arm.healthy
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
        daemon=DaemonSettings(tick_s=0.05, graceful_timeout_s=1.0, stats_log_interval_s=0, arm_wait_s=1.0),
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


class FakeArm:
    """Stands in for ArmMonitor in on_tick/shutdown tests: counts polls, reports health, closes."""

    def __init__(self, close_ok: bool = True) -> None:
        self.polls: list[float] = []
        self.healthy = True
        self.last_error = ""
        self.closed = 0
        self.close_ok = close_ok
        self.bus = object()

    def poll(self) -> None:
        self.polls.append(0.0)

    def describe(self) -> str:
        return "arm ok" if self.healthy else f"arm FAILING: {self.last_error}"

    def close(self) -> bool:
        self.closed += 1
        return self.close_ok


def make_settings_daemon(engine: Engine, short_tmp: Path, **settings: float) -> tuple[Daemon, RecordingNotifier]:
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        arm=ArmConfig(kind="none"),
        daemon=DaemonSettings(**settings),
    )
    notifier = RecordingNotifier()
    daemon = Daemon(config, engine_factory=lambda: engine, notifier=notifier)
    notifier.daemon = daemon
    return daemon, notifier


def test_arm_poll_and_stats_line_pace(engine: Engine, short_tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    daemon, notifier = make_settings_daemon(engine, short_tmp, tick_s=0.05, arm_poll_s=0.5, stats_log_interval_s=2.0)
    try:
        daemon.startup()
        arm = FakeArm()
        daemon.arm = arm  # type: ignore[assignment]
        daemon._last_arm_poll = daemon._last_stats = 0.0
        notifier.sent.clear()
        with caplog.at_level("INFO", logger="runtime.daemon"):
            for k in range(1, 101):  # 5 s of 50 ms ticks
                if k == 61:
                    arm.healthy, arm.last_error = False, "servo 3 did not answer"
                daemon.on_tick(k / 20)
        assert len(arm.polls) == 10
        statuses = [f[0] for f, _, _ in notifier.sent]
        assert len(statuses) == 2 and all(s.startswith("STATUS=requests: ") for s in statuses)
        assert statuses[0].endswith("; arm ok")
        assert statuses[1].endswith("; arm FAILING: servo 3 did not answer")
        assert caplog.text.count("stats: requests:") == 2
    finally:
        daemon.arm = None
        daemon.shutdown()


def test_no_stats_line_when_its_interval_is_zero(engine: Engine, short_tmp: Path) -> None:
    daemon, notifier = make_settings_daemon(engine, short_tmp, tick_s=0.05, stats_log_interval_s=0)
    try:
        daemon.startup()
        notifier.sent.clear()
        for k in range(1, 200):
            daemon.on_tick(k / 20)
        assert notifier.sent == []
    finally:
        daemon.shutdown()


def test_main_loop_ends_when_asked(engine: Engine, short_tmp: Path) -> None:
    daemon, _ = make_settings_daemon(engine, short_tmp, tick_s=0.02)
    try:
        daemon.startup()
        timer = threading.Timer(0.3, lambda: daemon.handle_exit(signal.SIGTERM, None))
        timer.start()
        started = time.monotonic()
        daemon.main_loop()
        assert 0.25 < time.monotonic() - started < 10
        assert not daemon.failed
    finally:
        daemon.shutdown()


def test_main_loop_fails_when_the_server_dies(engine: Engine, short_tmp: Path) -> None:
    daemon, _ = make_settings_daemon(engine, short_tmp, tick_s=0.02)
    daemon.startup()
    assert daemon.server is not None
    server = daemon.server
    server.stop(0.0)
    daemon.main_loop()  # returns by itself
    assert daemon.failed and not daemon.should_exit
    daemon.shutdown()


def test_shutdown_order_and_a_failed_torque_off(
    engine: Engine, short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    daemon, notifier = make_settings_daemon(engine, short_tmp, tick_s=0.05, graceful_timeout_s=3.0)
    daemon.startup()
    arm = FakeArm(close_ok=False)
    daemon.arm = arm  # type: ignore[assignment]
    notifier.sent.clear()
    with caplog.at_level("INFO", logger="runtime.daemon"):
        daemon.shutdown()
    assert notifier.sent[0][0] == ("STOPPING=1", "STATUS=shutting down")
    assert arm.closed == 1 and daemon.arm is None and daemon.server is None
    assert daemon.failed  # torque could not be confirmed off: the exit status says so
    assert "stopping (up to 3 s for queued requests)" in caplog.text and "final stats" in caplog.text
    daemon.shutdown()  # a second shutdown finds nothing left to stop
    assert arm.closed == 1


# A forced stop leaves a busy worker behind by design; on a loaded machine its ZeroMQ context can then
# be collected while still open, which pytest reports as an unraisable exception.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_forced_shutdown_does_not_wait(engine: Engine, short_tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    daemon, _ = make_settings_daemon(engine, short_tmp, tick_s=0.05, graceful_timeout_s=30.0)
    daemon.startup()
    daemon.force_exit = True
    started = time.monotonic()
    with caplog.at_level("INFO", logger="runtime.daemon"):
        daemon.shutdown()
    assert "stopping (forced)" in caplog.text
    assert time.monotonic() - started < 15  # nowhere near the 30 s graceful timeout


def test_run_exits_zero_and_restores_the_signal_handlers(engine: Engine, short_tmp: Path) -> None:
    daemon, notifier = make_settings_daemon(engine, short_tmp, tick_s=0.02)
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def on_ready(*fields: str) -> bool:
        if any(f == "READY=1" for f in fields):
            seen.append(signal.getsignal(signal.SIGTERM))
            daemon.handle_exit(signal.SIGTERM, None)
        return True

    notifier.notify = on_ready  # type: ignore[method-assign]
    assert daemon.run() == 0
    assert seen == [daemon.handle_exit]  # installed while running
    assert signal.getsignal(signal.SIGTERM) is before


def test_run_exits_one_when_the_arm_is_not_released(engine: Engine, short_tmp: Path) -> None:
    daemon, notifier = make_settings_daemon(engine, short_tmp, tick_s=0.02)

    def on_ready(*fields: str) -> bool:
        if any(f == "READY=1" for f in fields):
            daemon.arm = FakeArm(close_ok=False)  # type: ignore[assignment]
            daemon.should_exit = True
        return True

    notifier.notify = on_ready  # type: ignore[method-assign]
    assert daemon.run() == 1


def test_a_failed_self_check_reaches_status_at_once_and_once(
    engine: Engine, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from runtime.server.server import PolicyServer

    daemon, notifier = make_settings_daemon(engine, short_tmp, tick_s=0.05, stats_log_interval_s=0)
    try:
        daemon.startup()
        daemon.on_tick(time.monotonic())
        assert not any("VERIFICATION FAILED" in x for f, _, _ in notifier.sent for x in f)
        monkeypatch.setattr(PolicyServer, "verification_failure", property(lambda self: "max abs error 0.4"))
        daemon.on_tick(time.monotonic())
        daemon.on_tick(time.monotonic())
        said = [x for f, _, _ in notifier.sent for x in f if "VERIFICATION FAILED" in x]
        assert said == ["STATUS=VERIFICATION FAILED, serving no chunks until a reload: max abs error 0.4"]
    finally:
        daemon.shutdown()
