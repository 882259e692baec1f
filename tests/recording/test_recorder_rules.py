"""The recorder's rules on a stand-in sink and stand-in encoders (a ring the test holds, no process,
no encode): the control thread's side never waits, counts every drop and overrun and refuses bad input
by name; the writer thread does the queued items in order, drops a failed episode and goes on, hands
the encoders' files to the sink and clears their staging folder; status field by field."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from runtime.errors import ConfigError, RecordingError, RecordingInputError
from runtime.recording import recorder as recorder_module
from runtime.recording.config import RecordingConfig
from runtime.recording.encoder_process import EncodedVideo, Link
from runtime.recording.features import RecordingFeatures
from runtime.recording.frames import FrameSlot
from runtime.recording.recorder import EpisodeRecorder, RecorderStatus
from runtime.recording.video import VideoSettings
from runtime.recording.writer import EpisodeDrops, EpisodeSummary

FRONT = "observation.images.front"
WRIST = "observation.images.wrist"


def features(cameras: dict[str, tuple[int, int]] | None = None) -> RecordingFeatures:
    return RecordingFeatures(fps=30, joint_names=("shoulder", "elbow"), cameras=cameras or {})


def two_cameras() -> RecordingFeatures:
    return features({"front": (16, 16), "wrist": (16, 18)})


class Sink:
    """Records every call; ``fail[name]`` is raised once by that call; ``gate`` holds ``write_frame``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail: dict[str, Exception] = {}
        self.gate = threading.Event()
        self.gate.set()
        self.frames = 0
        self.index = 0

    def _fail(self, name: str) -> None:
        error = self.fail.pop(name, None)
        if error is not None:
            raise error

    def begin_episode(self, task: str) -> int:
        self.calls.append(("begin", task))
        self._fail("begin")
        self.frames = 0
        return self.index

    def write_frame(self, frame: FrameSlot) -> None:
        self.gate.wait()
        self.calls.append(("frame", frame.t_s, frame.state.tolist(), sorted(frame.images)))
        self._fail("frame")
        self.frames += 1

    def finish_episode(self) -> EpisodeSummary | None:
        self.calls.append(("finish",))
        self._fail("finish")
        if not self.frames:
            return None
        summary = EpisodeSummary(self.index, self.frames, "task", 1.0)
        self.index += 1
        return summary

    def abort_episode(self) -> None:
        self.calls.append(("abort",))
        self._fail("abort")

    def close(self) -> None:
        self.calls.append(("close",))
        self._fail("close")


class EncodedSink(Sink):
    def attach_encoded(self, videos: dict[str, EncodedVideo], drops: EpisodeDrops | None) -> None:
        self.calls.append(("attach", videos, drops))
        self._fail("attach")


class Ring:
    def __init__(self, slots: int, height: int, width: int) -> None:
        self.views = [np.zeros((height, width, 3), np.uint8) for _ in range(slots)]
        self.free: deque[int] = deque(range(slots))

    def take(self) -> int | None:
        return self.free.popleft() if self.free else None

    def give_back(self, index: int) -> None:
        self.free.append(index)


class Encoder:
    """A camera's encoder as the recorder sees it; every call is logged in the shared ``log``."""

    def __init__(self, key: str, log: list[tuple[Any, ...]], slots: int = 4, height: int = 16, width: int = 16):
        self.key = key
        self.log = log
        self.link = Link(Ring(slots, height, width), None)  # type: ignore[arg-type]
        self.on_death: Any = None
        self.sends = True
        self.results: dict[int, EncodedVideo | Exception] = {}
        self.close_fails = False

    @property
    def ring(self) -> Ring:
        return self.link.ring  # type: ignore[return-value]

    def begin(self, episode: int, path: Path) -> None:
        self.log.append((self.key, "begin", episode, path))

    def end(self, episode: int) -> None:
        self.log.append((self.key, "end", episode))

    def abort(self, episode: int) -> None:
        self.log.append((self.key, "abort", episode))

    def send_frame(self, slot: int, pts: int, link: Link) -> bool:
        level = int(link.ring.views[slot][0, 0, 0])
        self.log.append((self.key, "frame", slot, pts, link is self.link, level))
        return self.sends

    def result(self, episode: int, timeout_s: float) -> EncodedVideo:
        self.log.append((self.key, "result", episode, timeout_s))
        got = self.results.get(episode, EncodedVideo(Path(f"{self.key}-{episode}.mp4"), 2, {}, 0.004))
        if isinstance(got, Exception):
            raise got
        return got

    def close(self) -> None:
        self.log.append((self.key, "close"))
        if self.close_fails:
            raise RuntimeError("the process would not stop")


Z2 = np.zeros(2, np.float32)


def image(level: int, height: int = 16, width: int = 16) -> npt.NDArray[np.uint8]:
    return np.full((height, width, 3), level, np.uint8)


def add(rec: EpisodeRecorder, t_s: float = 0.0, level: int = 0) -> bool:
    """A frame of the features: joint state [t_s, 1], and the cameras of ``rec`` at grey ``level``."""
    cameras = rec._features.cameras
    images = {cam: image(level, h, w) for cam, (h, w) in cameras.items()}
    return rec.add_frame(t_s, np.array([t_s, 1.0]), Z2, Z2, images, "policy", False)


def with_encoders(
    tmp_path: Path, *, slots: int = 4, max_drop_rate: float = 0.05, buffer_frames: int = 4
) -> tuple[EpisodeRecorder, EncodedSink, dict[str, Encoder], list[tuple[Any, ...]]]:
    log: list[tuple[Any, ...]] = []
    encoders = {"front": Encoder(FRONT, log, slots), "wrist": Encoder(WRIST, log, slots, 16, 18)}
    sink = EncodedSink()
    rec = EpisodeRecorder(
        sink,
        two_cameras(),
        buffer_frames=buffer_frames,
        encoders=encoders,  # type: ignore[arg-type]
        staging_dir=tmp_path / "staging",
        max_drop_rate=max_drop_rate,
        codec="libx264",
    )
    return rec, sink, encoders, log


@contextmanager
def recording(sink: Sink, feats: RecordingFeatures, **kwargs: Any) -> Iterator[EpisodeRecorder]:
    """A recorder closed at the end, its sink's gate opened first (a failed check never hangs)."""
    rec = EpisodeRecorder(sink, feats, **kwargs)
    try:
        yield rec
    finally:
        sink.gate.set()
        rec.close()


def status_of(rec: EpisodeRecorder) -> RecorderStatus:
    assert rec.flush(10)
    return rec.status()


# -- making one ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "shown"), [(1, "1"), (0, "0"), (True, "True"), (2.5, "2.5"), ("4", "'4'")])
def test_the_buffer_size_is_refused_word_for_word(value: object, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        EpisodeRecorder(Sink(), features(), buffer_frames=value)  # type: ignore[arg-type]
    assert str(info.value) == f"recording.buffer_frames: expected an integer >= 2, got {shown}"


def test_two_slots_are_enough_and_a_stalled_writer_overruns_at_the_third_frame(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = Sink()
    sink.gate.clear()
    with recording(sink, features(), buffer_frames=2) as rec:
        rec.start_episode("pick")
        assert [add(rec, 0.0), add(rec, 0.1), add(rec, 0.2), add(rec, 0.3)] == [True, True, False, False]
        live = rec.status()
        assert (live.overruns, live.frames_dropped, live.queued_frames, live.recording) == (1, 2, 2, False)
        assert rec.end_episode() is False  # the overrun ended it
        with caplog.at_level(logging.WARNING, logger="runtime.recording.recorder"):
            sink.gate.set()
            status = status_of(rec)
    assert sink.calls == [
        ("begin", "pick"),
        ("frame", 0.0, [0.0, 1.0], []),
        ("frame", 0.1, [pytest.approx(0.1), 1.0], []),
        ("finish",),
        ("close",),
    ]
    assert (status.episodes_written, status.frames_written, status.queued_frames) == (1, 2, 0)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "recording buffer overran (all 2 frame slots waited for the disk): episode ended there"
    ]


def test_encoders_must_be_one_per_camera_in_any_order() -> None:
    log: list[tuple[Any, ...]] = []
    only_front = {"front": Encoder(FRONT, log)}
    with pytest.raises(ConfigError) as info:
        EpisodeRecorder(EncodedSink(), two_cameras(), encoders=only_front, staging_dir=Path("s"))  # type: ignore[arg-type]
    assert str(info.value) == "recording encoders: expected one per camera ['front', 'wrist'], got ['front']"
    other = {"zoom": Encoder(FRONT, log), "front": Encoder(FRONT, log)}
    with pytest.raises(ConfigError) as info:
        EpisodeRecorder(EncodedSink(), two_cameras(), encoders=other, staging_dir=Path("s"))  # type: ignore[arg-type]
    assert str(info.value) == "recording encoders: expected one per camera ['front', 'wrist'], got ['front', 'zoom']"
    backwards = {"wrist": Encoder(WRIST, log, 4, 16, 18), "front": Encoder(FRONT, log)}
    EpisodeRecorder(EncodedSink(), two_cameras(), encoders=backwards, staging_dir=Path("s")).close()  # type: ignore[arg-type]


def test_encoders_need_a_staging_folder_and_a_sink_that_takes_their_files() -> None:
    log: list[tuple[Any, ...]] = []
    encoders = {"front": Encoder(FRONT, log), "wrist": Encoder(WRIST, log)}
    want = "recording encoders: need a staging_dir and a sink with attach_encoded"
    with pytest.raises(ConfigError) as info:
        EpisodeRecorder(EncodedSink(), two_cameras(), encoders=encoders)  # type: ignore[arg-type]
    assert str(info.value) == want
    with pytest.raises(ConfigError) as info:
        EpisodeRecorder(Sink(), two_cameras(), encoders=encoders, staging_dir=Path("s"))  # type: ignore[arg-type]
    assert str(info.value) == want


def test_the_writer_is_a_daemon_thread_of_its_own() -> None:
    rec = EpisodeRecorder(Sink(), features())
    try:
        threads = [t for t in threading.enumerate() if t.name == "episode-writer"]
        assert len(threads) == 1 and threads[0].daemon and threads[0] is not threading.current_thread()
    finally:
        rec.close()
    assert [t for t in threading.enumerate() if t.name == "episode-writer"] == []


class Made:
    """Stand-ins for what ``create`` makes: every call's arguments, in order."""

    def __init__(self, fail_at: str = "") -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail_at = fail_at
        outer = self

        class Writer(EncodedSink):
            def __init__(self, root: str, feats: RecordingFeatures, **kwargs: Any) -> None:
                super().__init__()
                self.root = Path(root)
                outer.calls.append(("writer", root, feats, kwargs))

            def close(self) -> None:
                outer.calls.append(("writer closed",))

        class Camera(Encoder):
            def __init__(self, key: str, **kwargs: Any) -> None:
                outer.calls.append(("encoder", key, kwargs))
                if key == outer.fail_at:
                    raise RecordingError(f"recording: the encoder process for {key} did not start: no")
                super().__init__(key, outer.calls, 4, kwargs["height"], kwargs["width"])

        self.writer, self.camera = Writer, Camera

    def choose(self, config: RecordingConfig, feats: RecordingFeatures) -> VideoSettings:
        self.calls.append(("choose", config, feats))
        return VideoSettings(codec="libx264", crf=23)


def made(monkeypatch: pytest.MonkeyPatch, fail_at: str = "") -> Made:
    m = Made(fail_at)
    monkeypatch.setattr(recorder_module, "DatasetWriter", m.writer)
    monkeypatch.setattr(recorder_module, "CameraEncoder", m.camera)
    monkeypatch.setattr(recorder_module, "choose_video", m.choose)
    return m


def test_create_without_cameras_writes_videos_on_the_writer_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    m = made(monkeypatch)
    feats = features()
    video = VideoSettings(crf=40)
    config = RecordingConfig(dataset_dir="/data/pick", buffer_frames=2, video=video)
    rec = EpisodeRecorder.create(config, feats)
    sink = rec._sink
    sink.gate.clear()  # type: ignore[attr-defined]
    rec.start_episode("pick")
    assert [add(rec), add(rec), add(rec)] == [True, True, False]  # buffer_frames from the config
    sink.gate.set()  # type: ignore[attr-defined]
    rec.close()
    assert m.calls[0] == ("writer", "/data/pick", feats, {"video": video})
    assert len(m.calls) == 2 and m.calls[1] == ("writer closed",)
    assert rec.status().codec == ""


def test_create_with_cameras_starts_an_encoder_per_camera(monkeypatch: pytest.MonkeyPatch) -> None:
    m = made(monkeypatch)
    feats = two_cameras()
    config = RecordingConfig(
        dataset_dir="/data/pick",
        buffer_frames=3,
        camera_queue_frames=7,
        encoder_delay_ms=5.0,
        max_drop_rate=0.5,
    )
    cpus = frozenset({1, 3})
    rec = EpisodeRecorder.create(config, feats, cpus=cpus)
    chosen = VideoSettings(codec="libx264", crf=23)
    common = {"slots": 7, "fps": 30, "video": chosen, "delay_ms": 5.0, "cpus": cpus}
    assert m.calls[:4] == [
        ("choose", config, feats),
        ("writer", "/data/pick", feats, {"video": chosen, "encode_video": False}),
        ("encoder", FRONT, {**common, "height": 16, "width": 16}),
        ("encoder", WRIST, {**common, "height": 16, "width": 18}),
    ]
    del m.calls[:4]
    rec.start_episode("pick")
    assert m.calls == [
        (FRONT, "begin", 1, Path("/data/pick/.recording/episode-g000001/observation.images.front.mp4")),
        (WRIST, "begin", 1, Path("/data/pick/.recording/episode-g000001/observation.images.wrist.mp4")),
    ]
    # a tick dropped by one camera of two: 1 of 2 is not over 0.5
    rec._encoders["wrist"].link.ring.free.clear()  # type: ignore[attr-defined]
    assert add(rec, 0.0, 1)
    rec._encoders["wrist"].link.ring.free.append(0)  # type: ignore[attr-defined]
    assert add(rec, 0.1, 2)
    rec.end_episode()
    status = status_of(rec)
    attach = [c for c in rec._sink.calls if c[0] == "attach"]  # type: ignore[attr-defined]
    assert attach[0][2] == EpisodeDrops({FRONT: 0, WRIST: 1}, 1, 0.5, False)
    assert (status.codec, status.episodes_over_drop_rate) == ("libx264", 0)
    rec.close()


def test_create_closes_what_it_made_when_an_encoder_does_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    m = made(monkeypatch, fail_at=WRIST)
    with pytest.raises(RecordingError) as info:
        EpisodeRecorder.create(RecordingConfig(dataset_dir="/data/pick"), two_cameras())
    assert str(info.value) == f"recording: the encoder process for {WRIST} did not start: no"
    assert [c[:2] for c in m.calls[-3:]] == [("encoder", WRIST), (FRONT, "close"), ("writer closed",)]


def test_create_refuses_a_recording_that_is_off() -> None:
    with pytest.raises(ConfigError) as info:
        EpisodeRecorder.create(RecordingConfig(), features())
    assert str(info.value) == "recording.dataset_dir: empty, recording is off; name the dataset folder"


# -- the control thread's side ---------------------------------------------------------------------


@pytest.mark.parametrize(("task", "shown"), [("", "''"), ("  ", "'  '"), (5, "5"), (None, "None")])
def test_a_start_without_a_task_is_refused_word_for_word(task: object, shown: str) -> None:
    with EpisodeRecorder(Sink(), features()) as rec:
        with pytest.raises(RecordingError) as info:
            rec.start_episode(task)  # type: ignore[arg-type]
        assert str(info.value) == f"start_episode: task must be the task's text, got {shown}"
        assert not rec.recording


def test_a_closed_recorder_refuses_a_start_and_closing_again_does_nothing() -> None:
    sink = Sink()
    rec = EpisodeRecorder(sink, features())
    with rec as entered:
        assert entered is rec
    with pytest.raises(RecordingError) as info:
        rec.start_episode("again")
    assert str(info.value) == "the recorder is closed"
    rec.close()
    assert sink.calls == [("close",)]


def test_starting_while_recording_writes_the_open_episode_first() -> None:
    sink = Sink()
    with recording(sink, features()) as rec:
        rec.start_episode("a")
        assert add(rec, 0.5)
        rec.start_episode("b")
        assert rec.recording
        assert add(rec, 0.25)
        assert rec.end_episode() is True
        assert rec.end_episode() is False
        status = status_of(rec)
    assert sink.calls == [
        ("begin", "a"),
        ("frame", 0.5, [0.5, 1.0], []),
        ("finish",),
        ("begin", "b"),
        ("frame", 0.25, [0.25, 1.0], []),
        ("finish",),
        ("close",),
    ]
    assert (status.episodes_written, status.frames_written, status.recording) == (2, 2, False)


def test_frames_outside_an_episode_are_refused_and_counted() -> None:
    with EpisodeRecorder(Sink(), features()) as rec:
        assert add(rec) is False
        assert add(rec) is False
        assert rec.status().frames_dropped == 2
        assert rec.discard_episode() is False
        assert rec.end_episode() is False


def test_a_refused_frame_gives_its_slot_back() -> None:
    sink = Sink()
    sink.gate.clear()
    with recording(sink, features(), buffer_frames=2) as rec:
        rec.start_episode("bad input")
        for _ in range(3):
            with pytest.raises(RecordingInputError) as info:
                rec.add_frame(0.0, np.zeros(3), Z2, Z2, {}, "policy", False)
            assert info.value.field == "observation.state"
        assert rec.status().queued_frames == 0
        assert add(rec) and add(rec)
        assert rec.status().queued_frames == 2
        sink.gate.set()
        assert status_of(rec).queued_frames == 0


def test_a_discarded_episode_is_aborted_and_counted() -> None:
    sink = Sink()
    with recording(sink, features()) as rec:
        rec.start_episode("thrown away")
        assert add(rec, 0.5)
        assert rec.discard_episode() is True
        assert not rec.recording
        assert rec.discard_episode() is False
        assert add(rec) is False
        status = status_of(rec)
    assert sink.calls == [("begin", "thrown away"), ("frame", 0.5, [0.5, 1.0], []), ("abort",), ("close",)]
    assert (status.episodes_discarded, status.episodes_written, status.episodes_failed) == (1, 0, 0)


def test_an_empty_episode_is_finished_but_not_counted() -> None:
    sink = Sink()
    with recording(sink, features()) as rec:
        rec.start_episode("nothing")
        rec.end_episode()
        status = status_of(rec)
    assert sink.calls == [("begin", "nothing"), ("finish",), ("close",)]
    assert (status.episodes_written, status.frames_written) == (0, 0)


def test_close_writes_the_open_episode() -> None:
    sink = Sink()
    rec = EpisodeRecorder(sink, features())
    rec.start_episode("interrupted")
    assert add(rec, 0.5)
    rec.close()
    assert sink.calls == [("begin", "interrupted"), ("frame", 0.5, [0.5, 1.0], []), ("finish",), ("close",)]
    assert rec.status().episodes_written == 1


def test_flush_waits_for_what_is_queued_and_says_when_it_could_not() -> None:
    sink = Sink()
    sink.gate.clear()
    rec = EpisodeRecorder(sink, features())
    rec.start_episode("stalled")
    assert add(rec)
    assert rec.flush(0) is False
    sink.gate.set()
    assert rec.flush(10) is True
    rec.close()


def test_a_writer_that_does_not_finish_in_time_is_an_error_and_the_encoders_still_stop(tmp_path: Path) -> None:
    rec, sink, _, log = with_encoders(tmp_path)
    sink.gate.clear()
    rec.start_episode("stalled")
    assert add(rec)
    with pytest.raises(RecordingError) as info:
        rec.close(0.0)
    assert str(info.value) == "the episode writer did not finish within 0.0 s (disk stalled?)"
    assert (FRONT, "close") in log and (WRIST, "close") in log
    sink.gate.set()
    rec._thread.join(10)
    assert sink.calls[-1] == ("close",)


def test_an_encoder_that_fails_to_stop_is_logged_and_the_others_stop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec, sink, encoders, log = with_encoders(tmp_path)
    encoders["front"].close_fails = True
    with caplog.at_level(logging.ERROR, logger="runtime.recording.recorder"):
        rec.close()
    assert log == [(FRONT, "close"), (WRIST, "close")]
    assert sink.calls == [("close",)]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"recording: stopping the {FRONT} encoder failed"
    ]


def test_a_sink_that_fails_to_close_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    sink = Sink()
    sink.fail["close"] = OSError("gone")
    rec = EpisodeRecorder(sink, features())
    with caplog.at_level(logging.ERROR, logger="runtime.recording.recorder"):
        rec.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "closing the dataset writer failed"
    ]


# -- the writer thread's failures ------------------------------------------------------------------


def test_a_failed_start_fails_the_episode_and_the_next_one_records() -> None:
    sink = Sink()
    sink.fail["begin"] = OSError("disk full")
    with recording(sink, features()) as rec:
        rec.start_episode("lost")
        status = status_of(rec)
        assert (status.episodes_failed, status.last_error, status.recording) == (
            1,
            "starting an episode: disk full",
            False,
        )
        assert add(rec) is False  # the control side learns at its next frame, and ends the episode
        assert rec.status().frames_dropped == 1
        assert rec.end_episode() is False
        rec.start_episode("kept")
        assert rec.recording
        assert add(rec, 0.5)
        rec.end_episode()
        status = status_of(rec)
    assert sink.calls == [
        ("begin", "lost"),
        ("abort",),
        ("begin", "kept"),
        ("frame", 0.5, [0.5, 1.0], []),
        ("finish",),
        ("close",),
    ]
    assert (status.episodes_failed, status.episodes_written, status.frames_written) == (1, 1, 1)


def test_a_failed_frame_drops_its_episode_and_every_slot_comes_back() -> None:
    sink = Sink()
    sink.fail["frame"] = OSError(28, "No space left on device")
    with recording(sink, features(), buffer_frames=2) as rec:
        rec.start_episode("lost")
        assert add(rec, 0.5)
        assert status_of(rec).last_error == "writing a frame: [Errno 28] No space left on device"
        assert add(rec) is False
        rec.start_episode("kept")
        for k in range(3):  # two slots: each came back
            assert add(rec, k)
            assert rec.flush(10)
        rec.end_episode()
        status = status_of(rec)
    assert [c[0] for c in sink.calls] == [
        "begin",
        "frame",
        "abort",
        "begin",
        "frame",
        "frame",
        "frame",
        "finish",
        "close",
    ]
    assert (status.episodes_failed, status.episodes_written, status.frames_written) == (1, 1, 3)


def test_frames_after_a_failed_write_are_not_written() -> None:
    sink = Sink()
    sink.fail["frame"] = OSError("bad sector")
    with recording(sink, features(), buffer_frames=3) as rec:
        sink.gate.clear()
        rec.start_episode("lost")
        assert add(rec, 0.5) and add(rec, 0.25)  # both queued before the writer learns
        sink.gate.set()
        status = status_of(rec)
    assert sink.calls == [("begin", "lost"), ("frame", 0.5, [0.5, 1.0], []), ("abort",), ("close",)]
    assert (status.episodes_failed, status.queued_frames) == (1, 0)


def test_a_failed_finish_fails_the_episode() -> None:
    sink = Sink()
    sink.fail["finish"] = OSError("rename failed")
    with recording(sink, features()) as rec:
        rec.start_episode("lost")
        assert add(rec)
        rec.end_episode()
        status = status_of(rec)
    assert [c[0] for c in sink.calls] == ["begin", "frame", "finish", "abort", "close"]
    assert (status.episodes_failed, status.episodes_written, status.frames_written) == (1, 0, 0)
    assert status.last_error == "writing the episode: rename failed"


def test_the_writer_thread_outlives_a_failed_discard_and_a_failed_clean_up(caplog: pytest.LogCaptureFixture) -> None:
    class TwiceBroken(Sink):
        def abort_episode(self) -> None:
            self.calls.append(("abort",))
            raise RuntimeError("cleanup exploded")

    sink = TwiceBroken()
    with caplog.at_level(logging.ERROR, logger="runtime.recording.recorder"), recording(sink, features()) as rec:
        rec.start_episode("discarded")
        rec.discard_episode()
        status = status_of(rec)
        assert (status.last_error, status.episodes_failed, status.episodes_discarded) == (
            "handling _Discard: cleanup exploded",
            1,
            0,
        )
        rec.start_episode("kept")
        assert add(rec)
        rec.end_episode()
        assert status_of(rec).episodes_written == 1
    assert sink.calls[:3] == [("begin", "discarded"), ("abort",), ("abort",)]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "recording failed while handling _Discard: cleanup exploded; the episode is dropped",
        "cleaning up the failed episode failed too",
    ]


# -- with encoders ---------------------------------------------------------------------------------


def test_each_tick_goes_to_every_cameras_ring_in_order(tmp_path: Path) -> None:
    rec, sink, encoders, log = with_encoders(tmp_path)
    rec.start_episode("pick")
    for k in range(3):
        assert add(rec, k / 10, 10 + k)
    assert [e for e in log if e[1] == "frame"] == [
        (FRONT, "frame", 0, 0, True, 10),
        (WRIST, "frame", 0, 0, True, 10),
        (FRONT, "frame", 1, 1, True, 11),
        (WRIST, "frame", 1, 1, True, 11),
        (FRONT, "frame", 2, 2, True, 12),
        (WRIST, "frame", 2, 2, True, 12),
    ]
    assert encoders["wrist"].ring.views[2].shape == (16, 18, 3)
    assert (encoders["wrist"].ring.views[2] == 12).all()
    rec.end_episode()
    status = status_of(rec)
    assert [c[0] for c in sink.calls] == ["begin", "frame", "frame", "frame", "attach", "finish"]
    assert sink.calls[1] == ("frame", 0.0, [0.0, 1.0], [])  # the slots hold the joints only
    rec.close()
    assert status.frames_written == 3


def test_a_tick_a_camera_has_no_slot_for_is_left_out_for_every_camera(tmp_path: Path) -> None:
    rec, sink, encoders, log = with_encoders(tmp_path, slots=2)
    rec.start_episode("pick")
    assert add(rec, 0.0, 1) and add(rec, 0.1, 2)
    encoders["front"].ring.give_back(0)  # front freed a slot, wrist did not
    assert add(rec, 0.2, 3) is True  # left out, counted, the episode goes on
    assert list(encoders["front"].ring.free) == [0]  # the slot taken for it came back
    live = rec.status()
    assert (live.encoder_drops, live.encoder_drops_by_camera) == (1, {FRONT: 0, WRIST: 1})
    assert live.episode_drop_rate == pytest.approx(1 / 3)
    assert live.queued_frames in (0, 1, 2)
    encoders["wrist"].ring.give_back(1)
    assert add(rec, 0.3, 4)
    assert [e[2:] for e in log if e[0] == WRIST and e[1] == "frame"] == [
        (0, 0, True, 1),
        (1, 1, True, 2),
        (1, 2, True, 4),
    ]
    rec.end_episode()
    status = status_of(rec)
    attach = next(c for c in sink.calls if c[0] == "attach")
    assert attach[2] == EpisodeDrops({FRONT: 0, WRIST: 1}, 1, 0.25, True)
    assert [c[1] for c in sink.calls if c[0] == "frame"] == [0.0, 0.1, 0.3]
    rec.close()
    assert (status.encoder_drops, status.encoder_drops_by_camera) == (1, {FRONT: 0, WRIST: 1})
    assert status.episodes_over_drop_rate == 1


def test_a_drop_rate_at_the_limit_is_not_over_it(tmp_path: Path) -> None:
    rec, sink, encoders, _ = with_encoders(tmp_path, slots=8, max_drop_rate=0.25)
    rec.start_episode("pick")
    encoders["front"].ring.free.clear()
    assert add(rec, 0.0)
    encoders["front"].ring.free.extend(range(8))
    for k in range(3):
        assert add(rec, 0.1 * (k + 1))
    rec.end_episode()
    status = status_of(rec)
    rec.close()
    assert [c[2] for c in sink.calls if c[0] == "attach"] == [EpisodeDrops({FRONT: 1, WRIST: 0}, 1, 0.25, False)]
    assert status.episodes_over_drop_rate == 0


def test_drops_start_over_with_each_episode_and_add_up_since_the_start(tmp_path: Path) -> None:
    rec, sink, encoders, _ = with_encoders(tmp_path, slots=8)
    for task in ("a", "b"):
        rec.start_episode(task)
        encoders["front"].ring.free.clear()
        assert add(rec)
        encoders["front"].ring.free.extend(range(8))
        assert add(rec)
    live = rec.status()
    rec.end_episode()
    status = status_of(rec)
    rec.close()
    assert live.episode_drop_rate == 0.5
    drops = [c[2] for c in sink.calls if c[0] == "attach"]
    assert drops == [EpisodeDrops({FRONT: 1, WRIST: 0}, 1, 0.5, True)] * 2
    assert (status.encoder_drops, status.encoder_drops_by_camera[FRONT], status.episodes_over_drop_rate) == (2, 2, 2)


def test_an_episode_without_ticks_has_no_drop_rate(tmp_path: Path) -> None:
    rec, sink, _, _ = with_encoders(tmp_path)
    assert rec.status().episode_drop_rate == 0.0
    rec.start_episode("nothing")
    rec.end_episode()
    status = status_of(rec)
    rec.close()
    assert [c[2] for c in sink.calls if c[0] == "attach"] == [EpisodeDrops({FRONT: 0, WRIST: 0}, 0, 0.0, False)]
    assert status.episode_drop_rate == 0.0


def test_an_episode_over_the_drop_rate_is_logged_with_its_counts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec, _, encoders, _ = with_encoders(tmp_path, slots=8)
    rec.start_episode("pick")
    encoders["wrist"].ring.free.clear()
    assert add(rec)
    encoders["wrist"].ring.free.extend(range(8))
    assert add(rec) and add(rec)
    with caplog.at_level(logging.WARNING, logger="runtime.recording.recorder"):
        rec.end_episode()
        assert rec.flush(10)
    rec.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "recording: episode 0 dropped 1 of 3 ticks (33.3 % > recording.max_drop_rate 5.0 %), per camera "
        "{'observation.images.front': 0, 'observation.images.wrist': 1}: the encoders did not keep up"
    ]


def test_a_frame_a_dead_encoder_could_not_take_gives_its_slot_back(tmp_path: Path) -> None:
    rec, _, encoders, log = with_encoders(tmp_path)
    encoders["front"].sends = False
    rec.start_episode("pick")
    assert add(rec, 0.0, 1) and add(rec, 0.1, 2) and add(rec, 0.2, 3)
    assert sorted(encoders["front"].ring.free) == [0, 1, 2, 3]
    assert list(encoders["wrist"].ring.free) == [3]
    assert [e[3] for e in log if e[0] == FRONT and e[1] == "frame"] == [0, 1, 2]  # pts goes on
    assert rec.status().encoder_drops == 0
    rec.close()


def test_the_episodes_files_are_collected_and_handed_to_the_sink(tmp_path: Path) -> None:
    rec, sink, encoders, log = with_encoders(tmp_path)
    front = EncodedVideo(Path("f.mp4"), 4, {"mean": [1.0]}, 0.01)
    wrist = EncodedVideo(Path("w.mp4"), 0, {}, 0.5)
    encoders["front"].results[1] = front
    encoders["wrist"].results[1] = wrist
    rec.start_episode("pick")
    folder = tmp_path / "staging" / "episode-g000001"
    folder.mkdir(parents=True)
    (folder / "left.mp4").write_bytes(b"x")
    assert add(rec)
    rec.end_episode()
    status = status_of(rec)
    rec.close()
    assert [e for e in log if e[1] in ("end", "result")] == [
        (FRONT, "end", 1),
        (WRIST, "end", 1),
        (FRONT, "result", 1, 120.0),
        (WRIST, "result", 1, 120.0),
    ]
    assert sink.calls[2] == ("attach", {FRONT: front, WRIST: wrist}, EpisodeDrops({FRONT: 0, WRIST: 0}, 0, 0.0, False))
    assert status.encode_ms_per_frame == {FRONT: 2.5}  # a file without frames has no cost per frame
    assert not folder.exists()


def test_the_cost_per_frame_is_rounded_to_the_microsecond(tmp_path: Path) -> None:
    rec, _, encoders, _ = with_encoders(tmp_path)
    encoders["front"].results[1] = EncodedVideo(Path("f.mp4"), 3, {}, 0.0040004)
    rec.start_episode("pick")
    assert add(rec)
    rec.end_episode()
    status = status_of(rec)
    rec.close()
    assert status.encode_ms_per_frame == {FRONT: 1.333, WRIST: 2.0}


def test_a_missing_file_fails_the_episode_after_every_file_is_collected(tmp_path: Path) -> None:
    rec, sink, encoders, log = with_encoders(tmp_path)
    encoders["front"].results[1] = RecordingError(f"{FRONT}: the encoder process (pid 7) exited with code -9")
    encoders["wrist"].results[1] = RecordingError(f"{WRIST}: no such episode is being encoded")
    rec.start_episode("pick")
    folder = tmp_path / "staging" / "episode-g000001"
    folder.mkdir(parents=True)
    assert add(rec)
    rec.end_episode()
    status = status_of(rec)
    rec.close()
    assert [e[:3] for e in log if e[1] == "result"] == [(FRONT, "result", 1), (WRIST, "result", 1)]
    assert [c[0] for c in sink.calls] == ["begin", "frame", "abort", "close"]
    assert status.last_error == f"writing the episode: {FRONT}: the encoder process (pid 7) exited with code -9"
    assert (status.episodes_failed, status.episodes_written) == (1, 0)
    assert not folder.exists()


def test_a_failed_attach_fails_the_episode_and_clears_its_files(tmp_path: Path) -> None:
    rec, sink, _, _ = with_encoders(tmp_path)
    sink.fail["attach"] = OSError("append failed")
    rec.start_episode("pick")
    folder = tmp_path / "staging" / "episode-g000001"
    folder.mkdir(parents=True)
    assert add(rec)
    rec.end_episode()
    status = status_of(rec)
    rec.close()
    assert status.last_error == "writing the episode: append failed"
    assert not folder.exists()
    assert status.encode_ms_per_frame == {}


def test_a_discarded_episode_is_aborted_in_every_encoder_and_its_files_cleared(tmp_path: Path) -> None:
    rec, sink, _, log = with_encoders(tmp_path)
    rec.start_episode("a")
    rec.end_episode()
    rec.start_episode("b")
    folder = tmp_path / "staging" / "episode-g000002"
    folder.mkdir(parents=True)
    kept = tmp_path / "staging" / "episode-g000003"
    kept.mkdir()
    assert rec.discard_episode()
    status = status_of(rec)
    rec.close()
    assert [e for e in log if e[1] == "abort"] == [(FRONT, "abort", 2), (WRIST, "abort", 2)]
    assert [c[0] for c in sink.calls] == ["begin", "attach", "finish", "begin", "abort", "close"]
    assert not folder.exists() and kept.exists()
    assert status.episodes_discarded == 1


def test_a_dead_encoder_fails_the_open_episode_only(tmp_path: Path) -> None:
    rec, sink, encoders, _ = with_encoders(tmp_path)
    died = encoders["front"].on_death
    assert encoders["wrist"].on_death == died
    died(FRONT, "the encoder process (pid 7) exited with code -9")  # no episode open: nothing fails
    rec.start_episode("a")
    assert rec.recording and add(rec)
    died(FRONT, "the encoder process (pid 8) exited with code 1")
    assert not rec.recording
    encoders["front"].results[1] = RecordingError(f"{FRONT}: the encoder process (pid 8) exited with code 1")
    folder = tmp_path / "staging" / "episode-g000001"
    folder.mkdir(parents=True)
    assert add(rec) is False
    assert rec.end_episode() is False  # the refused frame ended it
    live = status_of(rec)
    assert not folder.exists()
    rec.start_episode("b")
    assert add(rec)
    rec.end_episode()
    status = status_of(rec)
    rec.close()
    assert (live.encoder_deaths, live.last_error) == (
        2,
        f"writing the episode: {FRONT}: the encoder process (pid 8) exited with code 1",
    )
    assert (live.frames_dropped, live.episodes_failed) == (1, 1)
    assert [c[0] for c in sink.calls] == ["begin", "frame", "abort", "begin", "frame", "attach", "finish", "close"]
    assert (status.episodes_written, status.episodes_failed) == (1, 1)


def test_a_death_names_the_camera_and_why(tmp_path: Path) -> None:
    rec, _, encoders, _ = with_encoders(tmp_path)
    encoders["wrist"].on_death(WRIST, "the encoder process (pid 9) exited with code -11")
    status = rec.status()
    rec.close()
    assert (status.encoder_deaths, status.last_error) == (
        1,
        f"{WRIST}: the encoder process (pid 9) exited with code -11",
    )


def test_the_end_of_an_episode_that_already_failed_clears_its_files(tmp_path: Path) -> None:
    rec, sink, _, _ = with_encoders(tmp_path)
    sink.fail["begin"] = OSError("disk full")
    rec.start_episode("lost")
    folder = tmp_path / "staging" / "episode-g000001"
    folder.mkdir(parents=True)
    assert rec.flush(10)
    rec.end_episode()
    rec.start_episode("next")
    status = status_of(rec)
    rec.close()
    assert not folder.exists()
    assert status.episodes_failed == 1
    assert [c[0] for c in sink.calls] == ["begin", "abort", "begin", "attach", "finish", "close"]


def test_status_field_by_field(tmp_path: Path) -> None:
    rec, _, encoders, _ = with_encoders(tmp_path, slots=8, buffer_frames=5)
    encoders["front"].results[1] = EncodedVideo(Path("f.mp4"), 2, {}, 0.003)
    encoders["wrist"].results[1] = EncodedVideo(Path("w.mp4"), 2, {}, 0.005)
    rec.start_episode("a")
    encoders["front"].ring.free.clear()
    assert add(rec)
    encoders["front"].ring.free.extend(range(8))
    assert add(rec) and add(rec)
    rec.end_episode()
    assert rec.flush(10)
    rec.start_episode("b")
    assert add(rec)
    rec.discard_episode()
    encoders["front"].on_death(FRONT, "gone")
    assert add(rec) is False
    status = status_of(rec)
    rec.close()
    assert status == RecorderStatus(
        recording=False,
        episodes_written=1,
        episodes_discarded=1,
        episodes_failed=0,
        overruns=0,
        frames_written=2,
        frames_dropped=1,
        queued_frames=0,
        last_error=f"{FRONT}: gone",
        encoder_drops=1,
        encoder_drops_by_camera={FRONT: 1, WRIST: 0},
        episode_drop_rate=0.0,
        episodes_over_drop_rate=1,
        encoder_deaths=1,
        codec="libx264",
        encode_ms_per_frame={FRONT: 1.5, WRIST: 2.5},
    )
    assert status.encoder_drops_by_camera is not rec._encoder_drops_by_camera
    assert status.encode_ms_per_frame is not rec._encode_ms


def test_a_new_recorder_has_nothing_to_report(tmp_path: Path) -> None:
    rec, _, _, _ = with_encoders(tmp_path, buffer_frames=3)
    status = rec.status()
    rec.close()
    assert status == RecorderStatus(
        recording=False,
        episodes_written=0,
        episodes_discarded=0,
        episodes_failed=0,
        overruns=0,
        frames_written=0,
        frames_dropped=0,
        queued_frames=0,
        last_error=None,
        encoder_drops=0,
        encoder_drops_by_camera={FRONT: 0, WRIST: 0},
        episode_drop_rate=0.0,
        episodes_over_drop_rate=0,
        encoder_deaths=0,
        codec="libx264",
        encode_ms_per_frame={},
    )


def test_create_with_cameras_takes_the_buffer_size_from_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    made(monkeypatch)
    rec = EpisodeRecorder.create(RecordingConfig(dataset_dir="/data/pick", buffer_frames=2), two_cameras())
    sink = rec._sink
    sink.gate.clear()  # type: ignore[attr-defined]
    rec.start_episode("pick")
    assert [add(rec), add(rec), add(rec)] == [True, True, False]
    assert rec.status().overruns == 1
    sink.gate.set()  # type: ignore[attr-defined]
    rec.close()


def test_drops_of_one_camera_add_up_over_an_episode(tmp_path: Path) -> None:
    rec, sink, encoders, _ = with_encoders(tmp_path, slots=8)
    rec.start_episode("pick")
    encoders["wrist"].ring.free.clear()
    assert add(rec) and add(rec) and add(rec)
    encoders["wrist"].ring.free.extend(range(8))
    assert add(rec)
    live = rec.status()
    rec.end_episode()
    assert rec.flush(10)
    rec.close()
    assert live.episode_drop_rate == 0.75
    assert [c[2] for c in sink.calls if c[0] == "attach"] == [EpisodeDrops({FRONT: 0, WRIST: 3}, 3, 0.75, True)]


def test_failed_episodes_add_up() -> None:
    sink = Sink()
    with recording(sink, features()) as rec:
        for k in range(3):
            sink.fail["begin"] = OSError(f"disk full {k}")
            rec.start_episode("lost")
            assert rec.flush(10)
        status = rec.status()
    assert (status.episodes_failed, status.last_error) == (3, "starting an episode: disk full 2")


def test_drops_and_overruns_add_up_over_episodes() -> None:
    sink = Sink()
    with recording(sink, features(), buffer_frames=2) as rec:
        assert add(rec) is False  # no episode: 1 dropped
        for task in ("a", "b"):
            sink.gate.clear()
            rec.start_episode(task)
            assert [add(rec), add(rec), add(rec)] == [True, True, False]
            sink.gate.set()
            assert rec.flush(10)
        status = rec.status()
    assert (status.overruns, status.frames_dropped, status.episodes_written) == (2, 3, 2)


def test_frames_refused_for_a_failed_episode_add_up() -> None:
    sink = Sink()
    sink.fail["frame"] = OSError("bad sector")
    with recording(sink, features()) as rec:
        assert add(rec) is False  # no episode: 1 dropped
        rec.start_episode("lost")
        assert add(rec)
        assert rec.flush(10)
        assert add(rec) is False
        status = rec.status()
    assert status.frames_dropped == 2


class SourceSink(Sink):
    def write_frame(self, frame: FrameSlot) -> None:
        self.calls.append(("frame", frame.source, frame.intervention))


def test_each_frames_source_and_intervention_reach_the_sink() -> None:
    sink = SourceSink()
    with recording(sink, features()) as rec:
        rec.start_episode("pick")
        assert rec.add_frame(0.0, Z2, Z2, Z2, {}, "teleop", True)
        assert rec.add_frame(0.1, Z2, Z2, Z2, {}, "hold", False)
        assert rec.flush(10)
    assert sink.calls[1:3] == [("frame", "teleop", True), ("frame", "hold", False)]


def test_a_tick_left_out_gives_its_slot_back_for_the_next(tmp_path: Path) -> None:
    rec, sink, encoders, _ = with_encoders(tmp_path, slots=8, buffer_frames=2)
    rec.start_episode("pick")
    encoders["wrist"].ring.free.clear()
    assert add(rec) and add(rec)  # both left out
    encoders["wrist"].ring.free.extend(range(8))
    for k in range(4):  # each slot of the two used twice
        assert add(rec, k)
        assert rec.flush(10)
    rec.end_episode()
    assert rec.flush(10)
    rec.close()
    assert [c[1] for c in sink.calls if c[0] == "frame"] == [0.0, 1.0, 2.0, 3.0]


def test_discarded_episodes_add_up() -> None:
    sink = Sink()
    with recording(sink, features()) as rec:
        for task in ("a", "b"):
            rec.start_episode(task)
            assert rec.discard_episode()
        status = status_of(rec)
    assert (status.episodes_discarded, status.episodes_written) == (2, 0)


def test_discarding_an_episode_that_already_failed_aborts_nothing_more() -> None:
    sink = Sink()
    sink.fail["begin"] = OSError("disk full")
    with recording(sink, features()) as rec:
        rec.start_episode("lost")
        assert rec.flush(10)
        assert rec.discard_episode() is True  # the control side had not learnt of the failure yet
        status = status_of(rec)
    assert sink.calls == [("begin", "lost"), ("abort",), ("close",)]
    assert (status.episodes_discarded, status.episodes_failed) == (0, 1)


def test_by_default_ninety_frames_may_wait_for_the_disk() -> None:
    sink = Sink()
    sink.gate.clear()
    with recording(sink, features()) as rec:
        rec.start_episode("stalled")
        assert all(add(rec) for _ in range(90))
        assert add(rec) is False
        assert rec.status().overruns == 1


@pytest.mark.parametrize(("ticks", "over"), [(20, False), (17, True)])
def test_by_default_an_episode_may_drop_five_percent_of_its_ticks(tmp_path: Path, ticks: int, over: bool) -> None:
    log: list[tuple[Any, ...]] = []
    encoders = {"front": Encoder(FRONT, log, 32), "wrist": Encoder(WRIST, log, 32, 16, 18)}
    sink = EncodedSink()
    rec = EpisodeRecorder(sink, two_cameras(), encoders=encoders, staging_dir=tmp_path)  # type: ignore[arg-type]
    rec.start_episode("pick")
    encoders["front"].ring.free.clear()
    assert add(rec)  # 1 tick left out of 20 is 5 %; of 17, 5.9 %
    encoders["front"].ring.free.extend(range(32))
    for _ in range(ticks - 1):
        assert add(rec)
    rec.end_episode()
    assert rec.flush(10)
    rec.close()
    drops = next(c[2] for c in sink.calls if c[0] == "attach")
    assert (drops.ticks, drops.over_limit) == (1, over)


def test_closing_after_a_failed_discard_closes_the_sink_and_aborts_nothing_more() -> None:
    class TwiceBroken(Sink):
        def abort_episode(self) -> None:
            self.calls.append(("abort",))
            raise RuntimeError("cleanup exploded")

    sink = TwiceBroken()
    with recording(sink, features()) as rec:
        rec.start_episode("discarded")
        rec.discard_episode()
        assert rec.flush(10)
    assert sink.calls == [("begin", "discarded"), ("abort",), ("abort",), ("close",)]


class ImageSink(Sink):
    def write_frame(self, frame: FrameSlot) -> None:
        self.calls.append(("frame", {cam: int(img[0, 0, 0]) for cam, img in frame.images.items()}))


def test_without_encoders_each_slot_carries_the_cameras_images_to_the_sink() -> None:
    sink = ImageSink()
    with recording(sink, features({"front": (16, 16)})) as rec:
        rec.start_episode("pick")
        assert add(rec, 0.0, 7) and add(rec, 0.1, 9)
        assert rec.flush(10)
    assert sink.calls[1:3] == [("frame", {"front": 7}), ("frame", {"front": 9})]
