"""Episodes recorded from the control loop: each tick of an open episode becomes one dataset frame.

The frame holds the joint state read at the tick, the goal commanded (after the safety envelope; the
held goal while nothing new was written), the raw request, the newest frame of every camera stream,
the goal's source (``policy``/``teleop``/``hold``) and whether an operator had taken over from the
policy. Start/stop/discard requests come from other threads through a deque and are carried out on
the loop's thread, which the recorder's API belongs to. Nothing here waits on the disk: the
recorder's ``add_frame`` never blocks, and a False from it (the writer fell behind) ends the episode
there, counted and logged by the daemon's thread, never silently.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from runtime.control.events import EventLog
from runtime.errors import RecordingError

if TYPE_CHECKING:  # the arm process imports the loop, the loop this module: no ZeroMQ there
    from runtime.arm_control.streams import ObservationStreams

IMAGE_PREFIX = "observation.images."


class Recorder(Protocol):
    """What the loop needs of :class:`runtime.recording.EpisodeRecorder`."""

    def start_episode(self, task: str) -> None: ...
    def add_frame(
        self,
        t_s: float,
        state: Any,
        action: Any,
        action_requested: Any,
        images: Mapping[str, Any],
        source: str,
        intervention: bool,
    ) -> bool: ...
    def end_episode(self) -> bool: ...
    def discard_episode(self) -> bool: ...


def camera_inputs(streams: ObservationStreams | None, inputs: Any) -> dict[str, tuple[int, int]]:
    """Camera name -> (height, width) for every stream that carries uint8 H x W x 3 frames."""
    if streams is None:
        return {}
    specs = {s.name: s for s in inputs}
    out: dict[str, tuple[int, int]] = {}
    for name in streams.names:
        spec = specs.get(name)
        if spec is not None and spec.dtype == "uint8" and len(spec.shape) == 3 and spec.shape[2] == 3:
            camera = name[len(IMAGE_PREFIX) :] if name.startswith(IMAGE_PREFIX) else name
            out[camera] = (int(spec.shape[0]), int(spec.shape[1]))
    return out


class EpisodeTap:
    def __init__(
        self,
        recorder: Recorder,
        streams: ObservationStreams | None,
        cameras: Mapping[str, tuple[int, int]],
        events: EventLog,
    ) -> None:
        self.recorder = recorder
        self.streams = streams
        self.events = events
        # stream input name -> camera name
        self._inputs = {
            (IMAGE_PREFIX + c if streams is not None and IMAGE_PREFIX + c in streams.names else c): c for c in cameras
        }
        self._images: dict[str, np.ndarray] = {}
        self._requests: deque[tuple[str, str, str]] = deque()
        self.active = False
        self.task = ""
        self._t0 = 0.0
        self.frames = 0
        self.counters: Counter[str] = Counter()

    # --- other threads ---------------------------------------------------------------------

    def request(self, op: str, task: str = "", who: str = "") -> None:
        """Queue ``start`` (with ``task``), ``stop`` or ``discard`` for the loop's next tick."""
        self._requests.append((op, task, who))

    # --- the loop ---------------------------------------------------------------------------

    def tick(
        self,
        now: float,
        present: np.ndarray | None,
        goal: np.ndarray | None,
        requested: np.ndarray | None,
        source: str,
        intervention: bool,
    ) -> None:
        while self._requests:
            self._carry_out(*self._requests.popleft(), now)
        if not self.active or present is None or goal is None:
            return
        if not self._fill_images():
            self.counters["frames_without_camera"] += 1
            return
        try:
            ok = self.recorder.add_frame(
                now - self._t0,
                present,
                goal,
                requested if requested is not None else goal,
                self._images,
                source,
                intervention,
            )
        except RecordingError as e:
            self.recorder.end_episode()
            self._ended("refused frame", f"{e}")
            return
        if not ok:
            self._ended("overrun", "the writer fell behind (recording.buffer_frames) or failed")
            return
        self.frames += 1

    def end(self) -> None:
        """End (write) an open episode: shutdown and e-stop keep what was recorded."""
        if self.active:
            self.recorder.end_episode()
            self.active = False
            self.counters["episodes_ended"] += 1
            self.events.emit(logging.INFO, "recording: episode %r ended with %d frames", self.task, self.frames)

    def _carry_out(self, op: str, task: str, who: str, now: float) -> None:
        by = who or "?"
        if op == "start":
            if self.active:
                self.end()
            try:
                self.recorder.start_episode(task)
            except RecordingError as e:
                self.counters["start_failures"] += 1
                self.events.emit(logging.ERROR, "recording: episode %r (asked by %s) not started: %s", task, by, e)
                return
            self.active, self.task, self._t0, self.frames = True, task, now, 0
            self.counters["episodes_started"] += 1
            self.events.emit(logging.INFO, "recording: episode %r started (asked by %s)", task, by)
        elif op == "stop":
            if not self.active:
                self.events.emit(logging.WARNING, "recording: stop asked by %s, but no episode is open", by)
                return
            self.end()
        elif op == "discard":
            if not self.active:
                self.events.emit(logging.WARNING, "recording: discard asked by %s, but no episode is open", by)
                return
            self.recorder.discard_episode()
            self.active = False
            self.counters["episodes_discarded"] += 1
            self.events.emit(logging.INFO, "recording: episode %r discarded (asked by %s)", self.task, by)

    def _fill_images(self) -> bool:
        if self.streams is None:
            return True
        for name, camera in self._inputs.items():
            part = self.streams.latest(name)
            if part is None:
                return False
            self._images[camera] = part.array
        return True

    def _ended(self, why: str, detail: str) -> None:
        self.active = False
        self.counters["episodes_cut"] += 1
        self.counters[f"episodes_cut_{why.replace(' ', '_')}"] += 1
        self.events.emit(
            logging.ERROR,
            "recording: episode %r ended after %d frames: %s (%s)",
            self.task,
            self.frames,
            why,
            detail,
        )

    def status(self) -> dict[str, Any]:
        out = {"active": self.active, "task": self.task, "frames": self.frames, **dict(self.counters)}
        # the recorder's own counters (frames its encoders dropped, deaths, the codec), where it keeps them
        recorder_status = getattr(self.recorder, "status", None)
        if callable(recorder_status):
            status = recorder_status()
            if is_dataclass(status) and not isinstance(status, type):
                out["recorder"] = asdict(status)
        return out
