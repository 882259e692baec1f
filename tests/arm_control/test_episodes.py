"""Episodes recorded from the loop, on a stand-in recorder and stand-in camera streams: which
streams are cameras, requests carried out at the next tick in order, each frame's fields, a frame
without a camera, a refused frame and a writer that fell behind ending the episode, every event's
words, the counters and status."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from runtime.arm_control.episodes import EpisodeTap, camera_inputs
from runtime.bundle.manifest import TensorSpec
from runtime.control.events import EventLog
from runtime.errors import RecordingError
from runtime.protocol.stream import StreamPart

PRESENT = np.array([1.0, 2.0])
GOAL = np.array([1.5, 2.5])
REQUESTED = np.array([9.0, 2.5])


class Recorder:
    """Logs every call; ``start_error`` / ``frame_error`` raise, ``accept`` is add_frame's answer."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.start_error: Exception | None = None
        self.frame_error: Exception | None = None
        self.accept = True

    def start_episode(self, task: str) -> None:
        self.calls.append(("start", task))
        if self.start_error is not None:
            raise self.start_error

    def add_frame(
        self, t_s: float, state: Any, action: Any, action_requested: Any, images: Any, source: str, intervention: bool
    ) -> bool:
        self.calls.append(("frame", t_s, state, action, action_requested, dict(images), source, intervention))
        if self.frame_error is not None:
            raise self.frame_error
        return self.accept

    def end_episode(self) -> bool:
        self.calls.append(("end",))
        return True

    def discard_episode(self) -> bool:
        self.calls.append(("discard",))
        return True


class Streams:
    """Camera streams by name; ``parts`` holds the newest frame of each (absent: none yet)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.parts: dict[str, np.ndarray] = {}
        self.asked: list[str] = []

    def latest(self, name: str) -> StreamPart | None:
        self.asked.append(name)
        array = self.parts.get(name)
        return None if array is None else StreamPart(name, 1, 0.0, array)


def texts(events: EventLog) -> list[tuple[int, str]]:
    return [(e.level, e.text()) for e in events.drain()]


def tap(
    streams: Streams | None = None, cameras: dict[str, tuple[int, int]] | None = None
) -> tuple[EpisodeTap, Recorder, EventLog]:
    recorder, events = Recorder(), EventLog()
    return EpisodeTap(recorder, streams, cameras or {}, events), recorder, events  # type: ignore[arg-type]


def frame(t: EpisodeTap, now: float, **kw: Any) -> None:
    args: dict[str, Any] = {"present": PRESENT, "goal": GOAL, "requested": REQUESTED, "source": "policy"}
    args.update(kw)
    t.tick(now, args["present"], args["goal"], args["requested"], args["source"], kw.get("intervention", False))


# --- which streams are cameras -------------------------------------------------------------


def test_without_streams_there_are_no_cameras() -> None:
    assert camera_inputs(None, [TensorSpec("observation.images.front", "uint8", (4, 6, 3))]) == {}


def test_cameras_are_the_streams_of_uint8_colour_frames_named_without_the_prefix() -> None:
    streams = Streams(("observation.images.front", "wrist", "observation.images.depth", "gray", "flat", "nothing"))
    inputs = [
        TensorSpec("observation.images.front", "uint8", (480, 640, 3)),
        TensorSpec("wrist", "uint8", (240, 320, 3)),
        TensorSpec("observation.images.depth", "float32", (480, 640, 3)),
        TensorSpec("gray", "uint8", (480, 640, 1)),
        TensorSpec("flat", "uint8", (480, 3)),
        TensorSpec("observation.state", "float32", (6,)),
    ]
    got = camera_inputs(streams, inputs)  # type: ignore[arg-type]
    assert got == {"front": (480, 640), "wrist": (240, 320)}
    assert all(type(v) is int for hw in got.values() for v in hw)


# --- a new tap and its requests ------------------------------------------------------------


def test_a_new_tap_records_nothing_until_asked() -> None:
    t, recorder, events = tap()
    assert (t.active, t.task, t.frames, dict(t.counters)) == (False, "", 0, {})
    frame(t, 5.0)
    assert recorder.calls == [] and texts(events) == []
    assert t.status() == {"active": False, "task": "", "frames": 0}


def test_a_start_is_carried_out_at_the_next_tick_and_its_first_frame_is_at_zero() -> None:
    t, recorder, events = tap()
    t.request("start", "pick the cube", "ana")
    assert recorder.calls == [] and not t.active
    frame(t, 10.0)
    frame(t, 10.25, source="teleop", intervention=True)
    assert recorder.calls == [
        ("start", "pick the cube"),
        ("frame", 0.0, PRESENT, GOAL, REQUESTED, {}, "policy", False),
        ("frame", 0.25, PRESENT, GOAL, REQUESTED, {}, "teleop", True),
    ]
    assert (t.active, t.task, t.frames) == (True, "pick the cube", 2)
    assert texts(events) == [(logging.INFO, "recording: episode 'pick the cube' started (asked by ana)")]
    assert t.status() == {"active": True, "task": "pick the cube", "frames": 2, "episodes_started": 1}


def test_a_request_without_a_task_or_a_name() -> None:
    t, recorder, events = tap()
    t.request("start")
    frame(t, 1.0, goal=None)
    assert recorder.calls == [("start", "")]
    assert texts(events) == [(logging.INFO, "recording: episode '' started (asked by ?)")]


def test_a_tick_without_a_reading_or_a_goal_adds_no_frame() -> None:
    t, recorder, _ = tap()
    t.request("start", "x", "ana")
    frame(t, 1.0, present=None)
    frame(t, 2.0, goal=None)
    assert recorder.calls == [("start", "x")] and t.frames == 0


def test_a_frame_without_a_request_carries_the_goal_as_requested() -> None:
    t, recorder, _ = tap()
    t.request("start", "x", "ana")
    frame(t, 1.0, requested=None)
    assert recorder.calls[1] == ("frame", 0.0, PRESENT, GOAL, GOAL, {}, "policy", False)


def test_requests_are_carried_out_in_order_within_one_tick() -> None:
    t, recorder, events = tap()
    t.request("start", "one", "ana")
    t.request("stop", who="ana")
    t.request("start", "two", "bo")
    frame(t, 3.0)
    assert recorder.calls == [
        ("start", "one"),
        ("end",),
        ("start", "two"),
        ("frame", 0.0, PRESENT, GOAL, REQUESTED, {}, "policy", False),
    ]
    assert texts(events) == [
        (logging.INFO, "recording: episode 'one' started (asked by ana)"),
        (logging.INFO, "recording: episode 'one' ended with 0 frames"),
        (logging.INFO, "recording: episode 'two' started (asked by bo)"),
    ]
    assert t.task == "two" and t.frames == 1


def test_a_start_while_an_episode_is_open_ends_it_first_and_counts_from_zero() -> None:
    t, recorder, events = tap()
    t.request("start", "one", "ana")
    frame(t, 1.0)
    frame(t, 1.5)
    t.request("start", "two", "bo")
    frame(t, 4.0)
    assert recorder.calls[3:] == [
        ("end",),
        ("start", "two"),
        ("frame", 0.0, PRESENT, GOAL, REQUESTED, {}, "policy", False),
    ]
    assert texts(events)[1:] == [
        (logging.INFO, "recording: episode 'one' ended with 2 frames"),
        (logging.INFO, "recording: episode 'two' started (asked by bo)"),
    ]
    assert t.status() == {"active": True, "task": "two", "frames": 1, "episodes_started": 2, "episodes_ended": 1}


def test_a_start_the_recorder_refuses_leaves_no_episode_open() -> None:
    t, recorder, events = tap()
    recorder.start_error = RecordingError("the dataset's features differ")
    t.request("start", "x", "ana")
    frame(t, 1.0)
    assert recorder.calls == [("start", "x")]
    assert not t.active and t.task == ""
    assert texts(events) == [
        (logging.ERROR, "recording: episode 'x' (asked by ana) not started: the dataset's features differ")
    ]
    assert t.status() == {"active": False, "task": "", "frames": 0, "start_failures": 1}


def test_a_failed_start_after_an_open_episode_keeps_that_episode_written() -> None:
    t, recorder, _ = tap()
    t.request("start", "one", "ana")
    frame(t, 1.0)
    recorder.start_error = RecordingError("disk full")
    t.request("start", "two", "ana")
    frame(t, 2.0)
    assert recorder.calls[2:] == [("end",), ("start", "two")]
    assert not t.active and t.task == "one" and t.frames == 1


def test_stop_and_discard_without_an_episode_are_said() -> None:
    t, recorder, events = tap()
    t.request("stop", who="ana")
    t.request("discard")
    frame(t, 1.0)
    assert recorder.calls == []
    assert texts(events) == [
        (logging.WARNING, "recording: stop asked by ana, but no episode is open"),
        (logging.WARNING, "recording: discard asked by ?, but no episode is open"),
    ]
    assert t.status() == {"active": False, "task": "", "frames": 0}


def test_stop_writes_the_episode() -> None:
    t, recorder, events = tap()
    t.request("start", "x", "ana")
    frame(t, 1.0)
    t.request("stop", who="bo")
    frame(t, 2.0)
    assert recorder.calls[2:] == [("end",)]
    assert not t.active and t.frames == 1
    assert texts(events)[1:] == [(logging.INFO, "recording: episode 'x' ended with 1 frames")]
    assert t.status() == {"active": False, "task": "x", "frames": 1, "episodes_started": 1, "episodes_ended": 1}


def test_discard_drops_the_episode() -> None:
    t, recorder, events = tap()
    t.request("start", "x", "ana")
    frame(t, 1.0)
    t.request("discard", who="bo")
    frame(t, 2.0)
    frame(t, 3.0)
    assert recorder.calls[2:] == [("discard",)]
    assert not t.active
    assert texts(events)[1:] == [(logging.INFO, "recording: episode 'x' discarded (asked by bo)")]
    assert t.status() == {"active": False, "task": "x", "frames": 1, "episodes_started": 1, "episodes_discarded": 1}


def test_an_unknown_request_does_nothing() -> None:
    t, recorder, events = tap()
    t.request("pause", "x", "ana")
    frame(t, 1.0)
    assert recorder.calls == [] and texts(events) == [] and not t.active


def test_end_writes_an_open_episode_once() -> None:
    t, recorder, events = tap()
    t.end()
    assert recorder.calls == [] and texts(events) == []
    t.request("start", "x", "ana")
    frame(t, 1.0)
    t.end()
    t.end()
    assert recorder.calls[2:] == [("end",)]
    assert t.counters["episodes_ended"] == 1 and not t.active


# --- frames cut short ----------------------------------------------------------------------


def test_a_frame_the_recorder_refuses_ends_the_episode() -> None:
    t, recorder, events = tap()
    t.request("start", "x", "ana")
    frame(t, 1.0)
    recorder.frame_error = RecordingError("state has 3 values, expected 2")
    frame(t, 2.0)
    frame(t, 3.0)
    assert [c[0] for c in recorder.calls] == ["start", "frame", "frame", "end"]
    assert not t.active and t.frames == 1
    assert texts(events)[1:] == [
        (logging.ERROR, "recording: episode 'x' ended after 1 frames: refused frame (state has 3 values, expected 2)")
    ]
    assert t.status() == {
        "active": False,
        "task": "x",
        "frames": 1,
        "episodes_started": 1,
        "episodes_cut": 1,
        "episodes_cut_refused_frame": 1,
    }


def test_a_writer_that_fell_behind_ends_the_episode_without_writing_it() -> None:
    t, recorder, events = tap()
    t.request("start", "x", "ana")
    frame(t, 1.0)
    recorder.accept = False
    frame(t, 2.0)
    frame(t, 3.0)
    assert [c[0] for c in recorder.calls] == ["start", "frame", "frame"]
    assert not t.active and t.frames == 1
    assert texts(events)[1:] == [
        (
            logging.ERROR,
            "recording: episode 'x' ended after 1 frames: overrun "
            "(the writer fell behind (recording.buffer_frames) or failed)",
        )
    ]
    assert t.counters["episodes_cut"] == 1 and t.counters["episodes_cut_overrun"] == 1


# --- cameras -------------------------------------------------------------------------------


def test_each_frame_carries_the_newest_image_of_every_camera() -> None:
    streams = Streams(("observation.images.front", "wrist"))
    t, recorder, _ = tap(streams, {"front": (2, 2), "wrist": (2, 2)})
    front, wrist = np.zeros((2, 2, 3), np.uint8), np.ones((2, 2, 3), np.uint8)
    streams.parts = {"observation.images.front": front, "wrist": wrist}
    t.request("start", "x", "ana")
    frame(t, 1.0)
    images = recorder.calls[1][5]
    assert set(images) == {"front", "wrist"} and images["front"] is front and images["wrist"] is wrist
    assert sorted(streams.asked) == ["observation.images.front", "wrist"]


def test_a_tick_before_every_camera_sent_a_frame_adds_none_and_counts_it() -> None:
    streams = Streams(("observation.images.front", "observation.images.wrist"))
    t, recorder, _ = tap(streams, {"front": (2, 2), "wrist": (2, 2)})
    streams.parts = {"observation.images.front": np.zeros((2, 2, 3), np.uint8)}
    t.request("start", "x", "ana")
    frame(t, 1.0)
    frame(t, 2.0)
    assert recorder.calls == [("start", "x")]
    assert t.active and t.frames == 0 and t.counters["frames_without_camera"] == 2
    streams.parts["observation.images.wrist"] = np.ones((2, 2, 3), np.uint8)
    frame(t, 3.0)
    assert recorder.calls[1][1] == 2.0 and t.frames == 1


# --- status --------------------------------------------------------------------------------


@dataclass
class RecorderStatus:
    dropped: int
    codec: str


@pytest.mark.parametrize(
    ("status", "shown"),
    [
        (lambda: RecorderStatus(3, "h264"), {"dropped": 3, "codec": "h264"}),
        (lambda: RecorderStatus, None),  # a class, not a status
        (lambda: {"dropped": 3}, None),
        ("not callable", None),
    ],
)
def test_status_carries_the_recorders_own_status_when_it_has_one(status: Any, shown: dict[str, Any] | None) -> None:
    t, recorder, _ = tap()
    recorder.status = status  # type: ignore[attr-defined]
    out = t.status()
    assert out.get("recorder") == shown
    assert ("recorder" in out) is (shown is not None)


def test_every_count_goes_past_one() -> None:
    t, recorder, _ = tap()
    for _ in range(2):
        t.request("start", "x", "ana")
        t.request("stop")
        t.request("start", "y", "ana")
        t.request("discard")
        frame(t, 1.0)
        t.request("start", "z", "ana")
        frame(t, 2.0)
        recorder.frame_error = RecordingError("refused")
        frame(t, 3.0)
        recorder.frame_error = None
        t.request("start", "w", "ana")
        frame(t, 4.0)
        recorder.accept = False
        frame(t, 5.0)
        recorder.accept = True
        recorder.start_error = RecordingError("no")
        t.request("start", "v", "ana")
        frame(t, 6.0)
        recorder.start_error = None
    assert t.status() == {
        "active": False,
        "task": "w",
        "frames": 1,  # w's one frame before the overrun
        "episodes_started": 8,
        "episodes_ended": 2,
        "episodes_discarded": 2,
        "episodes_cut": 4,
        "episodes_cut_refused_frame": 2,
        "episodes_cut_overrun": 2,
        "start_failures": 2,
    }
