"""Errors raised by the servo bus drivers.

Two families are kept apart on purpose: *transport* errors (the bytes did not arrive intact) are
worth retrying a bounded number of times; *servo faults* (the servo answered, and its status byte
says it is overloaded, overheating, under-volted...) are never retried blindly, because re-sending
the same command to a servo that protects itself would only repeat the fault.

The project's base exception and its configuration error are defined here, in the lowest layer, so
that drivers import nothing of runtime; ``runtime.errors`` re-exports them beside the rest.
"""

from __future__ import annotations


class LerobotRuntimeError(Exception):
    """Base of every error raised on purpose by lerobot-runtime (re-exported by runtime.errors)."""


class ConfigError(LerobotRuntimeError, ValueError):
    """A configuration file or option is invalid (names the key and the value)."""


class BusError(LerobotRuntimeError):
    """Base of every error raised by a servo bus."""


class TransportError(BusError, IOError):
    """The reply did not arrive intact; retried up to the configured number of times."""

    def __init__(self, message: str, *, servo_id: int | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.servo_id = servo_id
        self.attempts = attempts


class ReplyTimeoutError(TransportError, TimeoutError):
    """No reply (or not all of it) within the timeout."""


class ChecksumError(TransportError):
    """A status packet arrived whose checksum / CRC does not match its bytes."""


class GarbledPacketError(TransportError):
    """A status packet was short, had a wrong header, length, or came from an unexpected servo."""


class StaleGoalError(TransportError):
    """A verified goal write read back different goals on every attempt."""


class PortGoneError(BusError, ConnectionError):
    """The serial port vanished (USB unplugged) or cannot be opened; the bus can reconnect later."""

    def __init__(self, message: str, *, port: str) -> None:
        super().__init__(message)
        self.port = port


class NotConnectedError(BusError, RuntimeError):
    """A bus operation was called before ``connect()`` or after ``disconnect()``."""


class ServoFaultError(BusError, RuntimeError):
    """A servo reported an error in its status packet; names the joint, the id and the decoded bits."""

    def __init__(self, joint: str | None, servo_id: int, bits: tuple[str, ...], raw: int) -> None:
        who = f"joint {joint!r} (servo id {servo_id})" if joint else f"servo id {servo_id}"
        super().__init__(
            f"{who} reports fault {', '.join(bits) or 'unknown'} (error byte 0x{raw:02X}); "
            "check load, supply voltage and temperature before re-enabling torque"
        )
        self.joint = joint
        self.servo_id = servo_id
        self.bits = bits
        self.raw = raw


class CalibrationError(BusError, ValueError):
    """A calibration file or value is invalid; names the file, the joint and the key."""


class UnknownJointError(BusError, KeyError):
    """A joint name that is not on this bus."""

    def __str__(self) -> str:
        # KeyError quotes its argument; keep the message readable.
        return str(self.args[0]) if self.args else ""
