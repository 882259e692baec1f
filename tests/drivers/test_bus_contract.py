"""What the shared bus code promises, message by message: defaults, refusals before the port is
touched, which servo a failed exchange names, how often it retries, and faults the port itself
raises (a write timeout, an I/O error), injected by wrapping the real pty port.

Expected packet sizes are worked from the vendors' frame definitions: a Feetech status is
``FF FF id len err params.. sum`` (6 bytes + params), a Dynamixel 2.0 status is
``FF FF FD 00 id lenL lenH 55 err params.. crcL crcH`` (11 bytes + params, before byte stuffing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest
import serial

from drivers.bus import GoalTypeError, GoalValueError, SerialServoBus
from drivers.calibration import Calibration
from drivers.errors import (
    CalibrationError,
    GarbledPacketError,
    NotConnectedError,
    PortGoneError,
    ReplyTimeoutError,
    StaleGoalError,
    UnknownJointError,
)
from drivers.port import SerialPort, open_serial
from drivers.sim.arm import SimArm, simulator_for
from drivers.sim.servo import DYNAMIXEL_OVERLOAD, FEETECH_OVERLOAD
from drivers.sim.simulator import ServoSimulator
from drivers.sim.wire import DynamixelWire
from drivers.vendors import bus_class

PING, SYNC_WRITE = 0x01, 0x83
STATUS_OVERHEAD = {"feetech": 6, "dynamixel": 11}
POSITION_BYTES = {"feetech": 2, "dynamixel": 4}
REST = ("shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


class FaultyPort:
    """The real pty port, with faults the port itself can raise and a record of its timeouts."""

    def __init__(self, inner: SerialPort) -> None:
        self.inner = inner
        self.timeouts: list[float | None] = []
        self.write_fault: Callable[[bytes], BaseException | None] = lambda packet: None
        self.read_fault: BaseException | None = None

    @property
    def timeout(self) -> float | None:
        return self.inner.timeout

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self.timeouts.append(value)
        self.inner.timeout = value

    def read(self, size: int = 1) -> bytes:
        if self.read_fault is not None:
            raise self.read_fault
        return self.inner.read(size)

    def write(self, data: bytes) -> int | None:
        fault = self.write_fault(data)
        if fault is not None:
            raise fault
        return self.inner.write(data)

    def reset_input_buffer(self) -> None:
        self.inner.reset_input_buffer()

    def close(self) -> None:
        self.inner.close()


def is_sync_write(protocol: str, packet: bytes) -> bool:
    return packet[4 if protocol == "feetech" else 7] == SYNC_WRITE


@pytest.fixture
def faulty(protocol: str, so101: Calibration) -> Iterator[tuple[SerialServoBus, ServoSimulator, list[FaultyPort]]]:
    sim = simulator_for(so101, protocol).start()  # type: ignore[arg-type]
    ports: list[FaultyPort] = []

    def opener(path: str, baud: int, timeout_s: float) -> SerialPort:
        ports.append(FaultyPort(open_serial(path, baud, timeout_s)))
        return ports[-1]

    bus = bus_class(protocol)(sim.port, so101, opener=opener)
    try:
        bus.connect()
        yield bus, sim, ports
    finally:
        try:
            bus.disconnect()
        finally:
            sim.stop()


class TestBeforeThePort:
    def test_documented_defaults(self, so101: Calibration) -> None:
        bus = bus_class("feetech")("/dev/ttyACM0", so101)
        assert (bus.baud, bus.timeout_s, bus.retries) == (1_000_000, 0.02, 2)
        assert bus.disable_torque_on_disconnect is True and bus.verify_goals is False
        assert bus.on_calibration_mismatch == "check"
        assert bus.is_connected is False and bus.last_attempts == 0 and bus.goals == {}

    def test_refusals_name_what_to_do(self, so101: Calibration) -> None:
        with pytest.raises(ValueError) as e:
            bus_class("feetech")("/dev/ttyACM0", so101, retries=-1)
        assert str(e.value) == "retries must be >= 0, got -1"
        bus = bus_class("dynamixel")("/dev/ttyACM0", so101)
        with pytest.raises(NotConnectedError) as info:
            bus.read_positions()
        assert str(info.value) == "bus on /dev/ttyACM0 is not connected; call connect() first"
        with pytest.raises(NotConnectedError) as info:
            bus.reconnect()
        assert str(info.value) == "/dev/ttyACM0: reconnect() needs a connected bus; call connect()"
        with pytest.raises(GoalValueError) as goal:
            bus.write_goals({"shoulder_pan": 0.0})
        assert str(goal.value) == f"no goal known yet for {', '.join(REST)}; connect() first"
        with pytest.raises(GoalTypeError) as kind:
            bus.write_goals([0.0])  # type: ignore[arg-type]
        assert str(kind.value) == "goals must be a mapping of joint name to number, got list"
        for value in (1.5, True):
            with pytest.raises(GoalTypeError) as kind:
                bus.write_register("shoulder_pan", "Goal_Position", value)  # type: ignore[arg-type]
            assert str(kind.value) == f"register value for shoulder_pan.Goal_Position must be an int, got {value!r}"

    def test_unknown_joint_and_register_are_listed(self, so101: Calibration) -> None:
        empty = bus_class("feetech")("/dev/ttyACM0", Calibration({}))
        with pytest.raises(UnknownJointError) as joint:
            empty.read_register("elbow", "ID")
        assert joint.value.args[0] == "unknown joint 'elbow'; this bus has no joints"
        bus = bus_class("feetech")("/dev/ttyACM0", so101)
        with pytest.raises(UnknownJointError) as joint:
            bus.read_register("elbow", "ID")
        assert joint.value.args[0] == f"unknown joint 'elbow'; this bus has shoulder_pan, {', '.join(REST)}"
        with pytest.raises(Exception) as reg:
            bus.read_id(1, "Bogus")
        assert str(reg.value) == f"unknown feetech register 'Bogus'; known: {', '.join(sorted(bus.spec.table))}"


class TestConnect:
    def test_missing_servos_are_all_named(self, protocol: str, so101: Calibration) -> None:
        with ServoSimulator(protocol, range(1, 5)) as sim:  # type: ignore[arg-type]
            bus = bus_class(protocol)(sim.port, so101, retries=0, on_calibration_mismatch="ignore")
            with pytest.raises(Exception) as e:
                bus.connect()
            assert str(e.value) == (
                f"no reply on {sim.port} from wrist_roll (id 5), gripper (id 6); check power, wiring, "
                f"baud rate 1000000 and ids (try: lerobot-runtime motors scan --port {sim.port})"
            )
            assert bus.is_connected is False

    def test_every_joint_homing_offset_is_checked(self, protocol: str, so101: Calibration) -> None:
        offsets = {j.id: j.homing_offset for j in so101.joints.values()}
        offsets[4] = offsets[6] = 0  # the first joints match: the check must not stop there
        with ServoSimulator(protocol, range(1, 7), homing_offsets=offsets) as sim:  # type: ignore[arg-type]
            bus = bus_class(protocol)(sim.port, so101)
            with pytest.raises(CalibrationError) as e:
                bus.connect()
            assert str(e.value) == (
                f"homing offsets on {sim.port} differ from {so101.source}: wrist_flex: servo has 0, file has 1020; "
                "gripper: servo has 0, file has 1332. "
                'Recalibrate, or set on_calibration_mismatch = "write" to store the file\'s values'
            )

    def test_close_hooks_run_after_the_port_is_closed(self, arm: SimArm) -> None:
        seen: list[bool] = []
        arm.bus.add_close_hook(lambda: seen.append(arm.bus.is_connected))
        arm.bus.disconnect()
        assert seen == [False] and arm.bus.is_connected is False


class TestWhoFailed:
    def test_an_unknown_id_is_named_by_number(self, arm: SimArm) -> None:
        bus = arm.bus
        with pytest.raises(ReplyTimeoutError) as e:
            bus.read_id(99, "Present_Position")
        assert str(e.value) == (
            f"read Present_Position of id 99 on {bus.port} failed after 3 attempt(s): no reply from id 99 within 20 ms"
        )
        assert (e.value.servo_id, e.value.attempts) == (99, 3)
        with pytest.raises(ReplyTimeoutError) as e:
            bus.write_id(99, "Torque_Enable", 0)
        assert str(e.value) == (
            f"write Torque_Enable of id 99 on {bus.port} failed after 3 attempt(s): no reply from id 99 within 20 ms"
        )

    def test_a_silent_last_servo_is_named_and_retried_twice(
        self, arm: SimArm, caplog: pytest.LogCaptureFixture
    ) -> None:
        bus = arm.bus
        arm.simulator.faults(6).no_reply = -1
        with caplog.at_level(logging.WARNING, logger="drivers.bus"), pytest.raises(ReplyTimeoutError) as e:
            bus.read_positions()
        assert str(e.value) == (
            f"sync read positions on {bus.port} failed after 3 attempt(s): "
            "no reply from joint 'gripper' (id 6) within 20 ms"
        )
        assert e.value.servo_id == 6
        assert caplog.text.count("retrying") == 2  # a retry announced is a retry made
        with pytest.raises(ReplyTimeoutError, match=r"^sync read state on .* 'gripper' \(id 6\)"):
            bus.read_state()
        arm.simulator.faults(6).no_reply = 0

    def test_a_cut_reply_is_garbled_and_named(self, arm: SimArm, protocol: str) -> None:
        bus = arm.bus
        arm.simulator.faults(5).short_reply = -1  # the simulator cuts the last two bytes
        with pytest.raises(GarbledPacketError) as e:
            bus.read_positions()
        arrived = 6 * (STATUS_OVERHEAD[protocol] + POSITION_BYTES[protocol]) - 2
        assert str(e.value) == (
            f"sync read positions on {bus.port} failed after 3 attempt(s): "
            f"short or garbled reply from joint 'wrist_roll' (id 5): {arrived} bytes arrived in all"
        )
        assert e.value.servo_id == 5
        arm.simulator.faults(5).short_reply = 0


class TestPortFaults:
    def test_a_write_timeout_is_retried_then_named(self, faulty, protocol: str) -> None:
        bus, sim, ports = faulty
        ports[-1].write_fault = lambda p: (
            serial.SerialTimeoutException("Write timeout") if is_sync_write(protocol, p) else None
        )
        for call, what in (
            (lambda: bus.write_goals({"shoulder_pan": 1.0}), "sync write goals"),
            (bus.enable_torque, "sync write hold goals"),
        ):
            before = sim.received[SYNC_WRITE]
            with pytest.raises(ReplyTimeoutError) as e:
                call()
            assert str(e.value) == f"{what} on {bus.port} failed after 3 attempt(s): write to {bus.port} timed out"
            assert e.value.attempts == 3 and sim.received[SYNC_WRITE] == before
        bus.verify_goals = True
        with pytest.raises(ReplyTimeoutError, match=r"^sync write goals on .* failed after 3 attempt\(s\): write to"):
            bus.write_goals({"shoulder_pan": 1.0})

    @pytest.mark.parametrize("where", ["write", "read"])
    def test_an_io_error_is_a_vanished_port_with_its_reason(self, faulty, where: str) -> None:
        bus, _, ports = faulty
        error = OSError(5, "Input/output error")
        if where == "write":
            ports[-1].write_fault = lambda p: error
        else:
            ports[-1].read_fault = error
        with pytest.raises(PortGoneError) as e:
            bus.read_positions()
        assert str(e.value) == (
            f"serial port {bus.port} vanished ([Errno 5] Input/output error); the next call reopens it when it is back"
        )
        assert len(bus.read_positions()) == 6  # reopened: a fresh port without the fault

    def test_scan_pings_once_with_its_own_timeout_then_restores(self, faulty) -> None:
        bus, sim, ports = faulty
        before = sim.received[PING]
        found = bus.scan([1, 2, 40])
        assert sorted(found) == [1, 2] and sim.received[PING] - before == 3  # no retry for silent id 40
        assert ports[-1].timeouts == [0.01, 0.02]
        assert bus.retries == 2
        bus.scan([3], timeout_ms=5)
        assert ports[-1].timeouts[-2:] == [0.005, 0.02]


class TestServoSide:
    def test_a_servo_reporting_a_fault_still_pings(self, arm: SimArm, protocol: str) -> None:
        model = arm.bus.ping(1)
        assert model is not None
        arm.simulator.faults(2).error_bits = FEETECH_OVERLOAD if protocol == "feetech" else DYNAMIXEL_OVERLOAD
        assert arm.bus.ping(2) == model  # `motors scan` lists an overloaded servo
        assert arm.bus.scan([2]) == {2: model}
        arm.simulator.faults(2).error_bits = 0

    def test_read_state_carries_velocity_and_load(self, arm: SimArm) -> None:
        bus, sim = arm.bus, arm.simulator
        bus.enable_torque()
        bus.write_goals({"shoulder_pan": 60.0})
        state = bus.read_state()["shoulder_pan"]
        servo = sim.servo(1)
        # read right after the reply, before anything steps the simulator again
        assert state.velocity_raw == servo.get("Present_Velocity") != 0
        assert state.load_raw == servo.get(sim.dialect.load_register) != 0
        assert state.velocity_raw != state.load_raw

    def test_enable_torque_writes_one(self, arm: SimArm) -> None:
        arm.bus.enable_torque()
        assert [arm.bus.read_register(j, "Torque_Enable") for j in arm.bus.joints] == [1] * 6

    def test_a_bad_register_value_is_named(self, arm: SimArm) -> None:
        with pytest.raises(Exception) as e:
            arm.bus.write_register("shoulder_pan", "Torque_Enable", 1 << 20)
        assert str(e.value).startswith(f"cannot write {1 << 20} to Torque_Enable: ")
        assert len(str(e.value)) > len(f"cannot write {1 << 20} to Torque_Enable: ")

    def test_clamping_is_warned_once_per_occurrence(self, arm: SimArm, caplog: pytest.LogCaptureFixture) -> None:
        bus = arm.bus
        lo, hi = bus.calibration.joints["shoulder_pan"].user_range
        with caplog.at_level(logging.DEBUG, logger="drivers.bus"):
            for goal in (400.0, 400.0, 0.0, 400.0):
                bus.write_goals({"shoulder_pan": goal})
        clamps = [r for r in caplog.records if r.getMessage().startswith("goal for shoulder_pan clamped")]
        assert [r.levelno for r in clamps] == [logging.WARNING, logging.DEBUG, logging.WARNING]
        assert clamps[0].getMessage() == (
            f"goal for shoulder_pan clamped: 400.00 -> {hi:.2f} (calibrated range {lo:.2f}..{hi:.2f})"
        )

    def test_goals_that_never_stick_are_written_three_times(
        self, protocol: str, so101: Calibration, caplog: pytest.LogCaptureFixture
    ) -> None:
        with SimArm.start(so101, protocol=protocol, verify_goals=True) as arm:  # type: ignore[arg-type]
            sim = arm.simulator
            sim.faults(2).ignore_writes = sim.faults(3).ignore_writes = -1
            before = sim.received[SYNC_WRITE]
            with caplog.at_level(logging.WARNING, logger="drivers.bus"), pytest.raises(StaleGoalError) as e:
                arm.bus.write_goals({"shoulder_lift": 20.0, "elbow_flex": 20.0})
            assert str(e.value) == "goals for shoulder_lift, elbow_flex did not stick after 3 full sync writes"
            assert e.value.attempts == 3 and sim.received[SYNC_WRITE] - before == 3
            assert caplog.text.count("re-sending all goals") == 2
            sim.faults(2).ignore_writes = sim.faults(3).ignore_writes = 0
            arm.bus.write_goals({"shoulder_lift": 20.0})
            assert arm.bus.last_attempts == 1


class StuffedPort:
    """Answers every packet with one Dynamixel status, framed by the simulator's own wire code."""

    def __init__(self, reply: bytes) -> None:
        self.reply, self.buf = reply, b""
        self.timeout: float | None = 0.01

    def read(self, size: int = 1) -> bytes:
        if not isinstance(size, int):  # pyserial's read takes a byte count, nothing else
            raise TypeError(f"read size must be an int, got {size!r}")
        out, self.buf = self.buf[:size], self.buf[size:]
        return out

    def write(self, data: bytes) -> int:
        self.buf = self.reply
        return len(data)

    def reset_input_buffer(self) -> None:
        self.buf = b""

    def close(self) -> None:
        pass


@pytest.mark.parametrize("cut", [0, 1])
def test_a_byte_stuffed_reply_is_read_to_its_end(so101: Calibration, cut: int) -> None:
    # Homing_Offset -131073 is FF FF FD FF on the wire: the status carries a stuffed FD, one byte
    # longer than the plain 15-byte reply the bus reads first.
    reply = DynamixelWire().status(1, 0, (-131073).to_bytes(4, "little", signed=True))
    assert len(reply) == 16
    bus = bus_class("dynamixel")("/dev/ttyFAKE", so101, retries=0, opener=lambda *a: StuffedPort(reply[: 16 - cut]))
    bus._connected = True  # the port is all this test needs; connect() would ping all six servos
    bus._open_port()
    if not cut:
        assert bus.read_id(1, "Homing_Offset") == -131073
        return
    with pytest.raises(ReplyTimeoutError) as e:
        bus.read_id(1, "Homing_Offset")
    assert str(e.value).endswith("no reply from joint 'shoulder_pan' (id 1) within 20 ms")


def test_a_reply_with_more_data_than_asked_is_garbled(so101: Calibration) -> None:
    reply = DynamixelWire().status(1, 0, bytes(6))  # six data bytes for a four-byte register
    bus = bus_class("dynamixel")("/dev/ttyFAKE", so101, retries=0, opener=lambda *a: StuffedPort(reply))
    bus._connected = True
    bus._open_port()
    with pytest.raises(GarbledPacketError) as e:
        bus.read_id(1, "Homing_Offset")
    assert str(e.value) == (
        "read Homing_Offset of id 1 on /dev/ttyFAKE failed after 1 attempt(s): "
        "reply from id 1 has 6 data bytes, expected 4"
    )
    assert e.value.servo_id == 1
