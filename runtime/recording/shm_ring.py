"""A ring of preallocated camera-frame slots in shared memory, between the daemon and one encoder
process.

One segment per camera holds ``slots`` frames of H x W x 3 bytes back to back (slot ``i`` at byte
``i x H x W x 3``). The daemon owns the segment (creates it, unlinks it on close); the encoder
process attaches to it by name. Which slots are free is the daemon's business alone: the control
thread takes a free index, copies the frame in and sends the index on the control channel; the
encoder sends the index back once the frame is encoded. So no frame byte is ever pickled or queued,
and a full ring means a dropped frame, never a wait.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections import deque
from multiprocessing import resource_tracker, shared_memory

import numpy as np
import numpy.typing as npt

from runtime.errors import ConfigError, RecordingError

log = logging.getLogger(__name__)

NAME_PREFIX = "lrr-frames-"  # every segment this module makes starts so (tests look for leaks by it)


def _frame_bytes(height: int, width: int) -> int:
    return height * width * 3


def slot_views(buf: memoryview | None, slots: int, height: int, width: int) -> list[npt.NDArray[np.uint8]]:
    """One H x W x 3 uint8 array per slot, viewing ``buf`` (no copy)."""
    if buf is None:
        raise RecordingError("shared memory: the segment is closed")
    size = _frame_bytes(height, width)
    whole = np.ndarray((slots, height, width, 3), dtype=np.uint8, buffer=buf[: slots * size])
    return [whole[i] for i in range(slots)]


class FrameRing:
    """The daemon's side: the segment, its slot views and the free list.

    ``take`` (control thread) and ``give_back`` (the thread reading the encoder's replies) may run
    on different threads: ``deque.popleft``/``append`` are atomic, so no lock is held on the
    control thread.
    """

    def __init__(self, slots: int, height: int, width: int) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 2:
            raise ConfigError(f"recording.camera_queue_frames: expected an integer >= 2, got {slots!r}")
        self.slots = slots
        self.height = height
        self.width = width
        self._shm: shared_memory.SharedMemory | None = shared_memory.SharedMemory(
            name=NAME_PREFIX + secrets.token_hex(6), create=True, size=slots * _frame_bytes(height, width)
        )
        self.name = self._shm.name
        self.views = slot_views(self._shm.buf, slots, height, width)
        self._free: deque[int] = deque(range(slots))

    def take(self) -> int | None:
        """A free slot's index, or None when every slot waits for the encoder."""
        try:
            return self._free.popleft()
        except IndexError:
            return None

    def give_back(self, index: int) -> None:
        self._free.append(index)

    def reset(self) -> None:
        """Every slot free again (after the encoder that held some was replaced)."""
        self._free.clear()
        self._free.extend(range(self.slots))

    @property
    def in_use(self) -> int:
        return self.slots - len(self._free)

    def close(self) -> None:
        """Release the views and remove the segment; safe to call twice."""
        shm, self._shm = self._shm, None
        if shm is None:
            return
        self.views = []
        try:
            shm.close()
        except BufferError:  # a view still alive somewhere: the mapping goes with the process
            log.debug("shared memory %s still viewed at close", self.name)
        with contextlib.suppress(FileNotFoundError):  # already gone: nothing to remove
            shm.unlink()


def attach(name: str) -> shared_memory.SharedMemory:
    """Open the daemon's segment from the encoder process without registering it for clean-up.

    Python 3.11's resource tracker would otherwise count the segment as the child's and unlink it
    (with a "leaked" warning) when the child exits, under the daemon's feet; the daemon owns it.
    """
    register = resource_tracker.register
    resource_tracker.register = lambda *a, **k: None
    try:
        return shared_memory.SharedMemory(name=name, create=False)
    finally:
        resource_tracker.register = register
