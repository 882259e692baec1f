"""Input validation against the manifest: the error names the input, what was expected and what came."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
