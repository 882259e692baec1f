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
from runtime.protocol.messages import HelloRequest, InferRequest, PingRequest, StatsRequest

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
            ("bad_request", "infer body: unknown key 'extra'", "body.extra", "observation, reset", "extra", 3),
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
