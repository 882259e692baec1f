"""One camera's video encoder in a process of its own, fed through a shared-memory frame ring.

The encoder runs outside the daemon's interpreter, so encoding neither takes the daemon's CPU time
slices under its interpreter lock nor delays the control loop's goal writes. What crosses:

- the frame ring (:mod:`runtime.recording.shm_ring`): the camera frames' bytes, written by the
  daemon's control thread, read by the encoder;
- the command pipe (daemon -> encoder): small tuples only, ``("begin", episode, path)``,
  ``("frame", slot, pts)``, ``("end", episode)``, ``("abort", episode)``, ``("stop",)``;
- the reply pipe (encoder -> daemon): ``("ready",)``, ``("free", slot)`` once a frame is encoded,
  ``("done", episode, path, frames, stats, encode_s)`` when an episode's file is closed, and
  ``("error", episode, message)`` when an episode could not be encoded.

The per-episode file is encoded exactly as :class:`~runtime.recording.video.EpisodeVideo` does on a
thread (presentation time ``index / fps``); the daemon's writer thread appends it to the camera's
dataset file as before. A thread of the daemon reads the replies: it returns slots to the ring,
hands results to whoever waits for them, and notices the encoder dying (its pipe closes), reports
it and starts a replacement with a fresh ring.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from runtime.errors import RecordingError
from runtime.recording.shm_ring import FrameRing, attach, slot_views
from runtime.recording.stats import ImageStats, Stats
from runtime.recording.video import EpisodeVideo, VideoSettings
from runtime.scheduling import normal_scheduling

log = logging.getLogger(__name__)

# the daemon is threaded: forking it could copy a lock some other thread holds; a spawned child
# starts clean and imports only what it uses
_CONTEXT = multiprocessing.get_context("spawn")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 5.0
NICE = 10


@dataclass(frozen=True)
class EncoderSpec:
    """What the encoder process needs to know (pickled once, at its start)."""

    key: str
    shm_name: str
    slots: int
    height: int
    width: int
    fps: int
    video: VideoSettings
    delay_ms: float = 0.0  # test and bench only: a deliberately slow encoder
    cpus: frozenset[int] | None = None  # where the process and the codec's threads may run


@dataclass(frozen=True)
class Link:
    """One encoder process's ring and command pipe, swapped together when it is replaced: a slot
    taken from one process's ring is only ever announced on that same process's pipe."""

    ring: FrameRing
    commands: Connection


@dataclass(frozen=True)
class EncodedVideo:
    """One camera's finished episode file."""

    path: Path
    frames: int
    stats: Stats
    encode_s: float  # the encoder process's CPU time (all its threads) from the episode's start to its file's end


def _main(spec: EncoderSpec, commands: Connection, replies: Connection) -> None:
    """The encoder process: encode frames of the open episode until told to stop or orphaned."""
    logging.basicConfig(level=logging.WARNING, format=f"encoder {spec.key}: %(levelname)s %(message)s")
    shm = attach(spec.shm_name)
    views = slot_views(shm.buf, spec.slots, spec.height, spec.width)
    episode = -1
    video: EpisodeVideo | None = None
    stats = ImageStats()
    cpu0 = time.process_time()
    if spec.cpus:
        # first, before the codec starts its threads (they inherit it); and every thread already here
        # too (numpy's BLAS pool starts at import, with the creating thread's mask, which on the
        # daemon's main thread includes the control CPU)
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(tid), spec.cpus)
    # the control loop and the policy come first: a starved encoder drops frames, the loop stays on time
    os.nice(NICE)
    replies.send(("ready",))
    try:
        while True:
            try:
                msg = commands.recv()
            except (EOFError, OSError):  # the daemon is gone: nothing left to encode for
                break
            kind = msg[0]
            if kind == "frame":
                slot, pts = msg[1], msg[2]
                if video is not None:
                    try:
                        if pts != video.frames:
                            raise RecordingError(f"frame pts: expected {video.frames}, got {pts}")
                        video.add(views[slot])
                        if video.frames == 1:
                            # SVT-AV1 raised its threads to SCHED_FIFO 99 as the codec opened: below
                            # everything real-time here, as an encoder that may drop frames should be
                            normal_scheduling()
                        stats.add(views[slot])
                        if spec.delay_ms:
                            time.sleep(spec.delay_ms / 1000)
                    except Exception as e:
                        video.abort()
                        video = None
                        replies.send(("error", episode, f"encoding frame {pts}: {e}"))
                replies.send(("free", slot))
            elif kind == "begin":
                if video is not None:
                    video.abort()
                # CPU time, not wall time: SVT-AV1 encodes on threads of its own, behind the add() calls
                episode, video, stats, cpu0 = msg[1], None, ImageStats(), time.process_time()
                try:
                    video = EpisodeVideo(Path(msg[2]), spec.fps, spec.height, spec.width, spec.video)
                except Exception as e:
                    replies.send(("error", episode, f"opening {msg[2]}: {e}"))
            elif kind == "end":
                if msg[1] != episode or video is None:
                    replies.send(("error", msg[1], "no such episode is being encoded"))
                    continue
                done, video = video, None
                try:
                    path = done.finish()
                    result = stats.result() if done.frames else {}
                    encode_s = time.process_time() - cpu0
                    replies.send(("done", episode, str(path), done.frames, result, encode_s))
                except Exception as e:
                    done.abort()
                    replies.send(("error", episode, f"finishing the file: {e}"))
            elif kind == "abort":
                if msg[1] == episode and video is not None:
                    video.abort()
                    video = None
            elif kind == "stop":
                break
    finally:
        if video is not None:
            video.abort()
        del views
        shm.close()


class CameraEncoder:
    """The daemon's handle on one camera's encoder process.

    ``link``, ``send_frame``, ``begin``, ``end`` and ``abort`` belong to the control thread (they
    never wait; read ``link`` once per frame, take the slot from its ring and pass it back to
    ``send_frame``); ``result`` waits, on the writer thread. ``on_death(key, reason)`` is called on the
    reply thread when the process dies unasked.
    """

    def __init__(
        self,
        key: str,
        *,
        slots: int,
        height: int,
        width: int,
        fps: int,
        video: VideoSettings,
        delay_ms: float = 0.0,
        on_death: Callable[[str, str], None] | None = None,
        cpus: frozenset[int] | None = None,
    ) -> None:
        """``cpus``: where the process may run (the daemon passes every CPU but the control loop's, so
        encoding never competes with the loop for its core); None: wherever the caller may."""
        self.key = key
        self._spec_args: dict[str, Any] = {"key": key, "fps": fps, "video": video, "delay_ms": delay_ms, "cpus": cpus}
        self._slots, self._height, self._width = slots, height, width
        self.on_death = on_death
        self._episode = -1  # the episode last begun (read by the reply thread when the process dies)
        self._results: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._retired: list[FrameRing] = []
        self._stopping = False
        # held while a replacement starts: close() waits for it, and no replacement starts after close()
        self._spawning = threading.Lock()
        self.deaths = 0
        self.last_death: str | None = None
        self._ready = threading.Event()
        self._spawn()
        if not self._ready.wait(START_TIMEOUT_S) or self.last_death is not None:
            reason = self.last_death or f"no word from it within {START_TIMEOUT_S} s"
            self.close()
            raise RecordingError(f"recording: the encoder process for {self.key} did not start: {reason}")

    def _spawn(self) -> None:
        ring = FrameRing(self._slots, self._height, self._width)
        spec = EncoderSpec(
            shm_name=ring.name, slots=self._slots, height=self._height, width=self._width, **self._spec_args
        )
        cmd_read, cmd_write = _CONTEXT.Pipe(duplex=False)
        rep_read, rep_write = _CONTEXT.Pipe(duplex=False)
        process = _CONTEXT.Process(
            target=_main, args=(spec, cmd_read, rep_write), name=f"encoder-{self.key}", daemon=True
        )
        process.start()
        # the child's ends live in the child now; closing ours lets EOF tell either side the other died
        cmd_read.close()
        rep_write.close()
        self.process = process
        self.link = Link(ring, cmd_write)  # one assignment: the control thread sees old or new, never a mix
        self._reader = threading.Thread(
            target=self._read, args=(rep_read, ring, process), name=f"encoder-{self.key}-replies", daemon=True
        )
        self._reader.start()

    @property
    def ring(self) -> FrameRing:
        return self.link.ring

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    # -- the control thread's side ---------------------------------------------------------------

    def _send(self, msg: tuple[Any, ...], link: Link | None = None) -> bool:
        try:
            (link or self.link).commands.send(msg)
        except (OSError, ValueError):  # the process died (its pipe is closed); the reply thread reports it
            return False
        return True

    def begin(self, episode: int, path: Path) -> None:
        self._episode = episode
        self._send(("begin", episode, str(path)))

    def send_frame(self, slot: int, pts: int, link: Link | None = None) -> bool:
        """Announce frame ``pts`` in ``slot`` of ``link``'s ring (default: the current one); False
        when that process is gone (give the slot back then)."""
        return self._send(("frame", slot, pts), link)

    def end(self, episode: int) -> None:
        self._send(("end", episode))

    def abort(self, episode: int) -> None:
        self._send(("abort", episode))

    # -- the writer thread's side ----------------------------------------------------------------

    def result(self, episode: int, timeout_s: float) -> EncodedVideo:
        """Wait for ``episode``'s file; raises RecordingError naming the camera if it cannot come."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RecordingError(f"{self.key}: the encoder gave no file for episode {episode} within {timeout_s} s")
            try:
                msg = self._results.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            kind = msg[0]
            if kind == "died" and msg[2] == episode:
                raise RecordingError(f"{self.key}: {msg[1]}")
            if kind in ("done", "error") and msg[1] == episode:
                if kind == "done":
                    return EncodedVideo(Path(msg[2]), int(msg[3]), msg[4], float(msg[5]))
                raise RecordingError(f"{self.key}: {msg[2]}")
            # a reply about an earlier episode (one that failed before its end was awaited): stale

    # -- the reply thread ------------------------------------------------------------------------

    def _read(self, replies: Connection, ring: FrameRing, process: Any) -> None:
        while True:
            try:
                msg = replies.recv()
            except (EOFError, OSError):
                break
            if msg[0] == "free":
                ring.give_back(msg[1])
            elif msg[0] == "ready":
                self._ready.set()
            else:
                self._results.put(msg)
        replies.close()
        if self._stopping:
            return
        process.join(1.0)
        reason = f"the encoder process (pid {process.pid}) exited with code {process.exitcode}"
        self.deaths += 1
        self.last_death = reason
        log.error("recording: %s: %s; its episode is dropped, a new encoder is started", self.key, reason)
        self._results.put(("died", reason, self._episode))
        if self.on_death is not None:
            self.on_death(self.key, reason)
        if not self._ready.is_set():  # it never started: do not loop on a process that cannot start
            self._ready.set()
            return
        with self._spawning:
            if self._stopping:
                return
            # frames in flight were in the dead process's slots: a fresh ring, the old one closed at the end
            self._retired.append(ring)
            try:
                self._spawn()
            except Exception:  # no replacement: the next episode's file never comes, and says so
                log.exception("recording: %s: starting a replacement encoder failed", self.key)

    def close(self) -> None:
        """Stop the process (asking first, then terminating), join it and remove the segments."""
        with self._spawning:  # a replacement being started is started whole first, then stopped here
            self._stopping = True
        self._send(("stop",))
        self.process.join(STOP_TIMEOUT_S)
        if self.process.is_alive():
            log.warning("recording: the %s encoder did not stop within %s s; terminating it", self.key, STOP_TIMEOUT_S)
            self.process.terminate()
            self.process.join(STOP_TIMEOUT_S)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
        self.link.commands.close()
        self._reader.join(STOP_TIMEOUT_S)
        self.process.close()
        for ring in [*self._retired, self.link.ring]:
            ring.close()
        self._retired = []


def cpu_count() -> int:
    """CPUs this process may run on (its affinity, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
