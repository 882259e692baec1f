"""``codec = "auto"``: the hardware encoders are tried only with a render node and passed over with
the reason; a software codec is taken when its measured cost fits the CPU each camera's encoder
gets, AV1 first; none fitting takes the fastest and warns."""

from __future__ import annotations

import logging
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from drivers.calibration import SO101_JOINTS
from runtime.errors import ConfigError
from runtime.recording import RecordingConfig, RecordingFeatures, VideoSettings, codec_choice
from runtime.recording.codec_choice import (
    HEADROOM,
    PROBE_FRAMES,
    Probe,
    budget_ms,
    choose_auto,
    choose_video,
    measure,
    probe_frames,
)


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


class FakeStream:
    def __init__(self, log: list[object], codec: str, rate: int, options: dict[str, str]) -> None:
        self.log = log
        self.added = (codec, rate, options)
        self.width = self.height = 0
        self.pix_fmt = ""
        self.codec_context = SimpleNamespace(time_base=None)

    def encode(self, frame: object) -> list[str]:
        self.log.append(("encode", None if frame is None else (frame.pts, frame.image.shape)))  # type: ignore[attr-defined]
        return ["flushed"] if frame is None else [f"packet {frame.pts}"]  # type: ignore[attr-defined]


class FakeContainer:
    def __init__(self, log: list[object], path: str, fail: str = "", close_fails: bool = False) -> None:
        self.log, self.path, self.fail, self.close_fails = log, path, fail, close_fails
        self.stream: FakeStream | None = None

    def add_stream(self, codec: str, rate: int, options: dict[str, str]) -> FakeStream:
        if self.fail == "add_stream":
            raise ValueError("unknown encoder")
        self.stream = FakeStream(self.log, codec, rate, options)
        return self.stream

    def mux(self, packet: str) -> None:
        self.log.append(("mux", packet))

    def close(self) -> None:
        self.log.append("close")
        if self.close_fails:
            raise RuntimeError("half-written")


class FakeFrame:
    def __init__(self, image: np.ndarray) -> None:
        self.image = image
        self.pts: int | None = None

    @staticmethod
    def from_ndarray(image: np.ndarray, format: str) -> FakeFrame:
        assert format == "rgb24"
        return FakeFrame(image)


class FakeAv:
    """PyAV's part a probe uses, keeping what was asked of it."""

    VideoFrame = FakeFrame

    def __init__(self, fail: str = "", close_fails: bool = False) -> None:
        self.log: list[object] = []
        self.fail, self.close_fails = fail, close_fails
        self.containers: list[FakeContainer] = []

    def open(self, path: str, mode: str) -> FakeContainer:
        if self.fail == "open":
            raise OSError("read-only file system")
        assert mode == "w"
        self.containers.append(FakeContainer(self.log, path, self.fail, self.close_fails))
        return self.containers[-1]


class Clock:
    """process_time and perf_counter stepping by what the test says, one step per call."""

    def __init__(self, cpu: list[float], wall: list[float]) -> None:
        self.cpu, self.wall = iter(cpu), iter(wall)

    def process_time(self) -> float:
        return next(self.cpu)

    def perf_counter(self) -> float:
        return next(self.wall)


def fake_av(monkeypatch: pytest.MonkeyPatch, av: FakeAv, clock: Clock | None = None) -> FakeAv:
    monkeypatch.setattr(codec_choice, "_av", lambda: av)
    monkeypatch.setattr(codec_choice, "time", clock or Clock([0.0, 0.0], [0.0, 0.0]))
    return av


def test_a_probe_encodes_every_frame_in_order_flushes_and_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    av = fake_av(monkeypatch, FakeAv(), Clock([10.0, 10.3], [50.0, 50.2]))
    video = VideoSettings(codec="libx264", crf=20, gop_frames=5)
    probe = measure(video, 6, 8, 25, frames=4)
    assert probe == Probe("libx264", True, pytest.approx(1000 * 0.3 / 4), "")
    (container,) = av.containers
    assert Path(container.path).name == "probe.mp4"
    assert Path(container.path).parent.name.startswith("codec-probe-")
    assert not Path(container.path).parent.exists()  # the scratch folder is gone
    stream = container.stream
    assert stream is not None
    assert stream.added == ("libx264", 25, video.options())
    assert (stream.width, stream.height, stream.pix_fmt) == (8, 6, "yuv420p")
    assert stream.codec_context.time_base == Fraction(1, 25)
    assert av.log == [
        ("encode", (0, (6, 8, 3))),
        ("mux", "packet 0"),
        ("encode", (1, (6, 8, 3))),
        ("mux", "packet 1"),
        ("encode", (2, (6, 8, 3))),
        ("mux", "packet 2"),
        ("encode", (3, (6, 8, 3))),
        ("mux", "packet 3"),
        ("encode", None),
        ("mux", "flushed"),
        "close",
    ]


def test_a_probes_cost_is_the_larger_of_cpu_and_wall_time(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_av(monkeypatch, FakeAv(), Clock([1.0, 1.1], [7.0, 7.5]))
    assert measure(VideoSettings(), 4, 4, 30, frames=2).ms_per_frame == pytest.approx(250.0)
    fake_av(monkeypatch, FakeAv(), Clock([1.0, 1.5], [7.0, 7.1]))
    assert measure(VideoSettings(), 4, 4, 30).ms_per_frame == pytest.approx(500.0 / 12)


def test_a_probe_that_cannot_open_its_file_or_the_encoder_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_av(monkeypatch, FakeAv(fail="open"))
    assert measure(VideoSettings(codec="libx264"), 4, 4, 30) == Probe(
        "libx264", False, 0.0, "cannot open a file: read-only file system"
    )
    av = fake_av(monkeypatch, FakeAv(fail="add_stream", close_fails=True))
    assert measure(VideoSettings(codec="h264_qsv"), 4, 4, 30) == Probe(
        "h264_qsv", False, 0.0, "does not open or encode: ValueError: unknown encoder"
    )
    assert av.log == ["close"]  # closed though it failed; closing failing too is not an error


def test_a_closing_failure_after_a_good_probe_keeps_the_measure(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_av(monkeypatch, FakeAv(close_fails=True), Clock([0.0, 0.024], [0.0, 0.012]))
    assert measure(VideoSettings(), 4, 4, 30, frames=2) == Probe("libsvtav1", True, pytest.approx(12.0))


def test_probe_frames_are_a_moving_gradient_with_a_little_noise() -> None:
    assert PROBE_FRAMES == 12 and HEADROOM == 0.8
    frames = probe_frames(3, 5, 300)
    assert len(frames) == 3
    assert all(f.shape == (5, 300, 3) and f.dtype == np.uint8 for f in frames)
    y, x = np.mgrid[0:5, 0:300]
    for k, frame in enumerate(frames):
        base = ((x + 3 * k) % 256 + y // 2) % 256
        for c, shift in enumerate((0, 85, 170)):
            gradient = (base + shift) % 256
            noise = frame[..., c].astype(int) - gradient
            inside = (gradient >= 4) & (gradient <= 251)  # away from the clipped ends
            assert np.abs(noise[inside]).max() == 4  # noise of -4..4, its ends drawn
            assert np.abs(noise[inside]).min() == 0
            assert frame[..., c][gradient < 4].max() <= 7  # clipped at 0, not wrapped to 252..255
            assert frame[..., c][gradient > 251].min() >= 248  # clipped at 255, not wrapped to 0..3
    assert frames[0][0, 0, 0] <= 4 and frames[0][0, 255, 0] >= 251  # clipped at 0 and 255, not wrapped
    for frame in frames:
        assert frame.min() == 0 and frame.max() == 255  # the noise reaches both ends
    again = probe_frames(3, 5, 300)
    assert all(np.array_equal(a, b) for a, b in zip(frames, again, strict=True))  # seeded


def test_the_budget_at_its_edges() -> None:
    assert budget_ms(3, 20, 3) != budget_ms(3, 20, 4)
    assert budget_ms(3, 20, 3) == pytest.approx(0.8 * (2 / 3) * 1000 / 20)  # 2 CPUs for 3 cameras
    assert budget_ms(0, 20, 3) == pytest.approx(0.8 * 1000 / 20)  # no camera counts as one
    assert budget_ms(4, 10, 0) == pytest.approx(0.8 * 0.25 * 1000 / 10)  # at least one CPU to share


def test_settings_for_keeps_every_other_setting() -> None:
    base = VideoSettings(crf=12, gop_frames=7, preset=3, x264_preset="fast", threads=2)
    assert codec_choice.settings_for("libx264", base) == VideoSettings(
        codec="libx264", crf=12, gop_frames=7, preset=3, x264_preset="fast", threads=2
    )


class Measured:
    """A stand-in for ``measure`` keeping each call's arguments."""

    def __init__(self, costs: dict[str, float]) -> None:
        self.costs = costs
        self.calls: list[tuple[str, int, int, int, int, VideoSettings]] = []

    def __call__(self, video: VideoSettings, height: int, width: int, fps: int, frames: int = 12) -> Probe:
        self.calls.append((video.codec, height, width, fps, frames, video))
        if video.codec not in self.costs:
            return Probe(video.codec, False, 0.0, "does not open or encode: no device")
        return Probe(video.codec, True, self.costs[video.codec])


def mixed() -> RecordingFeatures:
    # the largest by area is neither the tallest nor the widest
    return RecordingFeatures(
        fps=15, joint_names=SO101_JOINTS, cameras={"tall": (200, 16), "big": (60, 64), "wide": (16, 200)}
    )


def test_every_probe_is_of_the_largest_camera_at_the_recordings_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    m = Measured({"libx264": 1.0})
    monkeypatch.setattr(codec_choice, "measure", m)
    base = VideoSettings(crf=40)
    video = choose_auto(base, mixed(), cpus=4, render_nodes=["/dev/dri/renderD128"])
    assert video == VideoSettings(codec="libx264", crf=40)
    assert [c[:5] for c in m.calls] == [
        ("h264_qsv", 60, 64, 15, 2),
        ("h264_vaapi", 60, 64, 15, 2),
        ("libsvtav1", 60, 64, 15, 12),
        ("libx264", 60, 64, 15, 12),
    ]
    assert all(c[5].crf == 40 for c in m.calls)


def test_a_cost_exactly_at_the_budget_keeps_up(monkeypatch: pytest.MonkeyPatch) -> None:
    budget = budget_ms(1, 30, 2)
    monkeypatch.setattr(codec_choice, "measure", Measured({"libsvtav1": budget, "libx264": 1.0}))
    assert choose_auto(VideoSettings(), cameras(1), cpus=2, render_nodes=[]).codec == "libsvtav1"


def test_the_reasons_each_codec_was_passed_over(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(codec_choice, "measure", Measured({"h264_vaapi": 0.5}))
    with caplog.at_level(logging.INFO, logger="runtime.recording.codec_choice"):
        video = choose_auto(VideoSettings(), cameras(1), cpus=2, render_nodes=["/dev/dri/renderD129", "/dev/dri/x"])
    assert video == VideoSettings(codec="h264_vaapi")
    assert [r.getMessage() for r in caplog.records] == [
        "recording codec: h264_vaapi on /dev/dri/renderD129 (h264_qsv: does not open or encode: no device)"
    ]
    caplog.clear()
    monkeypatch.setattr(codec_choice, "measure", Measured({"h264_qsv": 0.5}))
    with caplog.at_level(logging.INFO, logger="runtime.recording.codec_choice"):
        choose_auto(VideoSettings(), cameras(1), cpus=2, render_nodes=["/dev/dri/renderD128"])
    assert [r.getMessage() for r in caplog.records] == [
        "recording codec: h264_qsv on /dev/dri/renderD128 (first choice)"
    ]


def test_the_software_choice_logged_whole(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(codec_choice, "measure", Measured({"libsvtav1": 6.25, "libx264": 1.55}))
    with caplog.at_level(logging.INFO, logger="runtime.recording.codec_choice"):
        assert choose_auto(VideoSettings(), cameras(2), cpus=3, render_nodes=[]).codec == "libsvtav1"
    assert [r.getMessage() for r in caplog.records] == [
        "recording codec: libsvtav1, 6.2 ms of CPU a 64x48 frame, within the 26.7 ms each of 2 camera(s) may use "
        "on 3 CPU(s) (hardware h264_qsv/h264_vaapi: not tried, no render node (/dev/dri/renderD*))"
    ]


def test_no_encoder_opening_is_refused_with_every_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec_choice, "measure", Measured({}))
    with pytest.raises(ConfigError) as e:
        choose_auto(VideoSettings(), cameras(1), cpus=2, render_nodes=["/dev/dri/renderD128"])
    assert str(e.value) == (
        "recording.codec: no encoder opens here (h264_qsv: does not open or encode: no device; "
        "h264_vaapi: does not open or encode: no device; libsvtav1: does not open or encode: no device; "
        "libx264: does not open or encode: no device); install PyAV with FFmpeg"
    )


def test_none_keeping_up_takes_the_fastest_that_opens_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(codec_choice, "measure", Measured({"libsvtav1": 20.0}))
    with caplog.at_level(logging.INFO, logger="runtime.recording.codec_choice"):
        video = choose_auto(VideoSettings(crf=5), cameras(2), cpus=2, render_nodes=[])
    assert video == VideoSettings(codec="libsvtav1", crf=5)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            "recording codec: libsvtav1, the fastest, but none keeps up with 2 camera(s) at 30 fps on 2 CPU(s) "
            "(hardware h264_qsv/h264_vaapi: not tried, no render node (/dev/dri/renderD*); "
            "libsvtav1: 20.0 ms > 13.3; libx264: does not open or encode: no device): "
            "frames will be dropped (counted per episode)",
        )
    ]
    monkeypatch.setattr(codec_choice, "measure", Measured({"libsvtav1": 20.0, "libx264": 30.0}))
    assert choose_auto(VideoSettings(), cameras(2), cpus=2, render_nodes=[]).codec == "libsvtav1"


def test_a_named_hardware_codec_is_probed_and_refused_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    checked: list[str] = []
    monkeypatch.setattr(VideoSettings, "check_available", lambda self: checked.append(self.codec))
    m = Measured({"h264_qsv": 3.0})
    monkeypatch.setattr(codec_choice, "measure", m)
    config = RecordingConfig(dataset_dir="x", codec="h264_qsv", video=VideoSettings(crf=22))
    with caplog.at_level(logging.INFO, logger="runtime.recording.codec_choice"):
        assert choose_video(config, mixed()) == VideoSettings(codec="h264_qsv", crf=22)
    assert checked == ["h264_qsv"]
    assert [c[:5] for c in m.calls] == [("h264_qsv", 60, 64, 15, 2)]
    assert [r.getMessage() for r in caplog.records] == ["recording codec: h264_qsv (as configured)"]
    with pytest.raises(ConfigError) as e:
        choose_video(RecordingConfig(dataset_dir="x", codec="h264_vaapi"), mixed())
    assert str(e.value) == (
        "recording.codec: 'h264_vaapi' does not open or encode: no device; try \"auto\" or a software codec"
    )
    m.calls.clear()
    choose_video(RecordingConfig(dataset_dir="x", codec="libx264"), mixed())
    assert m.calls == []  # a software codec is taken as named, unmeasured


def test_auto_looks_for_render_nodes_and_counts_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def nodes(pattern: str) -> list[str]:
        asked.append(pattern)
        return ["/dev/dri/renderD128"]

    monkeypatch.setattr(codec_choice.glob, "glob", nodes)
    monkeypatch.setattr(codec_choice, "cpu_count", lambda: 5)
    monkeypatch.setattr(codec_choice, "measure", Measured({"h264_qsv": 1.0}))
    assert choose_video(RecordingConfig(dataset_dir="x", codec="auto"), cameras(1)).codec == "h264_qsv"
    assert asked == ["/dev/dri/renderD*"]
    seen: list[int] = []
    monkeypatch.setattr(codec_choice, "choose_auto", lambda base, f, *, cpus, render_nodes: seen.append(cpus) or base)
    choose_video(RecordingConfig(dataset_dir="x", codec="auto", video=VideoSettings(crf=9)), cameras(1))
    assert seen == [5]
