"""``lerobot-runtime bench record``: what recording costs the control loop, and whether the disk side
keeps up.

Two measurements in one run, on camera frames of the given size:

- the writer's own cost per frame (video encoding, statistics, buffering), called directly, next to
  the control tick it has to fit in (``writer_ms_per_frame`` / tick);
- a control loop paced on absolute deadlines at ``fps`` for ``seconds``, once without recording and
  once recording every tick through :class:`EpisodeRecorder`: the ``add_frame`` call's latency and
  how late each tick woke, side by side, with the overruns counted.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from drivers.calibration import SO101_JOINTS
from runtime.bench.stats import summarize
from runtime.recording import DatasetWriter, EpisodeRecorder, RecordingFeatures, VideoSettings


@dataclass(frozen=True)
class RecordBench:
    cameras: int
    height_px: int
    width_px: int
    fps: int
    codec: str
    tick_ms: float
    writer_ms_per_frame: float
    writer_share_of_tick: float
    add_frame_ms: dict[str, float]
    tick_late_ms_idle: dict[str, float]
    tick_late_ms_recording: dict[str, float]
    ticks: int
    max_queued_frames: int
    buffer_frames: int
    overruns: int
    frames_written: int


def _frames(count: int, height: int, width: int) -> list[npt.NDArray[np.uint8]]:
    """A moving gradient with a little noise: closer to a camera than flat or random frames."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    out = []
    for k in range(count):
        base = ((x + 3 * k) % 256 + (y // 2)) % 256
        img = np.stack([base, (base + 85) % 256, (base + 170) % 256], axis=-1).astype(np.int16)
        img += rng.integers(-4, 5, img.shape, dtype=np.int16)
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


def _paced_loop(fps: int, seconds: float, body: Any) -> list[float]:
    """Run ``body(i)`` on absolute deadlines; return how late each tick woke (ms)."""
    period = 1.0 / fps
    late: list[float] = []
    start = time.perf_counter() + period
    for i in range(round(seconds * fps)):
        deadline = start + i * period
        now = time.perf_counter()
        if deadline > now:
            time.sleep(deadline - now)
        late.append((time.perf_counter() - deadline) * 1000)
        body(i)
    return late


def run_bench(
    *,
    cameras: int = 1,
    height: int = 480,
    width: int = 640,
    fps: int = 30,
    seconds: float = 10.0,
    codec: str = "libsvtav1",
    buffer_frames: int = 90,
) -> RecordBench:
    names = [f"cam{i}" for i in range(cameras)]
    features = RecordingFeatures(fps=fps, joint_names=SO101_JOINTS, cameras={n: (height, width) for n in names})
    video = VideoSettings(codec=codec)
    pool = _frames(60, height, width)
    joints = np.zeros(6, np.float32)
    with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp:
        # the writer alone, frame after frame
        writer = DatasetWriter(Path(tmp) / "direct", features, video=video)
        from runtime.recording.frames import FrameSlot, fill_slot

        slot = FrameSlot(features)
        writer.begin_episode("bench")
        n_direct = 3 * fps
        t0 = time.perf_counter()
        for i in range(n_direct):
            fill_slot(
                slot,
                features,
                i / fps,
                joints,
                joints,
                joints,
                {n: pool[i % len(pool)] for n in names},
                "policy",
                False,
            )
            writer.write_frame(slot)
        writer.finish_episode()
        writer_ms = (time.perf_counter() - t0) * 1000 / n_direct
        writer.close()

        # a paced control loop: idle, then recording every tick
        idle_late = _paced_loop(fps, seconds / 2, lambda i: None)
        recorder = EpisodeRecorder(
            DatasetWriter(Path(tmp) / "paced", features, video=video), features, buffer_frames=buffer_frames
        )
        call_ms: list[float] = []
        queued: list[int] = []
        images = [{n: pool[k] for n in names} for k in range(len(pool))]

        def tick(i: int) -> None:
            t = time.perf_counter()
            if not recorder.recording:
                recorder.start_episode("bench")
            recorder.add_frame(i / fps, joints, joints, joints, images[i % len(images)], "policy", False)
            call_ms.append((time.perf_counter() - t) * 1000)
            queued.append(recorder.status().queued_frames)

        rec_late = _paced_loop(fps, seconds, tick)
        recorder.end_episode()
        recorder.close()
        status = recorder.status()
    tick_ms = 1000 / fps
    return RecordBench(
        cameras=cameras,
        height_px=height,
        width_px=width,
        fps=fps,
        codec=codec,
        tick_ms=round(tick_ms, 3),
        writer_ms_per_frame=round(writer_ms, 3),
        writer_share_of_tick=round(writer_ms / tick_ms, 3),
        add_frame_ms=summarize(call_ms),
        tick_late_ms_idle=summarize(idle_late),
        tick_late_ms_recording=summarize(rec_late),
        ticks=len(call_ms),
        max_queued_frames=max(queued),
        buffer_frames=buffer_frames,
        overruns=status.overruns,
        frames_written=status.frames_written,
    )


def format_table(result: RecordBench) -> str:
    r = result
    lines = [
        f"recording {r.cameras} camera(s) of {r.width_px}x{r.height_px} at {r.fps} Hz with {r.codec}",
        f"  writer cost per frame      {r.writer_ms_per_frame:8.2f} ms  = {r.writer_share_of_tick:.2f} x the "
        f"{r.tick_ms:.1f} ms tick (must stay < 1 on the cores the writer gets)",
        f"  add_frame on the loop      median {r.add_frame_ms['median']:.3f} ms  p99 {r.add_frame_ms['p99']:.3f} ms",
        f"  tick wake-up lateness      idle p99 {r.tick_late_ms_idle['p99']:.3f} ms  recording p99 "
        f"{r.tick_late_ms_recording['p99']:.3f} ms",
        f"  ticks {r.ticks}, frames written {r.frames_written}, overruns {r.overruns}, most frames waiting for "
        f"the writer {r.max_queued_frames} of {r.buffer_frames} (a writer that keeps up stays near 1)",
    ]
    return "\n".join(lines)


def as_dict(result: RecordBench) -> dict[str, Any]:
    return asdict(result)
