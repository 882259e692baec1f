"""The daemon's hold on the arm: health and e-stop as published, opening and waiting for a late arm, and a
disconnect that reports a failed torque-off; on the simulated servos and on a stand-in bus and clock."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from drivers.bus import JointState
from drivers.calibration import load_calibration
from drivers.config import ArmConfig
from drivers.errors import BusError, CalibrationError, ServoFaultError, UnknownJointError
from drivers.sim.arm import SimArm
from runtime import arm_monitor as arm_monitor_module
from runtime.arm_monitor import ArmMonitor
from runtime.control.snapshot import Snapshot
from runtime.paths import configs_dir


@pytest.fixture
def sim_arm() -> Iterator[SimArm]:
    arm = SimArm.start(load_calibration(configs_dir() / "calibration" / "so101_sim.toml"))
    yield arm
    arm.close()


def test_health_follows_the_port(sim_arm: SimArm, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    monitor = ArmMonitor(ArmConfig(kind="sim"), bus=sim_arm.bus)
    monitor.open()
    assert monitor.healthy and monitor.summary()["positions"]["gripper"] == pytest.approx(50.0, abs=0.5)
    sim_arm.simulator.unplug()
    monitor.poll()
    monitor.poll()
    assert not monitor.healthy and monitor.failures == 2
    assert caplog.text.count("arm read failed") == 1  # logged once, not every poll
    sim_arm.simulator.replug()
    monitor.poll()
    assert monitor.healthy
    assert "arm read works again" in caplog.text
    assert monitor.close()


def test_failed_torque_off_is_reported(sim_arm: SimArm, caplog: pytest.LogCaptureFixture) -> None:
    monitor = ArmMonitor(ArmConfig(kind="sim"), bus=sim_arm.bus)
    monitor.open()
    sim_arm.simulator.unplug()
    assert monitor.close() is False
    assert "turning torque off failed" in caplog.text
    assert monitor.bus is None


# ---- on a stand-in bus and a clock the test moves ------------------------------------------------

FEETECH = ArmConfig(kind="feetech", port="/dev/ttyX")


def joint(position: float, temperature: int) -> JointState:
    return JointState(position, 2048, position, 0, 0, 12.0, temperature)


class StandInBus:
    """Answers each ``read_state`` with the next item of ``replies`` (an exception is raised)."""

    def __init__(self, *replies: Any, disconnect_error: BusError | None = None) -> None:
        self.replies = list(replies)
        self.reads = 0
        self.disconnects = 0
        self.disconnect_error = disconnect_error

    def read_state(self) -> dict[str, JointState]:
        self.reads += 1
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, BaseException):
            raise reply
        return dict(reply)

    def disconnect(self) -> None:
        self.disconnects += 1
        if self.disconnect_error is not None:
            raise self.disconnect_error


class StandInLoop:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def snapshot(self) -> Snapshot:
        return self.snap


class Changes:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def __call__(self, monitor: ArmMonitor) -> None:
        self.seen.append(dict(monitor.status()))


class Clock:
    """``time.monotonic`` and ``time.sleep`` for the monitor: sleeping moves the clock."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.slept = 0.0

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        # kept to the microsecond: twenty 50 ms naps make one second exactly
        self.t = round(self.t + s, 6)
        self.slept = round(self.slept + s, 6)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(arm_monitor_module, "time", SimpleNamespace(monotonic=c.monotonic, sleep=c.sleep))
    return c


TWO = {"shoulder_pan": joint(10.126, 31), "gripper": joint(-4.444, 38)}


def test_a_new_monitor_has_read_nothing() -> None:
    monitor = ArmMonitor(FEETECH)
    assert monitor.status() == {
        "kind": "feetech",
        "healthy": False,
        "last_error": "",
        "estop": False,
        "estop_reason": "",
        "temperature_c": {},
        "temperature_max_c": None,
        "reads": 0,
        "failures": 0,
    }
    assert monitor.summary() == {
        "kind": "feetech",
        "healthy": False,
        "reads": 0,
        "failures": 0,
        "last_error": "",
        "positions": {},
    }
    assert (monitor.bus, monitor.sim, monitor.source, monitor.on_change) == (None, None, None, None)
    assert monitor.last_state == {}
    monitor.poll()  # nothing to read from: nothing happens
    assert monitor.reads == 0 and monitor.failures == 0


def test_reads_and_failures_are_published_and_each_change_told_once() -> None:
    changes = Changes()
    monitor = ArmMonitor(FEETECH, on_change=changes)
    monitor.observe(TWO)
    expected = {
        "kind": "feetech",
        "healthy": True,
        "last_error": "",
        "estop": False,
        "estop_reason": "",
        "temperature_c": {"shoulder_pan": 31, "gripper": 38},
        "temperature_max_c": 38,
        "reads": 1,
        "failures": 0,
    }
    assert monitor.status() == expected
    assert changes.seen == [expected]
    assert monitor.summary() == {
        "kind": "feetech",
        "healthy": True,
        "reads": 1,
        "failures": 0,
        "last_error": "",
        "positions": {"shoulder_pan": 10.13, "gripper": -4.44},
    }
    monitor.observe({"shoulder_pan": joint(1.0, 45)})
    assert monitor.status()["reads"] == 2 and monitor.status()["temperature_max_c"] == 45
    assert len(changes.seen) == 1  # still healthy: no change to tell

    monitor.observe_failure(BusError("servo 3 did not answer"))
    assert monitor.status() == {
        **expected,
        "healthy": False,
        "last_error": "servo 3 did not answer",
        "temperature_c": {"shoulder_pan": 45},
        "temperature_max_c": 45,
        "reads": 2,
        "failures": 1,
    }
    assert len(changes.seen) == 2 and changes.seen[-1]["healthy"] is False
    monitor.observe_failure(BusError("servo 3 did not answer"))
    assert monitor.failures == 2 and len(changes.seen) == 2  # the same failure again
    monitor.observe_failure(BusError("port gone"))
    assert len(changes.seen) == 3 and changes.seen[-1]["last_error"] == "port gone"
    monitor.observe(TWO)
    assert len(changes.seen) == 4 and changes.seen[-1]["healthy"] is True
    # the last error stays for whoever asks what it was
    assert monitor.status()["last_error"] == "port gone"


def test_a_first_failure_is_a_change() -> None:
    changes = Changes()
    monitor = ArmMonitor(FEETECH, on_change=changes)
    monitor.observe_failure(BusError("no reply"))
    assert [c["last_error"] for c in changes.seen] == ["no reply"]
    assert monitor.describe() == "arm FAILING: no reply"


def test_estop_is_published_with_its_reason_and_cleared_on_release() -> None:
    changes = Changes()
    monitor = ArmMonitor(FEETECH, on_change=changes)
    monitor.observe(TWO)
    assert monitor.describe() == "arm ok"
    monitor.set_estop(True, "button")
    assert (monitor.status()["estop"], monitor.status()["estop_reason"]) == (True, "button")
    assert monitor.describe() == "arm E-STOP: button"
    assert len(changes.seen) == 2
    monitor.set_estop(True, "button")  # nothing new
    assert len(changes.seen) == 2
    monitor.set_estop(True, "")
    assert monitor.describe() == "arm E-STOP: engaged"
    assert len(changes.seen) == 3
    monitor.set_estop(False, "ignored when released")
    assert (monitor.estop, monitor.estop_reason) == (False, "")
    assert (changes.seen[-1]["estop"], changes.seen[-1]["estop_reason"]) == (False, "")
    assert monitor.describe() == "arm ok"
    n = len(changes.seen)
    monitor.set_estop(False)
    assert len(changes.seen) == n


def test_poll_reads_the_loops_snapshot_before_the_bus() -> None:
    bus = StandInBus(TWO)
    monitor = ArmMonitor(FEETECH, bus=bus)  # type: ignore[arg-type]
    monitor.source = StandInLoop(Snapshot(state={"gripper": joint(3.0, 40)}))
    monitor.poll()
    assert bus.reads == 0
    assert monitor.healthy and monitor.status()["temperature_c"] == {"gripper": 40}
    monitor.source = StandInLoop(Snapshot(arm_error="sync read timed out"))
    monitor.poll()
    assert not monitor.healthy and monitor.last_error == "sync read timed out" and monitor.failures == 1
    monitor.source = None
    monitor.poll()
    assert bus.reads == 1 and monitor.healthy and monitor.reads == 2
    # without a bus, the loop's snapshot alone
    alone = ArmMonitor(FEETECH)
    alone.source = StandInLoop(Snapshot(state=TWO))
    alone.poll()
    assert alone.reads == 1


def test_poll_counts_a_failed_bus_read() -> None:
    monitor = ArmMonitor(FEETECH, bus=StandInBus(BusError("checksum")))  # type: ignore[arg-type]
    monitor.poll()
    assert (monitor.healthy, monitor.failures, monitor.last_error) == (False, 1, "checksum")


def test_open_reads_once_and_refuses_an_arm_whose_first_read_fails() -> None:
    monitor = ArmMonitor(FEETECH, bus=StandInBus(TWO))  # type: ignore[arg-type]
    monitor.open()
    assert monitor.healthy and monitor.reads == 1
    failing = ArmMonitor(FEETECH, bus=StandInBus(BusError("servo 1 silent")))  # type: ignore[arg-type]
    with pytest.raises(BusError) as err:
        failing.open()
    assert str(err.value) == "arm (feetech, /dev/ttyX) connected but its first read failed: servo 1 silent"
    sim = ArmMonitor(ArmConfig(kind="sim"), bus=StandInBus(BusError("gone")))  # type: ignore[arg-type]
    with pytest.raises(BusError) as err:
        sim.open()
    assert str(err.value) == (
        "arm (sim, simulated servos on a pseudo-terminal) connected but its first read failed: gone"
    )


def test_open_opens_the_configured_arm(monkeypatch: pytest.MonkeyPatch) -> None:
    bus = StandInBus(TWO)
    opened: list[ArmConfig] = []
    monkeypatch.setattr(arm_monitor_module, "open_arm", lambda cfg: opened.append(cfg) or bus)
    monitor = ArmMonitor(FEETECH)
    monitor.open()
    assert opened == [FEETECH] and monitor.bus is bus and monitor.sim is None and monitor.healthy


def test_open_starts_the_simulated_arm_with_its_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = SimpleNamespace(bus=StandInBus(TWO))
    started: list[tuple[ArmConfig, object]] = []
    monkeypatch.setattr(arm_monitor_module, "load_calibration", lambda path: f"calibration of {path}")
    monkeypatch.setattr(arm_monitor_module, "start_sim_arm", lambda cfg, cal: started.append((cfg, cal)) or sim)
    config = ArmConfig(kind="sim", calibration="/cal/arm.toml")
    monitor = ArmMonitor(config)
    monitor.open()
    assert started == [(config, "calibration of /cal/arm.toml")]
    assert monitor.sim is sim and monitor.bus is sim.bus


class TestOpenWaiting:
    def test_no_wait_raises_the_first_error_as_it_is(self, clock: Clock) -> None:
        bus = StandInBus(BusError("servo 1 silent"))
        monitor = ArmMonitor(FEETECH, bus=bus)  # type: ignore[arg-type]
        with pytest.raises(BusError) as err:
            monitor.open_waiting(0.0)
        assert str(err.value) == "arm (feetech, /dev/ttyX) connected but its first read failed: servo 1 silent"
        assert bus.reads == 1 and clock.slept == 0.0

    def test_a_late_arm_is_waited_for_and_each_reason_told_once(self, clock: Clock) -> None:
        silent = BusError("servo 1 silent")
        bus = StandInBus(silent, silent, silent, BusError("servo 2 silent"), TWO)
        monitor = ArmMonitor(FEETECH, bus=bus)  # type: ignore[arg-type]
        heard: list[str] = []
        monitor.open_waiting(30.0, on_wait=heard.append, retry_s=2.0)
        assert monitor.healthy and bus.reads == 5
        assert clock.t == 1008.0  # four retries 2 s apart
        assert heard == [
            "waiting for the arm on /dev/ttyX (30 s left): "
            "arm (feetech, /dev/ttyX) connected but its first read failed: servo 1 silent",
            "waiting for the arm on /dev/ttyX (24 s left): "
            "arm (feetech, /dev/ttyX) connected but its first read failed: servo 2 silent",
        ]
        assert bus.disconnects == 0  # a bus handed in is not the monitor's to close

    def test_gives_up_after_the_limit_naming_it(self, clock: Clock) -> None:
        monitor = ArmMonitor(ArmConfig(kind="sim"), bus=StandInBus(BusError("no pty")))  # type: ignore[arg-type]
        heard: list[str] = []
        with pytest.raises(BusError) as err:
            monitor.open_waiting(2.5, on_wait=heard.append)
        assert str(err.value) == (
            "no arm on simulated servos after waiting 2.5 s (daemon.arm_wait_s): "
            "arm (sim, simulated servos on a pseudo-terminal) connected but its first read failed: no pty"
        )
        assert isinstance(err.value.__cause__, BusError)
        assert heard == [
            "waiting for the arm on simulated servos (2 s left): "
            "arm (sim, simulated servos on a pseudo-terminal) connected but its first read failed: no pty"
        ]
        assert clock.t == 1003.0  # tried at 0, 1, 2 and 3 s

    def test_no_time_left_is_the_end(self, clock: Clock) -> None:
        bus = StandInBus(BusError("silent"), BusError("silent"), TWO)
        monitor = ArmMonitor(FEETECH, bus=bus)  # type: ignore[arg-type]
        with pytest.raises(BusError, match=r"^no arm on /dev/ttyX after waiting 1 s \(daemon.arm_wait_s\): "):
            monitor.open_waiting(1.0, retry_s=1.0)  # the second attempt comes with 0 s left
        assert bus.reads == 2

    @pytest.mark.parametrize(
        "error",
        [
            CalibrationError("homing offset differs"),
            ServoFaultError("elbow_flex", 3, ("overheat",), 4),
            UnknownJointError("wrist"),
        ],
        ids=["calibration", "servo fault", "unknown joint"],
    )
    def test_what_waiting_cannot_fix_is_raised_at_once(
        self, clock: Clock, monkeypatch: pytest.MonkeyPatch, error: BusError
    ) -> None:
        opened: list[ArmConfig] = []

        def refuse(cfg: ArmConfig) -> None:
            opened.append(cfg)
            raise error

        monkeypatch.setattr(arm_monitor_module, "open_arm", refuse)
        monitor = ArmMonitor(FEETECH)
        with pytest.raises(type(error)) as err:
            monitor.open_waiting(60.0)
        assert err.value is error and len(opened) == 1 and clock.slept == 0.0

    def test_an_arm_that_cannot_be_opened_is_waited_for(self, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
        attempts = [BusError("no /dev/ttyX"), BusError("no /dev/ttyX"), StandInBus(TWO)]

        def open_arm(cfg: ArmConfig) -> StandInBus:
            item = attempts.pop(0)
            if isinstance(item, BusError):
                raise item
            return item

        monkeypatch.setattr(arm_monitor_module, "open_arm", open_arm)
        heard: list[str] = []
        monitor = ArmMonitor(FEETECH)
        monitor.open_waiting(5.0, on_wait=heard.append)
        assert monitor.healthy and clock.t == 1002.0
        assert heard == ["waiting for the arm on /dev/ttyX (5 s left): no /dev/ttyX"]

    def test_stopping_ends_the_wait(self, clock: Clock) -> None:
        monitor = ArmMonitor(FEETECH, bus=StandInBus(BusError("silent")))  # type: ignore[arg-type]
        with pytest.raises(InterruptedError, match=r"^stopped while waiting for the arm$"):
            monitor.open_waiting(60.0, should_stop=lambda: clock.t >= 1000.5)
        assert clock.t == 1000.5  # asked every 50 ms

    def test_an_arm_the_monitor_opened_is_closed_between_attempts(
        self, clock: Clock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        buses = [
            StandInBus(BusError("silent")),
            StandInBus(BusError("silent"), disconnect_error=BusError("no reply to torque off")),
            StandInBus(TWO),
        ]
        opened = list(buses)
        monkeypatch.setattr(arm_monitor_module, "open_arm", lambda cfg: opened.pop(0))
        monitor = ArmMonitor(FEETECH)
        monitor.open_waiting(10.0)
        assert [b.disconnects for b in buses] == [1, 1, 0]
        assert monitor.bus is buses[2]

    def test_a_simulated_arm_is_dropped_between_attempts(self, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
        sims = [SimpleNamespace(bus=StandInBus(BusError("silent"))), SimpleNamespace(bus=StandInBus(TWO))]
        started = list(sims)
        monkeypatch.setattr(arm_monitor_module, "load_calibration", lambda path: None)
        monkeypatch.setattr(arm_monitor_module, "start_sim_arm", lambda cfg, cal: started.pop(0))
        monitor = ArmMonitor(ArmConfig(kind="sim"))
        monitor.open_waiting(10.0)
        assert sims[0].bus.disconnects == 1
        assert monitor.sim is sims[1] and monitor.bus is sims[1].bus


class TestClose:
    def test_a_bus_is_disconnected_and_let_go(self) -> None:
        bus = StandInBus(TWO)
        monitor = ArmMonitor(FEETECH, bus=bus)  # type: ignore[arg-type]
        assert monitor.close() is True
        assert bus.disconnects == 1 and monitor.bus is None
        assert monitor.close() is True and bus.disconnects == 1

    def test_a_failed_torque_off_is_false(self, caplog: pytest.LogCaptureFixture) -> None:
        bus = StandInBus(TWO, disconnect_error=BusError("no reply"))
        monitor = ArmMonitor(FEETECH, bus=bus)  # type: ignore[arg-type]
        assert monitor.close() is False
        assert monitor.bus is None
        assert "arm disconnected, but turning torque off failed: no reply; check the arm by hand" in caplog.text

    def test_a_simulated_arm_the_arm_process_drove_is_stopped(self) -> None:
        stopped: list[bool] = []
        monitor = ArmMonitor(ArmConfig(kind="sim"))
        monitor.sim = SimpleNamespace(simulator=SimpleNamespace(stop=lambda: stopped.append(True)))  # type: ignore[assignment]
        assert monitor.close() is True
        assert stopped == [True] and monitor.sim is None
        assert monitor.close() is True and stopped == [True]


def test_the_log_tells_each_change_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="runtime.arm_monitor")
    monitor = ArmMonitor(FEETECH, bus=StandInBus(TWO))  # type: ignore[arg-type]
    monitor.open()
    assert "arm connected: so101 feetech on /dev/ttyX; positions shoulder_pan 10.1, gripper -4.4" in caplog.text
    monitor.observe_failure(BusError("no reply"))
    monitor.observe_failure(BusError("no reply"))
    monitor.observe(TWO)
    monitor.observe(TWO)
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("arm read failed: no reply") == 1
    assert messages.count("arm read works again after: no reply") == 1
    # a monitor's very first read failing is news too
    fresh = ArmMonitor(FEETECH)
    fresh.observe_failure(BusError("servo 6 silent"))
    assert "arm read failed: servo 6 silent" in [r.getMessage() for r in caplog.records]


def test_a_servo_fault_at_the_first_read_is_not_waited_for(clock: Clock) -> None:
    fault = ServoFaultError("elbow_flex", 3, ("overheat",), 4)
    bus = StandInBus(fault, TWO)
    monitor = ArmMonitor(FEETECH, bus=bus)  # type: ignore[arg-type]
    with pytest.raises(BusError) as err:
        monitor.open_waiting(60.0)
    assert str(err.value) == (
        "arm (feetech, /dev/ttyX) connected but its first read failed: joint 'elbow_flex' (servo id 3) reports "
        "fault overheat (error byte 0x04); check load, supply voltage and temperature before re-enabling torque"
    )
    assert err.value.__cause__ is fault
    assert bus.reads == 1 and clock.slept == 0.0
