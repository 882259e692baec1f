"""The camera producer: the synthetic pattern worked out by hand, OpenCV stood in for, the PUB
socket's parts, and the publishing pace on a clock the test moves."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from runtime.errors import ConfigError, DeviceError, MissingDependencyError
from runtime.producers import camera
from runtime.producers.camera import CameraPublisher, OpenCVSource, SyntheticSource
from runtime.protocol.stream import decode_part

NAME = "observation.images.front"


# ---- the synthetic source ----------------------------------------------------------------


def synthetic_base_8x4() -> np.ndarray:
    """8 x 4: red rises along x (255 * i / 7, truncated), green along y (255 * j / 3), blue 64."""
    red = [0, 36, 72, 109, 145, 182, 218, 255]
    green = [0, 85, 170, 255]
    return np.array([[[r, g, 64] for r in red] for g in green], dtype=np.uint8)


def test_the_synthetic_frame_is_a_gradient_with_a_square_sweeping_across() -> None:
    source = SyntheticSource(8, 4)
    assert (source.width, source.height) == (8, 4)
    frames = [source.read() for _ in range(4)]
    for frame in frames:
        assert frame.dtype == np.uint8 and frame.shape == (4, 8, 3)
    # the square: side max(2, min(8, 4) // 4) = 2, rows (4 - 2) // 2 = 1 and 2, from column 3 n mod 6
    for n, x0 in enumerate((0, 3, 0, 3)):
        expected = synthetic_base_8x4()
        expected[1:3, x0 : x0 + 2] = 255
        np.testing.assert_array_equal(frames[n], expected, err_msg=f"frame {n}")


def test_the_square_is_a_quarter_of_the_shorter_side_and_wraps() -> None:
    source = SyntheticSource(16, 12)  # side 3, rows 4..6, columns from 3 n mod 13
    for n, x0 in enumerate((0, 3, 6, 9, 12, 2)):
        frame = source.read()
        square = np.zeros((12, 16), dtype=bool)
        square[4:7, x0 : x0 + 3] = True
        assert np.array_equal(np.all(frame == 255, axis=-1), square), f"frame {n}"


def test_a_frame_as_small_as_the_square_is_all_square() -> None:
    source = SyntheticSource(2, 2)
    for _ in range(3):
        np.testing.assert_array_equal(source.read(), np.full((2, 2, 3), 255, dtype=np.uint8))


def test_each_frame_is_a_new_array() -> None:
    source = SyntheticSource(8, 4)
    first = source.read()
    first[:] = 7
    np.testing.assert_array_equal(source.read()[0, 0], [0, 0, 64])
    source.close()  # nothing to release


# ---- the OpenCV source, with a stand-in cv2 ------------------------------------------------


class FakeCapture:
    def __init__(self, cv2: FakeCV2, target: Any, api: int) -> None:
        self.cv2, self.target, self.api = cv2, target, api
        self.props: dict[int, float] = {}
        self.released = 0
        cv2.captures.append(self)

    def isOpened(self) -> bool:
        return self.cv2.opens

    def set(self, prop: int, value: float) -> bool:
        self.props[prop] = value
        return True

    def get(self, prop: int) -> float:
        return self.cv2.delivers.get(prop, self.props.get(prop, 0.0))

    def read(self) -> tuple[bool, Any]:
        return self.cv2.frames.pop(0)

    def release(self) -> None:
        self.released += 1


class FakeCV2(types.ModuleType):
    CAP_V4L2 = 200
    CAP_PROP_FRAME_WIDTH = 3
    CAP_PROP_FRAME_HEIGHT = 4
    CAP_PROP_FPS = 5
    COLOR_BGR2RGB = 4

    def __init__(self) -> None:
        super().__init__("cv2")
        self.captures: list[FakeCapture] = []
        self.opens = True
        self.delivers: dict[int, float] = {}
        self.frames: list[tuple[bool, Any]] = []

    def VideoCapture(self, target: Any, api: int) -> FakeCapture:
        return FakeCapture(self, target, api)

    def cvtColor(self, frame: np.ndarray, code: int) -> np.ndarray:
        assert code == self.COLOR_BGR2RGB
        return frame[..., ::-1]


@pytest.fixture
def cv2(monkeypatch: pytest.MonkeyPatch) -> FakeCV2:
    fake = FakeCV2()
    monkeypatch.setitem(sys.modules, "cv2", fake)
    return fake


def test_without_opencv_the_camera_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cv2", None)
    with pytest.raises(MissingDependencyError) as e:
        OpenCVSource("0", 640, 480, 30.0)
    assert str(e.value) == (
        "reading a camera needs OpenCV: pip install 'lerobot-runtime[camera]' "
        "(import of cv2 halted; None in sys.modules)"
    )
    assert isinstance(e.value.__cause__, ImportError)


def test_a_camera_is_opened_by_index_or_path_through_v4l2_at_the_size_and_rate_asked(cv2: FakeCV2) -> None:
    source = OpenCVSource("2", 640, 480, 30.0)
    cap = cv2.captures[0]
    assert (cap.target, cap.api) == (2, 200)
    assert cap.props == {3: 640, 4: 480, 5: 30.0}
    assert source.device == "2"
    OpenCVSource("/dev/video0", 640, 480, 30.0)
    assert cv2.captures[1].target == "/dev/video0"


def test_a_camera_that_does_not_open_is_refused(cv2: FakeCV2) -> None:
    cv2.opens = False
    with pytest.raises(DeviceError) as e:
        OpenCVSource("/dev/video9", 640, 480, 30.0)
    assert str(e.value) == "camera /dev/video9: cannot open it (is it plugged in, and readable by this user?)"


@pytest.mark.parametrize("delivers", [{3: 1280.0, 4: 720.0}, {3: 1280.0}, {4: 720.0}])
def test_a_camera_that_delivers_another_size_is_released_and_refused(cv2: FakeCV2, delivers: dict[int, float]) -> None:
    cv2.delivers = delivers
    with pytest.raises(DeviceError) as e:
        OpenCVSource("0", 640, 480, 30.0)
    got = f"{int(delivers.get(3, 640))}x{int(delivers.get(4, 480))}"
    assert str(e.value) == f"camera 0: asked for 640x480, it delivers {got}"
    assert cv2.captures[0].released == 1


def test_frames_are_read_as_rgb_and_a_failed_read_is_a_device_error(cv2: FakeCV2) -> None:
    source = OpenCVSource("0", 2, 1, 30.0)
    bgr = np.array([[[1, 2, 3], [4, 5, 6]]], dtype=np.uint8)
    cv2.frames = [(True, bgr), (False, bgr), (True, None)]
    np.testing.assert_array_equal(source.read(), [[[3, 2, 1], [6, 5, 4]]])
    for _ in range(2):
        with pytest.raises(DeviceError) as e:
            source.read()
        assert str(e.value) == "camera 0: read failed (unplugged?)"
    source.close()
    assert cv2.captures[0].released == 1


# ---- the publisher ---------------------------------------------------------------------------


class Source:
    """Frames numbered in their first pixel; each read can take time on the test's clock."""

    def __init__(self, clock: Clock | None = None, takes: list[float] | None = None) -> None:
        self.clock, self.takes = clock, list(takes or [])
        self.reads = 0
        self.closed = 0
        self.on_read: Any = None

    def read(self) -> np.ndarray:
        frame = np.full((2, 3, 3), self.reads, dtype=np.uint8)
        self.reads += 1
        if self.clock is not None and self.takes:
            self.clock.t += self.takes.pop(0)
        if self.on_read is not None:
            self.on_read(self.reads)
        return frame

    def close(self) -> None:
        self.closed += 1


class Socket:
    def __init__(self) -> None:
        self.sent: list[tuple[list[Any], bool]] = []
        self.closed: list[Any] = []

    def send_multipart(self, frames: list[Any], copy: bool = True) -> None:
        self.sent.append((frames, copy))

    def close(self, linger: Any = None) -> None:
        self.closed.append(linger)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t


class Stop:
    """The publisher's stop event on the test's clock: waiting moves the clock unless stopped."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.flag = False
        self.waits: list[float] = []

    def is_set(self) -> bool:
        return self.flag

    def set(self) -> None:
        self.flag = True

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        if not self.flag:
            self.clock.t += timeout
        return self.flag


Maker = Callable[[Any], tuple[CameraPublisher, Socket]]


@pytest.fixture
def publisher(tmp_path: Path) -> Iterator[Maker]:
    """Publishers at 8 fps (a period of 0.125 s) whose socket is a stand-in recording what is sent."""
    made: list[CameraPublisher] = []

    def make(source: Any) -> tuple[CameraPublisher, Socket]:
        pub = CameraPublisher(source, NAME, "ipc://cam.sock", 8.0, runtime_directory=tmp_path)
        made.append(pub)
        pub._sock.close(0)
        sock = Socket()
        pub._sock = sock  # type: ignore[assignment]
        return pub, sock

    yield make
    for pub in made:
        pub.close()


def parts(sock: Socket) -> list[tuple[int, float, int]]:
    """(seq, capture time, frame number) of each part sent, each sent without a copy."""
    out = []
    for frames, copy in sock.sent:
        assert copy is False
        part = decode_part([bytes(f) for f in frames])
        assert part.name == NAME and part.array.shape == (2, 3, 3)
        out.append((part.seq, part.capture_ts, int(part.array[0, 0, 0])))
    return out


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(camera, "time", c)
    return c


@pytest.mark.parametrize("fps", [0.0, -1.0, float("nan"), float("inf")])
def test_a_rate_that_is_not_a_finite_positive_number_is_refused(tmp_path: Path, fps: float) -> None:
    with pytest.raises(ConfigError) as e:
        CameraPublisher(Source(), NAME, "ipc://cam.sock", fps, runtime_directory=tmp_path)
    assert str(e.value) == f"camera --fps: expected a finite number > 0, got {fps}"


def test_a_slow_and_a_fast_rate_are_taken(tmp_path: Path) -> None:
    for fps in (0.5, 1e6):
        CameraPublisher(Source(), NAME, "ipc://cam.sock", fps, runtime_directory=tmp_path).close()


def test_the_publisher_binds_its_endpoint_under_the_runtime_directory(tmp_path: Path) -> None:
    pub = CameraPublisher(Source(), NAME, "ipc://cam.sock", 8.0, runtime_directory=tmp_path)
    try:
        assert pub.endpoint == f"ipc://{tmp_path}/cam.sock"
        assert (tmp_path / "cam.sock").exists()
        assert (pub.name, pub.period, pub.sent) == (NAME, 0.125, 0)
        # a subscriber that falls behind loses frames (2 queued at most); nothing lingers at close
        assert (pub._sock.getsockopt(zmq.SNDHWM), pub._sock.getsockopt(zmq.LINGER)) == (2, 0)
        assert pub._sock.type == zmq.PUB
    finally:
        pub.close()


def test_an_endpoint_that_cannot_be_bound_is_refused_and_nothing_left_open(tmp_path: Path) -> None:
    source = Source()
    with pytest.raises(ConfigError) as e:
        CameraPublisher(source, NAME, "bogus://x", 8.0)
    assert str(e.value) == "camera --endpoint: cannot bind bogus://x: Protocol not supported (addr='bogus://x')"
    assert isinstance(e.value.__cause__, zmq.ZMQError)
    assert source.closed == 1


def test_a_published_part_reaches_a_subscriber(tmp_path: Path) -> None:
    pub = CameraPublisher(Source(), NAME, "ipc://cam.sock", 8.0, runtime_directory=tmp_path)
    sub = pub._context.socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(pub.endpoint)
        frame = np.arange(18, dtype=np.uint8).reshape(2, 3, 3)
        for _ in range(500):  # until the subscription has reached the publisher
            pub.publish(frame, 12.5)
            if sub.poll(10):
                break
        part = decode_part(sub.recv_multipart())
        assert (part.name, part.capture_ts) == (NAME, 12.5)
        assert 0 <= part.seq < pub.sent
        np.testing.assert_array_equal(part.array, frame)
    finally:
        sub.close(0)
        pub.close()


def test_publish_numbers_the_parts_from_zero(publisher: Maker) -> None:
    pub, sock = publisher(Source())
    pub.publish(np.zeros((2, 3, 3), dtype=np.uint8), 5.0)
    pub.publish(np.full((2, 3, 3), 9, dtype=np.uint8), 5.25)
    assert parts(sock) == [(0, 5.0, 0), (1, 5.25, 9)]
    assert pub.sent == 2


def test_frames_go_out_on_absolute_deadlines_stamped_when_read(publisher: Maker, clock: Clock) -> None:
    source = Source(clock, takes=[0.03125] * 3)  # each read takes 1/32 s
    pub, sock = publisher(source)
    stop = pub._stop = Stop(clock)  # type: ignore[assignment]
    pub.run(max_frames=3)
    assert parts(sock) == [(0, 100.03125, 0), (1, 100.15625, 1), (2, 100.28125, 2)]
    assert stop.waits == [0.09375, 0.09375, 0.09375]  # to 100.125, 100.25, 100.375


def test_a_publisher_that_fell_behind_skips_the_deadlines_it_missed(publisher: Maker, clock: Clock) -> None:
    source = Source(clock, takes=[0.3125, 0.0, 0.0])  # the first read takes 2.5 periods
    pub, sock = publisher(source)
    stop = pub._stop = Stop(clock)  # type: ignore[assignment]
    pub.run(max_frames=3)
    # the next deadline after 100.3125 is the fourth, 100.375: no burst of the missed ones
    assert parts(sock) == [(0, 100.3125, 0), (1, 100.3125, 1), (2, 100.375, 2)]
    assert stop.waits == [0.0625, 0.125]


def test_a_publisher_exactly_on_time_does_not_wait(publisher: Maker, clock: Clock) -> None:
    source = Source(clock, takes=[0.125, 0.125, 0.125])  # each read takes exactly one period
    pub, sock = publisher(source)
    stop = pub._stop = Stop(clock)  # type: ignore[assignment]
    pub.run(max_frames=3)
    assert parts(sock) == [(0, 100.125, 0), (1, 100.25, 1), (2, 100.375, 2)]
    assert stop.waits == []


def test_max_frames_counts_every_part_this_publisher_sent(publisher: Maker, clock: Clock) -> None:
    pub, sock = publisher(Source(clock))
    pub._stop = Stop(clock)  # type: ignore[assignment]
    pub.publish(np.zeros((2, 3, 3), dtype=np.uint8), 1.0)
    pub.run(max_frames=3)
    assert [seq for seq, _, _ in parts(sock)] == [0, 1, 2]
    pub.run(max_frames=3)
    assert pub.sent == 3


def test_stop_ends_the_run_after_the_frame_in_hand(publisher: Maker, clock: Clock) -> None:
    source = Source(clock)
    pub, sock = publisher(source)
    stop = pub._stop = Stop(clock)  # type: ignore[assignment]
    source.on_read = lambda n: pub.stop() if n == 2 else None
    pub.run()  # no frame limit
    assert parts(sock) == [(0, 100.0, 0), (1, 100.125, 1)]
    assert stop.waits == [0.125, 0.125]  # the second wait returns at once: stopped
    assert clock.t == 100.125


def test_a_stopped_publisher_sends_nothing(publisher: Maker, clock: Clock) -> None:
    source = Source(clock)
    pub, sock = publisher(source)
    pub._stop = Stop(clock)  # type: ignore[assignment]
    pub.stop()
    pub.run(max_frames=3)
    assert (sock.sent, source.reads) == ([], 0)


def test_close_stops_closes_the_socket_at_once_and_the_source(publisher: Maker) -> None:
    source = Source()
    pub, sock = publisher(source)
    pub.close()
    assert pub._stop.is_set()
    assert sock.closed == [0]
    assert pub._context.closed
    assert source.closed == 1
