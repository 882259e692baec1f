"""Every way a request can be refused by the server's decoder: the exact message, field, expected and
received the client will see, the error code, and the request id echoed whenever it could be read."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest

from runtime.protocol.codec import decode_request, encode_request
from runtime.protocol.errors import ServerError
from runtime.protocol.messages import KINDS as ALL_KINDS
from runtime.protocol.messages import (
    ControlRequest,
    HelloRequest,
    InferRequest,
    PingRequest,
    StatsRequest,
    TeleopRequest,
)

LIMIT = 1 << 20
KINDS = " | ".join(ALL_KINDS)
ANSWERS = ", ".join(ALL_KINDS)


def pack(header: Any) -> bytes:
    return msgpack.packb(header, use_bin_type=True)


def refused(frames: list[Any]) -> ServerError:
    with pytest.raises(ServerError) as info:
        decode_request(frames, LIMIT)
    return info.value


def wire(e: ServerError) -> tuple[str, str, str | None, str | None, str | None, int | None]:
    return e.code, e.message, e.field, e.expected, e.received, e.request_id


def test_the_four_kinds_decode() -> None:
    assert decode_request([pack({"v": 1, "id": 0, "kind": "ping"})], LIMIT) == PingRequest(0)
    assert decode_request([pack({"v": 1, "id": 5, "kind": "hello", "body": None})], LIMIT) == HelloRequest(5)
    assert decode_request([pack({"v": 1, "id": 2**64 - 1, "kind": "stats", "body": {}})], LIMIT) == StatsRequest(
        2**64 - 1
    )
    obs = {"state": np.arange(6, dtype=np.float32)}
    request = decode_request(encode_request("infer", 9, obs), LIMIT)
    assert isinstance(request, InferRequest) and request.id == 9
    np.testing.assert_array_equal(request.observation["state"], obs["state"])


@pytest.mark.parametrize(
    ("frames", "expected"),
    [
        ([], ("bad_request", "empty message", "(header)", "a msgpack header frame", "nothing", None)),
        (
            [pack([1])],
            ("bad_request", "header: expected a msgpack map, got list", "(header)", "map", "list", None),
        ),
        (
            [pack(None)],
            ("bad_request", "header: expected a msgpack map, got nil", "(header)", "map", "nil", None),
        ),
        (
            [pack({"id": 3, "kind": "ping"})],
            ("bad_request", "header: missing protocol version 'v'", "v", "1", "nothing", 3),
        ),
        (
            [pack({"v": 2, "id": 3, "kind": "ping"})],
            (
                "unsupported_version",
                "protocol version 2 is not supported; this server speaks 1",
                "v",
                "1",
                "2",
                3,
            ),
        ),
        (
            [pack({"v": True, "id": 3, "kind": "ping"})],
            (
                "unsupported_version",
                "protocol version True is not supported; this server speaks 1",
                "v",
                "1",
                "True",
                3,
            ),
        ),
        (
            [pack({"v": 1, "kind": "ping"})],
            (
                "bad_request",
                "header.id: expected an integer in [0, 2**64), got nothing",
                "id",
                "integer in [0, 2**64)",
                "nothing",
                None,
            ),
        ),
        (
            [pack({"v": 1, "id": -1, "kind": "ping"})],
            (
                "bad_request",
                "header.id: expected an integer in [0, 2**64), got -1",
                "id",
                "integer in [0, 2**64)",
                "-1",
                None,
            ),
        ),
        (
            [pack({"v": 1, "id": "7", "kind": "ping"})],
            (
                "bad_request",
                "header.id: expected an integer in [0, 2**64), got '7'",
                "id",
                "integer in [0, 2**64)",
                "'7'",
                None,
            ),
        ),
        (
            [pack({"v": 1, "id": True, "kind": "ping"})],
            (
                "bad_request",
                "header.id: expected an integer in [0, 2**64), got True",
                "id",
                "integer in [0, 2**64)",
                "True",
                None,
            ),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "ping", "zz": 1, "aa": 2})],
            ("bad_request", "header: unknown key 'aa'", "aa", "v, id, kind, body", "aa", 3),
        ),
        (
            [pack({"v": 1, "id": 3})],
            ("bad_request", "header.kind: expected a string, got nothing", "kind", KINDS, "nothing", 3),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": 4})],
            ("bad_request", "header.kind: expected a string, got 4", "kind", KINDS, "4", 3),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "ping", "body": [1]})],
            ("bad_request", "header.body: expected a map, got list", "body", "map", "list", 3),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "session.move"})],
            (
                "unsupported_kind",
                f"kind 'session.move' is reserved for a later protocol version; this server answers {ANSWERS}",
                "kind",
                KINDS,
                "'session.move'",
                3,
            ),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "dance"})],
            (
                "unsupported_kind",
                f"kind 'dance' is unknown; this server answers {ANSWERS}",
                "kind",
                KINDS,
                "'dance'",
                3,
            ),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "ping", "body": {"a": 1}})],
            ("bad_request", "ping: takes no body and no data frames", "body", "empty", "1 body keys, 0 data frames", 3),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "stats"}), b"x", b"y"],
            (
                "bad_request",
                "stats: takes no body and no data frames",
                "body",
                "empty",
                "0 body keys, 2 data frames",
                3,
            ),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "infer", "body": {"observation": {}, "extra": 1}})],
            (
                "bad_request",
                "infer body: unknown key 'extra'",
                "body.extra",
                "observation, reset, task, prefix, delay, execution_horizon, prefix_attention_schedule, "
                "max_guidance_weight",
                "extra",
                3,
            ),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "infer", "body": {"observation": {}, "reset": 1}})],
            ("bad_request", "body.reset: expected true or false, got int", "body.reset", "bool", "int", 3),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "infer", "body": {}})],
            (
                "bad_request",
                "body.observation: expected a map of input name to array, got nothing",
                "body.observation",
                "map of name -> array descriptor",
                "nothing",
                3,
            ),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "infer", "body": {"observation": [1]}})],
            (
                "bad_request",
                "body.observation: expected a map of input name to array, got list",
                "body.observation",
                "map of name -> array descriptor",
                "list",
                3,
            ),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "infer", "body": {"observation": {}}}), b"\x00" * 4],
            (
                "bad_request",
                "data frame 0 is not referenced by any array",
                "(frames)",
                "0 data frames",
                "1 data frames",
                3,
            ),
        ),
        (
            [pack({"v": 1, "id": 3, "kind": "infer", "body": {"observation": {"s": 5}}})],
            (
                "bad_request",
                "s: expected an array descriptor map, got int",
                "s",
                "map with dtype, shape and frame or data",
                "int",
                3,
            ),
        ),
    ],
)
def test_refusals(frames: list[Any], expected: tuple[Any, ...]) -> None:
    assert wire(refused(frames)) == expected


def test_a_second_unreferenced_frame_is_named() -> None:
    frames = encode_request("infer", 4, {"s": np.zeros(2, np.float32)})
    e = refused([*frames, b"\x00", b"\x01"])
    assert (e.message, e.expected, e.received) == (
        "data frame 1 is not referenced by any array",
        "1 data frames",
        "3 data frames",
    )


def test_too_large_counts_every_frame() -> None:
    frames = [pack({"v": 1, "id": 1, "kind": "ping"}), b"\x00" * LIMIT]
    e = refused(frames)
    total = len(frames[0]) + LIMIT
    assert wire(e) == (
        "too_large",
        f"message of {total} bytes is over this server's limit of {LIMIT}",
        "(message)",
        f"<= {LIMIT} bytes",
        f"{total} bytes",
        1,  # the id is read from the header even when the message is refused for its size
    )
    exactly = [pack({"v": 1, "id": 1, "kind": "ping"})]
    assert decode_request(exactly, len(exactly[0])) == PingRequest(1)
    assert decode_request([memoryview(exactly[0])], len(exactly[0])) == PingRequest(1)


@pytest.mark.parametrize("header", [b"\xc1", pack({"v": 1}) + b"\x00"])
def test_undecodable_headers(header: bytes) -> None:
    e = refused([header])
    assert e.code == "bad_request" and e.message.startswith("header frame is not a single msgpack map: ")
    assert (e.field, e.expected, e.received) == ("(header)", "msgpack map", f"{len(header)} undecodable bytes")


def test_msgpack_extensions_are_refused_by_type() -> None:
    e = refused([b"\xd4\x05\x00"])  # fixext 1, type 5
    assert "msgpack extension type 5 is not part of the protocol" in e.message


def test_long_values_are_shortened() -> None:
    e = refused([pack({"v": 1, "id": 3, "kind": "k" * 100})])
    assert e.received == repr("k" * 100)[:77] + "..."


CONTROL = ("control.start", "control.stop", "control.status", "control.dump", "control.teleop")


def test_a_release_names_its_latch() -> None:
    release = decode_request(encode_request("control.release", 4, body={"who": "ana", "latch": 3}), LIMIT)
    assert release == ControlRequest(4, "control.release", who="ana", latch=3)
    largest = decode_request(encode_request("control.release", 5, body={"latch": 2**63 - 1}), LIMIT)
    assert largest.latch == 2**63 - 1  # type: ignore[union-attr]
    assert decode_request(encode_request("control.stop", 6, body={"who": "ana"}), LIMIT).latch == 0  # type: ignore[union-attr]


LATCH_EXPECTED = "integer >= 1"
LATCH_MESSAGE = (
    "control.release body.latch: expected the e-stop latch to release (an integer >= 1, as control.estop "
    "and control.status report it), got "
)


@pytest.mark.parametrize(
    ("body", "got", "received"),
    [
        ({"who": "ana"}, "nothing", "nothing"),
        ({"latch": 0}, "int 0", "0"),
        ({"latch": -2}, "int -2", "-2"),
        ({"latch": True}, "bool True", "True"),
        ({"latch": 1.0}, "float 1.0", "1.0"),
        ({"latch": "3"}, "str '3'", "'3'"),
        ({"latch": 2**63}, f"int {2**63}", str(2**63)),
    ],
)
def test_a_release_without_a_latch_it_could_name_is_refused(body: dict[str, Any], got: str, received: str) -> None:
    assert wire(refused([pack({"v": 1, "id": 8, "kind": "control.release", "body": body})])) == (
        "bad_request",
        LATCH_MESSAGE + got,
        "body.latch",
        LATCH_EXPECTED,
        received,
        8,
    )


def test_only_a_release_takes_a_latch() -> None:
    e = refused([pack({"v": 1, "id": 8, "kind": "control.estop", "body": {"latch": 1}})])
    unknown = ("bad_request", "control.estop body: unknown key 'latch'", "body.latch", "reason, who", "latch", 8)
    assert wire(e) == unknown
    e = refused([pack({"v": 1, "id": 9, "kind": "control.release", "body": {"latch": 1, "reason": "x"}})])
    assert (e.message, e.expected) == ("control.release body: unknown key 'reason'", "latch, who")


def test_control_requests_carry_who_and_reason() -> None:
    for kind in CONTROL:
        request = decode_request(encode_request(kind, 4, body={"who": "ana"}), LIMIT)
        assert (request.id, request.kind, request.who, request.reason) == (4, kind, "ana", "")  # type: ignore[union-attr]
    estop = decode_request(encode_request("control.estop", 5, body={"who": "bo", "reason": "hand in the way"}), LIMIT)
    assert (estop.id, estop.kind, estop.who, estop.reason) == (5, "control.estop", "bo", "hand in the way")  # type: ignore[union-attr]
    bare = decode_request([pack({"v": 1, "id": 6, "kind": "control.estop"})], LIMIT)
    assert (bare.who, bare.reason) == ("", "")  # type: ignore[union-attr]
    longest = "w" * 200
    assert decode_request(encode_request("control.stop", 7, body={"who": longest}), LIMIT).who == longest  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kind", "body", "data", "expected"),
    [
        (
            "control.start",
            {"reason": "x", "who": "a"},
            [],
            ("bad_request", "control.start body: unknown key 'reason'", "body.reason", "task, who", "reason", 8),
        ),
        (
            "control.estop",
            {"zeta": 1, "alpha": 2},
            [],
            ("bad_request", "control.estop body: unknown key 'alpha'", "body.alpha", "reason, who", "alpha", 8),
        ),
        (
            "control.stop",
            {"who": "a"},
            [b"\x00", b"\x01"],
            ("bad_request", "control.stop: takes no data frames", "(frames)", "who", "2 data frames", 8),
        ),
        (
            "control.estop",
            {"reason": 5},
            [],
            (
                "bad_request",
                "control.estop body.reason: expected a string of at most 200 characters, got int 5",
                "body.reason",
                "string <= 200 chars",
                "5",
                8,
            ),
        ),
        (
            "control.status",
            {"who": "w" * 201},
            [],
            (
                "bad_request",
                "control.status body.who: expected a string of at most 200 characters, got str "
                + repr("w" * 201)[:77]
                + "...",
                "body.who",
                "string <= 200 chars",
                repr("w" * 201)[:77] + "...",
                8,
            ),
        ),
    ],
)
def test_control_refusals(kind: str, body: dict[str, Any], data: list[bytes], expected: tuple[Any, ...]) -> None:
    assert wire(refused([pack({"v": 1, "id": 8, "kind": kind, "body": body}), *data])) == expected


def test_a_value_one_character_too_long_to_show_is_shortened() -> None:
    over = "k" * 79  # 81 characters once quoted
    assert refused([pack({"v": 1, "id": 3, "kind": over})]).received == repr(over)[:77] + "..."
    exactly = "k" * 78
    assert refused([pack({"v": 1, "id": 3, "kind": exactly})]).received == repr(exactly)


def test_extension_refusals_name_where_and_which() -> None:
    header = {"v": 1, "id": 12, "kind": "ping", "body": {"at": msgpack.Timestamp(0)}}
    assert wire(refused([pack(header)])) == (
        "bad_request",
        "header.body.at: msgpack extension type -1 is not part of the protocol",
        "body.at",
        "plain msgpack types (nil, bool, int, float, str, bin, array, map)",
        "extension type -1",
        12,
    )
    ext = msgpack.ExtType(5, b"\x00")
    assert refused([pack({"v": 1, "id": 13, "kind": "ping", "body": {"x": [1, ext]}})]).message == (
        "header.body.x[1]: msgpack extension type 5 is not part of the protocol"
    )


def test_an_oversized_message_still_names_its_request() -> None:
    # A header carrying an extension value is refused later, but its id can be read for the reply.
    header = pack({"v": 1, "id": 21, "kind": "ping", "body": {"x": msgpack.ExtType(5, b"\x00")}})
    assert refused([header, b"\x00" * LIMIT]).request_id == 21
    # unreadable: no id, and no other error than the size
    e = refused([b"\xc1", b"\x00" * LIMIT])
    assert (e.code, e.request_id) == ("too_large", None)
    # a header exactly as large as the limit is still read
    small = pack({"v": 1, "id": 22, "kind": "ping"})
    with pytest.raises(ServerError) as info:
        decode_request([small, b"\x00"], len(small))
    assert (info.value.code, info.value.request_id) == ("too_large", 22)


def test_infer_data_frames_may_be_bytes() -> None:
    obs = {"state": np.arange(6, dtype=np.float32)}
    frames = [bytes(f) for f in encode_request("infer", 9, obs)]
    request = decode_request(frames, LIMIT)
    np.testing.assert_array_equal(request.observation["state"], obs["state"])  # type: ignore[union-attr]


def test_teleop_requests_reach_their_parser_whole() -> None:
    body = {"session": "ab", "seq": 4, "positions": [1.5, -2, 0.0]}
    request = decode_request(encode_request("teleop.target", 9, body=body), LIMIT)
    assert request == TeleopRequest(9, "teleop.target", session="ab", seq=4, positions=(1.5, -2.0, 0.0))
    e = refused([pack({"v": 1, "id": 10, "kind": "teleop.target", "body": body}), b"\x00"])
    assert (e.message, e.field, e.received, e.request_id) == (
        "teleop.target: takes no data frames",
        "(frames)",
        "1 data frames",
        10,
    )
