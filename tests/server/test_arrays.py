"""Array descriptors on the wire: every refusal names the field, what was expected and what came."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime.protocol.arrays import DTYPES, MAX_NDIM, decode_array, frame_descriptor, wire_array, wire_dtype
from runtime.protocol.errors import BadRequestError

ALL = ", ".join(DTYPES)


def frames_for(*arrays: np.ndarray) -> list[memoryview]:
    return [memoryview(a.tobytes()) for a in arrays]


def refused(desc: Any, frames: list[memoryview] | None = None, used: list[bool] | None = None) -> BadRequestError:
    frames = frames if frames is not None else frames_for(np.zeros(6, np.float32))
    with pytest.raises(BadRequestError) as info:
        decode_array(desc, frames, used if used is not None else [False] * len(frames), "obs.state")
    return info.value


def fields(e: BadRequestError) -> tuple[str, str | None, str | None, str | None]:
    return e.message, e.field, e.expected, e.received


def test_frame_and_inline_arrays_decode_without_copies() -> None:
    a = np.arange(6, dtype=np.float32)
    frames = frames_for(a)
    used = [False]
    out = decode_array({"dtype": "float32", "shape": [2, 3], "frame": 0}, frames, used, "x")
    np.testing.assert_array_equal(out, a.reshape(2, 3))
    assert used == [True] and not out.flags.writeable
    inline = decode_array({"dtype": "uint8", "shape": [3], "data": b"\x01\x02\x03"}, [], [], "x")
    np.testing.assert_array_equal(inline, [1, 2, 3])
    empty = decode_array({"dtype": "int16", "shape": [0, 4], "data": b""}, [], [], "x")
    assert empty.shape == (0, 4)
    scalar = decode_array({"dtype": "float64", "shape": [], "data": np.float64(2.5).tobytes()}, [], [], "x")
    assert scalar.shape == () and float(scalar) == 2.5


def test_not_a_map() -> None:
    assert fields(refused([1])) == (
        "obs.state: expected an array descriptor map, got list",
        "obs.state",
        "map with dtype, shape and frame or data",
        "list",
    )


def test_unknown_key_names_the_first_in_order() -> None:
    e = refused({"dtype": "float32", "shape": [6], "frame": 0, "zeta": 1, "beta": 2})
    assert fields(e) == (
        "obs.state: unknown array descriptor key 'beta'",
        "obs.state.beta",
        "dtype, shape, frame or data",
        "beta",
    )


@pytest.mark.parametrize("dtype", ["object", "complex64", "<f4", 7, None, "float"])
def test_bad_dtype(dtype: Any) -> None:
    e = refused({"dtype": dtype, "shape": [6], "frame": 0})
    assert fields(e) == (
        f"obs.state.dtype: expected one of {ALL}, got {dtype!r}",
        "obs.state.dtype",
        " | ".join(DTYPES),
        repr(dtype),
    )


@pytest.mark.parametrize("shape", ["6", [6.0], [-1], [True], [1] * (MAX_NDIM + 1), None])
def test_bad_shape(shape: Any) -> None:
    e = refused({"dtype": "float32", "shape": shape, "frame": 0})
    assert fields(e) == (
        f"obs.state.shape: expected a list of at most {MAX_NDIM} non-negative integers, got {shape!r}",
        "obs.state.shape",
        f"list of <= {MAX_NDIM} non-negative integers",
        repr(shape),
    )


def test_the_largest_allowed_rank_and_zero_sizes_pass() -> None:
    desc = {"dtype": "uint8", "shape": [1] * (MAX_NDIM - 1) + [0], "data": b""}
    assert decode_array(desc, [], [], "x").ndim == MAX_NDIM


def test_long_values_are_shortened() -> None:
    e = refused({"dtype": "x" * 200, "shape": [6], "frame": 0})
    assert e.received is not None and len(e.received) == 80 and e.received.endswith("...")
    assert e.received == repr("x" * 200)[:77] + "..."
    exactly = "y" * 78  # repr adds two quotes: 80 characters, kept whole
    assert refused({"dtype": exactly, "shape": [6], "frame": 0}).received == repr(exactly)


def test_frame_and_data_together() -> None:
    e = refused({"dtype": "float32", "shape": [6], "frame": 0, "data": b""})
    assert fields(e) == ("obs.state: give either frame or data, not both", "obs.state", "frame or data", "both")


@pytest.mark.parametrize("index", [1, -1, "0", True, 0.0])
def test_bad_frame_index(index: Any) -> None:
    e = refused({"dtype": "float32", "shape": [6], "frame": index})
    assert fields(e) == (
        f"obs.state.frame: expected a data frame index in [0, 1), got {index!r}",
        "obs.state.frame",
        "integer in [0, 1)",
        repr(index),
    )


def test_a_frame_used_twice() -> None:
    e = refused({"dtype": "float32", "shape": [6], "frame": 0}, used=[True])
    assert fields(e) == (
        "obs.state.frame: data frame 0 is already used by another array",
        "obs.state.frame",
        "a frame no other array uses",
        "0",
    )


def test_inline_data_must_be_bin() -> None:
    e = refused({"dtype": "uint8", "shape": [2], "data": "ab"})
    assert fields(e) == ("obs.state.data: expected msgpack bin, got str", "obs.state.data", "bin", "str")


def test_neither_frame_nor_data() -> None:
    e = refused({"dtype": "uint8", "shape": [2]})
    assert fields(e) == ("obs.state: expected a frame index or inline data", "obs.state", "frame or data", "neither")


@pytest.mark.parametrize(
    ("shape", "dtype", "declared"), [([7], "float32", 28), ([4], "float64", 32), ([2, 2], "float32", 16)]
)
def test_size_mismatch(shape: list[int], dtype: str, declared: int) -> None:
    e = refused({"dtype": dtype, "shape": shape, "frame": 0})
    assert fields(e) == (
        f"obs.state: dtype {dtype} shape {shape} declares {declared} bytes, the message carries 24",
        "obs.state",
        f"{declared} bytes",
        "24 bytes",
    )
    e = refused({"dtype": dtype, "shape": shape, "data": b"\x00" * 5})
    assert e.received == "5 bytes"


def test_huge_declared_shape_is_refused_without_allocating() -> None:
    e = refused({"dtype": "float64", "shape": [2**40, 2**40], "frame": 0})
    assert e.expected == f"{2**80 * 8} bytes"


def test_wire_dtype_and_array() -> None:
    assert wire_dtype(np.zeros(1, np.float32)) == "float32"
    with pytest.raises(TypeError) as info:
        wire_dtype(np.zeros(1, np.complex64))
    assert str(info.value) == f"dtype complex64 cannot be sent; the protocol carries only {ALL}"
    big = np.arange(4, dtype=">i4")
    out = wire_array(big)
    assert out.dtype.byteorder in ("<", "=") and out.tobytes() == np.arange(4, dtype="<i4").tobytes()
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    assert wire_array(strided).flags.c_contiguous
    already = np.zeros(3, np.float32)
    assert wire_array(already) is already  # no copy when nothing needs changing
    assert frame_descriptor(out, 2) == {"dtype": "int32", "shape": [4], "frame": 2}


def test_one_character_over_is_shortened() -> None:
    over = "y" * 79  # 81 characters once quoted
    assert refused({"dtype": over, "shape": [6], "frame": 0}).received == repr(over)[:77] + "..."


def test_an_unhashable_dtype_is_refused_like_any_other() -> None:
    e = refused({"dtype": ["float32"], "shape": [6], "frame": 0})
    assert (e.field, e.received) == ("obs.state.dtype", "['float32']")
