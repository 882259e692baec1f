"""The notify protocol against a real AF_UNIX datagram socket, path and abstract namespace."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.sdnotify import SystemdNotifier


@pytest.fixture
def listener(short_tmp: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(short_tmp / "notify")
    sock.bind(path)
    sock.settimeout(5)
    yield sock, path
    sock.close()


def test_ready_status_watchdog_stopping(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    n = SystemdNotifier(path)
    assert n.ready("serving")
    assert sock.recv(4096) == b"READY=1\nSTATUS=serving"
    assert n.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert n.stopping()
    assert sock.recv(4096) == b"STOPPING=1"
    n.close()


def test_abstract_namespace() -> None:
    name = f"lerobot-runtime-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        n = SystemdNotifier("@" + name)
        assert n.status("hi")
        assert sock.recv(4096) == b"STATUS=hi"
        n.close()
    finally:
        sock.close()


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/x")
    monkeypatch.setenv("WATCHDOG_USEC", "4000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    n = SystemdNotifier.from_env()
    assert n.address == "/run/x" and n.watchdog_interval_s == 2.0
    monkeypatch.setenv("WATCHDOG_PID", "1")  # the watchdog is meant for another process
    assert SystemdNotifier.from_env().watchdog_interval_s is None
    monkeypatch.delenv("NOTIFY_SOCKET")
    assert not SystemdNotifier.from_env().notify("READY=1")


def test_unreachable_socket_is_not_fatal_and_logged_once(short_tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    notifier = SystemdNotifier(str(short_tmp / "nobody"))
    assert not notifier.ready()
    for _ in range(5):
        assert not notifier.watchdog()
    assert caplog.text.count("systemd notify to") == 1
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(short_tmp / "nobody"))
    try:
        assert notifier.watchdog()
        assert "works again" in caplog.text
        listener.close()
        (short_tmp / "nobody").unlink()
        assert not notifier.watchdog() and not notifier.watchdog()
        assert caplog.text.count("failed") == 2  # a new failure is news again
    finally:
        listener.close()


def test_fields_without_status(listener: tuple[socket.socket, str]) -> None:
    sock, path = listener
    n = SystemdNotifier(path)
    assert n.ready()
    assert sock.recv(4096) == b"READY=1"
    assert n.stopping("bye")
    assert sock.recv(4096) == b"STOPPING=1\nSTATUS=bye"
    n.close()
    n.close()  # twice is fine
    assert n.notify("A=1", "B=2")  # a fresh socket after close
    assert sock.recv(4096) == b"A=1\nB=2"
    n.close()


@pytest.mark.parametrize("raw", ["", "0", "-5", "abc", "1.5"])
def test_watchdog_usec_that_is_not_a_positive_integer(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/x")
    monkeypatch.setenv("WATCHDOG_USEC", raw)
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    n = SystemdNotifier.from_env()
    assert n.watchdog_usec is None and n.watchdog_interval_s is None


def test_watchdog_without_pid_applies_to_us(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "3000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    n = SystemdNotifier.from_env()
    assert n.watchdog_usec == 3_000_000 and n.watchdog_interval_s == 1.5
    assert n.address is None and not n.enabled
    monkeypatch.setenv("NOTIFY_SOCKET", "")
    assert SystemdNotifier.from_env().address is None


def test_no_watchdog_variables_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/x")
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    n = SystemdNotifier.from_env()
    assert n.address == "/run/x" and n.watchdog_usec is None


def test_the_smallest_watchdog_timeout_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "1")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert SystemdNotifier.from_env().watchdog_usec == 1
