"""Recording through the encoder processes, as the daemon does (``EpisodeRecorder.create``): the
dataset is whole and checks; an encoder that cannot keep up drops ticks, counted per camera and per
episode and written in the episode's row, without ever holding up ``add_frame``; an encoder that
dies fails its episode only; saving one episode never holds up the next."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from drivers.calibration import SO101_JOINTS
from runtime.recording import EpisodeRecorder, RecordingConfig, RecordingFeatures
from runtime.recording.check import check_dataset
from runtime.recording.reader import DatasetReader
from runtime.recording.tables import pa
from tests.recording.conftest import HEIGHT, WIDTH, Tick, add, frame_image, ticks

pytestmark = pytest.mark.usefixtures("no_leaks")


def two_cameras() -> RecordingFeatures:
    cams = {"front": (HEIGHT, WIDTH), "wrist": (HEIGHT, WIDTH)}
    return RecordingFeatures(fps=30, joint_names=SO101_JOINTS, cameras=cams, robot_type="so101_follower")


def add_both(recorder: EpisodeRecorder, tick: Tick) -> bool:
    images = {"front": tick.image, "wrist": tick.image[::-1].copy()}
    return recorder.add_frame(tick.t_s, tick.state, tick.action, tick.requested, images, tick.source, tick.intervention)


def episode_rows(root: Path) -> list[dict[str, object]]:
    files = sorted((root / "meta" / "episodes").glob("*/*.parquet"))
    return [row for f in files for row in pa().parquet.read_table(f).to_pylist()]


def test_episodes_through_the_encoder_processes(root: Path) -> None:
    features = two_cameras()
    config = RecordingConfig(dataset_dir=str(root), codec="libx264")
    with EpisodeRecorder.create(config, features) as recorder:
        pids = {enc.pid for enc in recorder._encoders.values()}
        assert os.getpid() not in pids and len(pids) == 2
        for n, task in ((10, "pick"), (6, "place")):
            recorder.start_episode(task)
            for t in ticks(n, seed=n):
                assert add_both(recorder, t)
                time.sleep(1 / 60)  # a loop's pace, roughly: the encoders keep up with it
            recorder.end_episode()
        assert recorder.flush(60)
        status = recorder.status()
    assert (status.episodes_written, status.frames_written, status.encoder_drops) == (2, 16, 0)
    assert status.codec == "libx264"
    assert check_dataset(root).ok, check_dataset(root).problems
    reader = DatasetReader(root)
    episode = reader.episode(1)
    assert episode.images["observation.images.front"].shape == (6, HEIGHT, WIDTH, 3)
    means = episode.images["observation.images.front"].reshape(6, -1).mean(axis=1)
    want = [frame_image(k).mean() for k in range(6)]
    assert max(abs(m - w) for m, w in zip(means, want, strict=True)) < 3
    rows = episode_rows(root)
    assert [r["recording/frames_dropped"] for r in rows] == [0, 0]
    assert [r["recording/observation.images.wrist/frames_dropped"] for r in rows] == [0, 0]
    assert not (root / ".recording").exists()


def test_a_slow_encoder_drops_ticks_counts_them_and_never_blocks(
    root: Path, features: RecordingFeatures, caplog: pytest.LogCaptureFixture
) -> None:
    config = RecordingConfig(
        dataset_dir=str(root), codec="libx264", camera_queue_frames=3, encoder_delay_ms=60, max_drop_rate=0.05
    )
    frames = ticks(30, seed=3)
    calls_ms: list[float] = []
    caplog.set_level(logging.WARNING, logger="runtime.recording.recorder")
    with EpisodeRecorder.create(config, features) as recorder:
        recorder.start_episode("slow")
        for t in frames:
            t0 = time.perf_counter()
            assert add(recorder, t)  # a drop is not the end of the episode
            calls_ms.append((time.perf_counter() - t0) * 1000)
            time.sleep(1 / 30)
        live = recorder.status()
        recorder.end_episode()
        # the next episode starts while the slow encoders still finish the first
        recorder.start_episode("after")
        for t in ticks(12, seed=4):
            assert add(recorder, t)
            time.sleep(1 / 30)
        recorder.end_episode()
        assert recorder.flush(60)
        status = recorder.status()
    assert max(calls_ms) < 20, calls_ms
    rows = episode_rows(root)
    dropped = rows[0]["recording/frames_dropped"]
    assert isinstance(dropped, int) and 5 <= dropped <= 29  # 60 ms a frame against 33 ms ticks
    assert rows[0]["recording/observation.images.front/frames_dropped"] == dropped
    assert rows[0]["recording/drop_rate"] == pytest.approx(dropped / 30)
    assert rows[0]["recording/drops_over_limit"] is True
    assert rows[0]["length"] == 30 - dropped
    assert live.episode_drop_rate == pytest.approx(dropped / 30)
    # the second episode began while the first was still being encoded: it went on, dropping too
    later = rows[1]["recording/frames_dropped"]
    assert isinstance(later, int) and rows[1]["length"] == 12 - later
    assert status.encoder_drops == dropped + later
    assert status.encoder_drops_by_camera == {"observation.images.front": dropped + later}
    assert (status.episodes_written, status.frames_written) == (2, 42 - dropped - later)
    assert status.episodes_over_drop_rate == (2 if later else 1)
    lines = [r.getMessage() for r in caplog.records if "max_drop_rate" in r.getMessage()]
    assert f"episode 0 dropped {dropped} of 30 ticks" in lines[0]
    report = check_dataset(root)
    assert report.ok, report.problems
    # the rows kept are the ticks recorded, in order (their control time shows the gaps)
    times = DatasetReader(root).episode(0).columns["control.time_s"]
    assert len(times) == 30 - dropped and all(b > a for a, b in itertools.pairwise(times))


def test_a_dead_encoder_fails_its_episode_only(root: Path, features: RecordingFeatures) -> None:
    config = RecordingConfig(dataset_dir=str(root), codec="libx264")
    with EpisodeRecorder.create(config, features) as recorder:
        recorder.start_episode("killed")
        for t in ticks(3, seed=5):
            assert add(recorder, t)
        encoder = recorder._encoders["front"]
        first = encoder.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 20
        refused = False
        for t in ticks(600, seed=6):  # the loop goes on ticking until the death is seen
            if not add(recorder, t):
                refused = True
                break
            assert time.monotonic() < deadline, "the dead encoder was never noticed"
            time.sleep(0.01)
        assert refused and not recorder.recording
        while (encoder.pid == first or not encoder.alive) and time.monotonic() < deadline:
            time.sleep(0.05)
        recorder.start_episode("after")
        for t in ticks(4, seed=7):
            assert add(recorder, t)
        recorder.end_episode()
        assert recorder.flush(60)
        status = recorder.status()
    assert status.encoder_deaths == 1 and "exited with code -9" in (status.last_error or "")
    assert (status.episodes_failed, status.episodes_written, status.frames_written) == (1, 1, 4)
    assert check_dataset(root).ok
    assert DatasetReader(root).num_episodes == 1


def test_the_drop_counts_are_scraped(root: Path, features: RecordingFeatures) -> None:
    pytest.importorskip("prometheus_client")
    from runtime.metrics import RuntimeCollector

    config = RecordingConfig(dataset_dir=str(root), codec="libx264", camera_queue_frames=2, encoder_delay_ms=80)
    with EpisodeRecorder.create(config, features) as recorder:
        recorder.start_episode("scraped")
        for t in ticks(8, seed=8):
            assert add(recorder, t)
        recorder.end_episode()
        assert recorder.flush(60)
        status = recorder.status()
    collector = RuntimeCollector(_unused, _unused, list, recording=lambda: status)
    families = {f.name: f for f in collector.recording_metrics()}
    dropped = families["lerobot_runtime_recording_frames_dropped"].samples
    assert [(s.labels["camera"], s.value) for s in dropped] == [("observation.images.front", status.encoder_drops)]
    assert status.encoder_drops >= 4  # 8 ticks at once into 2 slots of an 80 ms encoder
    assert families["lerobot_runtime_recording_episodes_written"].samples[0].value == 1


def _unused() -> Any:
    raise AssertionError("only the recording's metrics are read here")


def _threads(pid: int) -> dict[int, tuple[int, int]]:
    """Each thread of ``pid``: the CPU it last ran on (field 39 of /proc/PID/task/TID/stat) and the
    CPU time it has used (utime + stime, fields 14 and 15)."""
    seen = {}
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # fields 3.. follow the command name
        except (OSError, IndexError):
            continue  # the thread ended between listing and reading
        seen[int(stat.parent.name)] = (int(fields[36]), int(fields[11]) + int(fields[12]))
    return seen


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a CPU to keep free")
def test_encoders_run_only_on_the_cpus_they_are_given(root: Path) -> None:
    """The daemon gives the encoders every CPU but the control loop's: every thread of every encoder
    that ran while they encoded was seen running there."""
    allowed = max(os.sched_getaffinity(0))
    config = RecordingConfig(dataset_dir=str(root), codec="libx264")
    with EpisodeRecorder.create(config, two_cameras(), cpus=frozenset({allowed})) as recorder:
        pids = [enc.pid for enc in recorder._encoders.values()]
        start = {pid: _threads(pid) for pid in pids}
        recorder.start_episode("pinned")
        ran_on: list[int] = []
        for t in ticks(40, seed=3):
            assert add_both(recorder, t)
            for pid in pids:
                for tid, (cpu, used) in _threads(pid).items():
                    if used > start[pid].get(tid, (0, -1))[1]:  # it ran since the episode began
                        ran_on.append(cpu)
            time.sleep(1 / 60)
        recorder.end_episode()
        assert recorder.flush(60)
        masks = {frozenset(os.sched_getaffinity(tid)) for pid in pids for tid in _threads(pid)}
    assert len(ran_on) >= 40
    assert set(ran_on) == {allowed}
    assert masks == {frozenset({allowed})}


def test_encoders_and_the_probe_leave_no_real_time_thread_behind(root: Path) -> None:
    """SVT-AV1 raises the thread that opens it (and its own threads) to SCHED_FIFO 99 when the process
    may: the codec probe puts the daemon's thread back, and every thread of an encoding encoder
    process is SCHED_OTHER, below the control loop's priority."""
    from runtime.recording.codec_choice import measure
    from runtime.recording.video import VideoSettings

    before = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
    probe = measure(VideoSettings(codec="libsvtav1"), 96, 128, 30, frames=3)
    assert probe.ok, probe
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == before
    left = [t for t in os.listdir("/proc/self/task") if os.sched_getscheduler(int(t)) != os.SCHED_OTHER]
    assert not left, f"threads left real-time after the probe: {left}"
    # and the native threads this thread starts afterwards (ZeroMQ's, for the camera streams): the C
    # library's own copy of its class was put back too
    import zmq

    before_zmq = set(os.listdir("/proc/self/task"))
    context = zmq.Context()
    socket = context.socket(zmq.SUB)
    try:
        time.sleep(0.1)
        native = set(os.listdir("/proc/self/task")) - before_zmq
        assert native and all(os.sched_getscheduler(int(t)) == os.SCHED_OTHER for t in native)
    finally:
        socket.close(0)
        context.term()
    config = RecordingConfig(dataset_dir=str(root), codec="libsvtav1")
    with EpisodeRecorder.create(config, two_cameras()) as recorder:
        pids = [enc.pid for enc in recorder._encoders.values()]
        recorder.start_episode("scheduling")
        for t in ticks(10, seed=4):
            assert add_both(recorder, t)
            time.sleep(1 / 60)
        time.sleep(0.3)  # the codecs are open and encoding by now
        policies = {(pid, tid): os.sched_getscheduler(tid) for pid in pids if pid is not None for tid in _threads(pid)}
        recorder.end_episode()
        assert recorder.flush(60)
    assert policies and all(p == os.SCHED_OTHER for p in policies.values()), policies
