"""PyAV's side of recording: the ``[recording.video]`` refusals and the options each codec is
given, an episode's file written call by call on a stand-in PyAV, and on a few tiny x264 files (a few
milliseconds each) what the dataset depends on: a frame every ``1 / fps`` seconds, an episode appended
after the frames already there, a span decoded, the info LeRobot keeps."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from runtime.errors import ConfigError, MissingDependencyError
from runtime.recording import video as video_module
from runtime.recording.video import (
    EpisodeVideo,
    VideoSettings,
    append_video,
    decode_frames,
    frame_times,
    video_info,
)
from runtime.scheduling import keep_scheduling

H, W = 32, 48
X264 = VideoSettings(codec="libx264", crf=18, gop_frames=2)


def grey(level: int) -> npt.NDArray[np.uint8]:
    return np.full((H, W, 3), level, np.uint8)


# -- settings --------------------------------------------------------------------------------------


def test_defaults_follow_lerobot() -> None:
    assert VideoSettings() == VideoSettings("libsvtav1", 30, 2, 12, "ultrafast", 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"crf": -1}, "recording.video.crf: expected 0..63, got -1"),
        ({"crf": 64}, "recording.video.crf: expected 0..63, got 64"),
        ({"gop_frames": 0}, "recording.video.gop_frames: expected >= 1, got 0"),
        ({"preset": -1}, "recording.video.preset: expected 0..13, got -1"),
        ({"preset": 14}, "recording.video.preset: expected 0..13, got 14"),
        ({"threads": -1}, "recording.video.threads: expected >= 0, got -1"),
    ],
)
def test_each_setting_is_refused_past_its_bound(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        VideoSettings(**kwargs)  # type: ignore[arg-type]
    assert str(info.value) == message


@pytest.mark.parametrize(
    "kwargs", [{"crf": 0}, {"crf": 63}, {"gop_frames": 1}, {"preset": 0}, {"preset": 13}, {"threads": 0}]
)
def test_each_setting_is_taken_at_its_bound(kwargs: dict[str, int]) -> None:
    VideoSettings(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("settings", "options"),
    [
        (VideoSettings(), {"g": "2", "crf": "30", "preset": "12", "svtav1-params": "lp=1"}),
        (VideoSettings(threads=0, preset=5, crf=20, gop_frames=4), {"g": "4", "crf": "20", "preset": "5"}),
        (VideoSettings(codec="libx264", threads=2), {"g": "2", "crf": "30", "preset": "ultrafast", "threads": "2"}),
        (
            VideoSettings(codec="h264", x264_preset="veryfast"),
            {"g": "2", "crf": "30", "preset": "veryfast", "threads": "1"},
        ),
        (VideoSettings(codec="libx264", threads=0), {"g": "2", "crf": "30", "preset": "ultrafast"}),
        (VideoSettings(codec="hevc", threads=3), {"g": "2", "crf": "30", "threads": "3"}),
        (VideoSettings(codec="libaom-av1", threads=0), {"g": "2", "crf": "30"}),
    ],
)
def test_each_codec_gets_its_own_options(settings: VideoSettings, options: dict[str, str]) -> None:
    assert settings.options() == options


class Codecs:
    """``av.codec`` with only some encoders: ``Codec(name, mode)`` raises for the others."""

    def __init__(self, have: set[str]) -> None:
        self.have = have
        self.asked: list[tuple[str, str]] = []
        self.codec = self

    def Codec(self, name: str, mode: str) -> object:
        self.asked.append((name, mode))
        if name not in self.have or mode != "w":
            raise ValueError(f"unknown codec {name!r}")
        return object()


def test_a_codec_this_build_lacks_is_refused_naming_the_ones_it_has(monkeypatch: pytest.MonkeyPatch) -> None:
    av = Codecs({"hevc", "libx264", "libaom-av1"})
    monkeypatch.setattr(video_module, "_av", lambda: av)
    with pytest.raises(ConfigError) as info:
        VideoSettings(codec="libnothing").check_available()
    assert str(info.value) == (
        "recording.video.codec: this PyAV build has no 'libnothing' encoder; "
        "available: ['libaom-av1', 'libx264', 'hevc']"
    )
    assert str(info.value.__cause__) == "unknown codec 'libnothing'"
    assert av.asked[0] == ("libnothing", "w")
    VideoSettings(codec="hevc").check_available()
    assert av.asked[-1] == ("hevc", "w")
    every = Codecs({"libsvtav1", "libaom-av1", "libx264", "h264", "hevc"})
    monkeypatch.setattr(video_module, "_av", lambda: every)
    with pytest.raises(ConfigError) as info:
        VideoSettings(codec="h264_qsv").check_available()
    assert str(info.value) == (
        "recording.video.codec: this PyAV build has no 'h264_qsv' encoder; "
        "available: ['libsvtav1', 'libaom-av1', 'libx264', 'h264', 'hevc']"
    )


def test_the_real_build_has_x264_and_refuses_a_made_up_codec() -> None:
    X264.check_available()
    with pytest.raises(ConfigError, match=r"no 'libnothing' encoder; available: \[.*'libx264'"):
        VideoSettings(codec="libnothing").check_available()


def test_without_pyav_recording_cameras_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(MissingDependencyError) as info:
        video_module._av()
    assert str(info.value) == "recording camera streams needs PyAV: pip install 'lerobot-runtime[record]'"
    assert isinstance(info.value.__cause__, ImportError)


# -- an episode's file, call by call ---------------------------------------------------------------


class CodecContext:
    time_base: Fraction | None = None


class Stream:
    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.codec_context = CodecContext()
        self.width = self.height = 0
        self.pix_fmt = ""

    def encode(self, frame: Any) -> list[str]:
        self.log.append(("encode", None if frame is None else (frame.pts, frame.format, int(frame.image[0, 0, 0]))))
        return ["flushed"] if frame is None else [f"packet {frame.pts}a", f"packet {frame.pts}b"]


class Container:
    def __init__(self, log: list[Any], fail: str) -> None:
        self.log = log
        self.fail = fail
        self.stream: Stream | None = None

    def add_stream(self, codec: str, rate: int, options: dict[str, str]) -> Stream:
        self.log.append(("add_stream", codec, rate, options))
        if self.fail == "add_stream":
            raise ValueError("no such encoder")
        self.stream = Stream(self.log)
        return self.stream

    def mux(self, packet: str) -> None:
        self.log.append(("mux", packet))

    def close(self) -> None:
        self.log.append(("close",))
        if self.fail == "close":
            raise OSError("closing failed")


class Frame:
    def __init__(self, image: npt.NDArray[np.uint8], format: str) -> None:
        self.image, self.format = image, format
        self.pts: int | None = None


class StandInAv:
    def __init__(self, fail: str = "") -> None:
        self.log: list[Any] = []
        self.fail = fail
        self.containers: list[Container] = []
        av = self

        class VideoFrame:
            @staticmethod
            def from_ndarray(image: npt.NDArray[np.uint8], format: str) -> Frame:
                av.log.append(("from_ndarray", image.shape, format))
                return Frame(image, format)

        self.VideoFrame = VideoFrame

    def open(self, path: str, mode: str) -> Container:
        self.log.append(("open", path, mode))
        container = Container(self.log, self.fail)
        self.containers.append(container)
        return container


def stand_in(monkeypatch: pytest.MonkeyPatch, fail: str = "") -> StandInAv:
    av = StandInAv(fail)
    monkeypatch.setattr(video_module, "_av", lambda: av)
    return av


def test_an_episode_file_is_opened_with_the_codecs_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    av = stand_in(monkeypatch)
    path = tmp_path / "a" / "b" / "ep.mp4"
    settings = VideoSettings(codec="libx264", crf=23)
    ep = EpisodeVideo(path, 15, 24, 40, settings)
    assert path.parent.is_dir()
    assert av.log == [
        ("open", str(path), "w"),
        ("add_stream", "libx264", 15, {"g": "2", "crf": "23", "preset": "ultrafast", "threads": "1"}),
    ]
    stream = av.containers[0].stream
    assert stream is not None
    assert (stream.width, stream.height, stream.pix_fmt) == (40, 24, "yuv420p")
    assert stream.codec_context.time_base == Fraction(1, 15)
    assert (ep.path, ep.frames) == (path, 0)


def test_an_episode_file_whose_stream_cannot_be_made_is_closed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    av = stand_in(monkeypatch, fail="add_stream")
    with pytest.raises(ValueError, match="no such encoder"):
        EpisodeVideo(tmp_path / "ep.mp4", 30, H, W, X264)
    assert av.log[-1] == ("close",)


def test_each_frame_gets_its_index_as_time_and_the_end_flushes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    av = stand_in(monkeypatch)
    ep = EpisodeVideo(tmp_path / "ep.mp4", 30, H, W, X264)
    del av.log[:]
    ep.add(grey(7))
    ep.add(grey(9))
    assert ep.frames == 2
    assert ep.finish() == tmp_path / "ep.mp4"
    assert av.log == [
        ("from_ndarray", (H, W, 3), "rgb24"),
        ("encode", (0, "rgb24", 7)),
        ("mux", "packet 0a"),
        ("mux", "packet 0b"),
        ("from_ndarray", (H, W, 3), "rgb24"),
        ("encode", (1, "rgb24", 9)),
        ("mux", "packet 1a"),
        ("mux", "packet 1b"),
        ("encode", None),
        ("mux", "flushed"),
        ("close",),
    ]


def test_an_aborted_file_is_closed_and_removed_even_if_closing_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    av = stand_in(monkeypatch, fail="close")
    path = tmp_path / "ep.mp4"
    ep = EpisodeVideo(path, 30, H, W, X264)
    path.write_bytes(b"half a file")
    ep.abort()
    assert av.log[-1] == ("close",)
    assert not path.exists()
    ep.abort()  # nothing left to remove: no error either


# -- real files ------------------------------------------------------------------------------------


def encode(path: Path, levels: list[int], fps: int = 30, settings: VideoSettings = X264) -> Path:
    # SVT-AV1 raises the thread that opens it to SCHED_FIFO 99; the encoder process puts its own back,
    # and so does this test's thread
    with keep_scheduling():
        ep = EpisodeVideo(path, fps, H, W, settings)
        for level in levels:
            ep.add(grey(level))
        return ep.finish()


def means(frames: npt.NDArray[np.uint8]) -> list[int]:
    """Each frame's grey level to the nearest 10 (the codec moves a level by a unit or two)."""
    return [10 * round(float(f.mean()) / 10) for f in frames]


def test_a_real_file_has_a_frame_every_one_over_fps(tmp_path: Path) -> None:
    path = encode(tmp_path / "ep.mp4", [10, 60, 110, 160, 210])
    assert frame_times(path) == pytest.approx([0.0, 1 / 30, 2 / 30, 3 / 30, 4 / 30], abs=1e-9)
    assert video_info(path) == {
        "video.height": H,
        "video.width": W,
        "video.codec": "h264",
        "video.pix_fmt": "yuv420p",
        "video.is_depth_map": False,
        "video.fps": 30,
        "video.channels": 3,
        "has_audio": False,
    }
    assert means(decode_frames(path, 0.0, 5, 30)) == [10, 60, 110, 160, 210]


def test_an_episode_is_appended_after_the_frames_already_there(tmp_path: Path) -> None:
    dst = encode(tmp_path / "file-000.mp4", [10, 60, 110], fps=10)
    src = encode(tmp_path / "ep.mp4", [160, 210], fps=10)
    append_video(dst, src, 3, 10)
    assert frame_times(dst) == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4], abs=1e-9)
    assert means(decode_frames(dst, 0.0, 5, 10)) == [10, 60, 110, 160, 210]
    assert means(decode_frames(dst, 0.3, 2, 10)) == [160, 210]  # the second episode on its own
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep.mp4", "file-000.mp4"]
    assert video_info(dst)["video.fps"] == 10
    append_video(dst, src, 5, 10)  # and a third
    assert frame_times(dst) == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6], abs=1e-9)


def test_an_av1_episode_is_appended_though_this_build_has_no_av1_decoder_named_like_its_stream(
    tmp_path: Path,
) -> None:
    """LeRobot's default codec: the packets are copied with the template's codec context as it is."""
    av1 = VideoSettings(codec="libsvtav1")
    dst = encode(tmp_path / "file-000.mp4", [10, 60, 110], fps=10, settings=av1)
    src = encode(tmp_path / "ep.mp4", [160, 210], fps=10, settings=av1)
    append_video(dst, src, 3, 10)
    assert frame_times(dst) == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4], abs=1e-9)
    assert means(decode_frames(dst, 0.0, 5, 10)) == [10, 60, 110, 160, 210]
    assert video_info(dst)["video.codec"] == "av1"


def test_an_episode_with_b_frames_keeps_each_frames_own_time_when_appended(tmp_path: Path) -> None:
    """x264's B-frames come out of display order: each packet's own presentation time is shifted."""
    b_frames = VideoSettings(codec="libx264", x264_preset="medium")
    levels = [10, 30, 50, 70, 90, 110, 130, 150, 170, 190, 210, 230]
    dst = encode(tmp_path / "file-000.mp4", levels[:8], fps=10, settings=b_frames)
    src = encode(tmp_path / "ep.mp4", levels[8:], fps=10, settings=b_frames)
    append_video(dst, src, 8, 10)
    assert frame_times(dst) == pytest.approx([k / 10 for k in range(12)], abs=1e-9)
    assert means(decode_frames(dst, 0.0, 12, 10)) == levels


def test_a_span_is_decoded_from_its_first_frame_keeping_what_is_asked(tmp_path: Path) -> None:
    path = encode(tmp_path / "ep.mp4", [10, 60, 110, 160, 210])
    assert means(decode_frames(path, 2 / 30, 3, 30)) == [110, 160, 210]
    assert means(decode_frames(path, 1 / 30, 4, 30, keep=[0, 3])) == [60, 210]
    kept = decode_frames(path, 0.0, 5, 30, keep=[2])
    assert kept.shape == (1, H, W, 3) and kept.dtype == np.uint8 and means(kept) == [110]


def test_a_span_the_file_does_not_hold_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = encode(tmp_path / "ep.mp4", [10, 60, 110, 160, 210])
    with pytest.raises(ValueError) as info:
        decode_frames(path, 0.0, 7, 30)
    assert str(info.value) == f"{path}: found 5 frames from 0.0000 s, expected 7"
    with pytest.raises(ValueError) as info:
        decode_frames(path, 3 / 30, 4, 30, keep=[0, 2])
    assert str(info.value) == f"{path}: found 2 frames from 0.1000 s, expected 3"
    with pytest.raises(ValueError) as info:
        decode_frames(path, 0.0, 3, 10)  # frames 1/30 s apart where 1/10 s was asked
    assert str(info.value) == f"{path}: frame at 0.0333 s where 0.1000 s was expected"
    with pytest.raises(ValueError) as info:
        decode_frames(path, 0.0, 5, 30, keep=[0, 5])
    assert str(info.value) == f"{path}: frames to keep must lie in 0..4, got [0, 5]"
    with pytest.raises(ValueError) as info:
        decode_frames(path, 0.0, 5, 30, keep=[-1])
    assert str(info.value) == f"{path}: frames to keep must lie in 0..4, got [-1]"
    with pytest.raises(ValueError) as info:
        decode_frames(path, 0.0, 5, 30, keep=[])
    assert str(info.value) == f"{path}: found 0 frames from 0.0000 s, expected 0"


# -- reading, on a stand-in container --------------------------------------------------------------


class Packet:
    def __init__(self, pts: int | None, size: int = 100) -> None:
        self.pts, self.size = pts, size
        self.time_base = Fraction(1, 1000)


class DecodedFrame:
    def __init__(self, pts: int, time_base: Fraction, level: int, log: list[Any]) -> None:
        self.pts, self.time_base, self.level, self.log = pts, time_base, level, log

    def to_ndarray(self, format: str) -> npt.NDArray[np.uint8]:
        self.log.append(("to_ndarray", self.pts, format))
        return np.full((2, 4, 3), self.level, np.uint8)


class ReadStream:
    time_base = Fraction(1, 1024)  # seeks are in it; the frames carry 1/1000 s
    height, width, pix_fmt, base_rate = 24, 40, "yuv420p", Fraction(30, 1)

    class codec:
        canonical_name = "av1"


class Streams:
    def __init__(self, audio: int) -> None:
        self.video = [ReadStream()]
        self.audio = [object()] * audio


class ReadContainer:
    def __init__(self, log: list[Any], packets: list[Packet], frames: list[tuple[int, int]], audio: int) -> None:
        self.log, self.packets, self.frames = log, packets, frames
        self.streams = Streams(audio)
        self.frame_base = Fraction(1, 1000)

    def __enter__(self) -> ReadContainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.log.append(("closed",))

    def demux(self, stream: ReadStream) -> list[Packet]:
        assert stream is self.streams.video[0]
        return self.packets

    def seek(self, offset: int, *, stream: ReadStream, backward: bool) -> None:
        self.log.append(("seek", offset, stream is self.streams.video[0], backward))

    def decode(self, stream: ReadStream) -> Any:
        assert stream is self.streams.video[0]
        for pts, level in self.frames:
            self.log.append(("decoded", pts))
            yield DecodedFrame(pts, self.frame_base, level, self.log)


class ReadAv:
    def __init__(self, packets: list[Packet] = [], frames: list[tuple[int, int]] = [], audio: int = 0) -> None:  # noqa: B006
        self.log: list[Any] = []
        self.packets, self.frames, self.audio = packets, frames, audio
        self.frame_base = Fraction(1, 1000)

    def open(self, path: str) -> ReadContainer:
        self.log.append(("open", path))
        container = ReadContainer(self.log, self.packets, self.frames, self.audio)
        container.frame_base = self.frame_base
        return container


def test_frame_times_skip_the_end_marker_and_empty_packets_in_time_order(monkeypatch: pytest.MonkeyPatch) -> None:
    packets = [Packet(0), Packet(100), Packet(50), Packet(None, 0), Packet(150, 0), Packet(200, 1), Packet(None)]
    av = ReadAv(packets=packets)
    monkeypatch.setattr(video_module, "_av", lambda: av)
    assert frame_times(Path("ep.mp4")) == [0.0, 0.05, 0.1, 0.2]  # a one-byte packet is a frame too
    assert av.log == [("open", "ep.mp4"), ("closed",)]


def test_video_info_says_whether_the_file_has_sound(monkeypatch: pytest.MonkeyPatch) -> None:
    av = ReadAv(audio=1)
    monkeypatch.setattr(video_module, "_av", lambda: av)
    assert video_info(Path("ep.mp4")) == {
        "video.height": 24,
        "video.width": 40,
        "video.codec": "av1",
        "video.pix_fmt": "yuv420p",
        "video.is_depth_map": False,
        "video.fps": 30,
        "video.channels": 3,
        "has_audio": True,
    }


def test_decoding_seeks_half_a_frame_early_and_stops_after_the_last_kept_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    # frames every 125 ms (8 fps); the span 0.375 s + 3 frames, keeping the first two
    frames = [(0, 1), (125, 2), (250, 3), (375, 4), (500, 5), (625, 6), (750, 7)]
    av = ReadAv(frames=frames)
    monkeypatch.setattr(video_module, "_av", lambda: av)
    out = decode_frames(Path("ep.mp4"), 0.375, 3, 8, keep=[0, 1])
    assert [int(f[0, 0, 0]) for f in out] == [4, 5]
    assert out.shape == (2, 2, 4, 3)
    assert av.log == [
        ("open", "ep.mp4"),
        ("seek", 320, True, True),  # 0.3125 s in the stream's 1/1024 s
        ("decoded", 0),
        ("decoded", 125),
        ("decoded", 250),
        ("decoded", 375),
        ("to_ndarray", 375, "rgb24"),
        ("decoded", 500),
        ("to_ndarray", 500, "rgb24"),
        ("decoded", 625),  # one past the last kept frame: nothing more is decoded
        ("closed",),
    ]


def test_decoding_from_the_start_seeks_to_zero_and_keeps_in_the_order_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    av = ReadAv(frames=[(0, 1), (100, 2), (200, 3)])
    monkeypatch.setattr(video_module, "_av", lambda: av)
    out = decode_frames(Path("ep.mp4"), 0.0, 3, 10, keep=[2, 0])
    assert [int(f[0, 0, 0]) for f in out] == [3, 1]
    assert av.log[1] == ("seek", 0, True, True)


def test_a_frame_within_half_a_frame_of_its_time_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    # at 10 fps, half a frame is 50 ms: 149 ms is taken for 100 ms; 251 ms is refused for 200 ms
    av = ReadAv(frames=[(0, 1), (149, 2), (251, 3)])
    monkeypatch.setattr(video_module, "_av", lambda: av)
    assert [int(f[0, 0, 0]) for f in decode_frames(Path("ep.mp4"), 0.0, 2, 10)] == [1, 2]
    with pytest.raises(ValueError) as info:
        decode_frames(Path("ep.mp4"), 0.0, 3, 10)
    assert str(info.value) == "ep.mp4: frame at 0.2510 s where 0.2000 s was expected"


def test_frames_before_the_span_are_passed_over_up_to_half_a_frame_early(monkeypatch: pytest.MonkeyPatch) -> None:
    # the span starts at 0.2 s: 149 ms is before it, 151 ms is its first frame (within 50 ms)
    av = ReadAv(frames=[(0, 1), (149, 2), (151, 3), (300, 4)])
    monkeypatch.setattr(video_module, "_av", lambda: av)
    assert [int(f[0, 0, 0]) for f in decode_frames(Path("ep.mp4"), 0.2, 2, 10)] == [3, 4]


def test_a_frame_exactly_half_a_frame_early_is_the_spans_first(monkeypatch: pytest.MonkeyPatch) -> None:
    # 8 fps, times in 1/16 s (binary-exact): the span starts at 0.25 s, half a frame is 0.0625 s;
    # the frame at 0.1875 s is on the edge and taken, not passed over for the one at 0.3125 s
    av = ReadAv(frames=[(1, 1), (3, 2), (5, 3)])
    av.frame_base = Fraction(1, 16)
    monkeypatch.setattr(video_module, "_av", lambda: av)
    assert [int(f[0, 0, 0]) for f in decode_frames(Path("ep.mp4"), 0.25, 1, 8)] == [2]
