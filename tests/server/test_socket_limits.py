"""What the server's sockets refuse before any of its code runs.

A frame over ``max_message_bytes`` is dropped by libzmq (``ZMQ_MAXMSGSIZE``) as its size arrives,
with the connection, before the frame is buffered: one oversized message cannot make the daemon
allocate it. The server then serves the next client as if nothing happened.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from runtime.client import PolicyClient
from runtime.errors import ConfigError, InstanceRunningError
from runtime.protocol import codec
from runtime.server import PolicyServer, ServerConfig
from runtime.server.config import CurveConfig
from runtime.server.synthetic import DEMO, example_observation, reference_actions

from .conftest import RECV_TIMEOUT_MS

# A server that cannot start cleanly can hang in its context's term(); fail such a test in 20 s (every
# test here takes under 2 s) instead of waiting for the suite's 300 s.
pytestmark = pytest.mark.timeout(20, method="thread")

# worked out from the demo policy's inputs: a 96x128x3 uint8 image and 6 float32 joints, twice,
# plus 64 KiB for the header
AUTO_LIMIT = 2 * (96 * 128 * 3 + 6 * 4) + 64 * 1024


def _routers(server: PolicyServer) -> list[Any]:
    return list(server._routers)


def _no_reply(ctx: zmq.Context, endpoint: str, frames: list[Any], wait_ms: int = 600) -> bool:
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)
    try:
        sock.send_multipart(frames)
        return not sock.poll(wait_ms)
    finally:
        sock.close(0)


def _serves(server: PolicyServer, endpoint: str) -> None:
    obs = example_observation(DEMO, seed=4)
    with PolicyClient(endpoint, timeout_s=5.0) as client:
        chunk = client.infer(obs)
        assert client.hello().max_message_bytes == server.max_message_bytes
    np.testing.assert_allclose(chunk.actions, reference_actions(DEMO, obs), atol=1e-5)


def test_the_limit_defaults_to_twice_the_inputs_plus_64_kib(make_server: Callable[..., PolicyServer]) -> None:
    server = make_server()
    assert server.max_message_bytes == AUTO_LIMIT
    with PolicyClient(server.bound_endpoints[0], timeout_s=5.0) as client:
        assert client.hello().max_message_bytes == AUTO_LIMIT


def test_every_listening_socket_carries_the_limit_and_the_high_water_mark(
    make_server: Callable[..., PolicyServer],
) -> None:
    server = make_server(max_message_bytes=300_000)
    routers = _routers(server)
    assert len(routers) == 2  # ipc and tcp
    for sock in routers:
        assert sock.getsockopt(zmq.MAXMSGSIZE) == 300_000
        assert sock.getsockopt(zmq.RCVHWM) == 16
        assert sock.getsockopt(zmq.LINGER) == 0
    auto = make_server(endpoints=("tcp://127.0.0.1:*",))
    assert [s.getsockopt(zmq.MAXMSGSIZE) for s in _routers(auto)] == [AUTO_LIMIT]


@pytest.mark.parametrize("transport", [0, 1], ids=["ipc", "tcp"])
def test_an_oversized_frame_is_dropped_at_the_socket_and_the_server_keeps_serving(
    make_server: Callable[..., PolicyServer], zmq_ctx: zmq.Context, transport: int
) -> None:
    server = make_server(max_message_bytes=100_000)
    endpoint = server.bound_endpoints[transport]
    header = codec.encode_request("ping", 9)[0]
    # one frame over the limit: libzmq drops it, with the connection; no reply, nothing counted
    assert _no_reply(zmq_ctx, endpoint, [header, b"\x00" * 100_001])
    assert _no_reply(zmq_ctx, endpoint, [header + b"\x00" * 100_000])
    stats = server.snapshot()
    assert dict(stats.requests) == {}
    assert dict(stats.errors) == {}
    _serves(server, endpoint)
    # a frame of exactly the limit is delivered, and refused by the server's own check of the total
    sock = zmq_ctx.socket(zmq.DEALER)
    sock.connect(endpoint)
    sock.send_multipart([header, b"\x00" * 100_000])
    assert sock.poll(RECV_TIMEOUT_MS)
    reply = codec.decode_reply(sock.recv_multipart())
    assert reply.error is not None and reply.error.code == "too_large" and reply.id == 9
    sock.close(0)


def test_an_explicit_limit_replaces_the_default(make_server: Callable[..., PolicyServer]) -> None:
    server = make_server(endpoints=("ipc://policy.sock",), max_message_bytes=AUTO_LIMIT * 3)
    assert server.max_message_bytes == AUTO_LIMIT * 3
    assert server.info.max_message_bytes == AUTO_LIMIT * 3
    _serves(server, server.bound_endpoints[0])


def test_a_dropped_reply_is_counted(make_server: Callable[..., PolicyServer]) -> None:
    """ROUTER refuses a send to a peer over its high-water mark; the server counts it and goes on."""
    server = make_server(endpoints=("ipc://policy.sock",))

    class Full:
        def send_multipart(self, frames: list[Any], flags: int = 0, copy: bool = True) -> None:
            assert flags & zmq.NOBLOCK  # never waits for a slow peer
            assert copy is False
            raise zmq.Again()

    server._send(Full(), [b"id", b"header"])
    server._send(Full(), [b"id", b"header"])
    assert server.snapshot().errors["dropped"] == 2


def test_a_reply_is_sent_without_waiting(make_server: Callable[..., PolicyServer]) -> None:
    server = make_server(endpoints=("ipc://policy.sock",))
    sent: list[tuple[list[Any], int, bool]] = []

    class Sock:
        def send_multipart(self, frames: list[Any], flags: int = 0, copy: bool = True) -> None:
            sent.append((frames, flags, copy))

    server._send(Sock(), [b"id", b"header"])
    assert sent == [([b"id", b"header"], zmq.NOBLOCK, False)]
    assert "dropped" not in server.snapshot().errors


def test_a_random_tcp_port_is_bound_and_reported(make_server: Callable[..., PolicyServer]) -> None:
    server = make_server(endpoints=("tcp://127.0.0.1:0", "tcp://127.0.0.1:*"))
    ports = [int(ep.rsplit(":", 1)[1]) for ep in server.bound_endpoints]
    assert all(ep.startswith("tcp://127.0.0.1:") for ep in server.bound_endpoints)
    assert all(p > 0 for p in ports) and len(set(ports)) == 2
    for ep in server.bound_endpoints:
        _serves(server, ep)


def test_an_abstract_ipc_socket_is_bound_as_named(make_server: Callable[..., PolicyServer]) -> None:
    name = f"ipc://@lerobot-runtime-test-{os.getpid()}"
    server = make_server(endpoints=(name,))
    assert server.bound_endpoints == [name]
    _serves(server, name)


def test_a_port_held_by_this_process_is_named_without_blaming_another_daemon(engine: Any) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        server = PolicyServer(engine, ServerConfig(endpoints=(f"tcp://127.0.0.1:{port}",)))
        with pytest.raises(InstanceRunningError) as err:
            server.start()
        assert (
            str(err.value)
            == f"server.endpoints: cannot bind tcp://127.0.0.1:{port}: PID {os.getpid()} is listening there"
        )
        assert isinstance(err.value.__cause__, zmq.ZMQError)
    finally:
        holder.close()
    assert not server.running


def test_an_unbindable_endpoint_is_a_config_error_naming_it(engine: Any) -> None:
    server = PolicyServer(engine, ServerConfig(endpoints=("tcp://127.0.0.1:0x",)))
    with pytest.raises(ConfigError) as err:
        server.start()
    assert str(err.value) == (
        "server.endpoints: cannot bind tcp://127.0.0.1:0x: Invalid argument (addr='tcp://127.0.0.1:0x')"
    )
    assert isinstance(err.value.__cause__, zmq.ZMQError)
    assert not server.running


def test_curve_is_applied_to_tcp_listeners_only(make_server: Callable[..., PolicyServer], tmp_path: Path) -> None:
    import zmq.auth

    _, secret = zmq.auth.create_certificates(str(tmp_path), "server")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    zmq.auth.create_certificates(str(allowed), "client")
    server = make_server(curve=CurveConfig(secret, str(allowed)))
    ipc, tcp = _routers(server)
    assert ipc.getsockopt(zmq.CURVE_SERVER) == 0
    assert tcp.getsockopt(zmq.CURVE_SERVER) == 1
    assert [s.getsockopt(zmq.MAXMSGSIZE) for s in (ipc, tcp)] == [AUTO_LIMIT, AUTO_LIMIT]


GOOD = ServerConfig()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"endpoints": ()}, "server.endpoints: expected at least one endpoint, got an empty list"),
        ({"endpoints": ("udp://x:1",)}, "server.endpoints: expected ipc://PATH or tcp://HOST:PORT, got 'udp://x:1'"),
        (
            {"endpoints": ("ipc://a", "inproc://b")},
            "server.endpoints: expected ipc://PATH or tcp://HOST:PORT, got 'inproc://b'",
        ),
        ({"queue_depth": 0}, "server.queue_depth: expected >= 1, got 0"),
        ({"max_message_bytes": -1}, "server.max_message_bytes: expected 0 (auto) or a byte count, got -1"),
        (
            {"canary_interval_s": 0.005},
            "server.canary_interval_s: expected 0 (off) or a period in [0.01, 86400] seconds, got 0.005",
        ),
        (
            {"canary_interval_s": 86401},
            "server.canary_interval_s: expected 0 (off) or a period in [0.01, 86400] seconds, got 86401",
        ),
        (
            {"canary_interval_s": -1},
            "server.canary_interval_s: expected 0 (off) or a period in [0.01, 86400] seconds, got -1",
        ),
        (
            {"history_max_gap_s": -0.5},
            "server.history_max_gap_s: expected 0 (never restart) or seconds > 0, got -0.5",
        ),
        (
            {"history_max_gap_s": float("inf")},
            "server.history_max_gap_s: expected 0 (never restart) or seconds > 0, got inf",
        ),
        (
            {"history_max_gap_s": float("nan")},
            "server.history_max_gap_s: expected 0 (never restart) or seconds > 0, got nan",
        ),
        ({"noise_seed": -1}, "server.noise_seed: expected an integer in [0, 2**64), got -1"),
        ({"noise_seed": 2**64}, f"server.noise_seed: expected an integer in [0, 2**64), got {2**64}"),
    ],
)
def test_a_bad_server_key_is_refused_naming_it(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(GOOD, **change)
    assert str(err.value) == message


@pytest.mark.parametrize(
    "change",
    [
        {"queue_depth": 1},
        {"max_message_bytes": 0},
        {"max_message_bytes": 1},
        {"canary_interval_s": 0},
        {"canary_interval_s": 0.01},
        {"canary_interval_s": 86400},
        {"history_max_gap_s": 0},
        {"noise_seed": 0},
        {"noise_seed": 2**64 - 1},
        {"endpoints": ("ipc://a",)},
        {"endpoints": ("tcp://127.0.0.1:1",)},
    ],
)
def test_the_edges_of_each_server_key_are_accepted(change: dict[str, Any]) -> None:
    cfg = dataclasses.replace(GOOD, **change)
    for key, value in change.items():
        assert getattr(cfg, key) == value


def test_a_port_held_by_another_process_is_named_as_possibly_another_daemon(engine: Any) -> None:
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket, sys, time\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "print(s.getsockname()[1], flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        port = int(holder.stdout.readline())
        server = PolicyServer(engine, ServerConfig(endpoints=(f"tcp://127.0.0.1:{port}",)))
        with pytest.raises(InstanceRunningError) as err:
            server.start()
        assert str(err.value) == (
            f"server.endpoints: cannot bind tcp://127.0.0.1:{port}: PID {holder.pid} is listening there "
            "(another lerobot-runtime?)"
        )
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()


def test_only_a_port_in_use_is_blamed_on_its_listener(engine: Any) -> None:
    """A bind that fails for another reason is a config error, even when something listens on that port."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        # [::1] is loopback, but ZeroMQ binds IPv6 only with its IPv6 option: "No such device"
        server = PolicyServer(engine, ServerConfig(endpoints=(f"tcp://[::1]:{port}",)))
        with pytest.raises(ConfigError) as err:
            server.start()
        assert not isinstance(err.value, InstanceRunningError)
        assert str(err.value).startswith(f"server.endpoints: cannot bind tcp://[::1]:{port}: ")
    finally:
        holder.close()


def test_the_ipc_socket_is_for_the_owner_and_the_group(
    make_server: Callable[..., PolicyServer], short_tmp: Path
) -> None:
    import stat

    old = os.umask(0o022)  # without the chmod the socket would be srwxr-xr-x
    try:
        make_server(endpoints=("ipc://policy.sock",))
    finally:
        os.umask(old)
    assert stat.S_IMODE((short_tmp / "policy.sock").stat().st_mode) == 0o660


def test_every_client_heard_is_counted_and_req_clients_are_answered(
    make_server: Callable[..., PolicyServer], zmq_ctx: zmq.Context
) -> None:
    server = make_server(endpoints=("ipc://policy.sock",))
    endpoint = server.bound_endpoints[0]
    for kind in (zmq.DEALER, zmq.REQ):  # REQ puts an empty delimiter before the header
        for rid in (1, 2):
            sock = zmq_ctx.socket(kind)
            sock.connect(endpoint)
            sock.send_multipart(codec.encode_request("ping", rid))
            assert sock.poll(RECV_TIMEOUT_MS), f"no reply to a {kind} client"
            reply = codec.decode_reply(sock.recv_multipart())
            assert reply.ok and reply.id == rid
            sock.close(0)
    assert server.snapshot().clients == 4
