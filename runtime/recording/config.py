"""The ``[recording]`` settings: where episodes go, how far the writer may fall behind, how video is
encoded. Units are in the key names; every check names the key and the value it refused."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.errors import ConfigError
from runtime.recording.video import VideoSettings


@dataclass(frozen=True)
class RecordingConfig:
    """``dataset_dir``: the dataset folder (created, or continued when its features match; empty:
    recording is off); ``buffer_frames``: frames that may wait for the disk before an overrun ends
    the episode (at 30 Hz, 90 frames is 3 s); ``video``: the ``[recording.video]`` encoder settings."""

    dataset_dir: str = ""
    buffer_frames: int = 90
    video: VideoSettings = field(default_factory=VideoSettings)

    def __post_init__(self) -> None:
        if isinstance(self.buffer_frames, bool) or not isinstance(self.buffer_frames, int) or self.buffer_frames < 2:
            raise ConfigError(f"recording.buffer_frames: expected an integer >= 2, got {self.buffer_frames!r}")

    @property
    def enabled(self) -> bool:
        return bool(self.dataset_dir)
