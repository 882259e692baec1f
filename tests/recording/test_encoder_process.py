"""The per-camera encoder process: frames cross in shared memory, only slot indices cross the pipe,
the file it writes is the one the thread encoder wrote, a dead encoder is reported and replaced,
and nothing (segment, child) outlives ``close``."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from runtime.errors import RecordingError
from runtime.recording.encoder_process import CameraEncoder
from runtime.recording.video import VideoSettings, decode_frames, frame_times
from tests.recording.conftest import HEIGHT, WIDTH, frame_image

pytestmark = pytest.mark.usefixtures("no_leaks")


def encoder(**kwargs: object) -> CameraEncoder:
    args: dict[str, object] = {"slots": 4, "height": HEIGHT, "width": WIDTH, "fps": 30, "video": VideoSettings()}
    args.update(kwargs)
    return CameraEncoder("observation.images.front", **args)  # type: ignore[arg-type]


def feed(enc: CameraEncoder, k: int, pts: int) -> None:
    while (slot := enc.ring.take()) is None:  # the test waits; the recorder would drop
        time.sleep(0.002)
    np.copyto(enc.ring.views[slot], frame_image(k))
    assert enc.send_frame(slot, pts)


def test_an_episode_encoded_in_the_process(tmp_path: Path) -> None:
    enc = encoder()
    try:
        assert enc.pid != os.getpid()
        enc.begin(0, tmp_path / "ep0.mp4")
        for k in range(12):
            feed(enc, k, k)
        enc.end(0)
        done = enc.result(0, 20.0)
    finally:
        enc.close()
    assert done.frames == 12 and done.path == tmp_path / "ep0.mp4"
    assert done.stats["count"].tolist() == [12]
    assert frame_times(done.path) == pytest.approx([k / 30 for k in range(12)])
    decoded = decode_frames(done.path, 0.0, 12, 30)
    means = decoded.reshape(12, -1).mean(axis=1)
    want = np.array([frame_image(k).mean() for k in range(12)])
    assert np.abs(means - want).max() < 3


def test_a_full_ring_is_seen_not_waited_for(tmp_path: Path) -> None:
    enc = encoder(slots=3, delay_ms=100)
    try:
        enc.begin(0, tmp_path / "ep0.mp4")
        taken = [enc.ring.take() for _ in range(4)]
        assert taken[3] is None  # three slots, all in use: the caller drops the frame
        for pts, slot in enumerate(taken[:3]):
            assert slot is not None
            np.copyto(enc.ring.views[slot], frame_image(pts))
            enc.send_frame(slot, pts)
        enc.end(0)
        assert enc.result(0, 20.0).frames == 3
        assert enc.ring.in_use == 0
    finally:
        enc.close()


def test_a_killed_encoder_is_reported_and_replaced(tmp_path: Path) -> None:
    deaths: list[tuple[str, str]] = []
    enc = encoder(on_death=lambda key, why: deaths.append((key, why)))
    try:
        enc.begin(0, tmp_path / "ep0.mp4")
        feed(enc, 0, 0)
        first = enc.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        with pytest.raises(RecordingError, match="exited with code -9"):
            enc.result(0, 20.0)
        assert deaths and deaths[0][0] == "observation.images.front" and enc.deaths == 1
        # the replacement records the next episode
        deadline = time.monotonic() + 20
        while (enc.pid == first or not enc.alive) and time.monotonic() < deadline:
            time.sleep(0.05)
        enc.begin(1, tmp_path / "ep1.mp4")
        for k in range(3):
            feed(enc, k, k)
        enc.end(1)
        assert enc.result(1, 20.0).frames == 3
    finally:
        enc.close()
