"""The episode recorder the control loop calls from its real-time thread.

Nothing the control thread calls waits on the disk: ``add_frame`` copies the frame into a free
preallocated slot and queues it; ``start_episode``, ``end_episode`` and ``discard_episode`` queue a
command. The recorder's own writer thread takes slots and commands in order and does the encoding and
writing (:class:`~runtime.recording.writer.DatasetWriter`). When the writer falls so far behind that no
slot is free, ``add_frame`` returns False, the episode is ended there with the frames it has (written
whole, like any other), and the overrun is counted and logged by the writer thread. The control
thread never logs, never blocks, never allocates more than a small command object.

All of ``start_episode``/``add_frame``/``end_episode``/``discard_episode`` belong to one thread (the
control loop); ``status`` may be read from any thread; ``flush`` and ``close`` wait, so call them off
the control thread.

Example::

    recorder = EpisodeRecorder.create(RecordingConfig(dataset_dir="/data/pick"), features)
    recorder.start_episode("pick up the cube")
    ok = recorder.add_frame(t_s, state, action, requested, {"front": rgb}, "teleop", True)
    recorder.end_episode()
    recorder.close()
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from runtime.errors import ConfigError, RecordingError
from runtime.recording.config import RecordingConfig
from runtime.recording.features import RecordingFeatures
from runtime.recording.frames import FrameSlot, fill_slot
from runtime.recording.writer import DatasetWriter, EpisodeSink

log = logging.getLogger(__name__)

EndReason = Literal["requested", "overrun", "closed"]


@dataclass(frozen=True)
class RecorderStatus:
    """Counters since the recorder was made; ``queued_frames`` are waiting for the writer."""

    recording: bool
    episodes_written: int
    episodes_discarded: int
    episodes_failed: int
    overruns: int
    frames_written: int
    frames_dropped: int
    queued_frames: int
    last_error: str | None


@dataclass(frozen=True)
class _Start:
    generation: int
    task: str


@dataclass(frozen=True)
class _End:
    generation: int
    reason: EndReason


@dataclass(frozen=True)
class _Discard:
    generation: int


@dataclass(frozen=True)
class _Flush:
    done: threading.Event


class _Close:
    pass


_Item = FrameSlot | _Start | _End | _Discard | _Flush | _Close


class EpisodeRecorder:
    """Records episodes through ``sink`` on a writer thread of its own.

    ``buffer_frames`` is how many frames may wait for the writer (at 30 Hz, 90 frames is 3 s of a
    stalled disk); each slot holds one frame of every camera, so memory is
    ``buffer_frames x sum(H x W x 3)`` bytes, taken once here.
    """

    def __init__(self, sink: EpisodeSink, features: RecordingFeatures, *, buffer_frames: int = 90) -> None:
        if isinstance(buffer_frames, bool) or not isinstance(buffer_frames, int) or buffer_frames < 2:
            raise ConfigError(f"recording.buffer_frames: expected an integer >= 2, got {buffer_frames!r}")
        self._sink = sink
        self._features = features
        self._slots = buffer_frames
        self._free: deque[FrameSlot] = deque(FrameSlot(features) for _ in range(buffer_frames))
        self._inbox: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        # control-thread state
        self._generation = 0
        self._open = False
        self._closed = False
        # written by the writer thread, read anywhere (single ints and a str: no lock needed)
        self._failed_generation = -1
        self._episodes_written = 0
        self._episodes_discarded = 0
        self._episodes_failed = 0
        self._frames_written = 0
        self._last_error: str | None = None
        # written by the control thread
        self._overruns = 0
        self._frames_dropped = 0
        self._thread = threading.Thread(target=self._run, name="episode-writer", daemon=True)
        self._thread.start()

    @classmethod
    def create(cls, config: RecordingConfig, features: RecordingFeatures) -> EpisodeRecorder:
        """A recorder writing to ``config.dataset_dir`` (opened here, on the calling thread)."""
        if not config.enabled:
            raise ConfigError("recording.dataset_dir: empty, recording is off; name the dataset folder")
        writer = DatasetWriter(config.dataset_dir, features, video=config.video)
        return cls(writer, features, buffer_frames=config.buffer_frames)

    # -- the control thread's side ---------------------------------------------------------------

    def start_episode(self, task: str) -> None:
        """Begin an episode of ``task``; an episode still open is ended (written) first."""
        self._check_open_for_use()
        if not isinstance(task, str) or not task.strip():
            raise RecordingError(f"start_episode: task must be the task's text, got {task!r}")
        if self._open:
            self._inbox.put(_End(self._generation, "requested"))
        self._generation += 1
        self._open = True
        self._inbox.put(_Start(self._generation, task))

    def add_frame(
        self,
        t_s: float,
        state: npt.ArrayLike,
        action: npt.ArrayLike,
        action_requested: npt.ArrayLike,
        images: Mapping[str, npt.NDArray[np.uint8]],
        source: str,
        intervention: bool,
    ) -> bool:
        """Queue one frame of the open episode; never blocks.

        True: the frame is queued. False: it was not recorded, because the writer fell behind (no free
        slot: this call ended the episode with the frames before it and counted an overrun), because
        writing the episode failed, or because no episode is open. A frame that does not match the
        features raises :class:`~runtime.errors.RecordingInputError` naming the field.
        """
        if not self._open:
            self._frames_dropped += 1
            return False
        if self._failed_generation == self._generation:
            self._open = False
            self._frames_dropped += 1
            return False
        try:
            slot = self._free.popleft()
        except IndexError:
            self._overruns += 1
            self._frames_dropped += 1
            self._open = False
            self._inbox.put(_End(self._generation, "overrun"))
            return False
        try:
            fill_slot(slot, self._features, t_s, state, action, action_requested, images, source, intervention)
        except Exception:
            self._free.append(slot)
            raise
        self._inbox.put(slot)
        return True

    def end_episode(self) -> bool:
        """Write the open episode; False when none was open (for instance an overrun ended it)."""
        if not self._open:
            return False
        self._open = False
        self._inbox.put(_End(self._generation, "requested"))
        return True

    def discard_episode(self) -> bool:
        """Drop the open episode, nothing of it is kept; False when none was open."""
        if not self._open:
            return False
        self._open = False
        self._inbox.put(_Discard(self._generation))
        return True

    @property
    def recording(self) -> bool:
        return self._open and self._failed_generation != self._generation

    def status(self) -> RecorderStatus:
        return RecorderStatus(
            recording=self.recording,
            episodes_written=self._episodes_written,
            episodes_discarded=self._episodes_discarded,
            episodes_failed=self._episodes_failed,
            overruns=self._overruns,
            frames_written=self._frames_written,
            frames_dropped=self._frames_dropped,
            queued_frames=self._slots - len(self._free),
            last_error=self._last_error,
        )

    # -- waiting calls, for other threads --------------------------------------------------------

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until everything queued so far is written; False on timeout."""
        done = threading.Event()
        self._inbox.put(_Flush(done))
        return done.wait(timeout_s)

    def close(self, timeout_s: float = 60.0) -> None:
        """End (write) an open episode, stop the writer thread and close the sink."""
        if self._closed:
            return
        if self._open:
            self._open = False
            self._inbox.put(_End(self._generation, "closed"))
        self._closed = True
        self._inbox.put(_Close())
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise RecordingError(f"the episode writer did not finish within {timeout_s} s (disk stalled?)")

    def __enter__(self) -> EpisodeRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open_for_use(self) -> None:
        if self._closed:
            raise RecordingError("the recorder is closed")

    # -- the writer thread -----------------------------------------------------------------------

    def _run(self) -> None:
        writing = -1  # generation of the episode the sink has open, -1: none
        while True:
            item = self._inbox.get()
            if isinstance(item, _Close):
                self._shut_down(writing)
                return
            try:
                writing = self._handle(item, writing)
            except Exception as e:  # the thread must outlive any one failure, or slots never come back
                self._fail(writing, f"handling {type(item).__name__}", e)
                writing = -1

    def _handle(self, item: _Item, writing: int) -> int:
        """Do one queued item; return the generation the sink has open afterwards (-1: none)."""
        if isinstance(item, FrameSlot):
            try:
                if writing >= 0:
                    self._sink.write_frame(item)
            except Exception as e:
                self._fail(writing, "writing a frame", e)
                return -1
            finally:
                self._free.append(item)
            return writing
        if isinstance(item, _Start):
            try:
                index = self._sink.begin_episode(item.task)
            except Exception as e:
                self._fail(item.generation, "starting an episode", e)
                return -1
            log.info("recording episode %d: %r", index, item.task)
            return item.generation
        if isinstance(item, _End):
            if writing != item.generation:
                return writing  # that episode already failed
            if item.reason == "overrun":
                log.warning(
                    "recording buffer overran (all %d frame slots waited for the disk): episode ended there",
                    self._slots,
                )
            try:
                summary = self._sink.finish_episode()
            except Exception as e:
                self._fail(item.generation, "writing the episode", e)
                return -1
            if summary is not None:
                self._episodes_written += 1
                self._frames_written += summary.frames
            return -1
        if isinstance(item, _Discard):
            if writing != item.generation:
                return writing
            self._sink.abort_episode()
            self._episodes_discarded += 1
            log.info("episode discarded")
            return -1
        if isinstance(item, _Flush):
            item.done.set()
        return writing

    def _shut_down(self, writing: int) -> None:
        try:
            if writing >= 0:  # only reached if the episode's _End never came: drop what is half-done
                self._sink.abort_episode()
            self._sink.close()
        except Exception:
            log.exception("closing the dataset writer failed")

    def _fail(self, generation: int, what: str, error: Exception) -> None:
        log.error("recording failed while %s: %s; the episode is dropped", what, error, exc_info=error)
        self._last_error = f"{what}: {error}"
        self._episodes_failed += 1
        self._failed_generation = generation
        try:
            self._sink.abort_episode()
        except Exception:
            log.exception("cleaning up the failed episode failed too")
