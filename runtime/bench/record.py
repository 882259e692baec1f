"""``lerobot-runtime bench record``: what recording costs, per video codec, for one and two cameras,
side by side in one run.

Each row records one episode through :meth:`EpisodeRecorder.create`, as the daemon does (one encoder
process per camera, frames through shared memory), from a control loop paced on absolute deadlines
at ``fps`` for ``seconds``: the encoders' CPU time per frame, the share of ticks dropped because an
encoder was behind, the ``add_frame`` call's latency on the loop and how late the loop's ticks woke
(next to the same loop not recording). The last line says which codec ``codec = "auto"`` picks for
each camera count on this computer.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drivers.calibration import SO101_JOINTS
from runtime.bench.machine import cpu_summary
from runtime.bench.stats import summarize
from runtime.recording import EpisodeRecorder, RecordingConfig, RecordingFeatures, VideoSettings
from runtime.recording.codec_choice import choose_auto, probe_frames
from runtime.recording.encoder_process import cpu_count

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordRow:
    codec: str
    cameras: int
    encoder_ms_per_frame: float  # CPU time of one camera's encoder process per frame (mean over cameras)
    drop_rate: float
    ticks: int
    frames_written: int
    overruns: int
    add_frame_ms: dict[str, float]
    tick_late_ms: dict[str, float]


@dataclass(frozen=True)
class RecordBench:
    height_px: int
    width_px: int
    fps: int
    seconds: float
    cpus: int
    cpu_flags: list[str]
    tick_late_ms_idle: dict[str, float]
    rows: list[RecordRow]
    auto: dict[int, str]  # cameras -> the codec "auto" picks here


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


def _row(codec: str, cameras: int, height: int, width: int, fps: int, seconds: float, root: Path) -> RecordRow:
    names = [f"cam{i}" for i in range(cameras)]
    features = RecordingFeatures(fps=fps, joint_names=SO101_JOINTS, cameras={n: (height, width) for n in names})
    pool = probe_frames(30, height, width)
    images = [{n: pool[(k + 7 * j) % len(pool)] for j, n in enumerate(names)} for k in range(len(pool))]
    joints = np.zeros(6, np.float32)
    call_ms: list[float] = []
    with EpisodeRecorder.create(RecordingConfig(dataset_dir=str(root), codec=codec), features) as recorder:
        recorder.start_episode("bench")

        def tick(i: int) -> None:
            t = time.perf_counter()
            recorder.add_frame(i / fps, joints, joints, joints, images[i % len(images)], "policy", False)
            call_ms.append((time.perf_counter() - t) * 1000)

        late = _paced_loop(fps, seconds, tick)
        recorder.end_episode()
        recorder.flush(120)
        status = recorder.status()
    ticks = len(call_ms)
    per_camera = list(status.encode_ms_per_frame.values())
    return RecordRow(
        codec=codec,
        cameras=cameras,
        encoder_ms_per_frame=round(sum(per_camera) / len(per_camera), 2) if per_camera else float("nan"),
        drop_rate=round(status.encoder_drops / ticks, 4) if ticks else 0.0,
        ticks=ticks,
        frames_written=status.frames_written,
        overruns=status.overruns,
        add_frame_ms=summarize(call_ms),
        tick_late_ms=summarize(late),
    )


def run_bench(
    *,
    codecs: Sequence[str] = ("libsvtav1", "libx264"),
    cameras: Sequence[int] = (1, 2),
    height: int = 480,
    width: int = 640,
    fps: int = 30,
    seconds: float = 6.0,
) -> RecordBench:
    idle = _paced_loop(fps, min(seconds, 3.0), lambda i: None)
    rows: list[RecordRow] = []
    with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp:
        for codec in codecs:
            for n in cameras:
                rows.append(_row(codec, n, height, width, fps, seconds, Path(tmp) / f"{codec}-{n}"))
    auto = {}
    for n in cameras:
        features = RecordingFeatures(
            fps=fps, joint_names=SO101_JOINTS, cameras={f"cam{i}": (height, width) for i in range(n)}
        )
        auto[n] = choose_auto(VideoSettings(), features, cpus=cpu_count(), render_nodes=[]).codec
    return RecordBench(
        height_px=height,
        width_px=width,
        fps=fps,
        seconds=seconds,
        cpus=cpu_count(),
        cpu_flags=cpu_summary()["cpu_flags"],
        tick_late_ms_idle=summarize(idle),
        rows=rows,
        auto=auto,
    )


def format_table(result: RecordBench) -> str:
    r = result
    lines = [
        f"recording {r.width_px}x{r.height_px} at {r.fps} Hz, {r.seconds:g} s a row, {r.cpus} CPU(s), "
        f"CPU flags: {', '.join(r.cpu_flags) or 'none of avx2/avx512_vnni/avx512_bf16'}",
        f"{'codec':<11} {'cams':>4} {'encoder ms/frame':>16} {'drop rate':>9} {'frames':>7} {'overruns':>8} "
        f"{'add_frame p50/p99 ms':>21} {'tick late p99 ms':>16}",
    ]
    for row in r.rows:
        add = f"{row.add_frame_ms['median']:.3f} / {row.add_frame_ms['p99']:.3f}"
        lines.append(
            f"{row.codec:<11} {row.cameras:>4} {row.encoder_ms_per_frame:>16.2f} {100 * row.drop_rate:>8.1f}% "
            f"{row.frames_written:>7} {row.overruns:>8} {add:>21} {row.tick_late_ms['p99']:>16.2f}"
        )
    lines.append(
        f"tick late p99 not recording: {r.tick_late_ms_idle['p99']:.2f} ms; the tick is {1000 / r.fps:.1f} ms, an "
        "encoder keeps up while its ms/frame stays under it on the CPU it gets"
    )
    lines.append('codec = "auto" picks here: ' + ", ".join(f"{n} camera(s): {c}" for n, c in r.auto.items()))
    return "\n".join(lines)


def as_dict(result: RecordBench) -> dict[str, Any]:
    return asdict(result)
