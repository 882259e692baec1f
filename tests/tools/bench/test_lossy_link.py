"""The bench's bad network (:mod:`tools.bench.lossy_link`), measured through it with an echo server on
loopback: the round trip it adds, bytes in order, a silence that holds and then delivers, a cut."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tools.bench.lossy_link import LossyLink


@pytest.fixture
def echo() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    port = int(server.getsockname()[1])

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield port
    server.close()


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def _trip(sock: socket.socket, payload: bytes) -> float:
    started = time.monotonic()
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        got += sock.recv(65536)
    assert got == payload
    return (time.monotonic() - started) * 1e3


def test_the_round_trip_it_adds_and_its_jitter(echo: int) -> None:
    link = LossyLink(echo, rtt_ms=40.0)
    try:
        with socket.create_connection(("127.0.0.1", link.port)) as s:
            trips = [_trip(s, b"x" * 100) for _ in range(5)]
            assert min(trips) >= 39.0 and max(trips) < 80.0
            link.set(40.0, 30.0)
            jittered = [_trip(s, bytes([i]) * 10) for i in range(20)]  # each payload back whole, in order
            assert min(jittered) >= 24.0 and max(jittered) < 100.0 and max(jittered) - min(jittered) > 3.0
    finally:
        link.close()


def test_silence_holds_everything_until_lifted_and_a_cut_closes_the_connection(echo: int) -> None:
    link = LossyLink(echo)
    try:
        with socket.create_connection(("127.0.0.1", link.port)) as s:
            assert _trip(s, b"a") < 50
            link.silence(True)
            s.sendall(b"held")
            s.settimeout(0.3)
            with pytest.raises(TimeoutError):
                s.recv(10)
            link.silence(False)
            s.settimeout(2.0)
            assert s.recv(10) == b"held"
            link.stall(0.2)
            assert _trip(s, b"late") >= 190
            link.cut()
            assert s.recv(10) == b""  # closed by the link
        with socket.create_connection(("127.0.0.1", link.port)) as again:  # new connections are still taken
            again.settimeout(2.0)
            assert _trip(again, b"b") < 50
        assert link.connections == 2
    finally:
        link.close()
