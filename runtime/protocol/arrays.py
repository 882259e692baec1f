"""Explicit ndarray encoding: a small descriptor map plus the raw bytes, never pickle.

A descriptor is ``{"dtype": "float32", "shape": [100, 6], "frame": 0}`` where ``frame`` indexes the data
frames that follow the header frame, or ``{"dtype": ..., "shape": ..., "data": <bin>}`` with the bytes
inline. Bytes are C-order, little-endian. Only the dtypes in :data:`DTYPES` exist on the wire (no
object, string, void or complex dtypes), and the declared size is checked against the bytes actually
present before any array is made; decoding never copies (``np.frombuffer`` over the received frame).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

from runtime.protocol.errors import BadRequestError

DTYPES: Final[Mapping[str, np.dtype[Any]]] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "bool",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "uint32",
        "int32",
        "uint64",
        "int64",
        "float16",
        "float32",
        "float64",
    )
}
MAX_NDIM: Final = 8
_DESCRIPTOR_KEYS: Final = frozenset(("dtype", "shape", "frame", "data"))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def wire_dtype(array: np.ndarray) -> str:
    """The wire name of ``array``'s dtype; refuses dtypes that have none (object, str, complex...)."""
    name = array.dtype.name
    if name not in DTYPES:
        raise TypeError(f"dtype {array.dtype} cannot be sent; the protocol carries only {', '.join(DTYPES)}")
    return name


def wire_array(array: np.ndarray) -> np.ndarray:
    """``array`` as C-contiguous little-endian, copying only when it is not already."""
    wire_dtype(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return np.ascontiguousarray(array)


def frame_descriptor(array: np.ndarray, frame: int) -> dict[str, Any]:
    """Descriptor of a :func:`wire_array` result sent as data frame ``frame``."""
    return {"dtype": array.dtype.name, "shape": list(array.shape), "frame": frame}


def decode_array(desc: Any, frames: Sequence[memoryview], used: list[bool], where: str) -> np.ndarray:
    """Build a read-only array over the bytes a descriptor names; ``where`` is the field for errors.

    ``used`` marks the data frames consumed, so the caller can refuse frames nobody referenced.
    """
    if not isinstance(desc, dict):
        raise BadRequestError(
            f"{where}: expected an array descriptor map, got {type(desc).__name__}",
            field=where,
            expected="map with dtype, shape and frame or data",
            received=type(desc).__name__,
        )
    unknown = set(desc) - _DESCRIPTOR_KEYS
    if unknown:
        key = sorted(map(str, unknown))[0]
        raise BadRequestError(
            f"{where}: unknown array descriptor key {key!r}",
            field=f"{where}.{key}",
            expected="dtype, shape, frame or data",
            received=key,
        )
    dtype_name = desc.get("dtype")
    dtype = DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if dtype is None:
        raise BadRequestError(
            f"{where}.dtype: expected one of {', '.join(DTYPES)}, got {_short(dtype_name)}",
            field=f"{where}.dtype",
            expected=" | ".join(DTYPES),
            received=_short(dtype_name),
        )
    shape = desc.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_NDIM
        or not all(type(d) is int and d >= 0 for d in shape)
    ):
        raise BadRequestError(
            f"{where}.shape: expected a list of at most {MAX_NDIM} non-negative integers, "
            f"got {_short(shape)}",
            field=f"{where}.shape",
            expected=f"list of <= {MAX_NDIM} non-negative integers",
            received=_short(shape),
        )
    buf: memoryview | bytes
    if "frame" in desc:
        if "data" in desc:
            raise BadRequestError(
                f"{where}: give either frame or data, not both",
                field=where,
                expected="frame or data",
                received="both",
            )
        index = desc["frame"]
        if type(index) is not int or not 0 <= index < len(frames):
            raise BadRequestError(
                f"{where}.frame: expected a data frame index in [0, {len(frames)}), got {_short(index)}",
                field=f"{where}.frame",
                expected=f"integer in [0, {len(frames)})",
                received=_short(index),
            )
        if used[index]:
            raise BadRequestError(
                f"{where}.frame: data frame {index} is already used by another array",
                field=f"{where}.frame",
                expected="a frame no other array uses",
                received=str(index),
            )
        used[index] = True
        buf = frames[index]
    elif "data" in desc:
        data = desc["data"]
        if not isinstance(data, bytes):
            raise BadRequestError(
                f"{where}.data: expected msgpack bin, got {type(data).__name__}",
                field=f"{where}.data",
                expected="bin",
                received=type(data).__name__,
            )
        buf = data
    else:
        raise BadRequestError(
            f"{where}: expected a frame index or inline data",
            field=where,
            expected="frame or data",
            received="neither",
        )
    # Python integers: a declared shape of 2**40 x 2**40 is just compared, never allocated.
    declared = math.prod(shape) * dtype.itemsize
    actual = len(buf) if isinstance(buf, bytes) else buf.nbytes
    if declared != actual:
        raise BadRequestError(
            f"{where}: dtype {dtype_name} shape {shape} declares {declared} bytes, "
            f"the message carries {actual}",
            field=where,
            expected=f"{declared} bytes",
            received=f"{actual} bytes",
        )
    return np.frombuffer(buf, dtype=dtype).reshape(shape)
