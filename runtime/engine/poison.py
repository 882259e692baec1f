"""Output poisoning: proof that an inference wrote every value it returned.

OpenVINO's CPU plugin can return from an inference without error and without writing its outputs
(seen with one inference thread and inputs that break the graph's shape inference). The output
buffers then still hold the previous request's chunk, which would be served as fresh. So each engine
fills its output buffers with a marker before a run and refuses to return any value still holding it.

Floating outputs get a signalling NaN with a fixed payload: arithmetic never produces it (NaNs a
computation makes are quiet), so one marked value means one value not written. Other dtypes get a
byte pattern, and only a buffer that is entirely the pattern counts as unwritten.
"""

from __future__ import annotations

import numpy as np

_FLOAT_MARKS: dict[np.dtype[np.generic], tuple[np.dtype[np.generic], int]] = {
    np.dtype(np.float32): (np.dtype(np.uint32), 0x7FBADBAD),
    np.dtype(np.float64): (np.dtype(np.uint64), 0x7FF7BADBADBADBAD),
    np.dtype(np.float16): (np.dtype(np.uint16), 0x7DAD),
}
_BYTE_MARK = 0xA5


def poison(array: np.ndarray) -> None:
    """Fill ``array`` (a writable view of an output buffer) with the marker for its dtype."""
    mark = _FLOAT_MARKS.get(array.dtype)
    if mark is not None:
        array.view(mark[0]).fill(mark[1])
    else:
        array.view(np.uint8).fill(_BYTE_MARK)


def unwritten(array: np.ndarray) -> int:
    """How many values of ``array`` still hold the marker (for non-float dtypes: all or nothing)."""
    if array.size == 0:
        return 0
    mark = _FLOAT_MARKS.get(array.dtype)
    if mark is not None:
        return int(np.count_nonzero(array.view(mark[0]) == mark[1]))
    return array.size if bool(np.all(array.view(np.uint8) == _BYTE_MARK)) else 0


def unwritten_message(name: str, count: int, total: int) -> str:
    return (
        f"OpenVINO returned without writing output {name!r} ({count} of {total} values unwritten) and "
        "reported no error; the previous result is not served"
    )
