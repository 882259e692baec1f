"""The [recording] table: defaults, and every refusal at its bound, word for word."""

from __future__ import annotations

import pytest

from runtime.errors import ConfigError
from runtime.recording.config import RecordingConfig
from runtime.recording.video import VideoSettings


def test_defaults() -> None:
    c = RecordingConfig()
    assert c.dataset_dir == ""
    assert c.buffer_frames == 1800
    assert c.codec == "auto"
    assert c.camera_queue_frames == 30
    assert c.max_drop_rate == 0.05
    assert c.encoder_delay_ms == 0.0
    assert c.encoder_cpus == ()
    assert c.video == VideoSettings()
    assert c.enabled is False


def test_a_dataset_dir_turns_recording_on() -> None:
    assert RecordingConfig(dataset_dir="/data/ds").enabled is True


@pytest.mark.parametrize("key", ["buffer_frames", "camera_queue_frames"])
def test_frame_counts_at_their_bound(key: str) -> None:
    assert getattr(RecordingConfig(**{key: 2}), key) == 2  # type: ignore[arg-type]
    for bad in (1, 0, True, 2.0, "2"):
        with pytest.raises(ConfigError) as e:
            RecordingConfig(**{key: bad})  # type: ignore[arg-type]
        assert str(e.value) == f"recording.{key}: expected an integer >= 2, got {bad!r}"


@pytest.mark.parametrize("bad", ["", None, 5])
def test_codec_refused(bad: object) -> None:
    with pytest.raises(ConfigError) as e:
        RecordingConfig(codec=bad)  # type: ignore[arg-type]
    assert str(e.value) == f'recording.codec: expected "auto" or an FFmpeg encoder name, got {bad!r}'


def test_codec_named() -> None:
    assert RecordingConfig(codec="libx264").codec == "libx264"


def test_max_drop_rate_bounds() -> None:
    for good in (0, 0.0, 1, 1.0, 0.5):
        assert RecordingConfig(max_drop_rate=good).max_drop_rate == good
    for bad in (-0.01, 1.01, True, "0.1", None):
        with pytest.raises(ConfigError) as e:
            RecordingConfig(max_drop_rate=bad)  # type: ignore[arg-type]
        assert str(e.value) == f"recording.max_drop_rate: expected a share 0..1, got {bad!r}"


def test_encoder_delay_bounds() -> None:
    for good in (0, 0.0, 2.5, 7):
        assert RecordingConfig(encoder_delay_ms=good).encoder_delay_ms == good
    for bad in (-0.001, float("nan"), float("inf"), True, "1", None):
        with pytest.raises(ConfigError) as e:
            RecordingConfig(encoder_delay_ms=bad)  # type: ignore[arg-type]
        assert str(e.value) == f"recording.encoder_delay_ms: expected >= 0 ms, got {bad!r}"


def test_encoder_cpus() -> None:
    assert RecordingConfig(encoder_cpus=(0, 3)).encoder_cpus == (0, 3)
    for bad in ((-1,), (0, 0), (True,), (1.0,), (2, "3")):
        with pytest.raises(ConfigError) as e:
            RecordingConfig(encoder_cpus=bad)  # type: ignore[arg-type]
        assert str(e.value) == f"recording.encoder_cpus: expected distinct CPU numbers >= 0, got {list(bad)}"
