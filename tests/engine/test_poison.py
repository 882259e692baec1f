"""Output poisoning: the marker each dtype gets, counted back value by value (floats) or whole (others)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.engine.poison import poison, unwritten, unwritten_message

FLOAT_MARKS = [
    (np.float32, np.uint32, 0x7FBADBAD),
    (np.float64, np.uint64, 0x7FF7BADBADBADBAD),
    (np.float16, np.uint16, 0x7DAD),
]


@pytest.mark.parametrize(("dtype", "bits", "mark"), FLOAT_MARKS)
def test_a_float_buffer_gets_a_signalling_nan_and_each_value_is_counted(dtype: type, bits: type, mark: int) -> None:
    a = np.zeros((3, 4), dtype)
    poison(a)
    assert np.all(a.view(bits) == mark) and np.all(np.isnan(a))
    assert unwritten(a) == 12
    a[1, 2] = 0.5
    a[0, 0] = np.nan  # a NaN arithmetic makes is quiet: written
    assert unwritten(a) == 10
    a[...] = 1.0
    assert unwritten(a) == 0


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_])
def test_other_dtypes_get_a_byte_pattern_and_count_all_or_nothing(dtype: type) -> None:
    a = np.zeros(5, dtype)
    poison(a)
    assert np.all(a.view(np.uint8) == 0xA5)
    assert unwritten(a) == 5
    a.view(np.uint8)[0] = 0
    assert unwritten(a) == 0


def test_a_view_of_an_output_buffer_is_poisoned_in_place() -> None:
    buffer = np.zeros((2, 3), np.float32)
    poison(buffer[1])
    assert unwritten(buffer) == 3 and unwritten(buffer[0]) == 0


def test_an_empty_output_has_nothing_unwritten() -> None:
    for dtype in (np.float32, np.int64):
        a = np.zeros((0, 3), dtype)
        poison(a)
        assert unwritten(a) == 0


def test_the_message_names_the_output_and_the_counts() -> None:
    assert unwritten_message("action", 3, 60) == (
        "OpenVINO returned without writing output 'action' (3 of 60 values unwritten) and reported no error; "
        "the previous result is not served"
    )


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_a_single_value_output_left_unwritten_is_counted(dtype: type) -> None:
    a = np.zeros((1, 1), dtype)
    poison(a)
    assert unwritten(a) == 1
    a[0, 0] = 2
    assert unwritten(a) == 0
