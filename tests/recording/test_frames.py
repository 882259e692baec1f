"""A frame checked against the features and copied into its slot: each refusal names its field, and
a refused frame leaves the slot as it was."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.errors import RecordingInputError
from runtime.recording.features import RecordingFeatures
from runtime.recording.frames import FrameSlot, fill_slot

FEATURES = RecordingFeatures(fps=30, joint_names=("a", "b"), cameras={"front": (16, 18), "wrist": (20, 16)})
J = np.array([1.5, -2.0], dtype=np.float32)


def images(front: object = None, wrist: object = None) -> dict[str, object]:
    return {
        "front": np.full((16, 18, 3), 7, np.uint8) if front is None else front,
        "wrist": np.full((20, 16, 3), 9, np.uint8) if wrist is None else wrist,
    }


def fill(slot: FrameSlot, **kw: object) -> dict[str, np.ndarray]:
    args: dict[str, object] = {
        "t_s": 2.5,
        "state": J,
        "action": J * 2,
        "action_requested": J * 3,
        "images": images(),
        "source": "teleop",
        "intervention": 1,
    }
    args.update(kw)
    return fill_slot(slot, FEATURES, **args)  # type: ignore[arg-type]


def test_a_new_slot() -> None:
    slot = FrameSlot(FEATURES)
    assert slot.t_s == 0.0 and slot.source == "hold" and slot.intervention is False
    for v in (slot.state, slot.action, slot.requested):
        assert v.dtype == np.float32 and v.tolist() == [0.0, 0.0]
    assert {k: (v.shape, v.dtype) for k, v in slot.images.items()} == {
        "front": ((16, 18, 3), np.uint8),
        "wrist": ((20, 16, 3), np.uint8),
    }
    assert FrameSlot(FEATURES, images=False).images == {}


def test_a_frame_is_copied() -> None:
    slot = FrameSlot(FEATURES)
    chosen = fill(
        slot, state=[1, 2], images={"observation.images.front": images()["front"], "wrist": images()["wrist"]}
    )
    assert slot.t_s == 2.5 and isinstance(slot.t_s, float)
    assert slot.state.tolist() == [1.0, 2.0] and slot.state.dtype == np.float32
    assert slot.action.tolist() == [3.0, -4.0]
    assert slot.requested.tolist() == [4.5, -6.0]
    assert slot.source == "teleop"
    assert slot.intervention is True
    assert int(slot.images["front"][0, 0, 0]) == 7 and int(slot.images["wrist"][0, 0, 0]) == 9
    assert set(chosen) == {"front", "wrist"}
    assert chosen["front"] is not slot.images["front"]


def test_a_slot_without_images_returns_them() -> None:
    slot = FrameSlot(FEATURES, images=False)
    given = images()
    chosen = fill(slot)
    assert chosen["front"] is not None and int(chosen["wrist"][0, 0, 0]) == 9
    assert set(chosen) == set(given)


@pytest.mark.parametrize(
    ("arg", "field"), [("state", "observation.state"), ("action", "action"), ("action_requested", "request.action")]
)
@pytest.mark.parametrize("bad", [np.zeros(3), np.zeros((2, 1)), np.array(["x", "y"]), np.array([True, False])])
def test_a_vector_refused(arg: str, field: str, bad: np.ndarray) -> None:
    slot = FrameSlot(FEATURES)
    with pytest.raises(RecordingInputError) as e:
        fill(slot, **{arg: bad})
    assert str(e.value) == f"{field}: expected 2 numbers (one per joint), got shape {bad.shape} of {bad.dtype}"
    assert e.value.field == field
    assert e.value.expected == "(2,) float"
    assert e.value.received == f"{bad.shape} {bad.dtype}"
    assert slot.state.tolist() == [0.0, 0.0] and slot.t_s == 0.0


def test_integer_vectors_are_numbers() -> None:
    slot = FrameSlot(FEATURES)
    fill(slot, action=np.array([3, 4], dtype=np.int64))
    assert slot.action.tolist() == [3.0, 4.0]


def test_a_source_refused() -> None:
    slot = FrameSlot(FEATURES)
    with pytest.raises(RecordingInputError) as e:
        fill(slot, source="auto")
    assert str(e.value) == "control.source: expected one of ['policy', 'teleop', 'hold'], got 'auto'"
    assert (e.value.field, e.value.expected, e.value.received) == ("control.source", "policy | teleop | hold", "'auto'")
    assert slot.source == "hold"


@pytest.mark.parametrize(
    "given",
    [
        {"front": 1},  # one missing
        {"front": 1, "wrist": 2, "top": 3},  # one too many
        {"front": 1, "observation.images.front": 2},  # the same camera twice
        {"front": 1, "side": 2},  # one unknown
    ],
)
def test_cameras_refused(given: dict[str, object]) -> None:
    slot = FrameSlot(FEATURES)
    with pytest.raises(RecordingInputError) as e:
        fill(slot, images=given)
    assert str(e.value) == f"images: expected cameras ['front', 'wrist'], got {sorted(given)}"
    assert (e.value.field, e.value.expected, e.value.received) == (
        "images",
        "['front', 'wrist']",
        str(sorted(given)),
    )


@pytest.mark.parametrize(
    ("img", "got"),
    [
        (np.zeros((20, 16, 3), np.uint8), "(20, 16, 3) uint8"),
        (np.zeros((16, 18, 3), np.float32), "(16, 18, 3) float32"),
        (np.zeros((16, 18), np.uint8), "(16, 18) uint8"),
        ([[0]], "list"),
    ],
)
def test_an_image_refused(img: object, got: str) -> None:
    slot = FrameSlot(FEATURES)
    with pytest.raises(RecordingInputError) as e:
        fill(slot, images=images(front=img))
    assert str(e.value) == f"observation.images.front: expected a uint8 16x18x3 RGB frame, got {got}"
    assert (e.value.field, e.value.expected, e.value.received) == (
        "observation.images.front",
        "(16, 18, 3) uint8",
        got,
    )
    assert int(slot.images["wrist"].max()) == 0  # nothing half-copied
    assert slot.state.tolist() == [0.0, 0.0]
