"""Check a decoded observation against the policy's inputs on the I/O thread, before it is queued.

The engine validates again; checking here keeps bad observations out of the queue and gives the
client the field, the expected and the received value as separate reply fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from runtime.bundle.manifest import TensorSpec
from runtime.protocol.errors import BadInputError


class ObservationChecker:
    def __init__(self, specs: Sequence[TensorSpec]) -> None:
        self._specs = tuple(specs)
        self._names = frozenset(s.name for s in specs)
        self._expected = [(s.name, np.dtype(s.dtype), tuple(s.shape)) for s in specs]
        self._listing = ", ".join(s.name for s in specs)

    def check(self, observation: Mapping[str, np.ndarray]) -> None:
        for name, dtype, shape in self._expected:
            arr = observation.get(name)
            if arr is None:
                raise BadInputError(
                    f"observation is missing input {name!r}; the policy takes {self._listing}",
                    field=f"observation.{name}",
                    expected=f"{dtype}{list(shape)}",
                    received="nothing",
                )
            if arr.dtype != dtype:
                raise BadInputError(
                    f"observation.{name}: expected dtype {dtype}, got {arr.dtype}",
                    field=f"observation.{name}",
                    expected=str(dtype),
                    received=str(arr.dtype),
                )
            if arr.shape != shape:
                raise BadInputError(
                    f"observation.{name}: expected shape {list(shape)}, got {list(arr.shape)}",
                    field=f"observation.{name}",
                    expected=str(list(shape)),
                    received=str(list(arr.shape)),
                )
        if len(observation) != len(self._expected):
            extra = sorted(set(observation) - self._names)[0]
            raise BadInputError(
                f"observation has unexpected input {extra!r}; the policy takes {self._listing}",
                field=f"observation.{extra}",
                expected=self._listing,
                received=extra,
            )
