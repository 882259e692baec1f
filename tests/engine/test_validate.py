"""Input validation against the manifest: every refusal names the input, what was expected and what came."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.bundle.manifest import TensorSpec
from runtime.engine.validate import check_finite, validate_inputs
from runtime.errors import InputValidationError

SPECS = (
    TensorSpec("observation.images.front", "uint8", (4, 6, 3), "image"),
    TensorSpec("observation.state", "float32", (6,), "state"),
)


def good() -> dict[str, object]:
    return {
        "observation.state": np.arange(6, dtype=np.float32),
        "observation.images.front": np.zeros((4, 6, 3), np.uint8),
    }


def refused(inputs: dict[str, object]) -> InputValidationError:
    with pytest.raises(InputValidationError) as info:
        validate_inputs(SPECS, inputs)
    return info.value


def test_valid_inputs_come_back_in_spec_order_and_contiguous() -> None:
    inputs = good()
    image = np.zeros((6, 4, 3), np.uint8).transpose(1, 0, 2)  # right shape, not C-contiguous
    inputs["observation.images.front"] = image
    out = validate_inputs(SPECS, inputs)
    assert [a.shape for a in out] == [(4, 6, 3), (6,)]
    assert all(a.flags.c_contiguous for a in out)
    assert out[1] is inputs["observation.state"]  # already contiguous: no copy


def test_missing_input() -> None:
    inputs = good()
    del inputs["observation.state"]
    e = refused(inputs)
    assert str(e) == (
        "missing input(s) 'observation.state'; the policy takes 'observation.images.front', 'observation.state'"
    )
    assert (e.field, e.expected, e.received) == ("observation.state", "float32[6]", "nothing")


def test_several_missing_inputs_name_the_first() -> None:
    e = refused({})
    assert str(e).startswith("missing input(s) 'observation.images.front', 'observation.state';")
    assert (e.field, e.expected) == ("observation.images.front", "uint8[4, 6, 3]")


def test_unexpected_input() -> None:
    inputs = {**good(), "observation.zzz": np.zeros(1), "observation.extra": np.zeros(1)}
    e = refused(inputs)
    assert str(e) == (
        "unexpected input(s) 'observation.extra', 'observation.zzz'; the policy takes "
        "'observation.images.front', 'observation.state'"
    )
    assert (e.field, e.received) == ("observation.extra", "observation.extra")
    assert e.expected == "observation.images.front, observation.state"


def test_not_an_array() -> None:
    inputs = good()
    inputs["observation.state"] = [0.0] * 6
    e = refused(inputs)
    assert str(e) == "input 'observation.state': expected a numpy array of float32[6], got list"
    assert (e.field, e.expected, e.received) == ("observation.state", "float32[6]", "list")


def test_wrong_dtype() -> None:
    inputs = good()
    inputs["observation.state"] = np.zeros(6, np.float64)
    e = refused(inputs)
    assert str(e) == "input 'observation.state': expected dtype float32, got float64"
    assert (e.field, e.expected, e.received) == ("observation.state", "float32", "float64")


@pytest.mark.parametrize("shape", [(6, 4, 3), (4, 6), (1, 4, 6, 3), (4, 6, 4)])
def test_wrong_shape(shape: tuple[int, ...]) -> None:
    inputs = good()
    inputs["observation.images.front"] = np.zeros(shape, np.uint8)
    e = refused(inputs)
    assert str(e) == f"input 'observation.images.front': expected shape [4, 6, 3], got {list(shape)}"
    assert (e.field, e.expected, e.received) == ("observation.images.front", "[4, 6, 3]", str(list(shape)))


def test_the_first_bad_input_in_spec_order_is_named() -> None:
    inputs = {"observation.state": np.zeros(5, np.float32), "observation.images.front": np.zeros(1, np.uint8)}
    assert refused(inputs).field == "observation.images.front"


def finite_specs() -> tuple[TensorSpec, ...]:
    return (
        TensorSpec("observation.state", "float32", (2, 3), "state"),
        TensorSpec("observation.images.front", "uint8", (2,), "image"),
        TensorSpec("observation.extra", "float64", (3,), "other"),
    )


def finite_arrays() -> list[np.ndarray]:
    return [np.zeros((2, 3), np.float32), np.zeros(2, np.uint8), np.zeros(3, np.float64)]


def test_finite_inputs_pass() -> None:
    check_finite(finite_specs(), finite_arrays())
    arrays = finite_arrays()
    arrays[2] = np.array([1e308, 1e308, -1e308])  # finite values whose float64 sum overflows
    check_finite(finite_specs(), arrays)
    empty = (TensorSpec("e", "float32", (0,)),)
    check_finite(empty, [np.zeros(0, np.float32)])


@pytest.mark.parametrize(("bad", "shown"), [(np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf")])
def test_non_finite_input_is_refused_and_located(bad: float, shown: str) -> None:
    arrays = finite_arrays()
    arrays[0][1, 2] = bad
    arrays[0][1, 0] = 5.0
    with pytest.raises(InputValidationError) as info:
        check_finite(finite_specs(), arrays)
    e = info.value
    assert str(e) == (
        f"input 'observation.state': 1 of 6 values are not finite (first: {shown} at index [1, 2]); "
        "send finite numbers, or list the input in server.allow_non_finite"
    )
    assert (e.field, e.expected, e.received) == (
        "observation.state",
        "finite values",
        f"1 non-finite ({shown} at [1, 2])",
    )


def test_every_non_finite_value_is_counted_and_the_first_named() -> None:
    arrays = finite_arrays()
    arrays[2][:] = [1.0, np.inf, np.nan]
    with pytest.raises(InputValidationError) as info:
        check_finite(finite_specs(), arrays)
    assert "2 of 3 values are not finite (first: inf at index [1])" in str(info.value)
    assert info.value.field == "observation.extra"


def test_allowed_inputs_may_carry_non_finite_values() -> None:
    arrays = finite_arrays()
    arrays[0][0, 0] = np.nan
    check_finite(finite_specs(), arrays, allowed=("observation.state",))
    with pytest.raises(InputValidationError):
        check_finite(finite_specs(), arrays, allowed=("observation.extra",))
