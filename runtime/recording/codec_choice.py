"""Which video encoder records here: chosen once, when the recorder starts, by what opens and keeps
up on this computer.

``[recording] codec = "auto"`` tries, in order:

1. the iGPU's hardware H.264 encoder (``h264_qsv``, then ``h264_vaapi``), only when a render node
   (``/dev/dri/renderD*``) exists and the encoder opens and encodes a frame;
2. SVT-AV1 (LeRobot's default) at the configured preset, if it keeps up;
3. x264 at ``ultrafast``, if it keeps up;
4. failing all, the fastest software encoder measured (drops are then expected, and said so).

"Keeps up": a few synthetic frames of the largest camera's size are encoded (flushed included), and
the CPU time per frame must fit in ``HEADROOM`` of the tick times the share of a CPU each camera's
encoder gets (one CPU is left to the control loop and the policy; each encoder is one thread). The
order puts AV1 first because its files are what LeRobot writes and reads by default; x264 ultrafast
costs about a tenth of its CPU time (1.6 against 15-18 ms for a 640x480 frame here, `bench record`).
Every candidate tried and why it was passed over is logged in one line.
"""

from __future__ import annotations

import glob
import logging
import tempfile
import time
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from runtime.errors import ConfigError
from runtime.recording.encoder_process import cpu_count
from runtime.recording.features import RecordingFeatures
from runtime.recording.video import VideoSettings, _av

if TYPE_CHECKING:
    from runtime.recording.config import RecordingConfig

log = logging.getLogger(__name__)

HARDWARE = ("h264_qsv", "h264_vaapi")
SOFTWARE = ("libsvtav1", "libx264")
HEADROOM = 0.8  # of the time each encoder may use: room for a busier second than the probe saw
PROBE_FRAMES = 12
RENDER_NODES = "/dev/dri/renderD*"


@dataclass(frozen=True)
class Probe:
    codec: str
    ok: bool
    ms_per_frame: float  # CPU time (all the encoder's threads) or wall time, whichever is larger
    why: str = ""


def probe_frames(count: int, height: int, width: int) -> list[npt.NDArray[np.uint8]]:
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


def measure(video: VideoSettings, height: int, width: int, fps: int, frames: int = PROBE_FRAMES) -> Probe:
    """Open ``video.codec`` and encode ``frames`` frames into a scratch file; the cost per frame.

    The calling thread's scheduling is put back afterwards (SVT-AV1 raises it to SCHED_FIFO 99, and
    whatever this thread starts later would inherit it)."""
    from runtime.scheduling import keep_scheduling

    with keep_scheduling():
        return _measure(video, height, width, fps, frames)


def _measure(video: VideoSettings, height: int, width: int, fps: int, frames: int) -> Probe:
    av = _av()
    images = probe_frames(frames, height, width)
    with tempfile.TemporaryDirectory(prefix="codec-probe-") as tmp:
        try:
            out = av.open(str(Path(tmp) / "probe.mp4"), mode="w")
        except Exception as e:
            return Probe(video.codec, False, 0.0, f"cannot open a file: {e}")
        try:
            stream = out.add_stream(video.codec, rate=fps, options=video.options())
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            stream.codec_context.time_base = Fraction(1, fps)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for i, image in enumerate(images):
                frame = av.VideoFrame.from_ndarray(image, format="rgb24")
                frame.pts = i
                for packet in stream.encode(frame):
                    out.mux(packet)
            for packet in stream.encode(None):
                out.mux(packet)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        except Exception as e:
            return Probe(video.codec, False, 0.0, f"does not open or encode: {type(e).__name__}: {e}")
        finally:
            try:
                out.close()
            except Exception:  # a probe that failed half-way: the scratch folder goes anyway
                log.debug("closing the codec probe failed", exc_info=True)
    return Probe(video.codec, True, 1000 * max(cpu, wall) / frames)


def budget_ms(cameras: int, fps: int, cpus: int) -> float:
    """CPU time each camera's encoder may spend per frame and still keep up."""
    share = min(1.0, max(1, cpus - 1) / max(1, cameras))  # one encoder is one thread: at most a CPU
    return HEADROOM * share * 1000 / fps


def settings_for(codec: str, base: VideoSettings) -> VideoSettings:
    return replace(base, codec=codec)


def choose_video(config: RecordingConfig, features: RecordingFeatures) -> VideoSettings:
    """The encoder settings the recorder uses: ``config.codec`` as named, or chosen (``auto``)."""
    base = config.video
    if config.codec != "auto":
        video = settings_for(config.codec, base)
        video.check_available()
        if config.codec in HARDWARE:
            height, width = max(features.cameras.values(), key=lambda hw: hw[0] * hw[1])
            probe = measure(video, height, width, features.fps, frames=2)
            if not probe.ok:
                raise ConfigError(f'recording.codec: {config.codec!r} {probe.why}; try "auto" or a software codec')
        log.info("recording codec: %s (as configured)", video.codec)
        return video
    return choose_auto(base, features, cpus=cpu_count(), render_nodes=glob.glob(RENDER_NODES))


def choose_auto(
    base: VideoSettings, features: RecordingFeatures, *, cpus: int, render_nodes: list[str]
) -> VideoSettings:
    height, width = max(features.cameras.values(), key=lambda hw: hw[0] * hw[1])
    cameras, fps = len(features.cameras), features.fps
    budget = budget_ms(cameras, fps, cpus)
    tried: list[str] = []
    if not render_nodes:
        tried.append(f"hardware {'/'.join(HARDWARE)}: not tried, no render node ({RENDER_NODES})")
    else:
        for codec in HARDWARE:
            probe = measure(settings_for(codec, base), height, width, fps, frames=2)
            if probe.ok:
                log.info("recording codec: %s on %s (%s)", codec, render_nodes[0], "; ".join(tried) or "first choice")
                return settings_for(codec, base)
            tried.append(f"{codec}: {probe.why}")
    probes: list[Probe] = []
    for codec in SOFTWARE:
        video = settings_for(codec, base)
        probe = measure(video, height, width, fps)
        probes.append(probe)
        if probe.ok and probe.ms_per_frame <= budget:
            log.info(
                "recording codec: %s, %.1f ms of CPU a %dx%d frame, within the %.1f ms each of %d camera(s) may use "
                "on %d CPU(s) (%s)",
                codec,
                probe.ms_per_frame,
                width,
                height,
                budget,
                cameras,
                cpus,
                "; ".join(tried) or "first choice",
            )
            return video
        tried.append(
            f"{codec}: {probe.why}" if not probe.ok else f"{codec}: {probe.ms_per_frame:.1f} ms > {budget:.1f}"
        )
    working = [p for p in probes if p.ok]
    if not working:
        raise ConfigError(f"recording.codec: no encoder opens here ({'; '.join(tried)}); install PyAV with FFmpeg")
    fastest = min(working, key=lambda p: p.ms_per_frame)
    log.warning(
        "recording codec: %s, the fastest, but none keeps up with %d camera(s) at %d fps on %d CPU(s) (%s): "
        "frames will be dropped (counted per episode)",
        fastest.codec,
        cameras,
        fps,
        cpus,
        "; ".join(tried),
    )
    return settings_for(fastest.codec, base)
