"""Input validation against the manifest: the error names the input, what was expected and what came."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from runtime.bundle.manifest import TensorSpec
from runtime.errors import InputValidationError


def validate_inputs(specs: Sequence[TensorSpec], inputs: Mapping[str, object]) -> list[np.ndarray]:
    """Check names, types, dtypes and shapes; return C-contiguous arrays in ``specs`` order."""
    expected_names = [s.name for s in specs]
    missing = [n for n in expected_names if n not in inputs]
    if missing:
        spec = next(s for s in specs if s.name == missing[0])
        raise InputValidationError(
            f"missing input(s) {', '.join(map(repr, missing))}; the policy takes "
            f"{', '.join(map(repr, expected_names))}",
            field=missing[0],
            expected=f"{spec.dtype}{list(spec.shape)}",
            received="nothing",
        )
    if len(inputs) != len(specs):
        extra = sorted(set(inputs) - set(expected_names))
        raise InputValidationError(
            f"unexpected input(s) {', '.join(map(repr, extra))}; the policy takes "
            f"{', '.join(map(repr, expected_names))}",
            field=extra[0],
            expected=", ".join(expected_names),
            received=extra[0],
        )
    out: list[np.ndarray] = []
    for spec in specs:
        value = inputs[spec.name]
        if not isinstance(value, np.ndarray):
            raise InputValidationError(
                f"input {spec.name!r}: expected a numpy array of {spec.dtype}{list(spec.shape)}, "
                f"got {type(value).__name__}",
                field=spec.name,
                expected=f"{spec.dtype}{list(spec.shape)}",
                received=type(value).__name__,
            )
        if value.dtype != np.dtype(spec.dtype):
            raise InputValidationError(
                f"input {spec.name!r}: expected dtype {spec.dtype}, got {value.dtype}",
                field=spec.name,
                expected=spec.dtype,
                received=str(value.dtype),
            )
        if value.shape != spec.shape:
            raise InputValidationError(
                f"input {spec.name!r}: expected shape {list(spec.shape)}, got {list(value.shape)}",
                field=spec.name,
                expected=str(list(spec.shape)),
                received=str(list(value.shape)),
            )
        out.append(np.ascontiguousarray(value))
    return out


def check_finite(specs: Sequence[TensorSpec], arrays: Sequence[np.ndarray], allowed: Collection[str] = ()) -> None:
    """Refuse NaN or infinity in floating inputs, except those named in ``allowed``.

    A NaN in the joint state goes through the network into every action of the chunk; the policy
    cannot be trusted with it, and the client should hear which input carried it.
    """
    for spec, a in zip(specs, arrays, strict=True):
        if a.dtype.kind != "f" or spec.name in allowed or a.size == 0:
            continue
        # One float64 sum is cheaper than an elementwise test and finite exactly when every value
        # is (float32/float16 values cannot overflow a float64 sum); float64 inputs may overflow it,
        # so a non-finite sum is confirmed elementwise before refusing.
        with np.errstate(over="ignore"):  # an overflowing sum is expected here, not worth a warning
            total = float(a.sum(dtype=np.float64))
        if math.isfinite(total):
            continue
        bad = ~np.isfinite(a)
        count = int(bad.sum())
        if count == 0:
            continue
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), a.shape))
        value = a[first]
        raise InputValidationError(
            f"input {spec.name!r}: {count} of {a.size} values are not finite (first: {value} at index "
            f"{list(first)}); send finite numbers, or list the input in server.allow_non_finite",
            field=spec.name,
            expected="finite values",
            received=f"{count} non-finite ({value} at {list(first)})",
        )
