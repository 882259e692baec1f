"""A camera stream's part on the wire (docs/control.md's three frames: topic, header, data) and every
refusal of one that does not fit, naming the stream and the field."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest

from runtime.protocol.errors import BadRequestError
from runtime.protocol.stream import STREAM_VERSION, StreamPart, decode_part, encode_part

NAME = "observation.images.front"
KEYS = "['array', 'capture_ts', 'seq', 'v']"


def frame(shape: tuple[int, ...] = (2, 4, 3), dtype: Any = np.uint8) -> np.ndarray:
    return np.arange(int(np.prod(shape))).astype(dtype).reshape(shape)


def header(**changes: Any) -> dict[str, Any]:
    h: dict[str, Any] = {
        "v": 1,
        "seq": 7,
        "capture_ts": 12.5,
        "array": {"dtype": "uint8", "shape": [2, 4, 3], "frame": 0},
    }
    h.update(changes)
    return h


def part(h: Any, data: bytes | None = None, name: bytes = NAME.encode()) -> list[bytes]:
    return [name, msgpack.packb(h, use_bin_type=True), frame().tobytes() if data is None else data]


def refused(frames: list[Any]) -> BadRequestError:
    with pytest.raises(BadRequestError) as caught:
        decode_part(frames)
    return caught.value


def test_a_part_is_its_topic_a_header_and_the_array_bytes() -> None:
    img = frame()
    topic, head, data = encode_part(NAME, 7, 12.5, img)
    assert topic == NAME.encode()
    assert msgpack.unpackb(head) == header()
    assert STREAM_VERSION == 1
    assert bytes(data) == img.tobytes()


def test_a_part_carries_its_capture_time_as_a_float_and_the_array_little_endian_in_c_order() -> None:
    img = np.arange(12, dtype=">u2").reshape(3, 4).T  # big-endian and not C-contiguous
    frames = encode_part("caméra", 0, 3, img)
    assert frames[0] == "caméra".encode()
    h = msgpack.unpackb(frames[1])
    assert h == {"v": 1, "seq": 0, "capture_ts": 3.0, "array": {"dtype": "uint16", "shape": [4, 3], "frame": 0}}
    assert type(h["capture_ts"]) is float
    assert bytes(frames[2]) == np.ascontiguousarray(img.astype("<u2")).tobytes()


@pytest.mark.parametrize("as_view", [True, False])
def test_a_part_decodes_to_what_was_sent(as_view: bool) -> None:
    img = frame((2, 2, 3), np.float32)
    frames = [bytes(f) for f in encode_part("caméra", 9, 4, img)]
    p = decode_part([memoryview(f) for f in frames] if as_view else frames)
    assert (p.name, p.seq, p.capture_ts) == ("caméra", 9, 4.0)
    assert type(p.capture_ts) is float
    assert p.array.dtype == np.float32 and np.array_equal(p.array, img)
    assert isinstance(p, StreamPart)


@pytest.mark.parametrize("count", [2, 4])
def test_a_part_of_another_number_of_frames_is_refused(count: int) -> None:
    frames = part(header())
    frames = frames[:count] if count < 3 else [*frames, b""]
    e = refused(frames)
    assert e.message == f"stream part: expected 3 frames (topic, header, data), got {count}"
    assert (e.field, e.expected, e.received) == ("(frames)", "3", str(count))


def test_a_topic_that_is_not_utf8_is_read_with_replacements() -> None:
    p = decode_part(part(header(), name=b"front\xff"))
    assert p.name == "front\ufffd"
    e = refused([b"front\xff", b"\xc1", b""])
    assert e.message.startswith("stream front\ufffd: header is not msgpack")


def test_a_header_that_is_not_msgpack_is_refused() -> None:
    e = refused([NAME.encode(), b"\xc1", b""])
    assert e.message.startswith(f"stream {NAME}: header is not msgpack: ")
    assert (e.field, e.expected, e.received) == ("(header)", "msgpack map", "bytes")
    assert e.__suppress_context__


def test_a_header_with_a_msgpack_extension_is_refused_by_type() -> None:
    ext = msgpack.packb(msgpack.ExtType(5, b"x"))
    e = refused([NAME.encode(), ext, b""])
    assert e.message == f"stream {NAME}: header is not msgpack: msgpack extension type 5 is not part of the protocol"
    assert e.field == "(header)"


def test_a_header_with_a_key_that_is_not_a_string_is_refused() -> None:
    e = refused(part({1: 2, **header()}))
    assert e.message.startswith(f"stream {NAME}: header is not msgpack: ")
    assert e.field == "(header)"


def test_a_header_with_string_keys_sent_as_bytes_is_refused_naming_them() -> None:
    raw = msgpack.packb({k.encode(): v for k, v in header().items()}, use_bin_type=True)
    e = refused([NAME.encode(), raw, frame().tobytes()])
    assert e.message.startswith(f"stream {NAME}: header must have exactly {KEYS}, got [b'array'")


@pytest.mark.parametrize(
    ("h", "got"),
    [
        ([1, 2], "list"),
        ("v", "str"),
        ({k: v for k, v in header().items() if k != "seq"}, "['array', 'capture_ts', 'v']"),
        ({**header(), "extra": 1}, "['array', 'capture_ts', 'extra', 'seq', 'v']"),
    ],
)
def test_a_header_without_exactly_its_keys_is_refused(h: Any, got: str) -> None:
    e = refused(part(h))
    assert e.message == f"stream {NAME}: header must have exactly {KEYS}, got {got}"
    assert (e.field, e.expected, e.received) == ("(header)", "array, capture_ts, seq, v", got)


@pytest.mark.parametrize(("v", "shown"), [(2, "2"), (0, "0"), ("1", "'1'")])
def test_another_version_is_refused(v: Any, shown: str) -> None:
    e = refused(part(header(v=v)))
    assert e.message == f"stream {NAME}: version {shown} is not 1"
    assert (e.field, e.expected, e.received) == ("v", "1", shown)


def test_seq_zero_is_taken() -> None:
    assert decode_part(part(header(seq=0))).seq == 0


@pytest.mark.parametrize(("seq", "shown"), [(-1, "-1"), (True, "True"), (1.0, "1.0"), ("1", "'1'"), (None, "None")])
def test_a_seq_that_is_not_a_non_negative_integer_is_refused(seq: Any, shown: str) -> None:
    e = refused(part(header(seq=seq)))
    assert e.message == f"stream {NAME}: seq must be a non-negative integer, got {shown}"
    assert e.field == "seq"


def test_a_capture_time_in_whole_seconds_is_taken_as_a_float() -> None:
    p = decode_part(part(header(capture_ts=5)))
    assert p.capture_ts == 5.0 and type(p.capture_ts) is float


@pytest.mark.parametrize(("ts", "shown"), [(True, "True"), ("1.0", "'1.0'"), (None, "None"), ([1.0], "[1.0]")])
def test_a_capture_time_that_is_not_a_number_is_refused(ts: Any, shown: str) -> None:
    e = refused(part(header(capture_ts=ts)))
    assert e.message == f"stream {NAME}: capture_ts must be a number, got {shown}"
    assert e.field == "capture_ts"


def test_an_array_that_does_not_fit_its_bytes_is_refused_naming_the_stream() -> None:
    e = refused(part(header(), data=frame().tobytes()[:-1]))
    assert e.field == NAME
    assert NAME in e.message


def test_the_array_is_the_only_data_frame() -> None:
    e = refused(part(header(array={"dtype": "uint8", "shape": [2, 4, 3], "frame": 1})))
    assert e.field == f"{NAME}.frame"
