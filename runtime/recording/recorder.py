"""The episode recorder the control loop calls from its real-time thread.

Nothing the control thread calls waits on the disk: ``add_frame`` copies the frame into a free
preallocated slot and queues it; ``start_episode``, ``end_episode`` and ``discard_episode`` queue a
command. The recorder's own writer thread takes slots and commands in order and does the encoding and
writing (:class:`~runtime.recording.writer.DatasetWriter`). When the writer falls so far behind that no
slot is free, ``add_frame`` returns False, the episode is ended there with the frames it has (written
whole, like any other), and the overrun is counted and logged by the writer thread. The control
thread never logs, never blocks, never allocates more than a small command object.

With cameras, :meth:`EpisodeRecorder.create` encodes each camera in a process of its own
(:mod:`runtime.recording.encoder_process`): ``add_frame`` copies each image straight into that
camera's shared-memory ring and sends the slot's index; the writer thread keeps the joint columns,
the tables and the metadata, and appends each finished camera file. When a camera's ring has no free
slot, the tick is left out (for every camera, so rows and videos stay frame for frame) and counted
per camera and per episode; the episode goes on, and its drop rate is written in its metadata row
(``recording/*`` columns) and logged when over ``[recording] max_drop_rate``.

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
import shutil
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from runtime.errors import ConfigError, RecordingError
from runtime.recording.codec_choice import choose_video
from runtime.recording.config import RecordingConfig
from runtime.recording.encoder_process import CameraEncoder, EncodedVideo, Link
from runtime.recording.features import RecordingFeatures
from runtime.recording.frames import FrameSlot, fill_slot
from runtime.recording.writer import STAGING_DIR, DatasetWriter, EpisodeDrops, EpisodeSink

log = logging.getLogger(__name__)

EndReason = Literal["requested", "overrun", "closed", "failed"]
RESULT_TIMEOUT_S = 120.0  # an encoder this far behind an episode's end is stuck: the episode fails


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
    #: ticks left out because a camera's encoder was behind (its ring full), since the start
    encoder_drops: int = 0
    #: camera column -> ticks it had no free slot for, since the start
    encoder_drops_by_camera: dict[str, int] = field(default_factory=dict)
    #: the open (else the last) episode's ticks left out / ticks seen
    episode_drop_rate: float = 0.0
    episodes_over_drop_rate: int = 0
    encoder_deaths: int = 0
    codec: str = ""
    #: camera column -> its encoder's CPU time per frame over the last episode written (ms)
    encode_ms_per_frame: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Start:
    generation: int
    task: str


@dataclass(frozen=True)
class _End:
    generation: int
    reason: EndReason
    drops: EpisodeDrops | None = None


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

    ``encoders`` (camera name -> its encoder process, made by :meth:`create`): the images go to
    them instead, the slots hold the joint columns only, and ``sink`` must take the finished files
    (``attach_encoded``); ``staging_dir`` is where the encoders write each episode's files.
    """

    def __init__(
        self,
        sink: EpisodeSink,
        features: RecordingFeatures,
        *,
        buffer_frames: int = 90,
        encoders: Mapping[str, CameraEncoder] | None = None,
        staging_dir: Path | None = None,
        max_drop_rate: float = 0.05,
        codec: str = "",
    ) -> None:
        if isinstance(buffer_frames, bool) or not isinstance(buffer_frames, int) or buffer_frames < 2:
            raise ConfigError(f"recording.buffer_frames: expected an integer >= 2, got {buffer_frames!r}")
        self._encoders = dict(encoders or {})
        if self._encoders:
            if sorted(self._encoders) != sorted(features.cameras):
                want, got = sorted(features.cameras), sorted(self._encoders)
                raise ConfigError(f"recording encoders: expected one per camera {want}, got {got}")
            if staging_dir is None or not callable(getattr(sink, "attach_encoded", None)):
                raise ConfigError("recording encoders: need a staging_dir and a sink with attach_encoded")
        self._staging = staging_dir
        self._keys = {cam: features.image_key(cam) for cam in features.cameras}
        self._cams = {key: cam for cam, key in self._keys.items()}
        self._max_drop_rate = max_drop_rate
        self._codec = codec
        self._sink = sink
        self._features = features
        self._slots = buffer_frames
        with_images = not self._encoders
        self._free: deque[FrameSlot] = deque(FrameSlot(features, images=with_images) for _ in range(buffer_frames))
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
        self._episodes_over_drop_rate = 0
        self._encode_ms: dict[str, float] = {}
        # written by the reply threads of the encoders
        self._encoder_deaths = 0
        # written by the control thread
        self._overruns = 0
        self._frames_dropped = 0
        self._ep_frames = 0  # ticks of the open episode sent to the encoders
        self._ep_dropped = 0  # ticks of the open episode left out (an encoder behind)
        self._ep_drops: dict[str, int] = dict.fromkeys(self._keys.values(), 0)
        self._encoder_drops = 0
        self._encoder_drops_by_camera: dict[str, int] = dict.fromkeys(self._keys.values(), 0)
        for encoder in self._encoders.values():
            encoder.on_death = self._encoder_died
        self._thread = threading.Thread(target=self._run, name="episode-writer", daemon=True)
        self._thread.start()

    @classmethod
    def create(
        cls, config: RecordingConfig, features: RecordingFeatures, *, cpus: frozenset[int] | None = None
    ) -> EpisodeRecorder:
        """A recorder writing to ``config.dataset_dir`` (opened here, on the calling thread);
        ``cpus``: the CPUs its encoder processes may run on (None: the caller's)."""
        if not config.enabled:
            raise ConfigError("recording.dataset_dir: empty, recording is off; name the dataset folder")
        if not features.cameras:
            writer = DatasetWriter(config.dataset_dir, features, video=config.video)
            return cls(writer, features, buffer_frames=config.buffer_frames)
        video = choose_video(config, features)
        writer = DatasetWriter(config.dataset_dir, features, video=video, encode_video=False)
        encoders: dict[str, CameraEncoder] = {}
        try:
            for cam, (height, width) in features.cameras.items():
                encoders[cam] = CameraEncoder(
                    features.image_key(cam),
                    slots=config.camera_queue_frames,
                    height=height,
                    width=width,
                    fps=features.fps,
                    video=video,
                    delay_ms=config.encoder_delay_ms,
                    cpus=cpus,
                )
        except BaseException:
            for encoder in encoders.values():
                encoder.close()
            writer.close()
            raise
        return cls(
            writer,
            features,
            buffer_frames=config.buffer_frames,
            encoders=encoders,
            staging_dir=writer.root / STAGING_DIR,
            max_drop_rate=config.max_drop_rate,
            codec=video.codec,
        )

    # -- the control thread's side ---------------------------------------------------------------

    def start_episode(self, task: str) -> None:
        """Begin an episode of ``task``; an episode still open is ended (written) first."""
        self._check_open_for_use()
        if not isinstance(task, str) or not task.strip():
            raise RecordingError(f"start_episode: task must be the task's text, got {task!r}")
        if self._open:
            self._end("requested")
        self._generation += 1
        self._open = True
        self._ep_frames = self._ep_dropped = 0
        self._ep_drops = dict.fromkeys(self._keys.values(), 0)
        for cam, encoder in self._encoders.items():
            encoder.begin(self._generation, self._episode_file(self._generation, cam))
        self._inbox.put(_Start(self._generation, task))

    def _episode_file(self, generation: int, cam: str) -> Path:
        assert self._staging is not None
        # "episode-*": the writer clears such leftovers of a crash when it opens the dataset
        return self._staging / f"episode-g{generation:06d}" / f"{self._keys[cam]}.mp4"

    def _end(self, reason: EndReason) -> None:
        """Queue the open episode's end (the control thread's side of it)."""
        self._open = False
        drops: EpisodeDrops | None = None
        if self._encoders:
            for encoder in self._encoders.values():
                encoder.end(self._generation)
            seen = self._ep_frames + self._ep_dropped
            rate = self._ep_dropped / seen if seen else 0.0
            drops = EpisodeDrops(dict(self._ep_drops), self._ep_dropped, rate, rate > self._max_drop_rate)
        self._inbox.put(_End(self._generation, reason, drops))

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

        True: the frame is queued, or (cameras in encoder processes) left out because a camera's
        encoder was behind: counted per camera, the episode goes on. False: it was not recorded,
        because the writer fell behind (no free slot: this call ended the episode with the frames
        before it and counted an overrun), because writing the episode failed or its encoder died,
        or because no episode is open. A frame that does not match the
        features raises :class:`~runtime.errors.RecordingInputError` naming the field.
        """
        if not self._open:
            self._frames_dropped += 1
            return False
        if self._failed_generation == self._generation:
            self._frames_dropped += 1
            self._end("failed")  # the writer drops it (already did, or does when an encoder died)
            return False
        try:
            slot = self._free.popleft()
        except IndexError:
            self._overruns += 1
            self._frames_dropped += 1
            self._end("overrun")
            return False
        try:
            chosen = fill_slot(slot, self._features, t_s, state, action, action_requested, images, source, intervention)
        except Exception:
            self._free.append(slot)
            raise
        if self._encoders and not self._to_encoders(chosen):
            self._free.append(slot)
            return True
        self._inbox.put(slot)
        return True

    def _to_encoders(self, images: Mapping[str, npt.NDArray[np.uint8]]) -> bool:
        """Copy the tick's images into every camera's ring and send the slots; False (the tick is
        left out, counted) when any camera has no free slot."""
        taken: list[tuple[CameraEncoder, Link, int]] = []
        short = False
        for cam, encoder in self._encoders.items():
            link = encoder.link  # once: a replacement encoder swaps in a new ring and pipe together
            index = link.ring.take()
            if index is None:
                key = self._keys[cam]
                self._ep_drops[key] += 1
                self._encoder_drops_by_camera[key] += 1
                short = True
            else:
                taken.append((encoder, link, index))
        if short:
            for _, link, index in taken:
                link.ring.give_back(index)
            self._ep_dropped += 1
            self._encoder_drops += 1
            return False
        for encoder, link, index in taken:
            np.copyto(link.ring.views[index], images[self._cam_of(encoder)])
            if not encoder.send_frame(index, self._ep_frames, link):
                link.ring.give_back(index)  # that process is gone; its reply thread fails the episode
        self._ep_frames += 1
        return True

    def _cam_of(self, encoder: CameraEncoder) -> str:
        return self._cams[encoder.key]

    def end_episode(self) -> bool:
        """Write the open episode; False when none was open (for instance an overrun ended it)."""
        if not self._open:
            return False
        self._end("requested")
        return True

    def discard_episode(self) -> bool:
        """Drop the open episode, nothing of it is kept; False when none was open."""
        if not self._open:
            return False
        self._open = False
        for encoder in self._encoders.values():
            encoder.abort(self._generation)
        self._inbox.put(_Discard(self._generation))
        return True

    @property
    def recording(self) -> bool:
        return self._open and self._failed_generation != self._generation

    def status(self) -> RecorderStatus:
        seen = self._ep_frames + self._ep_dropped
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
            encoder_drops=self._encoder_drops,
            encoder_drops_by_camera=dict(self._encoder_drops_by_camera),
            episode_drop_rate=self._ep_dropped / seen if seen else 0.0,
            episodes_over_drop_rate=self._episodes_over_drop_rate,
            encoder_deaths=self._encoder_deaths,
            codec=self._codec,
            encode_ms_per_frame=dict(self._encode_ms),
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
            self._end("closed")
        self._closed = True
        self._inbox.put(_Close())
        self._thread.join(timeout_s)
        # after the writer thread: it may have waited on the encoders for the last episode's files
        for encoder in self._encoders.values():
            try:
                encoder.close()
            except Exception:
                log.exception("recording: stopping the %s encoder failed", encoder.key)
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
                self._clear_episode_files(item.generation)
                return writing  # that episode already failed
            if item.reason == "overrun":
                log.warning(
                    "recording buffer overran (all %d frame slots waited for the disk): episode ended there",
                    self._slots,
                )
            try:
                if self._encoders:
                    self._attach_encoded(item)
                summary = self._sink.finish_episode()
            except Exception as e:
                self._fail(item.generation, "writing the episode", e)
                return -1
            finally:
                self._clear_episode_files(item.generation)
            if summary is not None and item.drops is not None and item.drops.over_limit:
                self._episodes_over_drop_rate += 1
                d = item.drops
                log.warning(
                    "recording: episode %d dropped %d of %d ticks (%.1f %% > recording.max_drop_rate %.1f %%), "
                    "per camera %s: the encoders did not keep up",
                    summary.episode_index,
                    d.ticks,
                    d.ticks + summary.frames,
                    100 * d.rate,
                    100 * self._max_drop_rate,
                    d.per_camera,
                )
            if summary is not None:
                self._episodes_written += 1
                self._frames_written += summary.frames
            return -1
        if isinstance(item, _Discard):
            if writing != item.generation:
                return writing
            self._sink.abort_episode()
            self._clear_episode_files(item.generation)
            self._episodes_discarded += 1
            log.info("episode discarded")
            return -1
        if isinstance(item, _Flush):
            item.done.set()
        return writing

    def _attach_encoded(self, item: _End) -> None:
        """Wait for every camera's file of the episode, then hand them to the sink."""
        videos: dict[str, EncodedVideo] = {}
        error: Exception | None = None
        for encoder in self._encoders.values():
            try:
                videos[encoder.key] = encoder.result(item.generation, RESULT_TIMEOUT_S)
            except RecordingError as e:  # go on: the other files must be collected (and removed) too
                error = error or e
        if error is not None:
            raise error
        attach = getattr(self._sink, "attach_encoded")  # noqa: B009 (checked in __init__)
        attach(videos, item.drops)
        for key, video in videos.items():
            if video.frames:
                self._encode_ms[key] = round(1000 * video.encode_s / video.frames, 3)

    def _clear_episode_files(self, generation: int) -> None:
        if self._staging is not None:
            shutil.rmtree(self._staging / f"episode-g{generation:06d}", ignore_errors=True)

    def _encoder_died(self, key: str, reason: str) -> None:
        """On an encoder's reply thread: fail the open episode; its replacement takes the next."""
        self._encoder_deaths += 1
        self._last_error = f"{key}: {reason}"
        if self._open:
            self._failed_generation = self._generation

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
