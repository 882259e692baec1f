"""``PolicyClient`` hands a caller the reply to its own request, never another request's.

The server here is a bare ROUTER socket driven by the test, so it can answer out of order, with the
wrong id, late, or not at all, which the real server never does on purpose.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import numpy as np
import pytest
import zmq

from runtime.client import ClientCurveKeys, PolicyClient, RequestTimeoutError
from runtime.protocol import codec
from runtime.protocol.errors import BusyError, ErrorInfo, ServerError, UnauthorizedError
from runtime.protocol.messages import PROTOCOL_VERSION, PolicyInfo, StatsSnapshot, TensorInfo, Timing

RECV_TIMEOUT_MS = 5000
T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    id: int
    kind: str


class FakeServer:
    """A ROUTER on loopback; ``request()`` takes the next request, ``answer()`` sends any header."""

    def __init__(self, ctx: zmq.Context) -> None:
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"

    def request(self) -> tuple[bytes, Request]:
        """The next request's routing id and what it asked (its header as sent, unchecked)."""
        assert self.sock.poll(RECV_TIMEOUT_MS), "the client sent nothing"
        frames = self.sock.recv_multipart()
        self.frames = frames[1:]
        self.header = msgpack.unpackb(frames[1])
        return frames[0], Request(self.header["id"], self.header["kind"])

    def infer_request(self) -> codec.InferRequest:
        request = codec.decode_request(self.frames, 1 << 24)
        assert isinstance(request, codec.InferRequest)
        return request

    def answer(self, client: bytes, *frames: Any) -> None:
        self.sock.send_multipart([client, *frames])

    def reply(self, client: bytes, kind: str, rid: int, body: dict[str, Any]) -> None:
        self.answer(client, codec.encode_reply(kind, rid, body, Timing(1.0, 2.0, 3.0)))

    def actions(self, client: bytes, rid: int, actions: np.ndarray) -> None:
        self.answer(client, *codec.encode_actions_reply(rid, actions, Timing(1.0, 2.0, 3.0)))

    def error(self, client: bytes, kind: str, rid: int | None, code: str, message: str) -> None:
        self.answer(client, codec.encode_error(kind, rid, ErrorInfo(code, message), Timing()))


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture
def server(ctx: zmq.Context) -> FakeServer:
    return FakeServer(ctx)


@pytest.fixture
def client(server: FakeServer, ctx: zmq.Context) -> Iterator[PolicyClient]:
    c = PolicyClient(server.endpoint, timeout_s=5.0, context=ctx)
    yield c
    c.close()


@pytest.fixture
def calls() -> Iterator[Callable[[Callable[[], T]], Future[T]]]:
    with ThreadPoolExecutor(1) as pool:
        yield lambda fn: pool.submit(fn)


def _chunk(value: float) -> np.ndarray:
    return np.full((10, 6), value, np.float32)


STATE = {"observation.state": np.zeros(6, np.float32)}


def test_a_reply_to_another_request_is_dropped_and_the_callers_own_is_returned(
    server: FakeServer, client: PolicyClient, calls: Any
) -> None:
    future = calls(lambda: client.infer(STATE))
    who, request = server.request()
    assert request.id == 1
    server.actions(who, 7, _chunk(7.0))  # someone else's chunk
    server.actions(who, 0, _chunk(0.0))
    server.actions(who, request.id, _chunk(1.0))
    chunk = future.result(timeout=10)
    np.testing.assert_array_equal(chunk.actions, _chunk(1.0))
    assert chunk.request_id == 1


def test_a_reply_with_another_id_is_never_returned_even_when_it_is_the_only_one(
    server: FakeServer, client: PolicyClient, calls: Any
) -> None:
    future = calls(lambda: client.infer(STATE, timeout_s=0.5))
    who, request = server.request()
    server.actions(who, request.id + 1, _chunk(2.0))
    with pytest.raises(RequestTimeoutError) as err:
        future.result(timeout=10)
    assert str(err.value) == f"no reply to infer request 1 from {server.endpoint} within 0.5 s"


def test_an_error_for_another_request_is_not_raised_to_the_caller(
    server: FakeServer, client: PolicyClient, calls: Any
) -> None:
    future = calls(lambda: client.ping())
    who, request = server.request()
    assert request.kind == "ping"
    server.error(who, "infer", request.id + 5, "busy", "not yours")
    server.reply(who, "ping", request.id, {"uptime_s": 12.5})
    pong = future.result(timeout=10)
    assert pong.uptime_s == 12.5


def test_an_error_for_the_callers_request_is_raised_with_its_id(
    server: FakeServer, client: PolicyClient, calls: Any
) -> None:
    client.timeout_s = 3.0
    future = calls(lambda: client.infer(STATE))
    who, request = server.request()
    server.error(who, "infer", request.id, "busy", "queue full")
    with pytest.raises(BusyError) as err:
        future.result(timeout=10)
    assert err.value.message == "queue full"
    assert err.value.request_id == 1
    future = calls(lambda: client.stats())
    who, request = server.request()
    server.error(who, "stats", request.id, "something_new", "a code this client does not know")
    with pytest.raises(ServerError) as err2:
        future.result(timeout=10)
    assert (err2.value.code, err2.value.request_id) == ("something_new", 2)


def test_each_call_has_a_new_id_and_a_late_reply_does_not_answer_the_next_call(
    server: FakeServer, client: PolicyClient, calls: Any
) -> None:
    first = calls(lambda: client.infer(STATE, timeout_s=0.3))
    who1, r1 = server.request()
    with pytest.raises(RequestTimeoutError, match="no reply to infer request 1 "):
        first.result(timeout=10)
    second = calls(lambda: client.infer(STATE))
    who2, r2 = server.request()
    assert (r1.id, r2.id) == (1, 2)
    assert who2 != who1  # a fresh socket after the timeout: the old one's queue is gone with it
    server.actions(who1, r1.id, _chunk(1.0))  # late, to the old socket
    server.actions(who2, r1.id, _chunk(1.0))  # late, with the old id, to the new one
    server.actions(who2, r2.id, _chunk(2.0))
    np.testing.assert_array_equal(second.result(timeout=10).actions, _chunk(2.0))
    third = calls(lambda: client.ping())
    _, r3 = server.request()
    assert r3.id == 3
    server.reply(who2, "ping", 3, {"uptime_s": 1.0})
    assert third.result(timeout=10).uptime_s == 1.0


def test_the_call_timeout_overrides_the_clients_and_counts_from_the_send(
    server: FakeServer, client: PolicyClient, calls: Any
) -> None:
    started = time.monotonic()
    future = calls(lambda: client.hello(timeout_s=0.4))
    server.request()
    with pytest.raises(RequestTimeoutError) as err:
        future.result(timeout=10)
    waited = time.monotonic() - started
    assert 0.35 <= waited < 3.0, waited
    assert str(err.value) == f"no reply to hello request 1 from {server.endpoint} within 0.4 s"
    client.timeout_s = 0.25
    started = time.monotonic()
    future = calls(lambda: client.ping())
    server.request()
    with pytest.raises(RequestTimeoutError) as err:
        future.result(timeout=10)
    assert 0.2 <= time.monotonic() - started < 3.0
    assert str(err.value) == f"no reply to ping request 2 from {server.endpoint} within 0.25 s"


def test_the_round_trip_is_measured_from_the_send(server: FakeServer, client: PolicyClient, calls: Any) -> None:
    future = calls(lambda: client.infer(STATE))
    who, request = server.request()
    time.sleep(0.2)
    server.actions(who, request.id, _chunk(3.0))
    chunk = future.result(timeout=10)
    assert 200 <= chunk.round_trip_ms < 3000, chunk.round_trip_ms
    future = calls(lambda: client.ping())
    who, request = server.request()
    time.sleep(0.1)
    server.reply(who, "ping", request.id, {"uptime_s": 0.0})
    assert 100 <= future.result(timeout=10).round_trip_ms < 3000


def test_what_each_call_sends(server: FakeServer, client: PolicyClient, calls: Any) -> None:
    future = calls(lambda: client.infer(STATE, reset=True))
    who, request = server.request()
    infer = server.infer_request()
    assert infer.reset is True
    np.testing.assert_array_equal(infer.observation["observation.state"], STATE["observation.state"])
    server.actions(who, request.id, _chunk(0.0))
    future.result(timeout=10)

    future = calls(lambda: client.infer(STATE))
    who, request = server.request()
    assert server.infer_request().reset is False
    assert "reset" not in server.header["body"]
    server.actions(who, request.id, _chunk(0.0))
    future.result(timeout=10)

    future = calls(lambda: client.control("release", who="op", reason="test", latch=4))
    who, request = server.request()
    assert request.kind == "control.release"
    assert server.header["body"] == {"who": "op", "reason": "test", "latch": 4}
    server.reply(who, "control.release", request.id, {"latch": 4, "mode": "idle"})
    assert future.result(timeout=10) == {"latch": 4, "mode": "idle"}

    future = calls(lambda: client.control("estop", latch=0))
    who, request = server.request()
    assert server.header["body"] == {"latch": 0}  # 0 is a latch, sent; absent is not
    server.reply(who, "control.estop", request.id, {})
    future.result(timeout=10)

    future = calls(lambda: client.control("status"))
    who, request = server.request()
    assert server.header == {"v": 1, "id": request.id, "kind": "control.status"}  # nothing else
    server.reply(who, "control.status", request.id, {"mode": "idle"})
    assert future.result(timeout=10) == {"mode": "idle"}


def test_teleop_sends_its_body_and_returns_the_reply_body_and_round_trip(
    server: FakeServer, client: PolicyClient, calls: Any
) -> None:
    future = calls(lambda: client.teleop("open", who="station"))
    who, request = server.request()
    assert request.kind == "teleop.open"
    assert server.header["body"] == {"who": "station"}
    time.sleep(0.05)
    server.reply(who, "teleop.open", request.id, {"session": "abc"})
    body, rtt_ms = future.result(timeout=10)
    assert body == {"session": "abc"}
    assert 50 <= rtt_ms < 3000


def test_reset_gives_a_new_socket_and_close_leaves_a_shared_context_alone(
    server: FakeServer, ctx: zmq.Context, calls: Any
) -> None:
    c = PolicyClient(server.endpoint, timeout_s=5.0, context=ctx)
    future = calls(lambda: c.ping())
    who1, _ = server.request()
    server.reply(who1, "ping", 1, {"uptime_s": 0.0})
    future.result(timeout=10)
    c.reset()
    future = calls(lambda: c.ping())
    who2, r = server.request()
    assert who2 != who1 and r.id == 2
    server.reply(who2, "ping", 2, {"uptime_s": 0.0})
    future.result(timeout=10)
    with c:
        pass
    assert not ctx.closed  # the caller's context: still usable
    ctx.socket(zmq.PAIR).close(0)


def test_a_client_with_its_own_context_terminates_it(server: FakeServer) -> None:
    c = PolicyClient(server.endpoint, timeout_s=0.2)
    assert c._own_context
    context = c._context
    c.close()
    assert context.closed


def _keys(tmp_path: Path, name: str) -> tuple[bytes, bytes]:
    import zmq.auth

    _, secret_file = zmq.auth.create_certificates(str(tmp_path), name)
    public, secret = zmq.auth.load_certificate(secret_file)
    assert secret is not None
    return public, secret


def test_client_curve_keys_load_from_files_and_refuse_a_public_key_file(tmp_path: Path) -> None:
    import zmq.auth

    server_public_file, _ = zmq.auth.create_certificates(str(tmp_path), "server")
    client_public_file, client_secret_file = zmq.auth.create_certificates(str(tmp_path), "client")
    keys = ClientCurveKeys.from_files(server_public_file, client_secret_file)
    assert keys.server_public == zmq.auth.load_certificate(server_public_file)[0]
    assert (keys.public, keys.secret) == zmq.auth.load_certificate(client_secret_file)
    with pytest.raises(ValueError) as err:
        ClientCurveKeys.from_files(server_public_file, client_public_file)
    assert str(err.value) == f"{client_public_file} holds no secret key; expected the .key_secret file"


def test_a_refused_curve_key_is_raised_unauthorized_not_a_timeout(tmp_path: Path, ctx: zmq.Context) -> None:
    from zmq.auth.thread import ThreadAuthenticator

    server_public, server_secret = _keys(tmp_path, "server")
    client_public, client_secret = _keys(tmp_path, "client")
    allowed = tmp_path / "allowed"
    allowed.mkdir()  # nobody's key
    auth = ThreadAuthenticator(ctx)
    auth.start()
    try:
        auth.configure_curve(domain="*", location=str(allowed))
        router = ctx.socket(zmq.ROUTER)
        router.linger = 0
        router.curve_server = True
        router.curve_secretkey = server_secret
        port = router.bind_to_random_port("tcp://127.0.0.1")
        endpoint = f"tcp://127.0.0.1:{port}"
        keys = ClientCurveKeys(server_public, client_public, client_secret)
        with PolicyClient(endpoint, timeout_s=5.0, curve=keys, context=ctx) as c:
            started = time.monotonic()
            with pytest.raises(UnauthorizedError) as err:
                c.ping()
            assert time.monotonic() - started < 4.0  # the handshake event, not the timeout
            assert err.value.request_id == 1
            assert err.value.message.startswith(f"{endpoint} refused this client's CURVE key (handshake error ")
            assert err.value.message.endswith("add its public key file to the server's authorized_keys_dir")
            with pytest.raises(UnauthorizedError):
                c.ping()  # a fresh socket after the refusal, refused again
        router.close(0)
    finally:
        auth.stop()


INFO = PolicyInfo(
    protocol_version=PROTOCOL_VERSION,
    server_version="0.1.0",
    policy_name="demo_act",
    inputs=(TensorInfo("observation.state", "float32", (6,), "state"),),
    outputs=(TensorInfo("action", "float32", (10, 6), "action"),),
    action_output="action",
    chunk_length=10,
    action_names=("a", "b", "c", "d", "e", "f"),
    control_rate_hz=30.0,
    engine={"engine": "openvino", "device": "CPU", "precision": "f32"},
    versions={"openvino": "2025.4.1"},
    kinds=("hello", "infer", "ping", "stats"),
    max_message_bytes=1 << 20,
    queue_depth=4,
)
STATS = StatsSnapshot(12.0, {"infer": 3}, {"busy": 1}, 2, 0, 1, 4, 0)


def test_hello_and_stats_return_what_the_server_answered(server: FakeServer, client: PolicyClient, calls: Any) -> None:
    future = calls(lambda: client.hello())
    who, request = server.request()
    assert request.kind == "hello"
    server.reply(who, "stats", request.id + 1, STATS.to_wire())  # not the answer to this call
    server.reply(who, "hello", request.id, INFO.to_wire())
    assert future.result(timeout=10) == INFO
    future = calls(lambda: client.stats())
    who, request = server.request()
    assert server.header == {"v": PROTOCOL_VERSION, "id": 2, "kind": "stats"}
    server.reply(who, "hello", request.id - 1, INFO.to_wire())
    server.reply(who, "stats", request.id, STATS.to_wire())
    assert future.result(timeout=10) == STATS


@pytest.mark.parametrize(
    ("kind", "call"),
    [
        ("hello", lambda c: c.hello(timeout_s=0.3)),
        ("ping", lambda c: c.ping(timeout_s=0.3)),
        ("stats", lambda c: c.stats(timeout_s=0.3)),
        ("control.status", lambda c: c.control("status", timeout_s=0.3)),
        ("teleop.open", lambda c: c.teleop("open", timeout_s=0.3, who="x")),
    ],
)
def test_every_call_takes_its_own_timeout(
    server: FakeServer, client: PolicyClient, calls: Any, kind: str, call: Any
) -> None:
    future = calls(lambda: call(client))  # the client's own timeout is 5 s
    server.request()
    with pytest.raises(RequestTimeoutError) as err:
        future.result(timeout=4)
    assert str(err.value) == f"no reply to {kind} request 1 from {server.endpoint} within 0.3 s"


def test_the_default_timeout_is_two_seconds(server: FakeServer, ctx: zmq.Context) -> None:
    with PolicyClient(server.endpoint, context=ctx) as c:
        assert c.timeout_s == 2.0


def test_the_round_trip_is_the_time_from_send_to_reply_in_ms(
    server: FakeServer, client: PolicyClient, calls: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    future = calls(lambda: client.infer(STATE))
    who, request = server.request()
    clock[0] = 100.25
    server.actions(who, request.id, _chunk(3.0))
    assert future.result(timeout=10).round_trip_ms == 250.0


def test_closing_twice_is_harmless(server: FakeServer, ctx: zmq.Context) -> None:
    c = PolicyClient(server.endpoint, timeout_s=1.0, context=ctx)
    c.close()
    c.close()  # e.g. close() inside a with block


def test_an_authorised_curve_client_gets_its_reply_and_closes_cleanly(tmp_path: Path, ctx: zmq.Context) -> None:
    """With CURVE the client also watches handshake events; a call where none came is answered as usual."""
    import shutil

    from zmq.auth.thread import ThreadAuthenticator

    server_public, server_secret = _keys(tmp_path, "server")
    client_public, client_secret = _keys(tmp_path, "client")
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    shutil.copy(tmp_path / "client.key", allowed / "client.key")
    auth = ThreadAuthenticator(ctx)
    auth.start()
    try:
        auth.configure_curve(domain="*", location=str(allowed))
        fake = FakeServer.__new__(FakeServer)
        fake.sock = ctx.socket(zmq.ROUTER)
        fake.sock.linger = 0
        fake.sock.curve_server = True
        fake.sock.curve_secretkey = server_secret
        fake.endpoint = f"tcp://127.0.0.1:{fake.sock.bind_to_random_port('tcp://127.0.0.1')}"
        keys = ClientCurveKeys(server_public, client_public, client_secret)
        c = PolicyClient(fake.endpoint, timeout_s=5.0, curve=keys, context=ctx)
        with ThreadPoolExecutor(1) as pool:
            for rid in (1, 2):
                future = pool.submit(c.ping)
                who, request = fake.request()
                assert request.id == rid
                time.sleep(0.05)
                fake.reply(who, "ping", rid, {"uptime_s": float(rid)})
                assert future.result(timeout=10).uptime_s == float(rid)
        c.close()
        c.close()
        fake.sock.close(0)
    finally:
        auth.stop()
