"""Camera streams as video files, with PyAV (FFmpeg).

Each episode's frames are encoded as they arrive into a file of their own; when the episode ends
that file is appended to the camera's current dataset file by copying packets (no re-encode),
shifted in time so episodes follow one another. LeRobot finds an episode's frames by time
(``from_timestamp`` + ``frame_index / fps``), so every frame gets the presentation time
``index / fps`` exactly.

Defaults follow LeRobot 0.4.x: AV1 (SVT-AV1, preset 12, CRF 30), yuv420p, a key frame every 2
frames so any frame decodes after at most one other.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from runtime.errors import ConfigError, MissingDependencyError

log = logging.getLogger(__name__)

# SVT-AV1 prints a banner of its settings to stderr for every file it opens; keep only its errors
# out of the daemon's journal (a value set by the user wins).
os.environ.setdefault("SVT_LOG", "1")


def _av() -> Any:
    try:
        import av
    except ImportError as e:
        raise MissingDependencyError(
            "recording camera streams needs PyAV: pip install 'lerobot-runtime[record]'"
        ) from e
    return av


@dataclass(frozen=True)
class VideoSettings:
    """``codec``: an FFmpeg encoder PyAV has (``libsvtav1``, ``libx264``, ``h264``...); ``crf``:
    quality, lower is better and bigger; ``gop_frames``: frames between key frames; ``preset``:
    SVT-AV1 speed (0 slow..13 fast), unused by other codecs; ``x264_preset``: x264's speed
    (``ultrafast``: a tenth of SVT-AV1's CPU time per frame, files about as large); ``threads``:
    encoder threads (0: codec default; keep it low on the robot, the cores belong to the control
    loop and the policy)."""

    codec: str = "libsvtav1"
    crf: int = 30
    gop_frames: int = 2
    preset: int = 12
    x264_preset: str = "ultrafast"
    threads: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.crf <= 63:
            raise ConfigError(f"recording.video.crf: expected 0..63, got {self.crf}")
        if self.gop_frames < 1:
            raise ConfigError(f"recording.video.gop_frames: expected >= 1, got {self.gop_frames}")
        if not 0 <= self.preset <= 13:
            raise ConfigError(f"recording.video.preset: expected 0..13, got {self.preset}")
        if self.threads < 0:
            raise ConfigError(f"recording.video.threads: expected >= 0, got {self.threads}")

    def check_available(self) -> None:
        """Refuse up front an encoder this FFmpeg build lacks, naming the ones to try."""
        av = _av()
        try:
            av.codec.Codec(self.codec, "w")
        except Exception as e:
            have = [c for c in ("libsvtav1", "libaom-av1", "libx264", "h264", "hevc") if _has_encoder(av, c)]
            raise ConfigError(
                f"recording.video.codec: this PyAV build has no {self.codec!r} encoder; available: {have}"
            ) from e

    def options(self) -> dict[str, str]:
        opts = {"g": str(self.gop_frames), "crf": str(self.crf)}
        if self.codec == "libsvtav1":
            opts["preset"] = str(self.preset)
            if self.threads:
                opts["svtav1-params"] = f"lp={self.threads}"
        else:
            if self.codec in ("libx264", "h264"):
                opts["preset"] = self.x264_preset
            if self.threads:
                opts["threads"] = str(self.threads)
        return opts


def _has_encoder(av: Any, name: str) -> bool:
    try:
        av.codec.Codec(name, "w")
    except Exception:
        return False
    return True


class EpisodeVideo:
    """One camera's frames of one episode, encoded as they come into ``path``."""

    def __init__(self, path: Path, fps: int, height: int, width: int, settings: VideoSettings) -> None:
        av = _av()
        self.path = path
        self.frames = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._container = av.open(str(path), mode="w")
        try:
            self._stream = self._container.add_stream(settings.codec, rate=fps, options=settings.options())
            self._stream.width = width
            self._stream.height = height
            self._stream.pix_fmt = "yuv420p"
            self._stream.codec_context.time_base = Fraction(1, fps)
        except Exception:
            self._container.close()
            raise

    def add(self, image: npt.NDArray[np.uint8]) -> None:
        frame = _av().VideoFrame.from_ndarray(image, format="rgb24")
        frame.pts = self.frames
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.frames += 1

    def finish(self) -> Path:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self.path

    def abort(self) -> None:
        try:
            self._container.close()
        except Exception:  # a half-written file is deleted anyway
            log.debug("closing an aborted episode video failed", exc_info=True)
        self.path.unlink(missing_ok=True)


def _packets(container: Any) -> Iterator[Any]:
    """The packets of ``container``'s first video stream, without the demuxer's end-of-stream marker."""
    return (p for p in container.demux(container.streams.video[0]) if p.dts is not None)


@contextmanager
def _rewritten(path: Path, template: Any) -> Iterator[Callable[[Any], None]]:
    """``mux(packet)`` writes ``path`` anew in the stream of ``template``'s first video stream, by copying
    packets; the file is replaced atomically at the end (a crash or an error leaves the old one whole)."""
    av = _av()
    tmp = path.with_name(path.name + ".tmp")
    with av.open(str(tmp), mode="w", format="mp4") as out:
        in_stream = template.streams.video[0]
        stream = out.add_stream_from_template(in_stream, opaque=True)
        stream.time_base = in_stream.time_base

        def mux(packet: Any) -> None:
            packet.stream = stream
            out.mux(packet)

        yield mux
    os.replace(tmp, path)


def append_video(dst: Path, src: Path, dst_frames: int, fps: int) -> None:
    """Append ``src`` after the ``dst_frames`` frames of ``dst`` by copying packets (``dst`` is
    replaced atomically, so a crash leaves the previous file whole)."""
    av = _av()
    with av.open(str(dst)) as first, av.open(str(src)) as second, _rewritten(dst, first) as mux:
        for packet in _packets(first):
            mux(packet)
        # the second part starts where the first ends, in the output's time base
        shift = Fraction(dst_frames, fps)
        for packet in _packets(second):
            offset = round(shift / packet.time_base)
            packet.pts = None if packet.pts is None else packet.pts + offset
            packet.dts = packet.dts + offset
            mux(packet)


def keep_frames(path: Path, frames: int, fps: int) -> None:
    """Keep the first ``frames`` frames of ``path``, a file appended to episode by episode, by copying
    packets (replaced atomically). Every episode's packets start with a key frame at its own span and
    come after the earlier ones', so cutting at an episode's start keeps every packet the rest need."""
    av = _av()
    cut = Fraction(2 * frames - 1, 2 * fps)  # half a frame before the first one dropped
    with av.open(str(path)) as src, _rewritten(path, src) as mux:
        for packet in _packets(src):
            if packet.pts is None or packet.pts * packet.time_base < cut:
                mux(packet)


def frame_times(path: Path) -> list[float]:
    """Presentation time (seconds) of every frame in the file's first video stream, in order."""
    av = _av()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        times = [
            float(packet.pts * packet.time_base)
            for packet in container.demux(stream)
            if packet.pts is not None and packet.size > 0
        ]
    return sorted(times)


def video_info(path: Path) -> dict[str, Any]:
    """The ``info`` LeRobot keeps for a camera feature in ``meta/info.json``."""
    av = _av()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        info: dict[str, Any] = {
            "video.height": stream.height,
            "video.width": stream.width,
            "video.codec": stream.codec.canonical_name,
            "video.pix_fmt": stream.pix_fmt,
            "video.is_depth_map": False,
            "video.fps": int(stream.base_rate),
            "video.channels": 3,
            "has_audio": len(container.streams.audio) > 0,
        }
    return info


def decode_frames(
    path: Path, start_s: float, count: int, fps: int, keep: Sequence[int] | None = None
) -> npt.NDArray[np.uint8]:
    """``count`` RGB frames (count, H, W, 3) at ``start_s + k / fps``, decoded from ``path``.

    ``keep``: only these frame numbers (0 .. count-1, ascending), in that order; the others are
    decoded and dropped, so a sample of a long episode does not hold the whole episode in memory.
    """
    av = _av()
    want = [start_s + k / fps for k in range(count)]
    slots = {k: i for i, k in enumerate(keep)} if keep is not None else {k: k for k in range(count)}
    if any(not 0 <= k < count for k in slots):
        raise ValueError(f"{path}: frames to keep must lie in 0..{count - 1}, got {sorted(slots)}")
    out: npt.NDArray[np.uint8] | None = None
    half_frame = 0.5 / fps
    last = max(slots, default=-1)
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        # seek lands on the key frame at or before the first wanted frame
        container.seek(int(max(0.0, start_s - half_frame) / stream.time_base), stream=stream, backward=True)
        got = 0
        for frame in container.decode(stream):
            t = float(frame.pts * frame.time_base)
            if t < want[0] - half_frame:
                continue
            if got >= count or got > last:
                break
            if abs(t - want[got]) > half_frame:
                raise ValueError(f"{path}: frame at {t:.4f} s where {want[got]:.4f} s was expected")
            if got in slots:
                image = frame.to_ndarray(format="rgb24")
                if out is None:
                    out = np.empty((len(slots), *image.shape), dtype=np.uint8)
                out[slots[got]] = image
            got += 1
    if got != last + 1 or out is None:
        raise ValueError(f"{path}: found {got} frames from {start_s:.4f} s, expected {last + 1}")
    return out
