"""The camera frames' shared-memory ring: its refusal, slot views over one segment, the free list,
and a segment removed once, however often it is closed."""

from __future__ import annotations

from multiprocessing import shared_memory

import numpy as np
import pytest

from runtime.errors import ConfigError, RecordingError
from runtime.recording.shm_ring import NAME_PREFIX, FrameRing, attach, slot_views


@pytest.mark.parametrize("bad", [1, 0, True, 2.0])
def test_slots_refused(bad: object) -> None:
    with pytest.raises(ConfigError) as e:
        FrameRing(bad, 16, 16)  # type: ignore[arg-type]
    assert str(e.value) == f"recording.camera_queue_frames: expected an integer >= 2, got {bad!r}"


def test_slot_views_lie_back_to_back() -> None:
    buf = bytearray(2 * 4 * 5 * 3 + 7)
    views = slot_views(memoryview(buf), 2, 4, 5)
    assert [v.shape for v in views] == [(4, 5, 3), (4, 5, 3)]
    views[1][0, 0, 0] = 9
    views[0][3, 4, 2] = 8
    assert buf[60] == 9 and buf[59] == 8
    with pytest.raises(RecordingError, match=r"^shared memory: the segment is closed$"):
        slot_views(None, 2, 4, 5)


def test_the_ring() -> None:
    ring = FrameRing(3, 4, 6)
    try:
        assert ring.name.startswith(NAME_PREFIX) and len(ring.name) == len(NAME_PREFIX) + 12
        assert (ring.slots, ring.height, ring.width) == (3, 4, 6)
        assert len(ring.views) == 3 and ring.views[2].shape == (4, 6, 3)
        assert ring.in_use == 0
        assert [ring.take(), ring.take(), ring.take()] == [0, 1, 2]
        assert ring.in_use == 3
        assert ring.take() is None
        ring.give_back(1)
        assert ring.in_use == 2
        assert ring.take() == 1
        ring.reset()
        assert ring.in_use == 0
        assert [ring.take(), ring.take()] == [0, 1]
        # the encoder's side sees the daemon's bytes in the same place
        ring.views[1][:] = 5
        other = attach(ring.name)
        try:
            assert other.size >= 3 * 4 * 6 * 3
            assert bytes(other.buf[72:75]) == b"\x05\x05\x05" and other.buf[71] == 0
        finally:
            other.close()
    finally:
        ring.close()
    assert ring.views == []
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=ring.name)
    ring.close()  # twice: nothing to do


def test_close_with_a_view_still_alive_removes_the_segment() -> None:
    ring = FrameRing(2, 4, 4)
    kept = ring.views[0]
    ring.close()
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=ring.name)
    assert isinstance(kept, np.ndarray)
