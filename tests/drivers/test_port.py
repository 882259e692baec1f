"""Opening the serial port: the settings pyserial is given, the refusals, and low-latency mode asked
for. On a real pty (a simulator's port), with ``serial.Serial`` itself or a subclass that records the
low-latency request (a pty has no such setting and refuses it)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import serial

from drivers.errors import PortGoneError
from drivers.port import PORT_ERRORS, open_serial
from drivers.sim.simulator import ServoSimulator


@pytest.fixture
def pty() -> Iterator[str]:
    with ServoSimulator("feetech", [1]) as sim:
        yield sim.port


def test_the_port_is_opened_with_the_baud_and_timeouts_asked_for(pty: str) -> None:
    port = open_serial(pty, 57_600, 0.02)
    try:
        assert isinstance(port, serial.Serial)
        assert (port.port, port.baudrate, port.timeout) == (pty, 57_600, 0.02)
        # a short read timeout still gets half a second to drain a write
        assert port.write_timeout == 0.5
        assert port.exclusive is True
    finally:
        port.close()
    port = open_serial(pty, 1_000_000, 0.8)
    try:
        assert (port.baudrate, port.timeout, port.write_timeout) == (1_000_000, 0.8, 0.8)
    finally:
        port.close()


def test_a_port_open_elsewhere_is_refused_naming_it(pty: str) -> None:
    first = open_serial(pty, 1_000_000, 0.02)
    try:
        with pytest.raises(PortGoneError) as e:
            open_serial(pty, 1_000_000, 0.02)
        assert e.value.port == pty
        assert str(e.value).startswith(f"cannot open serial port {pty}: ")
        assert isinstance(e.value.__cause__, serial.SerialException)
    finally:
        first.close()


def test_a_missing_port_is_refused_naming_it(tmp_path: object) -> None:
    path = f"{tmp_path}/ttyUSB9"
    with pytest.raises(PortGoneError) as e:
        open_serial(path, 1_000_000, 0.02)
    assert e.value.port == path
    assert str(e.value).startswith(f"cannot open serial port {path}: ")
    assert "No such file or directory" in str(e.value)


def test_low_latency_mode_is_asked_for_and_a_refusal_is_only_logged(
    pty: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    asked: list[object] = []

    class Recording(serial.Serial):
        def set_low_latency_mode(self, low_latency_settings: bool) -> None:
            asked.append(low_latency_settings)
            super().set_low_latency_mode(low_latency_settings)

    monkeypatch.setattr(serial, "Serial", Recording)
    with caplog.at_level(logging.DEBUG, logger="drivers.port"):
        port = open_serial(pty, 1_000_000, 0.02)
    port.close()
    assert asked == [True]
    assert f"low-latency mode not available on {pty}: " in caplog.text


def test_a_vanished_tty_raises_one_of_the_port_errors() -> None:
    import termios

    assert (OSError, termios.error) == PORT_ERRORS
