"""The server's requests, one kind at a time, on real ipc sockets and a stand-in engine.

What each kind is answered, every refusal word for word (code, message, field, expected, received),
what is counted, infers checked and queued (busy, superseded, shutting down, a failed canary), the
control loop's own path ahead of the network, replies forwarded to the socket they came in on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from runtime import __version__
from runtime.bundle.manifest import FileEntry, LanguageEntry, RtcEntry, TensorSpec
from runtime.protocol import codec
from runtime.protocol.messages import KINDS, PrefixFields, Timing
from runtime.server import PolicyServer, ServerConfig
from runtime.server import server as server_module
from runtime.server.queue import Job
from runtime.server.server import policy_info, task_encoder

from .stand_in import INFO, JOINTS, STATE, STEPS, WAIT_S, Caller, StandIn, chunk, error_of, manifest, state

pytestmark = pytest.mark.timeout(30, method="thread")

Serve = Callable[..., PolicyServer]


@pytest.fixture
def serve(short_tmp: Path) -> Iterator[Serve]:
    started: list[tuple[PolicyServer, StandIn]] = []

    def make(engine: StandIn | None = None, **kwargs: Any) -> PolicyServer:
        engine = engine if engine is not None else StandIn()
        kwargs.setdefault("endpoints", ("ipc://a.sock",))
        kwargs.setdefault("canary_interval_s", 0)
        server = PolicyServer(engine, ServerConfig(**kwargs), runtime_directory=short_tmp)
        server.start()
        started.append((server, engine))
        return server

    yield make
    for server, engine in started:
        engine.release()
        server.stop(timeout=1.0)


@pytest.fixture
def caller(zmq_ctx: zmq.Context) -> Callable[..., Caller]:
    def make(server: PolicyServer, index: int = 0, identity: bytes | None = None) -> Caller:
        return Caller(zmq_ctx, server.bound_endpoints[index], identity)

    return make


def obs(v: float = 0.0) -> dict[str, np.ndarray]:
    return {STATE: state(v)}


class Sock:
    """Stands in for a ROUTER socket: keeps what the server sends."""

    def __init__(self) -> None:
        self.sent: list[list[Any]] = []

    def send_multipart(self, frames: list[Any], flags: int = 0, copy: bool = True) -> None:
        self.sent.append(frames)

    def reply(self) -> codec.Reply:
        assert len(self.sent) == 1, self.sent
        frames = self.sent[0]
        assert frames[0] == b"client-1"
        return codec.decode_reply(frames[1:])


def _handle(server: PolicyServer, frames: list[Any], received_at: float) -> codec.Reply:
    sock = Sock()
    server._handle(0, sock, [b"client-1"], [memoryview(f) for f in frames], received_at)
    return sock.reply()


# --- ping, hello, stats --------------------------------------------------------------------------


def test_ping_answers_the_uptime_in_milliseconds_rounded(serve: Serve, caller: Callable[..., Caller]) -> None:
    server = serve()
    server.stats.started = time.monotonic() - 100.25
    reply = caller(server).call("ping", 7)
    assert (reply.ok, reply.id, reply.kind) == (True, 7, "ping")
    uptime = reply.body["uptime_s"]
    assert 100.25 <= uptime < 100.25 + WAIT_S
    assert uptime == round(uptime, 3)
    assert set(reply.body) == {"uptime_s"}
    snap = server.snapshot()
    assert (dict(snap.requests), dict(snap.errors), snap.replies_ok) == ({"ping": 1}, {}, 1)


def test_a_reply_times_only_the_servers_own_handling(serve: Serve) -> None:
    server = serve()
    for kind in ("ping", "hello", "stats"):
        before = time.monotonic()
        reply = _handle(server, codec.encode_request(kind, 3), before - 1.5)
        after = time.monotonic()
        assert (reply.ok, reply.id, reply.kind) == (True, 3, kind)
        assert (reply.timing.queue_ms, reply.timing.infer_ms) == (0.0, 0.0)
        assert 1500.0 <= reply.timing.total_ms <= (after - before + 1.5) * 1e3


def test_hello_describes_the_policy(serve: Serve, caller: Callable[..., Caller]) -> None:
    server = serve(queue_depth=3, max_message_bytes=5000)
    reply = caller(server).call("hello", 2)
    assert (reply.ok, reply.id, reply.kind) == (True, 2, "hello")
    body = dict(reply.body)
    assert body == server.info.to_wire()
    assert body["arm"] is None
    assert body["limits"] == {"max_message_bytes": 5000, "queue_depth": 3}
    assert body["policy"]["name"] == "stand-in"


def test_hello_carries_the_arms_status_when_the_daemon_holds_one(serve: Serve, caller: Callable[..., Caller]) -> None:
    server = serve()
    calls: list[int] = []

    def arm() -> dict[str, Any]:
        calls.append(1)
        return {"health": "ok", "temperatures": [30, 31, 32]}

    server.arm_status = arm
    reply = caller(server).call("hello", 2)
    assert reply.body["arm"] == {"health": "ok", "temperatures": [30, 31, 32]}
    assert {**reply.body, "arm": None} == server.info.to_wire()
    assert calls == [1]
    # the description kept for the next hello is not changed
    assert server._hello_body["arm"] is None


def test_stats_answers_the_snapshot(serve: Serve, caller: Callable[..., Caller]) -> None:
    server = serve(queue_depth=2)
    c = caller(server)
    c.call("ping", 1)
    reply = c.call("stats", 2)
    assert (reply.ok, reply.id, reply.kind) == (True, 2, "stats")
    body = dict(reply.body)
    assert body["requests"] == {"ping": 1, "stats": 1}
    assert body["errors"] == {}
    assert body["replies_ok"] == 1  # the stats reply itself is counted after it is made
    assert body["queue"] == {"depth": 0, "depth_max": 0, "capacity": 2, "in_flight": 0}
    assert body["clients"] == 1
    assert body["engine"] == INFO.to_json()
    assert server.snapshot().replies_ok == 2


# --- control and teleop --------------------------------------------------------------------------


def test_control_without_a_control_loop_is_refused_naming_why(serve: Serve, caller: Callable[..., Caller]) -> None:
    server = serve()
    c = caller(server)
    reply = c.call("control.status", 4)
    assert error_of(reply) == (
        4,
        "control.status",
        "no_control",
        "control.status: this daemon does not drive an arm (arm.kind = none or control.enabled = false); "
        "control loops that own their arm use infer",
        None,
        None,
        None,
    )
    server.no_control_reason = "the arm is asleep"
    reply = c.call("teleop.open", 5, body={"who": "ana"})
    assert error_of(reply) == (5, "teleop.open", "no_control", "teleop.open: the arm is asleep", None, None, None)
    snap = server.snapshot()
    assert dict(snap.requests) == {"control.status": 1, "teleop.open": 1}
    assert dict(snap.errors) == {"no_control": 2}
    assert snap.replies_ok == 0


class Handler:
    def __init__(self, answer: Callable[[Any, str], dict[str, Any]]) -> None:
        self.answer = answer
        self.seen: list[tuple[Any, str]] = []

    def handle(self, request: Any, client: str) -> dict[str, Any]:
        self.seen.append((request, client))
        return self.answer(request, client)


def test_control_and_teleop_go_to_the_handler_with_the_client_named(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    server = serve()
    handler = Handler(lambda request, client: {"did": request.kind, "for": client})
    server.control = handler
    c = caller(server, identity=b"\x01op")
    reply = c.call("control.stop", 8)
    assert (reply.ok, reply.id, reply.kind, dict(reply.body)) == (
        True,
        8,
        "control.stop",
        {"did": "control.stop", "for": "016f70"},
    )
    reply = c.call("teleop.open", 9, body={"who": "ana"})
    assert (reply.ok, reply.id, dict(reply.body)) == (True, 9, {"did": "teleop.open", "for": "016f70"})
    assert [(r.kind, r.id, who) for r, who in handler.seen] == [
        ("control.stop", 8, "016f70"),
        ("teleop.open", 9, "016f70"),
    ]
    snap = server.snapshot()
    assert (dict(snap.requests), dict(snap.errors), snap.replies_ok) == (
        {"control.stop": 1, "teleop.open": 1},
        {},
        2,
    )


def test_a_bug_answering_a_request_is_an_internal_error_and_serving_goes_on(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    server = serve()

    def broken(request: Any, client: str) -> dict[str, Any]:
        raise KeyError("latch")

    server.control = Handler(broken)
    c = caller(server)
    reply = c.call("control.status", 6)
    assert error_of(reply) == (
        6,
        "control.status",
        "internal",
        "control.status failed in the server: KeyError: 'latch' (the traceback is in its log)",
        None,
        None,
        None,
    )
    assert c.call("ping", 7).ok
    snap = server.snapshot()
    assert dict(snap.requests) == {"control.status": 1, "ping": 1}
    assert dict(snap.errors) == {"internal": 1}


def test_a_bug_before_the_request_is_read_names_no_kind(
    serve: Serve, caller: Callable[..., Caller], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve()

    def broken(frames: Any, limit: int) -> Any:
        raise ValueError("no idea")

    monkeypatch.setattr(server_module, "decode_request", broken)
    reply = caller(server).call("ping", 6)
    assert error_of(reply) == (
        None,
        None,
        "internal",
        "request failed in the server: ValueError: no idea (the traceback is in its log)",
        None,
        None,
        None,
    )
    snap = server.snapshot()
    assert (dict(snap.requests), dict(snap.errors)) == ({"invalid": 1}, {"internal": 1})


def test_an_unreadable_request_is_counted_invalid_and_answered_with_its_id(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    import msgpack

    server = serve()
    c = caller(server)
    c.send([msgpack.packb({"v": 1, "id": 12, "kind": "shutdown"})])
    reply = c.receive()
    assert reply.id == 12 and reply.kind is None and reply.error is not None
    assert (reply.error.code, reply.error.field) == ("unsupported_kind", "kind")
    before = time.monotonic()
    reply = _handle(server, [msgpack.packb({"v": 1, "id": 13, "kind": "shutdown"})], before - 2.0)
    assert reply.id == 13 and reply.timing.total_ms >= 2000.0
    assert (reply.timing.queue_ms, reply.timing.infer_ms) == (0.0, 0.0)
    assert reply.timing.total_ms <= (time.monotonic() - before + 2.0) * 1e3
    snap = server.snapshot()
    assert (dict(snap.requests), dict(snap.errors)) == ({"invalid": 2}, {"unsupported_kind": 2})


# --- infer ---------------------------------------------------------------------------------------


def test_an_infer_is_answered_with_its_chunk(serve: Serve, caller: Callable[..., Caller]) -> None:
    engine = StandIn()
    server = serve(engine)
    reply = caller(server).call("infer", 5, obs(2.0))
    assert (reply.ok, reply.id, reply.kind) == (True, 5, "infer")
    actions = codec.actions_from_reply(reply, 0.0).actions
    np.testing.assert_array_equal(actions, [[2.0] * JOINTS, [3.0] * JOINTS])
    assert len(engine.runs) == 1
    np.testing.assert_array_equal(engine.runs[0][0], state(2.0))
    snap = server.snapshot()
    assert (dict(snap.requests), dict(snap.errors), snap.replies_ok) == ({"infer": 1}, {}, 1)


def test_the_reply_goes_back_through_the_socket_the_request_came_in_on(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    server = serve(endpoints=("ipc://a.sock", "ipc://b.sock"))
    first, second = caller(server, 0, b"same"), caller(server, 1, b"same")
    reply = second.call("infer", 21, obs(1.0))
    assert reply.ok and reply.id == 21
    assert first.nothing()
    reply = first.call("infer", 22, obs(4.0))
    assert reply.ok and reply.id == 22
    np.testing.assert_array_equal(codec.actions_from_reply(reply, 0.0).actions, chunk(state(4.0)))
    assert second.nothing()


BAD_OBSERVATIONS = [
    (
        {STATE: np.zeros(4, np.float32)},
        STATE,
        "[3]",
        "[4]",
    ),
    (
        {STATE: np.zeros(JOINTS, np.float64)},
        STATE,
        "float32",
        "float64",
    ),
    (
        {},
        STATE,
        None,
        None,
    ),
]


@pytest.mark.parametrize(("observation", "field", "expected", "received"), BAD_OBSERVATIONS)
def test_a_bad_observation_is_refused_naming_the_input_and_nothing_is_run(
    serve: Serve,
    caller: Callable[..., Caller],
    observation: dict[str, Any],
    field: str,
    expected: str | None,
    received: str | None,
) -> None:
    engine = StandIn()
    server = serve(engine)
    reply = caller(server).call("infer", 3, observation)
    assert reply.error is not None
    assert (reply.id, reply.kind, reply.error.code, reply.error.field) == (3, "infer", "bad_input", field)
    if expected is not None:
        assert (reply.error.expected, reply.error.received) == (expected, received)
    assert engine.runs == []
    assert dict(server.snapshot().errors) == {"bad_input": 1}


def test_values_that_are_not_finite_are_refused_unless_the_input_allows_them(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    bad = {STATE: np.array([0.0, np.nan, 1.0], np.float32)}
    engine = StandIn()
    reply = caller(serve(engine)).call("infer", 3, bad)
    assert reply.error is not None and (reply.error.code, reply.error.field) == ("bad_input", STATE)
    assert engine.runs == []
    allowing = StandIn()
    reply = caller(serve(allowing, endpoints=("ipc://b.sock",), allow_non_finite=(STATE,))).call("infer", 4, bad)
    assert reply.ok and len(allowing.runs) == 1


NOISE = TensorSpec("noise", "float32", (STEPS, JOINTS), "noise")


def test_sampling_noise_sent_by_a_client_is_refused(serve: Serve, caller: Callable[..., Caller]) -> None:
    engine = StandIn(manifest(NOISE))
    server = serve(engine)
    reply = caller(server).call("infer", 3, {**obs(), "noise": np.zeros((STEPS, JOINTS), np.float32)})
    assert error_of(reply) == (
        3,
        "infer",
        "bad_input",
        "input 'noise': the server draws this policy's sampling noise per request "
        "(server.noise_seed makes it reproducible); do not send it",
        "noise",
        "not sent",
        "noise sent",
    )
    assert engine.runs == []
    assert caller(server).call("infer", 4, obs()).ok  # without it, served with the server's noise


def test_a_task_sent_to_a_policy_without_language_is_refused(serve: Serve, caller: Callable[..., Caller]) -> None:
    engine = StandIn()
    server = serve(engine)
    reply = caller(server).call("infer", 3, obs(), {"task": "pick"})
    assert reply.error is not None
    assert (reply.error.code, reply.error.field, reply.error.expected, reply.error.received) == (
        "bad_input",
        "task",
        "no task",
        "str task",
    )
    assert engine.runs == [] and not server.takes_task


def test_a_prefix_sent_to_a_policy_without_real_time_chunking_is_refused(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    engine = StandIn()
    server = serve(engine)
    reply = caller(server).call("infer", 3, obs(), {"delay": 1})
    assert reply.error is not None
    assert (reply.error.code, reply.error.field) == ("bad_input", "delay")
    assert engine.runs == [] and not server.takes_prefix


# --- language and real-time chunking -------------------------------------------------------------

VOCAB = {"<pad>": 0, "<unk>": 1, "pick": 2, "up": 3, "cube": 4}
TOKENS = TensorSpec("tokens", "int64", (4,), "language")
MASK = TensorSpec("mask", "bool", (4,), "language")


def _language_engine(folder: Path) -> StandIn:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    tok.enable_truncation(4)
    tok.enable_padding(length=4, pad_id=0, pad_token="<pad>")
    text = str(tok.to_str()).encode()
    (folder / "tokenizer.json").write_bytes(text)
    language = LanguageEntry(
        FileEntry("tokenizer.json", hashlib.sha256(text).hexdigest()), "tokens", "mask", 4, max_task_bytes=20
    )
    info = dataclasses.replace(INFO, bundle=str(folder))
    return StandIn(manifest(TOKENS, MASK, language=language), info)


def test_a_language_policy_gets_the_tasks_tokens_and_refuses_sent_ones(
    serve: Serve, caller: Callable[..., Caller], tmp_path: Path
) -> None:
    engine = _language_engine(tmp_path)
    server = serve(engine)
    assert server.takes_task and server.tasks is not None and server.info.max_task_bytes == 20
    c = caller(server)
    assert c.call("infer", 1, obs(1.0), {"task": "pick up"}).ok
    tokens, mask = engine.runs[0][1], engine.runs[0][2]
    assert tokens.tolist() == [2, 3, 0, 0] and mask.tolist() == [True, True, False, False]
    reply = c.call("infer", 2, {**obs(), "tokens": np.zeros(4, np.int64)}, {"task": "pick"})
    assert error_of(reply) == (
        2,
        "infer",
        "bad_input",
        "input 'tokens': the server tokenizes this policy's task itself; send the task string (body.task), "
        "not its tokens",
        "tokens",
        "not sent (send task)",
        "tokens sent",
    )
    reply = c.call("infer", 3, obs())
    assert reply.error is not None
    assert (reply.error.code, reply.error.field, reply.error.received) == ("bad_input", "task", "nothing")
    assert len(engine.runs) == 1
    done: list[Any] = []
    assert server.submit_local([state(0.0)], lambda a, e: done.append(e))
    assert done == ["bad_input: " + reply.error.message]
    assert len(engine.runs) == 1
    assert server.snapshot().local_errors == {"bad_input": 1}  # counted as the socket's refusals are


def test_task_encoder_is_the_bundles_tokenizer_for_a_language_policy_only(tmp_path: Path) -> None:
    assert task_encoder(StandIn()) is None
    encoder = task_encoder(_language_engine(tmp_path))
    assert encoder is not None and encoder.max_bytes == 20
    assert encoder.encode("up cube")[0].tolist() == [3, 4, 0, 0]


PREFIX = TensorSpec("rtc.prefix", "float32", (4, JOINTS), "prefix")
WEIGHTS = TensorSpec("rtc.weights", "float32", (4,), "prefix_weights")
CAP = TensorSpec("rtc.cap", "float32", (1,), "guidance")
RTC = RtcEntry("rtc.prefix", "rtc.weights", "rtc.cap", 4, 2, "ZEROS", 5.0)


def test_a_real_time_chunking_policy_gets_the_prefix_and_refuses_sent_inputs(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    engine = StandIn(manifest(PREFIX, WEIGHTS, CAP, rtc=RTC))
    server = serve(engine)
    assert server.takes_prefix and server.prefix is not None
    c = caller(server)
    left = np.arange(2 * JOINTS, dtype=np.float32).reshape(2, JOINTS)
    assert c.call("infer", 1, obs(), {"prefix": left, "delay": 1}).ok
    prefix, weights, cap = engine.runs[0][1:]
    np.testing.assert_array_equal(prefix, np.concatenate([left, np.zeros((2, JOINTS), np.float32)]))
    assert weights.tolist() == [1.0, 0.0, 0.0, 0.0] and cap.tolist() == [5.0]  # ZEROS: 1 up to the delay
    reply = c.call("infer", 2, {**obs(), "rtc.weights": np.zeros(4, np.float32)})
    assert error_of(reply) == (
        2,
        "infer",
        "bad_input",
        "input 'rtc.weights': the server makes this policy's real-time chunking inputs itself; send the leftover "
        "actions as body.prefix and the delay as body.delay",
        "rtc.weights",
        "not sent (send prefix and delay)",
        "rtc.weights sent",
    )
    reply = c.call("infer", 3, obs(), {"delay": 9})
    assert reply.error is not None and (reply.error.code, reply.error.field) == ("bad_input", "delay")
    assert len(engine.runs) == 1
    done: list[Any] = []
    assert server.submit_local([state(0.0)], lambda a, e: done.append(e), rtc=PrefixFields(delay=9))
    assert done == ["bad_input: " + reply.error.message]
    assert server.submit_local([state(1.0)], lambda a, e: done.append(a), rtc=PrefixFields(left[:1], 1))
    wait_for(lambda: len(done) == 2)
    np.testing.assert_array_equal(done[1], chunk(state(1.0)))
    np.testing.assert_array_equal(engine.runs[1][1], np.concatenate([left[:1], np.zeros((3, JOINTS), np.float32)]))
    assert engine.runs[1][2].tolist() == [1.0, 0.0, 0.0, 0.0]


def test_policy_info_describes_the_policy_whole(tmp_path: Path) -> None:
    engine = StandIn(manifest(NOISE, PREFIX, WEIGHTS, CAP, rtc=RTC, history=2, tools={"lerobot": "0.4.1", "n": 3}))
    info = policy_info(engine, 4096, 5)
    assert info.protocol_version == 1 and info.server_version == __version__
    assert info.policy_name == "stand-in"
    assert [(t.name, t.dtype, t.shape, t.role) for t in info.inputs] == [(STATE, "float32", (JOINTS,), "state")]
    assert [(t.name, t.dtype, t.shape, t.role) for t in info.outputs] == [
        ("action", "float32", (STEPS, JOINTS), "action")
    ]
    assert (info.action_output, info.chunk_length, info.action_names, info.control_rate_hz) == (
        "action",
        STEPS,
        ("a", "b", "c"),
        30.0,
    )
    assert info.engine == INFO.to_json()
    assert dict(info.versions) == {
        "lerobot_runtime": __version__,
        "protocol": "1",
        "openvino": "2099.1",
        "zmq": zmq.zmq_version(),
        "lerobot": "0.4.1",
        "n": "3",
    }
    assert info.kinds == KINDS
    assert (info.max_message_bytes, info.queue_depth, info.history_frames) == (4096, 5, 2)
    assert info.noise_inputs == ("noise",) and info.max_task_bytes == 0
    assert (info.prefix_steps, info.max_delay) == (4, STEPS - 1)
    assert dict(info.prefix_defaults) == {
        "execution_horizon": 2,
        "prefix_attention_schedule": "ZEROS",
        "max_guidance_weight": 5.0,
    }
    plain = policy_info(StandIn(), 100, 1)
    assert (plain.prefix_steps, plain.max_delay, dict(plain.prefix_defaults), plain.noise_inputs) == (0, 0, {}, ())
    assert plain.history_frames == 1


def test_policy_info_names_a_language_policys_task_bound(tmp_path: Path) -> None:
    assert policy_info(_language_engine(tmp_path), 100, 1).max_task_bytes == 20


# --- the queue: busy, superseded, shutting down, a failed canary ---------------------------------


def wait_for(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_full_queue_refuses_busy_naming_its_bound(serve: Serve, caller: Callable[..., Caller]) -> None:
    engine = StandIn()
    engine.hold = True
    server = serve(engine, queue_depth=1, latest_observation_wins=False)
    a, b, c = caller(server, identity=b"a"), caller(server, identity=b"b"), caller(server, identity=b"c")
    a.send(codec.encode_request("infer", 1, obs(1.0)))
    engine.wait_entered()
    b.send(codec.encode_request("infer", 2, obs(2.0)))
    wait_for(lambda: len(server.queue) == 1)
    c.send(codec.encode_request("infer", 3, obs(3.0)))
    reply = c.receive()
    assert error_of(reply) == (
        3,
        "infer",
        "busy",
        "inference queue is full (1 waiting); send the next observation instead",
        "(queue)",
        "< 1 queued",
        "1 queued",
    )
    # timed from its receipt, here 100 s before it is handled
    before = time.monotonic()
    reply = _handle(server, codec.encode_request("infer", 4, obs(4.0)), before - 100.0)
    assert error_of(reply)[:3] == (4, "infer", "busy")
    assert reply.timing.queue_ms == 0.0 and reply.timing.infer_ms == 0.0
    assert 100_000.0 <= reply.timing.total_ms <= (time.monotonic() - before + 100.0) * 1e3
    assert dict(server.snapshot().errors) == {"busy": 2}
    engine.release()
    assert a.receive().id == 1 and b.receive().id == 2
    assert len(engine.runs) == 2


def test_a_newer_observation_from_the_same_client_supersedes_the_queued_one(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    engine = StandIn()
    engine.hold = True
    server = serve(engine, queue_depth=1)
    a = caller(server, identity=b"a")
    a.send(codec.encode_request("infer", 1, obs(1.0)))
    engine.wait_entered()
    a.send(codec.encode_request("infer", 2, obs(2.0)))
    wait_for(lambda: len(server.queue) == 1)
    a.send(codec.encode_request("infer", 3, obs(3.0)))
    reply = a.receive()
    assert error_of(reply) == (
        2,
        "infer",
        "superseded",
        "replaced by newer request 3 from the same client (latest observation wins)",
        None,
        None,
        None,
    )
    assert reply.timing.infer_ms == 0.0 and reply.timing.queue_ms == reply.timing.total_ms > 0.0
    engine.release()
    assert [a.receive().id, a.receive().id] == [1, 3]
    np.testing.assert_array_equal(engine.runs[1][0], state(3.0))
    assert dict(server.snapshot().errors) == {"superseded": 1}


def test_an_infer_while_stopping_is_refused_and_nothing_is_queued(serve: Serve, caller: Callable[..., Caller]) -> None:
    engine = StandIn()
    server = serve(engine)
    server._accepting = False
    before = time.monotonic()
    reply = _handle(server, codec.encode_request("infer", 4, obs()), before - 0.5)
    assert error_of(reply) == (4, "infer", "shutting_down", "the server is stopping", None, None, None)
    assert reply.timing.infer_ms == 0.0
    assert reply.timing.queue_ms == reply.timing.total_ms >= 500.0
    assert reply.timing.total_ms <= (time.monotonic() - before + 0.5) * 1e3
    assert len(server.queue) == 0 and engine.runs == []
    assert dict(server.snapshot().errors) == {"shutting_down": 1}
    assert not server.submit_local([state(0.0)], lambda a, e: None)
    server._accepting = True  # so the fixture's stop closes the queue at once


class FailedCanary:
    failure = "the test case's actions were off by 3.2 (tolerance 0.05); reload the bundle"

    def due(self, *, idle: bool) -> bool:
        return False

    def seconds_until_due(self) -> None:
        return None

    class state:  # stands in for CanaryState
        @staticmethod
        def to_wire() -> dict[str, Any]:
            return {"failed": True}


def test_an_infer_after_a_failed_canary_is_refused_with_its_reason(serve: Serve, caller: Callable[..., Caller]) -> None:
    engine = StandIn()
    server = serve(engine)
    assert server._worker is not None
    server._worker.canary = FailedCanary()  # type: ignore[assignment]
    reply = caller(server).call("infer", 6, obs())
    assert error_of(reply) == (6, "infer", "verification_failed", FailedCanary.failure, None, None, None)
    assert engine.runs == [] and dict(server.snapshot().errors) == {"verification_failed": 1}


def test_after_a_failed_canary_infers_are_refused_at_once_without_a_queue_slot(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    engine = StandIn()
    engine.hold, engine.hold_s = True, 10.0  # longer than any reply is waited for
    server = serve(engine, queue_depth=1)
    assert server.submit_local([state(0.0)], lambda a, e: None)
    engine.wait_entered()  # the worker is busy: refusals come from the I/O thread
    assert server._worker is not None
    server._worker.canary = FailedCanary()  # type: ignore[assignment]
    for rid, who in ((1, b"a"), (2, b"b")):
        reply = caller(server, identity=who).call("infer", rid, obs())
        assert error_of(reply)[:3] == (rid, "infer", "verification_failed")
    assert len(server.queue) == 0


# --- the control loop's path ---------------------------------------------------------------------


def test_the_control_loops_inference_goes_ahead_of_the_network(serve: Serve, caller: Callable[..., Caller]) -> None:
    engine = StandIn()
    engine.hold = True
    server = serve(engine, queue_depth=2)
    a = caller(server, identity=b"a")
    a.send(codec.encode_request("infer", 1, obs(1.0)))
    engine.wait_entered()
    a2 = caller(server, identity=b"b")
    a2.send(codec.encode_request("infer", 2, obs(2.0)))
    wait_for(lambda: len(server.queue) == 1)
    done: list[tuple[Any, Any]] = []
    assert server.submit_local([state(7.0)], lambda actions, error: done.append((actions, error))) is True
    engine.release()
    wait_for(lambda: len(engine.runs) == 3)
    assert [float(r[0][0]) for r in engine.runs] == [1.0, 7.0, 2.0]
    wait_for(lambda: len(done) == 1)
    actions, error = done[0]
    assert error is None
    np.testing.assert_array_equal(actions, chunk(state(7.0)))
    assert a.receive().id == 1 and a2.receive().id == 2


def test_the_control_loops_inferences_count_as_infer_requests_with_the_cpu_they_ran_on(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    server = serve()
    assert caller(server).call("infer", 1, obs()).ok
    done: list[Any] = []
    for n in (1, 2, 3):  # one at a time: a newer one would supersede a queued one
        assert server.submit_local([state(float(n))], lambda a, e: done.append(e))
        wait_for(lambda n=n: len(done) == n)
    assert done == [None, None, None]
    wait_for(lambda: server.snapshot().replies_ok == 4)
    snap = server.snapshot()
    assert (dict(snap.requests), dict(snap.errors)) == ({"infer": 4}, {})
    assert (dict(snap.local_requests), dict(snap.local_errors)) == ({"infer": 3}, {})
    assert sum(snap.inference_cpus.values()) == 4 and set(snap.inference_cpus) <= os.sched_getaffinity(0)
    assert snap.latency_ms["infer"].count == 4


def test_a_newer_local_observation_supersedes_the_queued_one(serve: Serve, caller: Callable[..., Caller]) -> None:
    engine = StandIn()
    engine.hold = True
    server = serve(engine)
    first: list[Any] = []
    second: list[Any] = []
    third: list[Any] = []
    assert server.submit_local([state(1.0)], lambda a, e: first.append((a, e)))
    engine.wait_entered()
    assert server.submit_local([state(2.0)], lambda a, e: second.append((a, e)))
    assert server.submit_local([state(3.0)], lambda a, e: third.append((a, e)))
    assert second == [(None, "superseded by a newer observation")]
    engine.release()
    wait_for(lambda: len(third) == 1)
    assert third[0][1] is None
    np.testing.assert_array_equal(third[0][0], chunk(state(3.0)))
    assert [float(r[0][0]) for r in engine.runs] == [1.0, 3.0]
    snap = server.snapshot()
    assert (dict(snap.requests), dict(snap.errors)) == ({"infer": 3}, {"superseded": 1})
    assert (dict(snap.local_requests), dict(snap.local_errors)) == ({"infer": 3}, {"superseded": 1})


def test_a_closed_queue_takes_no_local_inference(serve: Serve) -> None:
    server = serve()
    server.queue.close()
    assert server.submit_local([state(1.0)], lambda a, e: None) is False
    assert dict(server.snapshot().local_errors) == {"shutting_down": 1}
    server._accepting = False
    assert server.submit_local([state(1.0)], lambda a, e: None) is False
    snap = server.snapshot()
    assert (dict(snap.local_requests), dict(snap.errors)) == ({"infer": 2}, {"shutting_down": 2})


def test_the_control_loops_history_is_its_own_and_takes_observed_ticks(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    engine = StandIn(manifest(history=3))
    server = serve(engine)
    done: list[Any] = []

    def frames(run: int) -> list[float]:
        return [float(v) for v in engine.runs[run][0][:, 0]]

    server.observe_local([state(1.0)])
    server.observe_local([state(2.0)])
    assert server.submit_local([state(3.0)], lambda a, e: done.append(e))
    wait_for(lambda: len(done) == 1)
    assert frames(0) == [1.0, 2.0, 3.0]
    # a client's frames are not the loop's
    assert caller(server).call("infer", 1, obs(5.0)).ok
    assert frames(1) == [5.0, 5.0, 5.0]
    server.observe_local([state(4.0)], reset=True)
    assert server.submit_local([state(6.0)], lambda a, e: done.append(e))
    wait_for(lambda: len(done) == 2)
    assert frames(2) == [4.0, 4.0, 6.0]
    assert server.submit_local([state(8.0)], lambda a, e: done.append(e), reset=True)
    wait_for(lambda: len(done) == 3)
    assert frames(3) == [8.0, 8.0, 8.0]
    assert done == [None, None, None]


def test_the_control_loops_task_is_tokenized_for_a_language_policy(serve: Serve, tmp_path: Path) -> None:
    engine = _language_engine(tmp_path)
    server = serve(engine)
    done: list[Any] = []
    assert server.submit_local([state(1.0)], lambda a, e: done.append((a, e)), task="up cube")
    wait_for(lambda: len(done) == 1)
    assert done[0][1] is None
    np.testing.assert_array_equal(done[0][0], chunk(state(1.0)))
    assert engine.runs[0][1].tolist() == [3, 4, 0, 0] and engine.runs[0][2].tolist() == [True, True, False, False]


def test_a_clients_reset_starts_its_history_over(serve: Serve, caller: Callable[..., Caller]) -> None:
    engine = StandIn(manifest(history=2))
    server = serve(engine)
    a, b = caller(server, identity=b"a"), caller(server, identity=b"b")
    assert a.call("infer", 1, obs(1.0)).ok and b.call("infer", 1, obs(9.0)).ok
    assert a.call("infer", 2, obs(2.0)).ok
    assert a.call("infer", 3, obs(3.0), {"reset": True}).ok
    stacks = [r[0][:, 0].tolist() for r in engine.runs]
    assert stacks == [[1.0, 1.0], [9.0, 9.0], [1.0, 2.0], [3.0, 3.0]]


# --- replies and their errors --------------------------------------------------------------------


def test_a_job_error_goes_to_the_local_callback_or_the_client(serve: Serve) -> None:
    server = serve(endpoints=("ipc://a.sock", "ipc://b.sock"))
    done: list[Any] = []
    local = Job(-1, [b"control-loop"], 0, [], 0.0, lambda a, e: done.append((a, e)))
    server._reply_job_error(local, "shutting_down", "the server stopped")
    assert done == [(None, "shutting_down: the server stopped")]
    # a ROUTER is the I/O thread's alone: stand-ins here, the real ones put back before the stop
    real, socks = server._routers, [Sock(), Sock()]
    server._routers = socks
    try:
        received_at = time.monotonic() - 0.25
        server._reply_job_error(Job(1, [b"client-1"], 33, [], received_at), "shutting_down", "stopped first")
    finally:
        server._routers = real
    assert socks[0].sent == []
    reply = socks[1].reply()
    assert error_of(reply) == (33, "infer", "shutting_down", "stopped first", None, None, None)
    assert reply.timing.infer_ms == 0.0 and reply.timing.queue_ms == reply.timing.total_ms >= 250.0
    snap = server.snapshot()  # both counted; the control loop's also apart
    assert (dict(snap.errors), dict(snap.local_errors)) == ({"shutting_down": 2}, {"shutting_down": 1})


def test_a_reply_error_is_counted_and_timed_from_receipt(serve: Serve) -> None:
    server = serve()
    sock = Sock()
    before = time.monotonic()
    server._reply_error(sock, [b"client-1"], "infer", 9, "busy", "full", before - 1.0)
    after = time.monotonic()
    reply = sock.reply()
    assert error_of(reply) == (9, "infer", "busy", "full", None, None, None)
    assert reply.timing.infer_ms == 0.0 and reply.timing.queue_ms == reply.timing.total_ms
    assert 1000.0 <= reply.timing.total_ms <= (after - before + 1.0) * 1e3
    assert dict(server.snapshot().errors) == {"busy": 1}


def test_replies_from_the_worker_are_forwarded_to_their_socket_and_a_stale_index_is_dropped(
    serve: Serve, caller: Callable[..., Caller]
) -> None:
    server = serve(endpoints=("ipc://a.sock", "ipc://b.sock"))
    zero, one = caller(server, 0, b"zero"), caller(server, 1, b"one")
    assert zero.call("ping", 1).ok and one.call("ping", 1).ok  # both peers known to their ROUTER
    push = server._context.socket(zmq.PUSH)  # as the worker does
    push.linger = 0
    push.connect(f"inproc://lerobot-runtime-replies-{id(server):x}")
    try:
        timing = Timing(1.0, 2.0, 3.0)
        push.send_multipart([(2).to_bytes(2, "little"), b"one", codec.encode_reply("ping", 7, {}, timing)])
        push.send_multipart([(1).to_bytes(2, "little"), b"one", codec.encode_reply("ping", 8, {}, timing)])
        push.send_multipart([(0).to_bytes(2, "little"), b"zero", codec.encode_reply("ping", 9, {}, timing)])
        assert zero.receive().id == 9
        assert one.receive().id == 8  # 7 went to a socket the server does not have
        assert one.nothing(100) and zero.nothing(0)
    finally:
        push.close(0)
    assert server.running


def test_every_client_heard_is_remembered_and_the_silent_ones_forgotten_past_the_bound(serve: Serve) -> None:
    server = serve()
    server._clients = {i.to_bytes(2, "little"): 100.0 for i in range(1024)}
    server._heard(b"new", 160.0)  # 1025 clients: those silent for more than 60 s are forgotten
    assert len(server._clients) == 1025  # all heard exactly 60 s ago: kept
    server._heard(b"newer", 160.5)
    assert server._clients == {b"new": 160.0, b"newer": 160.5}
    server._heard(b"new", 161.0)
    assert server._clients == {b"new": 161.0, b"newer": 160.5}


def test_up_to_the_bound_no_client_is_forgotten(serve: Serve) -> None:
    server = serve()
    server._clients = {i.to_bytes(2, "little"): 0.0 for i in range(1023)}
    server._heard(b"x", 1000.0)
    assert len(server._clients) == 1024 and server._clients[b"x"] == 1000.0


def test_a_clients_history_is_kept_per_socket(serve: Serve, caller: Callable[..., Caller]) -> None:
    engine = StandIn(manifest(history=2))
    server = serve(engine, endpoints=("ipc://a.sock", "ipc://b.sock"))
    first, second = caller(server, 0, b"same"), caller(server, 1, b"same")
    assert first.call("infer", 1, obs(1.0)).ok
    assert second.call("infer", 1, obs(5.0)).ok
    assert first.call("infer", 2, obs(2.0)).ok
    assert [r[0][:, 0].tolist() for r in engine.runs] == [[1.0, 1.0], [5.0, 5.0], [1.0, 2.0]]


def test_without_latest_observation_wins_a_clients_infers_queue_up(serve: Serve, caller: Callable[..., Caller]) -> None:
    engine = StandIn()
    engine.hold = True
    server = serve(engine, queue_depth=1, latest_observation_wins=False)
    a = caller(server, identity=b"a")
    a.send(codec.encode_request("infer", 1, obs(1.0)))
    engine.wait_entered()
    a.send(codec.encode_request("infer", 2, obs(2.0)))
    wait_for(lambda: len(server.queue) == 1)
    a.send(codec.encode_request("infer", 3, obs(3.0)))
    assert error_of(a.receive())[:3] == (3, "infer", "busy")  # not superseding 2
    engine.release()
    assert [a.receive().id, a.receive().id] == [1, 2]
