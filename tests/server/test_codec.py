"""The codec on its own: arrays round-trip, hostile encodings are refused with the right code."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from runtime.protocol import codec
from runtime.protocol.arrays import DTYPES
from runtime.protocol.errors import (
    BadRequestError,
    TooLargeError,
    UnsupportedKindError,
    UnsupportedVersionError,
)
from runtime.protocol.messages import InferRequest, PingRequest

LIMIT = 1 << 20


def frames_of(header: object, *data: bytes) -> list[bytes]:
    return [msgpack.packb(header, use_bin_type=True), *data]


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_arrays_round_trip_every_allowed_dtype(dtype: str) -> None:
    arr = (np.arange(24) % 2).astype(dtype).reshape(2, 3, 4)
    req = codec.decode_request(codec.encode_request("infer", 7, {"x": arr}), LIMIT)
    assert isinstance(req, InferRequest)
    assert req.id == 7
    np.testing.assert_array_equal(req.observation["x"], arr)
    assert req.observation["x"].dtype == np.dtype(dtype)


def test_big_endian_arrays_are_sent_little_endian() -> None:
    arr = np.arange(4, dtype=">f4")
    req = codec.decode_request(codec.encode_request("infer", 1, {"x": arr}), LIMIT)
    assert isinstance(req, InferRequest)
    np.testing.assert_array_equal(req.observation["x"], arr)


def test_inline_data_is_accepted() -> None:
    arr = np.arange(6, dtype=np.float32)
    header = {
        "v": 1,
        "id": 3,
        "kind": "infer",
        "body": {"observation": {"x": {"dtype": "float32", "shape": [6], "data": arr.tobytes()}}},
    }
    req = codec.decode_request(frames_of(header), LIMIT)
    assert isinstance(req, InferRequest)
    np.testing.assert_array_equal(req.observation["x"], arr)


def test_received_arrays_are_views_not_copies() -> None:
    frames = codec.encode_request("infer", 1, {"x": np.zeros(1000, np.uint8)})
    data = bytearray(frames[1].tobytes())
    req = codec.decode_request([frames[0], memoryview(data)], LIMIT)
    assert isinstance(req, InferRequest)
    data[0] = 9
    assert req.observation["x"][0] == 9


@pytest.mark.parametrize("arr", [np.array([object()]), np.array(["a"]), np.zeros(2, np.complex64)])
def test_client_refuses_dtypes_without_a_wire_form(arr: np.ndarray) -> None:
    with pytest.raises(TypeError, match="cannot be sent"):
        codec.encode_request("infer", 1, {"x": arr})


def test_ping_round_trip() -> None:
    assert codec.decode_request(codec.encode_request("ping", 5), LIMIT) == PingRequest(5)


def _desc(dtype: object = "uint8", shape: object = (4,), frame: object = 0) -> dict[str, object]:
    return {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape, "frame": frame}


def _infer(obs: object) -> dict[str, object]:
    return {"v": 1, "id": 9, "kind": "infer", "body": {"observation": obs}}


BAD = [
    ("garbage", [b"\xc1\xff\x00garbage"], BadRequestError, "(header)"),
    (
        "truncated header",
        [msgpack.packb({"v": 1, "id": 1, "kind": "ping"})[:-3]],
        BadRequestError,
        "(header)",
    ),
    (
        "extra bytes after header",
        [msgpack.packb({"v": 1, "id": 1, "kind": "ping"}) + b"\x00"],
        BadRequestError,
        "(header)",
    ),
    ("header is a list", frames_of([1, 2, 3]), BadRequestError, "(header)"),
    ("no version", frames_of({"id": 1, "kind": "ping"}), BadRequestError, "v"),
    ("version 2", frames_of({"v": 2, "id": 1, "kind": "ping"}), UnsupportedVersionError, "v"),
    ("version as string", frames_of({"v": "1", "id": 1, "kind": "ping"}), UnsupportedVersionError, "v"),
    ("no id", frames_of({"v": 1, "kind": "ping"}), BadRequestError, "id"),
    ("negative id", frames_of({"v": 1, "id": -1, "kind": "ping"}), BadRequestError, "id"),
    ("kind is int", frames_of({"v": 1, "id": 1, "kind": 3}), BadRequestError, "kind"),
    ("unknown kind", frames_of({"v": 1, "id": 1, "kind": "exec"}), UnsupportedKindError, "kind"),
    ("reserved kind", frames_of({"v": 1, "id": 1, "kind": "session.start"}), UnsupportedKindError, "kind"),
    ("unknown header key", frames_of({"v": 1, "id": 1, "kind": "ping", "x": 1}), BadRequestError, "x"),
    ("body not a map", frames_of({"v": 1, "id": 1, "kind": "infer", "body": [1]}), BadRequestError, "body"),
    (
        "observation missing",
        frames_of({"v": 1, "id": 1, "kind": "infer", "body": {}}),
        BadRequestError,
        "body.observation",
    ),
    ("observation not a map", frames_of(_infer([1, 2])), BadRequestError, "body.observation"),
    ("array not a map", frames_of(_infer({"x": b"1234"})), BadRequestError, "x"),
    (
        "object dtype",
        frames_of(_infer({"x": _desc("object")}), b"1234"),
        BadRequestError,
        "x.dtype",
    ),
    (
        "numpy pickle dtype code",
        frames_of(_infer({"x": _desc("|O")}), b"1234"),
        BadRequestError,
        "x.dtype",
    ),
    (
        "shape not ints",
        frames_of(_infer({"x": _desc(shape=["4"])}), b"1234"),
        BadRequestError,
        "x.shape",
    ),
    (
        "negative shape",
        frames_of(_infer({"x": _desc(shape=[-4])}), b"1234"),
        BadRequestError,
        "x.shape",
    ),
    (
        "too many dims",
        frames_of(_infer({"x": _desc(shape=[1] * 9)}), b"1"),
        BadRequestError,
        "x.shape",
    ),
    (
        "huge declared size",
        frames_of(_infer({"x": _desc("float64", (2**40, 2**40, 2**20))}), b"1234"),
        BadRequestError,
        "x",
    ),
    (
        "declared size too small",
        frames_of(_infer({"x": _desc(shape=[2])}), b"1234"),
        BadRequestError,
        "x",
    ),
    (
        "frame index out of range",
        frames_of(_infer({"x": _desc(frame=3)}), b"1234"),
        BadRequestError,
        "x.frame",
    ),
    (
        "frame used twice",
        frames_of(_infer({"x": _desc(), "y": _desc()}), b"1234"),
        BadRequestError,
        "y.frame",
    ),
    ("unreferenced frame", frames_of(_infer({"x": _desc()}), b"1234", b"5678"), BadRequestError, "(frames)"),
    (
        "extension type",
        [msgpack.packb({"v": 1, "id": 1, "kind": "ping", "body": msgpack.ExtType(5, b"x")})],
        BadRequestError,
        "body",
    ),
    ("non-string map key", [msgpack.packb({1: 2})], BadRequestError, "(header)"),
    ("too large", frames_of({"v": 1, "id": 1, "kind": "ping"}, bytes(LIMIT)), TooLargeError, "(message)"),
]


@pytest.mark.parametrize(("name", "frames", "error", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_requests_are_refused_with_code_and_field(
    name: str, frames: list[bytes], error: type[Exception], field: str
) -> None:
    with pytest.raises(error) as info:
        codec.decode_request(frames, LIMIT)
    assert getattr(info.value, "field", None) == field
    assert info.value.received is not None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("frames", "field"),
    [
        (frames_of({"v": 1, "id": 42, "kind": "ping"}, bytes(LIMIT)), "(message)"),
        ([msgpack.packb({"v": 1, "id": 42, "kind": "ping", "body": {"x": [msgpack.ExtType(5, b"")]}})], "body.x[0]"),
        ([msgpack.packb({"v": msgpack.ExtType(1, b""), "id": 42, "kind": "ping"})], "v"),
        ([msgpack.packb({"v": 1, "id": 42, "kind": msgpack.Timestamp(0)})], "kind"),
    ],
    ids=["too_large", "ext deep in body", "ext as version", "ext timestamp as kind"],
)
def test_refusals_echo_the_id_of_a_readable_header(frames: list[bytes], field: str) -> None:
    with pytest.raises((BadRequestError, TooLargeError)) as info:
        codec.decode_request(frames, LIMIT)
    assert info.value.request_id == 42
    assert info.value.field == field


def test_errors_echo_the_request_id_when_readable() -> None:
    with pytest.raises(UnsupportedVersionError) as info:
        codec.decode_request(frames_of({"v": 9, "id": 42, "kind": "ping"}), LIMIT)
    assert info.value.request_id == 42
