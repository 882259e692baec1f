"""The driver errors: the fields each one carries and the words it says."""

from __future__ import annotations

import pytest

from drivers.errors import (
    BusError,
    ChecksumError,
    ConfigError,
    GarbledPacketError,
    LerobotRuntimeError,
    NotConnectedError,
    PortGoneError,
    ReplyTimeoutError,
    ServoFaultError,
    StaleGoalError,
    TransportError,
    UnknownJointError,
)

ADVICE = "check load, supply voltage and temperature before re-enabling torque"


def test_a_transport_error_names_no_servo_and_one_attempt_by_default() -> None:
    e = TransportError("no reply")
    assert (str(e), e.servo_id, e.attempts) == ("no reply", None, 1)
    e = ReplyTimeoutError("late", servo_id=3, attempts=4)
    assert (str(e), e.servo_id, e.attempts) == ("late", 3, 4)


def test_a_servo_fault_names_the_joint_the_id_the_bits_and_the_byte() -> None:
    e = ServoFaultError("gripper", 6, ("overload", "voltage"), 0x21)
    assert str(e) == f"joint 'gripper' (servo id 6) reports fault overload, voltage (error byte 0x21); {ADVICE}"
    assert (e.joint, e.servo_id, e.bits, e.raw) == ("gripper", 6, ("overload", "voltage"), 0x21)


def test_a_servo_fault_off_the_calibration_is_named_by_id_and_unknown_bits_say_so() -> None:
    e = ServoFaultError(None, 9, (), 0x0)
    assert str(e) == f"servo id 9 reports fault unknown (error byte 0x00); {ADVICE}"
    assert (e.joint, e.servo_id, e.bits, e.raw) == (None, 9, (), 0)
    assert str(ServoFaultError("", 12, ("overheat",), 0xA4)) == (
        f"servo id 12 reports fault overheat (error byte 0xA4); {ADVICE}"
    )


def test_an_unknown_joint_reads_as_its_message_not_quoted() -> None:
    assert str(UnknownJointError("unknown joint 'elbow'; this bus has no joints")) == (
        "unknown joint 'elbow'; this bus has no joints"
    )
    assert str(UnknownJointError()) == ""
    assert isinstance(UnknownJointError("x"), KeyError)


def test_a_port_gone_error_keeps_the_port() -> None:
    e = PortGoneError("unplugged", port="/dev/ttyACM0")
    assert (str(e), e.port) == ("unplugged", "/dev/ttyACM0")


@pytest.mark.parametrize(
    ("cls", "bases"),
    [
        (ConfigError, (LerobotRuntimeError, ValueError)),
        (TransportError, (BusError, OSError)),
        (ReplyTimeoutError, (TransportError, TimeoutError)),
        (ChecksumError, (TransportError,)),
        (GarbledPacketError, (TransportError,)),
        (StaleGoalError, (TransportError,)),
        (PortGoneError, (BusError, ConnectionError)),
        (NotConnectedError, (BusError, RuntimeError)),
        (ServoFaultError, (BusError, RuntimeError)),
        (UnknownJointError, (BusError, KeyError)),
    ],
)
def test_each_error_is_caught_as_its_families(cls: type, bases: tuple[type, ...]) -> None:
    assert all(issubclass(cls, b) for b in bases)
    assert issubclass(cls, LerobotRuntimeError)
    # servo faults are never transport errors: they must not be retried
    assert issubclass(cls, TransportError) == (
        cls in (TransportError, ReplyTimeoutError, ChecksumError, GarbledPacketError, StaleGoalError)
    )
