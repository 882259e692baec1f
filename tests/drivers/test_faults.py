"""Injected faults: retries, typed servo faults, slow replies, unplug/replug, torque-off, stale goals."""

from __future__ import annotations

import pytest

from drivers.calibration import Calibration
from drivers.errors import (
    ChecksumError,
    GarbledPacketError,
    PortGoneError,
    ReplyTimeoutError,
    ServoFaultError,
    StaleGoalError,
)
from drivers.sim.arm import SimArm
from drivers.sim.servo import DYNAMIXEL_OVERHEAT, DYNAMIXEL_OVERLOAD, FEETECH_OVERLOAD, FEETECH_VOLTAGE

SYNC_READ, SYNC_WRITE, READ, WRITE = 0x82, 0x83, 0x02, 0x03


def test_bad_checksum_is_retried(arm: SimArm) -> None:
    arm.simulator.faults(4).bad_checksum = 2
    before = arm.simulator.received[SYNC_READ]
    positions = arm.bus.read_positions()
    assert len(positions) == 6
    assert arm.bus.last_attempts == 3
    assert arm.simulator.received[SYNC_READ] - before == 3


def test_no_reply_is_retried_then_succeeds(arm: SimArm) -> None:
    arm.simulator.faults(2).no_reply = 1
    arm.bus.read_state()
    assert arm.bus.last_attempts == 2


def test_short_reply_is_retried(arm: SimArm) -> None:
    arm.simulator.faults(5).short_reply = 1
    arm.bus.read_positions()
    assert arm.bus.last_attempts == 2


def test_persistent_silence_gives_up_after_bounded_attempts(arm: SimArm) -> None:
    arm.simulator.faults(3).no_reply = -1
    before = arm.simulator.received[SYNC_READ]
    with pytest.raises(ReplyTimeoutError, match=r"after 3 attempt\(s\).*'elbow_flex' \(id 3\)") as info:
        arm.bus.read_positions()
    assert info.value.attempts == 3
    assert info.value.servo_id == 3
    assert arm.simulator.received[SYNC_READ] - before == 3
    arm.simulator.faults(3).no_reply = 0


def test_persistent_corruption_raises_checksum_error(arm: SimArm) -> None:
    arm.simulator.faults(1).bad_checksum = -1
    with pytest.raises(ChecksumError) as info:
        arm.bus.read_register("shoulder_pan", "Present_Position")
    assert info.value.attempts == 3


@pytest.mark.parametrize("what", ["overload", "other"])
def test_servo_fault_is_typed_and_not_retried(arm: SimArm, protocol: str, what: str) -> None:
    if what == "overload":
        bits, name = (FEETECH_OVERLOAD if protocol == "feetech" else DYNAMIXEL_OVERLOAD), "overload"
    else:
        bits, name = (FEETECH_VOLTAGE, "voltage") if protocol == "feetech" else (DYNAMIXEL_OVERHEAT, "overheat")
    arm.simulator.faults(2).error_bits = bits
    before = arm.simulator.received[SYNC_READ]
    with pytest.raises(ServoFaultError) as info:
        arm.bus.read_state()
    err = info.value
    assert (err.joint, err.servo_id) == ("shoulder_lift", 2)
    assert name in err.bits
    assert "shoulder_lift" in str(err)
    assert arm.simulator.received[SYNC_READ] - before == 1  # never retried
    arm.simulator.faults(2).error_bits = 0
    arm.bus.read_state()


def test_slow_reply_within_timeout_succeeds(arm: SimArm) -> None:
    arm.simulator.faults(6).delay_s = 0.005
    arm.bus.read_positions()
    assert arm.bus.last_attempts == 1


def test_reply_slower_than_timeout_is_a_timeout(arm: SimArm) -> None:
    # Much slower than (retries + 1) * timeout, so no late reply can land inside a retry.
    arm.simulator.faults(1).delay_s = 0.25
    with pytest.raises(ReplyTimeoutError) as info:
        arm.bus.read_register("shoulder_pan", "Present_Temperature")
    assert info.value.attempts == 3


def test_port_vanishes_then_returns(arm: SimArm) -> None:
    bus, sim = arm.bus, arm.simulator
    sim.unplug()
    with pytest.raises(PortGoneError) as info:
        bus.read_positions()
    assert info.value.port == bus.port
    with pytest.raises(PortGoneError, match="cannot open"):
        bus.read_positions()  # still unplugged: the automatic reopen fails fast
    assert bus.is_connected
    sim.replug()
    assert len(bus.read_positions()) == 6  # reopened automatically


def test_explicit_reconnect(arm: SimArm) -> None:
    arm.simulator.unplug()
    arm.simulator.replug()
    arm.bus.reconnect()
    assert len(arm.bus.read_positions()) == 6


def test_torque_disabled_on_disconnect_even_after_an_exception(protocol: str, so101: Calibration) -> None:
    sim_arm = SimArm.start(so101, protocol=protocol)  # type: ignore[arg-type]
    servos = sim_arm.simulator.servos
    with pytest.raises(RuntimeError, match="policy blew up"), sim_arm.bus as bus:
        bus.enable_torque()
        assert all(s.torque for s in servos.values())
        raise RuntimeError("policy blew up")
    assert not any(s.torque for s in servos.values())
    assert not sim_arm.bus.is_connected


def test_disconnect_closes_even_when_a_servo_does_not_answer(arm: SimArm) -> None:
    arm.bus.enable_torque()
    arm.simulator.faults(3).ignore_writes = -1  # servo 3 hears nothing (and so does not answer)
    with pytest.raises(ReplyTimeoutError):
        arm.bus.disconnect()
    assert not arm.bus.is_connected
    torques = {i: s.torque for i, s in arm.simulator.servos.items()}
    assert torques == {1: False, 2: False, 3: True, 4: False, 5: False, 6: False}


def test_torque_kept_when_configured(protocol: str, so101: Calibration) -> None:
    sim_arm = SimArm.start(so101, protocol=protocol, disable_torque_on_disconnect=False)  # type: ignore[arg-type]
    sim_arm.bus.enable_torque()
    sim_arm.bus.disconnect()
    assert all(s.torque for s in sim_arm.simulator.servos.values())
    sim_arm.close()


def _verified_arm(protocol: str, so101: Calibration) -> SimArm:
    return SimArm.start(so101, protocol=protocol, verify_goals=True)  # type: ignore[arg-type]


def test_no_stale_goal_after_a_dropped_sync_write(protocol: str, so101: Calibration) -> None:
    with _verified_arm(protocol, so101) as sim_arm:
        bus, sim = sim_arm.bus, sim_arm.simulator
        bus.enable_torque()
        bus.write_goals(dict.fromkeys(bus.joints, 10.0))
        bus.read_positions()
        sim.faults(3).ignore_writes = 1  # servo 3 misses the next sync write
        before = sim.received[SYNC_WRITE]
        latest = {n: -5.0 if n != "gripper" else 30.0 for n in bus.joints}
        bus.write_goals(latest)
        assert sim.received[SYNC_WRITE] - before == 2  # the full set went out twice
        assert bus.last_attempts == 2
        expected = {j.id: j.to_raw(latest[n])[0] for n, j in bus.calibration.joints.items()}
        assert {i: s.goal for i, s in sim.servos.items()} == expected


def test_goal_write_that_never_sticks_raises(protocol: str, so101: Calibration) -> None:
    with _verified_arm(protocol, so101) as sim_arm:
        sim_arm.simulator.faults(2).ignore_writes = -1
        with pytest.raises(StaleGoalError, match="shoulder_lift"):
            sim_arm.bus.write_goals({"shoulder_lift": 20.0})
        sim_arm.simulator.faults(2).ignore_writes = 0


def test_failed_sync_write_moves_no_joint(arm: SimArm) -> None:
    bus, sim = arm.bus, arm.simulator
    bus.enable_torque()
    bus.write_goals(dict.fromkeys(bus.joints, 5.0))
    bus.read_positions()  # round trip: the sim has handled the sync write
    goals_before = {i: s.goal for i, s in sim.servos.items()}
    sim.unplug()
    with pytest.raises(PortGoneError):
        bus.write_goals(dict.fromkeys(bus.joints, 25.0))
    assert {i: s.goal for i, s in sim.servos.items()} == goals_before
    assert bus.goals["shoulder_pan"] == pytest.approx(5.0, abs=0.1)  # bookkeeping unchanged
    sim.replug()
    bus.write_goals({"shoulder_pan": 25.0})  # others re-sent from the last good set
    bus.read_positions()
    assert sim.servo(1).goal == bus.calibration.joints["shoulder_pan"].to_raw(25.0)[0]
    assert sim.servo(2).goal == goals_before[2]


def test_garbled_reply_from_wrong_id_is_a_transport_error() -> None:
    # A reply that is well-formed but from the wrong servo must not be taken as ours.
    from drivers.feetech.bus import FeetechBus

    replies = [bytes.fromhex("FF FF 02 02 00 FB")]

    class FakePort:
        timeout: float | None = 0.01

        def __init__(self) -> None:
            self.buf = b""

        def read(self, size: int = 1) -> bytes:
            out, self.buf = self.buf[:size], self.buf[size:]
            return out

        def write(self, data: bytes) -> int:
            self.buf = replies[0]
            return len(data)

        def reset_input_buffer(self) -> None:
            self.buf = b""

        def close(self) -> None:
            pass

    bus = FeetechBus("fake", Calibration({}), retries=1, opener=lambda *_: FakePort())
    bus.connect()
    with pytest.raises(GarbledPacketError, match="expected a reply from id 1, got one from id 2") as info:
        bus._transact(bus.codec.ping(1), (1,), 0, what="ping")
    assert bus.last_attempts == 2 and info.value.servo_id == 1


def test_a_late_reply_from_another_servo_is_drained_before_the_retry() -> None:
    """A reply from the wrong servo is a late reply to an earlier exchange; more of it may arrive after
    the flush before the next send. The bus reads until the line is quiet, so the retry gets its own."""
    from drivers.feetech.bus import FeetechBus

    codec = FeetechBus("fake", Calibration({})).codec

    def encode_status(servo_id: int, error: int, params: bytes) -> bytes:
        return codec.status(servo_id, error, params)

    good, late = encode_status(1, 0, b""), encode_status(3, 0, b"")

    class LatePort:
        timeout: float | None = 0.01

        def __init__(self) -> None:
            self.buf, self.in_flight, self.writes, self.reads = b"", b"", 0, 0

        def read(self, size: int = 1) -> bytes:
            self.reads += 1
            if self.reads >= 2:  # the rest of the earlier exchange's replies arrives now, before anything newer
                self.buf, self.in_flight = self.in_flight + self.buf, b""
            out, self.buf = self.buf[:size], self.buf[size:]
            return out

        def write(self, data: bytes) -> int:
            self.writes += 1
            # the first exchange meets an earlier exchange's replies: one here, one still on the wire
            if self.writes == 1:
                self.buf, self.in_flight = encode_status(2, 0, b""), late
            else:
                self.buf = good
            return len(data)

        def reset_input_buffer(self) -> None:
            self.buf = b""  # what is still in flight is not here yet

        def close(self) -> None:
            pass

    port = LatePort()
    bus = FeetechBus("fake", Calibration({}), retries=1, opener=lambda *_: port)
    bus.connect()
    (status,) = bus._transact(bus.codec.ping(1), (1,), 0, what="ping")
    assert status.servo_id == 1 and bus.last_attempts == 2 and port.writes == 2
