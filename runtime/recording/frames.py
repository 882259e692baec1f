"""Frame slots: the preallocated memory a frame crosses from the control thread to the writer in.

The recorder owns a fixed ring of :class:`FrameSlot` s, each with arrays sized for one frame (joint
vectors and every camera image). The control thread copies a frame into a free slot and hands the
slot over; the writer thread hands it back when the frame is on its way to disk. So recording a
frame allocates nothing large on the control thread, and how far the writer may fall behind is
exactly the number of slots.

When the cameras are encoded in processes of their own, a slot carries the joint columns only (its
``images`` is empty) and the camera frames go to the encoders' shared-memory rings instead
(:mod:`runtime.recording.shm_ring`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from runtime.errors import RecordingInputError
from runtime.recording.features import (
    ACTION,
    IMAGE_PREFIX,
    REQUESTED_ACTION,
    SOURCES,
    STATE,
    RecordingFeatures,
)


class FrameSlot:
    """One frame's worth of preallocated arrays, reused for frame after frame."""

    __slots__ = ("action", "images", "intervention", "requested", "source", "state", "t_s")

    def __init__(self, features: RecordingFeatures, *, images: bool = True) -> None:
        n = features.num_joints
        self.t_s = 0.0
        self.state = np.zeros(n, dtype=np.float32)
        self.action = np.zeros(n, dtype=np.float32)
        self.requested = np.zeros(n, dtype=np.float32)
        cameras = features.cameras.items() if images else ()
        self.images = {cam: np.zeros((h, w, 3), dtype=np.uint8) for cam, (h, w) in cameras}
        self.source = "hold"
        self.intervention = False


def _vector(name: str, value: npt.ArrayLike, n: int) -> npt.NDArray[np.generic]:
    arr = np.asarray(value)
    if arr.shape != (n,) or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise RecordingInputError(
            f"{name}: expected {n} numbers (one per joint), got shape {arr.shape} of {arr.dtype}",
            field=name,
            expected=f"({n},) float",
            received=f"{arr.shape} {arr.dtype}",
        )
    return arr


def fill_slot(
    slot: FrameSlot,
    features: RecordingFeatures,
    t_s: float,
    state: npt.ArrayLike,
    action: npt.ArrayLike,
    action_requested: npt.ArrayLike,
    images: Mapping[str, npt.NDArray[np.uint8]],
    source: str,
    intervention: bool,
) -> dict[str, npt.NDArray[np.uint8]]:
    """Check a frame against the features and copy it into ``slot``; names the field that is wrong.

    Returns the frame's images by camera name (what a slot without images leaves to the caller)."""
    n = features.num_joints
    st = _vector(STATE, state, n)
    ac = _vector(ACTION, action, n)
    rq = _vector(REQUESTED_ACTION, action_requested, n)
    if source not in SOURCES:
        raise RecordingInputError(
            f"control.source: expected one of {list(SOURCES)}, got {source!r}",
            field="control.source",
            expected=" | ".join(SOURCES),
            received=repr(source),
        )
    # cameras by name ("front") or by their column ("observation.images.front"), as observations carry them
    cameras = features.cameras
    chosen: dict[str, npt.NDArray[np.uint8]] = {}
    for key, img in images.items():
        cam = key.removeprefix(IMAGE_PREFIX)
        if cam not in cameras or cam in chosen:
            chosen = {}
            break
        chosen[cam] = img
    if len(chosen) != len(cameras):
        raise RecordingInputError(
            f"images: expected cameras {sorted(cameras)}, got {sorted(images)}",
            field="images",
            expected=str(sorted(cameras)),
            received=str(sorted(images)),
        )
    for cam, (height, width) in cameras.items():
        img = chosen[cam]
        shape = (height, width, 3)
        if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.shape != shape:
            got = f"{img.shape} {img.dtype}" if isinstance(img, np.ndarray) else type(img).__name__
            key = features.image_key(cam)
            raise RecordingInputError(
                f"{key}: expected a uint8 {height}x{width}x3 RGB frame, got {got}",
                field=key,
                expected=f"{shape} uint8",
                received=got,
            )
    # every check passed: only now touch the slot, so a refused frame leaves nothing half-copied
    np.copyto(slot.state, st, casting="unsafe")
    np.copyto(slot.action, ac, casting="unsafe")
    np.copyto(slot.requested, rq, casting="unsafe")
    for cam, buf in slot.images.items():
        np.copyto(buf, chosen[cam])
    slot.t_s = float(t_s)
    slot.source = source
    slot.intervention = bool(intervention)
    return chosen
