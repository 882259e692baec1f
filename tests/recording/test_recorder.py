"""The recorder never holds up the control thread: a stalled disk ends the episode with an overrun
(counted, logged, the frames before it written whole), bad frames are refused by name, a failed
write drops that episode and the recorder goes on."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from runtime.errors import RecordingError, RecordingInputError
from runtime.recording import DatasetWriter, EpisodeRecorder, EpisodeSummary, RecordingFeatures, VideoSettings
from runtime.recording.check import check_dataset
from runtime.recording.frames import FrameSlot
from runtime.recording.reader import DatasetReader
from tests.recording.conftest import add, frame_image, ticks


class GatedWriter:
    """The real dataset writer behind a gate: frames wait until the test opens it (a stalled disk)."""

    def __init__(self, writer: DatasetWriter) -> None:
        self.writer = writer
        self.gate = threading.Event()
        self.frames_seen = 0

    def begin_episode(self, task: str) -> int:
        return self.writer.begin_episode(task)

    def write_frame(self, frame: FrameSlot) -> None:
        self.gate.wait()
        self.frames_seen += 1
        self.writer.write_frame(frame)

    def finish_episode(self) -> EpisodeSummary | None:
        return self.writer.finish_episode()

    def abort_episode(self) -> None:
        self.writer.abort_episode()

    def close(self) -> None:
        self.writer.close()


class SlowWriter(GatedWriter):
    """A disk that takes ``delay_s`` per frame."""

    def __init__(self, writer: DatasetWriter, delay_s: float) -> None:
        super().__init__(writer)
        self.gate.set()
        self.delay_s = delay_s

    def write_frame(self, frame: FrameSlot) -> None:
        time.sleep(self.delay_s)
        super().write_frame(frame)


def run_in_thread(fn: object, timeout_s: float = 10.0) -> object:
    """Run ``fn`` on another thread; fail (rather than hang) if it blocks."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)  # type: ignore[operator]
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), "the call blocked"
    return result[0]


def test_a_stalled_disk_never_blocks_add_frame(
    root: Path, features: RecordingFeatures, caplog: pytest.LogCaptureFixture
) -> None:
    sink = GatedWriter(DatasetWriter(root, features))
    recorder = EpisodeRecorder(sink, features, buffer_frames=4)
    frames = ticks(8, seed=1)
    recorder.start_episode("stalled")

    # the writer stalls on the first frame (holding its slot); 3 more fill the other slots; the next
    # overruns and ends the episode; later frames are refused without another overrun
    results = run_in_thread(lambda: [add(recorder, t) for t in frames])
    assert results == [True] * 4 + [False] * 4
    status = recorder.status()
    assert status.overruns == 1
    assert status.frames_dropped == 4
    assert not status.recording
    assert recorder.end_episode() is False  # the overrun already ended it

    with caplog.at_level(logging.WARNING, logger="runtime.recording.recorder"):
        sink.gate.set()
        assert recorder.flush()
    assert "buffer overran" in caplog.text
    status = recorder.status()
    assert (status.episodes_written, status.frames_written, status.queued_frames) == (1, 4, 0)
    recorder.close()
    assert check_dataset(root).problems == []
    ep = DatasetReader(root).episode(0)
    np.testing.assert_array_equal(ep.columns["observation.state"], np.stack([t.state for t in frames[:4]]))


def test_a_slow_disk_ends_the_episode_cleanly_and_recording_goes_on(root: Path, features: RecordingFeatures) -> None:
    sink = SlowWriter(DatasetWriter(root, features), delay_s=0.05)
    recorder = EpisodeRecorder(sink, features, buffer_frames=3)
    recorder.start_episode("too fast for the disk")
    accepted = 0
    for tick in ticks(200, seed=1):  # a tick every millisecond: far faster than 50 ms a frame
        if not add(recorder, tick):
            break
        accepted += 1
        time.sleep(0.001)
    assert 3 <= accepted < 200
    assert recorder.status().overruns == 1

    # the next episode records normally once the disk has caught up
    assert recorder.flush()
    sink.delay_s = 0.0
    recorder.start_episode("normal")
    for t in ticks(5, seed=2):
        assert add(recorder, t)
        assert recorder.flush()  # a disk that keeps up, however loaded this machine is
    recorder.close()
    status = recorder.status()
    assert (status.episodes_written, status.overruns, status.frames_written) == (2, 1, accepted + 5)
    assert check_dataset(root).problems == []
    assert DatasetReader(root).episode(0).length == accepted


def test_frames_outside_an_episode_are_refused_and_counted(root: Path, features: RecordingFeatures) -> None:
    with EpisodeRecorder(DatasetWriter(root, features), features) as recorder:
        assert add(recorder, ticks(1, seed=1)[0]) is False
        assert recorder.status().frames_dropped == 1
        assert recorder.end_episode() is False
        assert recorder.discard_episode() is False


def test_discarded_episodes_leave_nothing(root: Path, features: RecordingFeatures) -> None:
    with EpisodeRecorder(DatasetWriter(root, features), features) as recorder:
        recorder.start_episode("kept")
        for t in ticks(4, seed=1):
            add(recorder, t)
        recorder.end_episode()
        recorder.start_episode("thrown away")
        for t in ticks(6, seed=2):
            add(recorder, t)
        assert recorder.discard_episode()
        recorder.start_episode("kept too")
        for t in ticks(3, seed=3, start_frame=4):
            add(recorder, t)
        recorder.end_episode()
        recorder.start_episode("empty")  # no frames: nothing is written
        recorder.end_episode()
    status = recorder.status()
    assert (status.episodes_written, status.episodes_discarded) == (2, 1)
    reader = DatasetReader(root)
    assert reader.num_episodes == 2 and reader.tasks == ["kept", "kept too"]
    assert reader.episode(1).columns["index"].tolist() == [4, 5, 6]
    assert check_dataset(root).problems == []
    assert not (root / ".recording").exists()


def test_close_writes_the_open_episode(root: Path, features: RecordingFeatures) -> None:
    recorder = EpisodeRecorder(DatasetWriter(root, features), features)
    recorder.start_episode("interrupted by shutdown")
    for t in ticks(4, seed=1):
        add(recorder, t)
    recorder.close()
    assert DatasetReader(root).episode(0).length == 4
    with pytest.raises(RecordingError, match="closed"):
        recorder.start_episode("again")


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"state": np.zeros(5)}, "observation.state", "expected 6 numbers \\(one per joint\\), got shape \\(5,\\)"),
        ({"action": np.array(["a"] * 6)}, "action", "expected 6 numbers"),
        ({"action_requested": np.zeros((6, 1))}, "request.action", "got shape \\(6, 1\\)"),
        (
            {"source": "autopilot"},
            "control.source",
            "expected one of \\['policy', 'teleop', 'hold'\\], got 'autopilot'",
        ),
        ({"images": {}}, "images", "expected cameras \\['front'\\], got \\[\\]"),
        ({"images": {"front": np.zeros((48, 64, 3), np.float32)}}, "observation.images.front", "uint8 48x64x3"),
        ({"images": {"front": np.zeros((64, 48, 3), np.uint8)}}, "observation.images.front", "got \\(64, 48, 3\\)"),
    ],
)
def test_bad_frames_are_refused_by_name(
    root: Path, features: RecordingFeatures, change: dict[str, object], field: str, message: str
) -> None:
    with EpisodeRecorder(DatasetWriter(root, features), features, buffer_frames=2) as recorder:
        recorder.start_episode("bad input")
        good = {
            "t_s": 0.0,
            "state": np.zeros(6, np.float32),
            "action": np.zeros(6, np.float32),
            "action_requested": np.zeros(6, np.float32),
            "images": {"front": frame_image(0)},
            "source": "policy",
            "intervention": False,
        }
        for _ in range(3):  # a refused frame gives its slot back: refusals never exhaust the buffer
            with pytest.raises(RecordingInputError, match=message) as info:
                recorder.add_frame(**{**good, **change})  # type: ignore[arg-type]
            assert info.value.field == field
        assert recorder.add_frame(**good)  # type: ignore[arg-type]
        recorder.end_episode()
    assert DatasetReader(root).episode(0).length == 1


class FailingWriter(GatedWriter):
    """A disk that fails on the n-th frame of the first episode (disk full)."""

    def __init__(self, writer: DatasetWriter, fail_at: int) -> None:
        super().__init__(writer)
        self.gate.set()
        self.fail_at = fail_at
        self.failed = False

    def write_frame(self, frame: FrameSlot) -> None:
        if not self.failed and self.frames_seen == self.fail_at:
            self.failed = True
            raise OSError(28, "No space left on device")
        super().write_frame(frame)


def test_a_failed_write_drops_that_episode_and_says_why(
    root: Path, features: RecordingFeatures, caplog: pytest.LogCaptureFixture
) -> None:
    sink = FailingWriter(DatasetWriter(root, features), fail_at=2)
    with caplog.at_level(logging.ERROR), EpisodeRecorder(sink, features) as recorder:
        recorder.start_episode("lost")
        for t in ticks(4, seed=1):
            add(recorder, t)
        assert recorder.flush()
        assert add(recorder, ticks(1, seed=9)[0]) is False  # the control side learns at its next frame
        status = recorder.status()
        assert status.episodes_failed == 1 and not status.recording
        assert status.last_error is not None and "No space left on device" in status.last_error
        recorder.start_episode("kept")
        assert all(add(recorder, t) for t in ticks(3, seed=2))
        recorder.end_episode()
    assert "recording failed while writing a frame" in caplog.text
    reader = DatasetReader(root)
    assert reader.num_episodes == 1 and reader.tasks == ["kept"]
    assert check_dataset(root).problems == []


def test_buffer_size_is_checked(features: RecordingFeatures, root: Path) -> None:
    from runtime.errors import ConfigError

    with pytest.raises(ConfigError, match=r"recording\.buffer_frames: expected an integer >= 2, got 1"):
        EpisodeRecorder(DatasetWriter(root, features), features, buffer_frames=1)


def test_recording_config_from_toml(root: Path, features: RecordingFeatures) -> None:
    import tomllib

    from drivers.configtools import from_mapping
    from runtime.errors import ConfigError
    from runtime.recording import RecordingConfig

    text = f'dataset_dir = "{root}"\nbuffer_frames = 30\n[video]\ncodec = "libsvtav1"\ncrf = 35\n'
    config = from_mapping(RecordingConfig, tomllib.loads(text), "recording")
    assert (config.buffer_frames, config.video.crf) == (30, 35)
    with EpisodeRecorder.create(config, features) as recorder:
        recorder.start_episode("from the config")
        assert add(recorder, ticks(1, seed=1)[0])
    assert DatasetReader(root).num_episodes == 1
    with pytest.raises(ConfigError, match=r"recording\.video: unknown key\(s\) bitrate"):
        from_mapping(RecordingConfig, {"video": {"bitrate": 5}}, "recording")
    with pytest.raises(ConfigError, match=r"recording\.video\.crf: expected 0\.\.63, got 99"):
        from_mapping(RecordingConfig, {"video": {"crf": 99}}, "recording")
    with pytest.raises(ConfigError, match="no 'libnothing' encoder"):
        DatasetWriter(root, features, video=VideoSettings(codec="libnothing"))
    with pytest.raises(ConfigError, match="recording is off"):
        EpisodeRecorder.create(RecordingConfig(), features)


def test_cameras_by_name_or_by_column(root: Path, features: RecordingFeatures) -> None:
    with EpisodeRecorder(DatasetWriter(root, features), features) as recorder:
        recorder.start_episode("observation-style keys")
        t = ticks(2, seed=1)
        z = np.zeros(6, np.float32)
        assert recorder.add_frame(0.0, z, z, z, {"observation.images.front": t[0].image}, "policy", False)
        assert recorder.add_frame(0.033, z, z, z, {"front": t[1].image}, "policy", False)
        with pytest.raises(RecordingInputError, match="expected cameras"):
            recorder.add_frame(
                0.066, z, z, z, {"front": t[1].image, "observation.images.front": t[1].image}, "policy", False
            )
    assert DatasetReader(root).episode(0).length == 2


class BrokenDiscard(GatedWriter):
    def __init__(self, writer: DatasetWriter) -> None:
        super().__init__(writer)
        self.gate.set()
        self.broken = True

    def abort_episode(self) -> None:
        if self.broken:
            self.broken = False
            raise RuntimeError("cleanup exploded")
        super().abort_episode()


def test_the_writer_thread_outlives_an_unexpected_failure(
    root: Path, features: RecordingFeatures, caplog: pytest.LogCaptureFixture
) -> None:
    sink = BrokenDiscard(DatasetWriter(root, features))
    with caplog.at_level(logging.ERROR), EpisodeRecorder(sink, features, buffer_frames=2) as recorder:
        recorder.start_episode("discarded")
        add(recorder, ticks(1, seed=1)[0])
        recorder.discard_episode()
        assert recorder.flush()
        assert "cleanup exploded" in (recorder.status().last_error or "")
        recorder.start_episode("kept")
        for t in ticks(5, seed=2):
            assert add(recorder, t)
            assert recorder.flush()  # slots keep coming back
    assert DatasetReader(root).tasks == ["kept"]
    assert check_dataset(root).problems == []
