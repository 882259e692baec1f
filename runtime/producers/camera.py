"""``lerobot-runtime camera``: publish a camera's frames, with capture timestamps, to the control loop.

Frames go out on a ZeroMQ PUB socket in the stream format of :mod:`runtime.protocol.stream`
(uint8 height x width x 3, RGB), stamped with ``time.monotonic()`` right after the frame is read.
Sources: a V4L2/UVC camera through OpenCV (as LeRobot's ``OpenCVCamera``; the optional ``camera``
extra), or a synthetic moving pattern for the demo and tests.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import zmq

from runtime.errors import ConfigError, DeviceError, MissingDependencyError
from runtime.protocol.stream import encode_part
from runtime.server.endpoints import resolve_endpoint

log = logging.getLogger(__name__)


class FrameSource(Protocol):
    def read(self) -> np.ndarray:
        """The next frame, uint8 [height, width, 3] RGB; raises DeviceError when the camera fails."""
        ...

    def close(self) -> None: ...


class SyntheticSource:
    """A gradient with a bright square sweeping across it: frames that change, at no cost."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        y = np.linspace(0, 255, height, dtype=np.float32)[:, None]
        x = np.linspace(0, 255, width, dtype=np.float32)[None, :]
        base = np.stack(
            [
                np.broadcast_to(x, (height, width)),
                np.broadcast_to(y, (height, width)),
                np.full((height, width), 64.0, dtype=np.float32),
            ],
            axis=-1,
        )
        self._base = base.astype(np.uint8)
        self._n = 0

    def read(self) -> np.ndarray:
        frame = self._base.copy()
        side = max(2, min(self.width, self.height) // 4)
        x0 = (self._n * 3) % max(1, self.width - side)
        y0 = (self.height - side) // 2
        frame[y0 : y0 + side, x0 : x0 + side] = 255
        self._n += 1
        return frame

    def close(self) -> None:
        pass


class OpenCVSource:
    """A V4L2/UVC camera (``/dev/video0`` or an index), read through OpenCV, converted to RGB."""

    def __init__(self, device: str, width: int, height: int, fps: float) -> None:
        try:
            import cv2
        except ImportError as e:
            raise MissingDependencyError(
                f"reading a camera needs OpenCV: pip install 'lerobot-runtime[camera]' ({e})"
            ) from e
        self._cv2: Any = cv2
        target: int | str = int(device) if device.isdigit() else device
        cap = cv2.VideoCapture(target, cv2.CAP_V4L2)
        if not cap.isOpened():
            raise DeviceError(f"camera {device}: cannot open it (is it plugged in, and readable by this user?)")
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, width)
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, height)
        cap.set(cv2.CAP_PROP_FPS, fps)
        got_w, got_h = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        if (got_w, got_h) != (width, height):
            cap.release()
            raise DeviceError(f"camera {device}: asked for {width}x{height}, it delivers {got_w}x{got_h}")
        self._cap = cap
        self.device = device

    def read(self) -> np.ndarray:
        ok, frame = self._cap.read()
        if not ok or frame is None:
            raise DeviceError(f"camera {self.device}: read failed (unplugged?)")
        rgb: np.ndarray = self._cv2.cvtColor(frame, self._cv2.COLOR_BGR2RGB)
        return rgb

    def close(self) -> None:
        self._cap.release()


class CameraPublisher:
    """Read ``source`` at ``fps`` (absolute deadlines) and publish each frame as input ``name``."""

    def __init__(
        self, source: FrameSource, name: str, endpoint: str, fps: float, runtime_directory: Path | None = None
    ) -> None:
        if not 0 < fps < math.inf:  # an infinite rate is a period of 0: the pace would divide by it
            raise ConfigError(f"camera --fps: expected a finite number > 0, got {fps}")
        self.source = source
        self.name = name
        self.endpoint = resolve_endpoint(endpoint, runtime_directory)
        self.period = 1.0 / fps
        self.sent = 0
        self._stop = threading.Event()
        self._context = zmq.Context()
        self._sock = self._context.socket(zmq.PUB)
        self._sock.linger = 0
        self._sock.sndhwm = 2  # a subscriber that falls behind loses frames, never gets a backlog
        try:
            self._sock.bind(self.endpoint)
        except zmq.ZMQError as e:
            self.close()
            raise ConfigError(f"camera --endpoint: cannot bind {self.endpoint}: {e}") from e

    def publish(self, frame: np.ndarray, capture_ts: float) -> None:
        self._sock.send_multipart(encode_part(self.name, self.sent, capture_ts, frame), copy=False)
        self.sent += 1

    def run(self, max_frames: int | None = None) -> None:
        start = time.monotonic()
        k = 0
        while not self._stop.is_set() and (max_frames is None or self.sent < max_frames):
            frame = self.source.read()
            self.publish(frame, time.monotonic())
            k += 1
            delay = start + k * self.period - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                k = int((time.monotonic() - start) / self.period)  # fell behind: do not burst

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        self._sock.close(0)
        self._context.term()
        self.source.close()
