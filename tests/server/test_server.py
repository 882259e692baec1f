"""The server over real sockets (ipc and tcp loopback)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq

from runtime.client import PolicyClient
from runtime.engine.base import Engine
from runtime.protocol import codec
from runtime.protocol.errors import BadInputError, BusyError, SupersededError
from runtime.server import PolicyServer
from runtime.server.synthetic import DEMO, IMAGE, STATE, example_observation, reference_actions

from .conftest import RECV_TIMEOUT_MS, wait_until


def raw_call(ctx: zmq.Context, endpoint: str, frames: list[Any]) -> codec.Reply:
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)
    try:
        sock.send_multipart(frames)
        assert sock.poll(RECV_TIMEOUT_MS), "no reply"
        return codec.decode_reply(sock.recv_multipart())
    finally:
        sock.close(0)


def infer_frames(obs: dict[str, Any], rid: int = 1) -> list[Any]:
    return codec.encode_request("infer", rid, obs)


def header(h: dict[str, Any], *data: bytes) -> list[bytes]:
    return [msgpack.packb(h, use_bin_type=True), *data]


def good() -> dict[str, np.ndarray]:
    return example_observation(DEMO, seed=3)


BAD_INPUTS: list[tuple[str, Callable[[], list[Any]], str, str | None]] = [
    ("garbage bytes", lambda: [b"\x00\xffnot msgpack at all"], "bad_request", "(header)"),
    (
        "truncated frame",
        lambda: [infer_frames(good())[0][:-5], *infer_frames(good())[1:]],
        "bad_request",
        "(header)",
    ),
    (
        "truncated data frame",
        lambda: [*infer_frames(good())[:2], b"\x00" * 7],
        "bad_request",
        STATE,
    ),
    ("msgpack list header", lambda: header([1, "infer"]), "bad_request", "(header)"),
    ("id as string", lambda: header({"v": 1, "id": "1", "kind": "ping"}), "bad_request", "id"),
    ("unsupported version", lambda: header({"v": 99, "id": 1, "kind": "ping"}), "unsupported_version", "v"),
    ("unknown kind", lambda: header({"v": 1, "id": 1, "kind": "shutdown"}), "unsupported_kind", "kind"),
    (
        "missing observation key",
        lambda: infer_frames({IMAGE: good()[IMAGE]}),
        "bad_input",
        STATE,
    ),
    (
        "extra observation key",
        lambda: infer_frames({**good(), "observation.extra": np.zeros(1)}),
        "bad_input",
        "observation.extra",
    ),
    (
        "wrong dtype",
        lambda: infer_frames({**good(), STATE: good()[STATE].astype(np.float64)}),
        "bad_input",
        STATE,
    ),
    (
        "wrong shape",
        lambda: infer_frames({**good(), IMAGE: np.zeros((96, 128, 4), np.uint8)}),
        "bad_input",
        IMAGE,
    ),
    (
        "huge declared size",
        lambda: header(
            {
                "v": 1,
                "id": 1,
                "kind": "infer",
                "body": {"observation": {IMAGE: {"dtype": "uint8", "shape": [2**31, 2**31, 3], "frame": 0}}},
            },
            b"\x00" * 16,
        ),
        "bad_request",
        IMAGE,
    ),
    (
        "object dtype",
        lambda: header(
            {
                "v": 1,
                "id": 1,
                "kind": "infer",
                "body": {"observation": {STATE: {"dtype": "O", "shape": [6], "frame": 0}}},
            },
            b"\x00" * 48,
        ),
        "bad_request",
        f"{STATE}.dtype",
    ),
    # Frames each under ZMQ_MAXMSGSIZE (a bigger one is dropped by libzmq with the connection) but
    # together over max_message_bytes.
    (
        "too large",
        lambda: [*infer_frames(good()), b"\x00" * 100_000, b"\x00" * 100_000],
        "too_large",
        "(message)",
    ),
]


@pytest.mark.parametrize("transport", [0, 1], ids=["ipc", "tcp"])
def test_bad_inputs_get_error_replies_while_a_good_client_keeps_working(
    server: PolicyServer, zmq_ctx: zmq.Context, transport: int
) -> None:
    endpoint = server.bound_endpoints[transport]
    obs = good()
    want = reference_actions(DEMO, obs)
    with PolicyClient(endpoint, timeout_s=5.0) as client:
        for name, make, code, field in BAD_INPUTS:
            reply = raw_call(zmq_ctx, endpoint, make())
            assert not reply.ok, name
            assert reply.error is not None
            assert reply.error.code == code, (name, reply.error)
            assert reply.error.field == field, (name, reply.error)
            assert reply.error.message
            chunk = client.infer(obs)
            np.testing.assert_allclose(chunk.actions, want, atol=1e-5)
    stats = server.snapshot()
    assert stats.errors["bad_input"] == 4
    assert stats.requests["infer"] >= len(BAD_INPUTS)


def test_hello_ping_stats(server: PolicyServer) -> None:
    with PolicyClient(server.bound_endpoints[0]) as client:
        info = client.hello()
        assert info.policy_name == server.engine.manifest.policy_name
        assert [t.name for t in info.inputs] == [IMAGE, STATE]
        assert info.inputs[0].shape == (96, 128, 3) and info.inputs[0].dtype == "uint8"
        assert info.chunk_length == 100 and len(info.action_names) == 6
        assert info.control_rate_hz == 30.0
        assert info.device == "CPU" and info.precision == "f32"
        assert info.versions["protocol"] == "1"
        assert client.ping().request_id > 0
        client.infer(good())
        stats = client.stats()
        assert stats.requests["hello"] == 1 and stats.requests["infer"] == 1
        assert stats.latency_ms["total"].count == 1
        assert stats.queue_capacity == 4


def test_reply_timing_is_consistent(server: PolicyServer) -> None:
    with PolicyClient(server.bound_endpoints[1]) as client:
        t = client.infer(good()).timing
        assert 0 <= t.queue_ms <= t.total_ms and 0 < t.infer_ms <= t.total_ms


def test_client_errors_are_typed(server: PolicyServer) -> None:
    with PolicyClient(server.bound_endpoints[0]) as client:
        with pytest.raises(BadInputError) as info:
            client.infer({**good(), STATE: np.zeros(7, np.float32)})
        assert info.value.field == STATE
        assert info.value.expected == "[6]" and info.value.received == "[7]"
        assert isinstance(info.value, ValueError)


def test_req_socket_clients_are_answered(server: PolicyServer, zmq_ctx: zmq.Context) -> None:
    req = zmq_ctx.socket(zmq.REQ)
    req.connect(server.bound_endpoints[1])
    req.send_multipart(codec.encode_request("ping", 11))
    assert req.poll(RECV_TIMEOUT_MS)
    reply = codec.decode_reply(req.recv_multipart())
    assert reply.ok and reply.id == 11


class BrokenOnceControl:
    """A control handler with a bug that shows on its first request only."""

    def __init__(self) -> None:
        self.calls = 0

    def handle(self, request: Any, client: str) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 1:
            raise KeyError("mode")
        return {"mode": "idle"}


def test_a_bug_in_a_handler_is_answered_internal_and_the_next_request_is_served(
    server: PolicyServer, zmq_ctx: zmq.Context, caplog: pytest.LogCaptureFixture
) -> None:
    server.control = BrokenOnceControl()
    endpoint = server.bound_endpoints[1]
    with caplog.at_level(logging.ERROR, logger="runtime.server.server"):
        reply = raw_call(zmq_ctx, endpoint, codec.encode_request("control.status", 7))
        assert not reply.ok and reply.id == 7 and reply.kind == "control.status"
        assert reply.error is not None and reply.error.code == "internal"
        assert "control.status" in reply.error.message and "KeyError: 'mode'" in reply.error.message
        again = raw_call(zmq_ctx, endpoint, codec.encode_request("control.status", 8))
        assert again.ok and again.id == 8 and dict(again.body) == {"mode": "idle"}
        assert raw_call(zmq_ctx, endpoint, codec.encode_request("ping", 9)).ok
    assert server.running
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 1 and tracebacks[0].exc_info is not None
    assert tracebacks[0].exc_info[0] is KeyError
    assert server.snapshot().errors["internal"] == 1


def test_concurrent_clients_get_their_own_chunks(server: PolicyServer) -> None:
    n_clients, n_requests = 6, 15
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            endpoint = server.bound_endpoints[i % 2]
            with PolicyClient(endpoint, timeout_s=10.0) as client:
                for k in range(n_requests):
                    obs = example_observation(DEMO, seed=100 * i + k)
                    while True:
                        try:
                            chunk = client.infer(obs)
                            break
                        except BusyError:
                            continue  # backpressure is allowed; a lost or wrong reply is not
                    np.testing.assert_allclose(chunk.actions, reference_actions(DEMO, obs), atol=1e-5)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert server.snapshot().latency_ms["total"].count >= n_clients * n_requests


class GatedEngine(Engine):
    """The real engine, held at a gate so a test can fill the queue deterministically."""

    def __init__(self, inner: Engine) -> None:
        super().__init__(inner.manifest, inner.info)
        self.inner = inner
        self.gate = threading.Event()
        self.entered = threading.Event()

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        self.entered.set()
        assert self.gate.wait(10), "gate never opened"
        return self.inner.run_validated(arrays)


def _recv_all(sock: zmq.Socket, n: int) -> dict[int, codec.Reply]:
    out: dict[int, codec.Reply] = {}
    while len(out) < n:
        assert sock.poll(RECV_TIMEOUT_MS), f"got {len(out)} of {n} replies"
        r = codec.decode_reply(sock.recv_multipart())
        assert r.id is not None and r.id not in out
        out[r.id] = r
    return out


def test_backpressure_busy_and_latest_observation_wins(
    make_server: Callable[..., PolicyServer], engine: Engine, zmq_ctx: zmq.Context
) -> None:
    gated = GatedEngine(engine)
    server = make_server(gated, queue_depth=2)
    ep = server.bound_endpoints[1]
    a, b, c = (zmq_ctx.socket(zmq.DEALER) for _ in range(3))
    for s in (a, b, c):
        s.connect(ep)
    obs = good()
    a.send_multipart(infer_frames(obs, 1))  # runs, held at the gate
    assert gated.entered.wait(10)
    a.send_multipart(infer_frames(obs, 2))  # queued
    a.send_multipart(infer_frames(example_observation(DEMO, seed=9), 3))  # replaces 2
    wait_until(lambda: server.snapshot().errors.get("superseded", 0) == 1, what="superseded")
    b.send_multipart(infer_frames(obs, 10))  # queued: queue now full
    wait_until(lambda: server.snapshot().queue_depth == 2, what="queue full")
    c.send_multipart(infer_frames(obs, 20))  # refused
    busy = _recv_all(c, 1)[20]
    assert busy.error is not None and busy.error.code == "busy"
    gated.gate.set()
    got = _recv_all(a, 3)
    assert got[2].error is not None and got[2].error.code == "superseded"
    assert "3" in got[2].error.message
    np.testing.assert_allclose(codec.actions_from_reply(got[1], 0).actions, reference_actions(DEMO, obs), atol=1e-5)
    np.testing.assert_allclose(
        codec.actions_from_reply(got[3], 0).actions,
        reference_actions(DEMO, example_observation(DEMO, seed=9)),
        atol=1e-5,
    )
    assert _recv_all(b, 1)[10].ok


def test_client_maps_busy_and_superseded(engine: Engine) -> None:
    from runtime.protocol.errors import ErrorInfo, error_from_info

    assert isinstance(error_from_info(ErrorInfo("busy", "full")), BusyError)
    assert isinstance(error_from_info(ErrorInfo("superseded", "newer")), SupersededError)
    assert error_from_info(ErrorInfo("from_the_future", "x")).code == "from_the_future"


def test_stop_answers_queued_requests(
    make_server: Callable[..., PolicyServer], engine: Engine, zmq_ctx: zmq.Context
) -> None:
    gated = GatedEngine(engine)
    server = make_server(gated, queue_depth=4)
    a = zmq_ctx.socket(zmq.DEALER)
    b = zmq_ctx.socket(zmq.DEALER)
    a.connect(server.bound_endpoints[0])
    b.connect(server.bound_endpoints[0])
    a.send_multipart(infer_frames(good(), 1))
    assert gated.entered.wait(10)
    b.send_multipart(infer_frames(good(), 2))
    wait_until(lambda: server.snapshot().queue_depth == 1, what="queued")
    stopper = threading.Thread(target=server.stop, args=(0.0,))
    stopper.start()
    assert _recv_all(b, 1)[2].error.code == "shutting_down"  # type: ignore[union-attr]
    gated.gate.set()
    stopper.join(10)
    assert not stopper.is_alive()
