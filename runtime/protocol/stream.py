"""Observation parts published by producer processes (cameras) to the control loop.

Pattern: the producer binds a ZeroMQ **PUB** socket; the daemon connects a **SUB** socket and
subscribes to the input name. One part is three frames:

| frame | content |
|---|---|
| 0 | topic: the policy input's name, UTF-8 (``observation.images.front``) |
| 1 | header, a msgpack map: ``v`` (1), ``seq`` (uint, per producer), ``capture_ts`` (float seconds on the
      host's CLOCK_MONOTONIC, taken when the frame was captured), ``array`` (descriptor, ``frame: 0``) |
| 2 | the array's raw bytes (C order, little-endian) |

PUB/SUB drops for slow subscribers instead of queueing, and the subscriber keeps only the newest part
of each stream, so the loop never acts on a backlog. CLOCK_MONOTONIC is shared by every process on a
host, so the loop can age a part exactly; producers therefore run on the robot's computer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgpack
import numpy as np

from runtime.protocol.arrays import decode_array, frame_descriptor, wire_array
from runtime.protocol.errors import BadRequestError

STREAM_VERSION: Final = 1
_KEYS: Final = frozenset(("v", "seq", "capture_ts", "array"))


@dataclass(frozen=True, slots=True)
class StreamPart:
    name: str
    seq: int
    capture_ts: float
    array: np.ndarray


def encode_part(name: str, seq: int, capture_ts: float, array: np.ndarray) -> list[Any]:
    arr = wire_array(np.asarray(array))
    header = msgpack.packb(
        {"v": STREAM_VERSION, "seq": seq, "capture_ts": float(capture_ts), "array": frame_descriptor(arr, 0)},
        use_bin_type=True,
    )
    return [name.encode(), header, arr]


def _refuse_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} is not part of the protocol")


def decode_part(frames: Sequence[memoryview | bytes]) -> StreamPart:
    """Parse one part; raises :class:`BadRequestError` naming the field that is wrong."""
    if len(frames) != 3:
        raise BadRequestError(
            f"stream part: expected 3 frames (topic, header, data), got {len(frames)}",
            field="(frames)",
            expected="3",
            received=str(len(frames)),
        )
    name = bytes(frames[0]).decode("utf-8", errors="replace")
    try:
        header = msgpack.unpackb(frames[1], raw=False, strict_map_key=True, ext_hook=_refuse_ext)
    except Exception as e:
        raise BadRequestError(
            f"stream {name}: header is not msgpack: {e}", field="(header)", expected="msgpack map", received="bytes"
        ) from None
    if not isinstance(header, dict) or set(header) != _KEYS:
        got = sorted(header) if isinstance(header, dict) else type(header).__name__
        raise BadRequestError(
            f"stream {name}: header must have exactly {sorted(_KEYS)}, got {got}",
            field="(header)",
            expected=", ".join(sorted(_KEYS)),
            received=str(got),
        )
    if header["v"] != STREAM_VERSION:
        raise BadRequestError(
            f"stream {name}: version {header['v']!r} is not {STREAM_VERSION}",
            field="v",
            expected=str(STREAM_VERSION),
            received=repr(header["v"]),
        )
    seq, ts = header["seq"], header["capture_ts"]
    if type(seq) is not int or seq < 0:
        raise BadRequestError(f"stream {name}: seq must be a non-negative integer, got {seq!r}", field="seq")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise BadRequestError(f"stream {name}: capture_ts must be a number, got {ts!r}", field="capture_ts")
    data = frames[2] if isinstance(frames[2], memoryview) else memoryview(frames[2])
    array = decode_array(header["array"], [data], [False], name)
    return StreamPart(name, seq, float(ts), array)
