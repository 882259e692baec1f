"""``codec = "auto"``: the hardware encoders are tried only with a render node and passed over with
the reason; a software codec is taken when its measured cost fits the CPU each camera's encoder
gets, AV1 first; none fitting takes the fastest and warns."""

from __future__ import annotations

import logging

import pytest

from drivers.calibration import SO101_JOINTS
from runtime.errors import ConfigError
from runtime.recording import RecordingConfig, RecordingFeatures, VideoSettings, codec_choice
from runtime.recording.codec_choice import Probe, budget_ms, choose_auto, choose_video, measure


def cameras(n: int) -> RecordingFeatures:
    cams = {f"cam{i}": (48, 64) for i in range(n)}
    return RecordingFeatures(fps=30, joint_names=SO101_JOINTS, cameras=cams)


def fake_costs(monkeypatch: pytest.MonkeyPatch, costs: dict[str, float]) -> list[str]:
    tried: list[str] = []

    def fake(video: VideoSettings, height: int, width: int, fps: int, frames: int = 12) -> Probe:
        tried.append(video.codec)
        if video.codec not in costs:
            return Probe(video.codec, False, 0.0, "does not open or encode: no device")
        return Probe(video.codec, True, costs[video.codec])

    monkeypatch.setattr(codec_choice, "measure", fake)
    return tried


def test_the_budget_leaves_a_cpu_to_the_loop() -> None:
    assert budget_ms(1, 30, 2) == pytest.approx(0.8 * 1000 / 30)
    assert budget_ms(2, 30, 2) == pytest.approx(0.8 * 1000 / 30 / 2)
    assert budget_ms(2, 30, 8) == pytest.approx(0.8 * 1000 / 30)  # one thread each: at most a CPU
    assert budget_ms(1, 30, 1) == pytest.approx(0.8 * 1000 / 30)


def test_no_render_node_no_hardware_and_the_log_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tried = fake_costs(monkeypatch, {"libsvtav1": 17.0, "libx264": 2.0})
    with caplog.at_level(logging.INFO, logger="runtime.recording.codec_choice"):
        one = choose_auto(VideoSettings(), cameras(1), cpus=2, render_nodes=[])
        two = choose_auto(VideoSettings(), cameras(2), cpus=2, render_nodes=[])
    assert (one.codec, two.codec) == ("libsvtav1", "libx264")
    assert "h264_qsv" not in tried and "h264_vaapi" not in tried
    lines = [r.getMessage() for r in caplog.records]
    assert "no render node" in lines[0] and "libsvtav1" in lines[0]
    assert "libsvtav1: 17.0 ms > 13.3" in lines[1] and lines[1].startswith("recording codec: libx264")


def test_a_render_node_whose_encoder_does_not_open_falls_back_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tried = fake_costs(monkeypatch, {"libsvtav1": 17.0, "libx264": 2.0})
    with caplog.at_level(logging.INFO, logger="runtime.recording.codec_choice"):
        video = choose_auto(VideoSettings(), cameras(1), cpus=2, render_nodes=["/dev/dri/renderD128"])
    assert video.codec == "libsvtav1" and tried[:2] == ["h264_qsv", "h264_vaapi"]
    assert "h264_qsv: does not open or encode: no device" in caplog.records[0].getMessage()


def test_a_working_hardware_encoder_is_first(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_costs(monkeypatch, {"h264_vaapi": 0.5, "libsvtav1": 17.0, "libx264": 2.0})
    video = choose_auto(VideoSettings(), cameras(2), cpus=2, render_nodes=["/dev/dri/renderD128"])
    assert video.codec == "h264_vaapi"


def test_nothing_keeps_up_takes_the_fastest_and_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake_costs(monkeypatch, {"libsvtav1": 40.0, "libx264": 30.0})
    with caplog.at_level(logging.WARNING, logger="runtime.recording.codec_choice"):
        video = choose_auto(VideoSettings(), cameras(2), cpus=2, render_nodes=[])
    assert video.codec == "libx264"
    assert "frames will be dropped" in caplog.records[-1].getMessage()


def test_measuring_encodes_for_real() -> None:
    probe = measure(VideoSettings(codec="libx264"), 48, 64, 30, frames=4)
    assert probe.ok and probe.ms_per_frame > 0
    assert not measure(VideoSettings(codec="h264_vaapi"), 48, 64, 30, frames=2).ok


def test_a_named_codec_is_used_as_named_and_checked() -> None:
    assert choose_video(RecordingConfig(dataset_dir="x", codec="libx264"), cameras(1)).codec == "libx264"
    with pytest.raises(ConfigError, match="no 'libnothing' encoder"):
        choose_video(RecordingConfig(dataset_dir="x", codec="libnothing"), cameras(1))
    with pytest.raises(ConfigError, match=r"recording\.max_drop_rate: expected a share 0\.\.1, got 2"):
        RecordingConfig(max_drop_rate=2)
    with pytest.raises(ConfigError, match=r"recording\.camera_queue_frames: expected an integer >= 2, got 1"):
        RecordingConfig(camera_queue_frames=1)
