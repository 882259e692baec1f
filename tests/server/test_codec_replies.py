"""The reply side of the wire codec: what the server encodes is what the client decodes, and a reply
the client cannot read is refused naming the field (never a KeyError or a silent default)."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack
import numpy as np
import pytest

from runtime.protocol import PROTOCOL_VERSION
from runtime.protocol.codec import (
    ProtocolError,
    actions_from_reply,
    decode_reply,
    encode_actions_reply,
    encode_error,
    encode_reply,
    policy_info_from_reply,
    pong_from_reply,
    stats_from_reply,
)
from runtime.protocol.errors import ErrorInfo
from runtime.protocol.messages import Percentiles, PolicyInfo, StatsSnapshot, TensorInfo, Timing

TIMING = Timing(1.5, 2.25, 4.0)


def pack(header: Any) -> bytes:
    return msgpack.packb(header, use_bin_type=True)


def test_ok_reply_round_trip() -> None:
    reply = decode_reply([encode_reply("ping", 7, {"uptime_s": 12.5}, TIMING)])
    assert (reply.id, reply.kind, reply.ok, reply.error, reply.timing) == (7, "ping", True, None, TIMING)
    assert reply.body == {"uptime_s": 12.5} and list(reply.data) == []
    pong = pong_from_reply(reply, 3.0)
    assert (pong.request_id, pong.uptime_s, pong.timing, pong.round_trip_ms) == (7, 12.5, TIMING, 3.0)


def test_error_reply_round_trip() -> None:
    info = ErrorInfo("bad_input", "input 'x': expected shape [6], got [5]", "x", "[6]", "[5]")
    reply = decode_reply([encode_error("infer", 9, info, TIMING)])
    assert (reply.id, reply.kind, reply.ok, reply.body, reply.timing) == (9, "infer", False, {}, TIMING)
    assert reply.error == info


def test_error_reply_for_an_unreadable_request() -> None:
    reply = decode_reply([encode_error(None, None, ErrorInfo("bad_request", "not msgpack"), Timing())])
    assert (reply.id, reply.kind, reply.ok) == (None, None, False)
    assert reply.error == ErrorInfo("bad_request", "not msgpack", None, None, None)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16"])
def test_actions_round_trip(dtype: str) -> None:
    actions = np.arange(24, dtype=dtype).reshape(4, 6)
    frames = encode_actions_reply(3, actions, TIMING)
    assert len(frames) == 2
    chunk = actions_from_reply(decode_reply(frames), 5.5)
    assert chunk.request_id == 3 and chunk.timing == TIMING and chunk.round_trip_ms == 5.5
    assert chunk.actions.dtype == np.dtype(dtype) and chunk.actions.shape == (4, 6)
    np.testing.assert_array_equal(chunk.actions, actions)


def test_actions_reply_is_a_copy() -> None:
    actions = np.ones((2, 6), np.float32)
    frames = encode_actions_reply(1, actions, TIMING)
    actions[:] = 5  # the engine reuses its output buffer for the next inference
    np.testing.assert_array_equal(actions_from_reply(decode_reply(frames), 0).actions, np.ones((2, 6)))


def test_actions_reply_without_its_data_frame() -> None:
    frames = encode_actions_reply(1, np.ones((2, 6), np.float32), TIMING)
    with pytest.raises(ProtocolError, match=r"^reply: "):
        actions_from_reply(decode_reply(frames[:1]), 0)


def _header(**changes: Any) -> dict[str, Any]:
    h: dict[str, Any] = {"v": PROTOCOL_VERSION, "id": 1, "kind": "ping", "ok": True, "body": {"uptime_s": 1}}
    h.update(changes)
    return h


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        ([], "empty reply"),
        ([b"\xc1"], "reply header is not msgpack"),
        ([pack([1, 2])], "reply header: expected a map, got list"),
        ([pack(_header(v=99))], f"reply protocol version 99, this client speaks {PROTOCOL_VERSION}"),
        ([pack({k: v for k, v in _header().items() if k != "v"})], "reply protocol version None"),
        ([pack(_header(body=[1]))], "reply body: expected a map, got list"),
        ([pack(_header(ok=False))], "error reply without an error code"),
        ([pack(_header(ok=False, error={"code": 5}))], "error reply without an error code"),
        ([pack(_header(ok=1))], "error reply without an error code"),  # only True is success
    ],
)
def test_unreadable_replies(frames: list[bytes], message: str) -> None:
    with pytest.raises(ProtocolError, match="^" + message.replace("(", r"\(")):
        decode_reply(frames)


def test_lenient_envelope_fields() -> None:
    reply = decode_reply([pack(_header(id="7", kind=3, timing="soon", body=None))])
    assert (reply.id, reply.kind, reply.timing, reply.body) == (None, None, Timing(), {})
    reply = decode_reply([pack(_header(id=True, timing={"infer_ms": 2}))])
    assert reply.id is None and reply.timing == Timing(0.0, 2.0, 0.0)
    err = decode_reply([pack(_header(ok=False, error={"code": "busy", "message": 3, "field": "f"}))]).error
    assert err == ErrorInfo("busy", "", "f", None, None)


def test_pong_needs_a_number() -> None:
    for bad in ("1", True, None):
        reply = decode_reply([encode_reply("ping", 1, {"uptime_s": bad}, TIMING)])
        with pytest.raises(ProtocolError, match=r"^reply body\.uptime_s: unexpected"):
            pong_from_reply(reply, 0)
    assert pong_from_reply(decode_reply([encode_reply("ping", 1, {"uptime_s": 3}, TIMING)]), 0).uptime_s == 3.0


INFO = PolicyInfo(
    protocol_version=PROTOCOL_VERSION,
    server_version="0.1.0",
    policy_name="demo_act",
    inputs=(TensorInfo("observation.state", "float32", (6,), "state"), TensorInfo("img", "uint8", (4, 4, 3))),
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


def test_hello_round_trip() -> None:
    info = policy_info_from_reply(decode_reply([encode_reply("hello", 1, INFO.to_wire(), TIMING)]))
    assert info == INFO
    assert (info.device, info.precision) == ("CPU", "f32")


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("protocol_version",), "1", "reply body.protocol_version: unexpected str"),
        (("server_version",), None, "reply body.server_version: unexpected"),
        (("policy", "name"), 5, "reply body.policy.name: unexpected int"),
        (("action", "chunk_length"), 1.5, "reply body.action.chunk_length: unexpected float"),
        (("action", "chunk_length"), True, "reply body.action.chunk_length: unexpected bool"),
        (("action", "names"), "abc", "reply body.action.names: unexpected str"),
        (("action", "output"), None, "reply body.action.output"),
        (("control_rate_hz",), "30", "reply body.control_rate_hz: unexpected str"),
        (("limits", "queue_depth"), None, "reply body.limits.queue_depth"),
        (("limits", "max_message_bytes"), "1", "reply body.limits.max_message_bytes"),
        (("limits",), [], "reply body.limits: unexpected list"),
        (("engine",), [], "reply body.engine: unexpected list"),
        (("versions",), [], "reply body.versions: unexpected list"),
        (("kinds",), {}, "reply body.kinds: unexpected dict"),
        (("inputs",), {}, "reply inputs: expected a list, got dict"),
        (("outputs",), [1], "reply outputs: expected maps, got int"),
        (("outputs",), [{"name": "a", "dtype": "f", "shape": 3}], "reply outputs.shape: unexpected int"),
        (("inputs",), [{"name": 1, "dtype": "f", "shape": []}], "reply inputs.name: unexpected int"),
        (("inputs",), [{"name": "a", "dtype": 1, "shape": []}], "reply inputs.dtype: unexpected int"),
    ],
)
def test_malformed_hello_names_the_field(path: tuple[str, ...], value: Any, message: str) -> None:
    body = INFO.to_wire()
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ProtocolError, match="^" + message.replace(".", r"\.")):
        policy_info_from_reply(decode_reply([encode_reply("hello", 1, body, TIMING)]))


def test_tensor_role_defaults_to_other() -> None:
    body = INFO.to_wire()
    del body["inputs"][1]["role"]
    assert policy_info_from_reply(decode_reply([encode_reply("hello", 1, body, TIMING)])).inputs[1].role == "other"


STATS = StatsSnapshot(
    uptime_s=10.5,
    requests={"infer": 5, "ping": 2},
    errors={"bad_input": 1},
    replies_ok=6,
    queue_depth=1,
    queue_depth_max=3,
    queue_capacity=4,
    in_flight=1,
    latency_ms={"total": Percentiles(5, 1.0, 2.0, 3.0, 4.0), "infer": Percentiles(5, 0.5, 0.6, 0.7, 0.8)},
)


def _stats_wire() -> dict[str, Any]:
    return {
        "uptime_s": STATS.uptime_s,
        "requests": dict(STATS.requests),
        "errors": dict(STATS.errors),
        "replies_ok": STATS.replies_ok,
        "queue": {"depth": 1, "depth_max": 3, "capacity": 4, "in_flight": 1},
        "latency_ms": {k: v.to_wire() for k, v in STATS.latency_ms.items()},
    }


def test_stats_round_trip() -> None:
    assert _stats_wire().items() <= STATS.to_wire().items()
    assert stats_from_reply(decode_reply([encode_reply("stats", 1, STATS.to_wire(), TIMING)])) == STATS


def test_stats_latency_defaults_and_skips() -> None:
    body = _stats_wire()
    body["latency_ms"] = {"total": {"count": 2}, "junk": 5}
    stats = stats_from_reply(decode_reply([encode_reply("stats", 1, body, TIMING)]))
    assert stats.latency_ms == {"total": Percentiles(2, 0.0, 0.0, 0.0, 0.0)}


@pytest.mark.parametrize(
    ("key", "sub", "message"),
    [
        ("queue", None, "reply body.queue: unexpected"),
        ("queue", "capacity", "reply body.queue.capacity: unexpected"),
        ("queue", "depth", "reply body.queue.depth: unexpected"),
        ("queue", "depth_max", "reply body.queue.depth_max: unexpected"),
        ("queue", "in_flight", "reply body.queue.in_flight: unexpected"),
        ("replies_ok", None, "reply body.replies_ok: unexpected"),
        ("requests", None, "reply body.requests: unexpected"),
        ("errors", None, "reply body.errors: unexpected"),
        ("latency_ms", None, "reply body.latency_ms: unexpected"),
        ("uptime_s", None, "reply body.uptime_s: unexpected"),
    ],
)
def test_malformed_stats_names_the_field(key: str, sub: str | None, message: str) -> None:
    body = _stats_wire()
    if sub is None:
        body[key] = "x"
    else:
        body[key][sub] = "x"
    with pytest.raises(ProtocolError, match="^" + message.replace(".", r"\.")):
        stats_from_reply(decode_reply([encode_reply("stats", 1, body, TIMING)]))


def test_the_wire_says_ok_false_and_infer() -> None:
    error = msgpack.unpackb(encode_error("infer", 9, ErrorInfo("busy", "queue full"), TIMING))
    assert error["ok"] is False and error["error"]["code"] == "busy"
    assert decode_reply(encode_actions_reply(3, np.ones((1, 6), np.float32), TIMING)).kind == "infer"


def test_error_replies_are_lenient_about_their_envelope_too() -> None:
    reply = decode_reply([pack(_header(ok=False, id="7", kind=3, error={"code": "busy"}))])
    assert (reply.id, reply.kind, reply.ok, list(reply.data)) == (None, None, False, [])
    reply = decode_reply([pack(_header(timing={"queue_ms": 1}))])
    assert reply.timing == Timing(1.0, 0.0, 0.0)
    with pytest.raises(ProtocolError) as e:
        decode_reply([pack(_header(ok=False, error={"code": 5}))])
    assert str(e.value) == "error reply without an error code: {'code': 5}"


def test_replies_without_an_id_count_as_request_zero() -> None:
    frames = encode_actions_reply(3, np.ones((1, 6), np.float32), TIMING)
    header = msgpack.unpackb(frames[0])
    header["id"] = None
    assert actions_from_reply(decode_reply([pack(header), frames[1]]), 0).request_id == 0
    assert pong_from_reply(decode_reply([pack(_header(id=None))]), 0).request_id == 0


def test_actions_decode_from_bytes_frames() -> None:
    frames = [bytes(f) for f in encode_actions_reply(3, np.arange(6, dtype=np.float32).reshape(1, 6), TIMING)]
    np.testing.assert_array_equal(actions_from_reply(decode_reply(frames), 0).actions, np.arange(6).reshape(1, 6))


def test_a_missing_actions_frame_is_named() -> None:
    frames = encode_actions_reply(1, np.ones((2, 6), np.float32), TIMING)
    with pytest.raises(ProtocolError) as e:
        actions_from_reply(decode_reply(frames[:1]), 0)
    assert str(e.value) == "reply: actions.frame: expected a data frame index in [0, 0), got 0"


def test_a_readable_message_for_the_wrong_type() -> None:
    reply = decode_reply([encode_reply("ping", 1, {"uptime_s": "1"}, TIMING)])
    with pytest.raises(ProtocolError) as e:
        pong_from_reply(reply, 0)
    assert str(e.value) == "reply body.uptime_s: unexpected str '1'"


ARM = {"kind": "sim", "healthy": True, "estop": ""}


def test_hello_and_stats_carry_the_arm_and_the_rest() -> None:
    info = dataclasses.replace(INFO, arm=ARM)
    assert policy_info_from_reply(decode_reply([encode_reply("hello", 1, info.to_wire(), TIMING)])) == info
    stats = dataclasses.replace(
        STATS,
        arm=ARM,
        clients=3,
        inference_cpus={1: 40, 0: 2},
        engine={"engine": "openvino", "device": "CPU"},
        verification={"checked": 4, "failed": 0},
    )
    assert stats_from_reply(decode_reply([encode_reply("stats", 1, stats.to_wire(), TIMING)])) == stats
    for decode, wire_body in ((policy_info_from_reply, INFO.to_wire()), (stats_from_reply, STATS.to_wire())):
        wire_body["arm"] = "sim"
        with pytest.raises(ProtocolError) as e:
            decode(decode_reply([encode_reply("x", 1, wire_body, TIMING)]))
        assert str(e.value) == "reply body.arm: expected a map or nil, got str"


def test_hello_names_a_bad_action_or_policy_table() -> None:
    for key in ("action", "policy"):
        body = INFO.to_wire()
        body[key] = []
        with pytest.raises(ProtocolError) as e:
            policy_info_from_reply(decode_reply([encode_reply("hello", 1, body, TIMING)]))
        assert str(e.value) == f"reply body.{key}: unexpected list []"


def test_latency_without_a_count_counts_zero() -> None:
    body = _stats_wire()
    body["latency_ms"] = {"total": {"p50": 1.5}}
    stats = stats_from_reply(decode_reply([encode_reply("stats", 1, body, TIMING)]))
    assert stats.latency_ms == {"total": Percentiles(0, 1.5, 0.0, 0.0, 0.0)}


def test_stats_from_an_older_server_count_no_clients() -> None:
    assert "clients" not in _stats_wire()
    assert stats_from_reply(decode_reply([encode_reply("stats", 1, _stats_wire(), TIMING)])).clients == 0


def test_a_reply_with_a_msgpack_extension_is_refused_by_type() -> None:
    header = pack(_header(body={"uptime_s": msgpack.ExtType(5, b"\x00")}))
    with pytest.raises(ProtocolError) as e:
        decode_reply([header])
    assert str(e.value) == "reply header is not msgpack: msgpack extension type 5 is not part of the protocol"
