"""The serial port as the bus sees it, behind a Protocol so tests can fake it at the byte level."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from drivers.errors import PortGoneError

log = logging.getLogger(__name__)


class SerialPort(Protocol):
    """The part of ``serial.Serial`` the buses use."""

    timeout: float | None

    def read(self, size: int = 1) -> bytes: ...
    def write(self, data: bytes) -> int | None: ...
    def reset_input_buffer(self) -> None: ...
    def close(self) -> None: ...


PortOpener = Callable[[str, int, float], SerialPort]


def _port_error_types() -> tuple[type[BaseException], ...]:
    # pyserial wraps read/write failures in SerialException (an OSError), but flushing calls
    # termios directly, and termios.error is not an OSError: a vanished tty raises it with EIO.
    try:
        import termios
    except ImportError:  # pragma: no cover - not POSIX
        return (OSError,)
    return (OSError, termios.error)


#: exceptions a serial port raises when the device is gone (USB unplug) or misbehaves
PORT_ERRORS = _port_error_types()


def open_serial(path: str, baud: int, timeout_s: float) -> SerialPort:
    """Open a real serial port (or a pty slave) with pyserial.

    ``timeout`` bounds every ``read(n)`` as a whole, so an exact-length read returns after n bytes or
    the timeout, never hangs. The write timeout guards against a port that stops draining.
    """
    import serial

    try:
        port = serial.Serial(
            port=path, baudrate=baud, timeout=timeout_s, write_timeout=max(timeout_s, 0.5), exclusive=True
        )
    except (serial.SerialException, OSError) as e:
        raise PortGoneError(f"cannot open serial port {path}: {e}", port=path) from e
    try:
        # USB-serial adapters buffer replies for up to 16 ms by default; low-latency mode
        # hands them over at once. A pty has no such setting, so this may fail harmlessly.
        port.set_low_latency_mode(True)
    except (AttributeError, OSError, ValueError, NotImplementedError) as e:
        log.debug("low-latency mode not available on %s: %s", path, e)
    result: SerialPort = port
    return result
