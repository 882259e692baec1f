"""The ``[recording]`` settings: where episodes go, how far the writer may fall behind, which video
encoder records and how, how many camera frames may wait for it, and how many may be dropped before
an episode is marked. Units are in the key names; every check names the key and the value it refused."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from runtime.errors import ConfigError
from runtime.recording.video import VideoSettings


def _int_at_least(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"recording.{name}: expected an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class RecordingConfig:
    """``dataset_dir``: the dataset folder (created, or continued when its features match; empty:
    recording is off); ``buffer_frames``: ticks (joint columns only; the camera frames wait in
    the encoders' rings) that may wait for the writer before an overrun ends the episode (at 30 Hz,
    1800 is a minute: an episode's save never cuts the next one short); ``codec``: ``auto`` (chosen at
    start by what opens and keeps up, see :mod:`runtime.recording.codec_choice`) or an FFmpeg encoder
    (``libsvtav1``, ``libx264``, ``h264_qsv``, ``h264_vaapi``...); ``camera_queue_frames``: frames of
    each camera that may wait for its encoder before ticks are dropped; ``max_drop_rate``: the share
    of an episode's ticks that may be dropped before it is marked (``recording/drops_over_limit``)
    and logged; ``video``: the ``[recording.video]`` encoder settings (quality, key frames, presets).
    ``encoder_cpus``: the CPUs the encoder processes may run on (empty: chosen by the daemon, see
    :meth:`runtime.daemon.Daemon._encoder_cpus`). ``encoder_delay_ms`` is for tests and benchmarks:
    a deliberately slow encoder."""

    dataset_dir: str = ""
    buffer_frames: int = 1800
    codec: str = "auto"
    camera_queue_frames: int = 30
    max_drop_rate: float = 0.05
    encoder_delay_ms: float = 0.0
    encoder_cpus: tuple[int, ...] = ()
    video: VideoSettings = field(default_factory=VideoSettings)

    def __post_init__(self) -> None:
        _int_at_least("buffer_frames", self.buffer_frames, 2)
        _int_at_least("camera_queue_frames", self.camera_queue_frames, 2)
        if not isinstance(self.codec, str) or not self.codec:
            raise ConfigError(f'recording.codec: expected "auto" or an FFmpeg encoder name, got {self.codec!r}')
        rate = self.max_drop_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise ConfigError(f"recording.max_drop_rate: expected a share 0..1, got {rate!r}")
        delay = self.encoder_delay_ms
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not math.isfinite(delay) or delay < 0:
            raise ConfigError(f"recording.encoder_delay_ms: expected >= 0 ms, got {delay!r}")
        cpus = self.encoder_cpus
        if any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in cpus) or len(set(cpus)) != len(cpus):
            raise ConfigError(f"recording.encoder_cpus: expected distinct CPU numbers >= 0, got {list(cpus)}")

    @property
    def enabled(self) -> bool:
        return bool(self.dataset_dir)
