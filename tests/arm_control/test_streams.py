"""The observation streams: configured inputs checked against the policy's, each part checked (its
topic, dtype and shape, a capture time in the future) and counted, the refusal logged once per
stream, the newest part kept, staleness by age; the receiver on stand-in sockets, and once over a
real ipc socket."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import zmq

from runtime.arm_control import streams as streams_module
from runtime.arm_control.streams import POLL_MS, ObservationStreams
from runtime.bundle.manifest import TensorSpec
from runtime.control.config import StreamConfig
from runtime.errors import ConfigError
from runtime.protocol.errors import BadRequestError
from runtime.protocol.stream import StreamPart, encode_part

FRONT = "observation.images.front"
SPECS = (
    TensorSpec("observation.state", "float32", (6,), "state"),
    TensorSpec(FRONT, "uint8", (2, 3, 3), "image"),
    TensorSpec("wrist", "uint8", (2, 2, 3), "image"),
)


def make(tmp_path: Path, *configs: StreamConfig, **kw: Any) -> ObservationStreams:
    configs = configs or (
        StreamConfig(FRONT, "ipc://front.sock", 100.0),
        StreamConfig("wrist", "tcp://127.0.0.1:1", 50.0),
    )
    return ObservationStreams(configs, SPECS, runtime_directory=tmp_path, **kw)


class Socket:
    """A SUB socket's side the receiver reads: the messages queued, then zmq.Again."""

    def __init__(self, *messages: list[Any]) -> None:
        self.messages = [[SimpleNamespace(buffer=memoryview(bytes(f))) for f in m] for m in messages]

    def recv_multipart(self, flags: int, copy: bool) -> list[Any]:
        assert flags == zmq.NOBLOCK and copy is False
        if not self.messages:
            raise zmq.Again()
        return self.messages.pop(0)


def image(shape: tuple[int, ...] = (2, 3, 3), value: int = 7, dtype: Any = np.uint8) -> np.ndarray:
    return np.full(shape, value, dtype=dtype)


def test_an_input_the_policy_does_not_have_is_refused_naming_its_inputs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        make(tmp_path, StreamConfig("observation.images.side", "ipc://side.sock"))
    assert str(err.value) == (
        "control.streams: input 'observation.images.side' is not one of the policy's inputs "
        "(observation.state, observation.images.front, wrist)"
    )


def test_streams_start_with_nothing_received(tmp_path: Path) -> None:
    s = make(tmp_path)
    assert s.names == (FRONT, "wrist")
    assert s.endpoints == {FRONT: f"ipc://{tmp_path}/front.sock", "wrist": "tcp://127.0.0.1:1"}
    assert s.specs == {FRONT: SPECS[1], "wrist": SPECS[2]}
    assert s.received == {FRONT: 0, "wrist": 0} and s.refused == {FRONT: 0, "wrist": 0}
    assert s.latest(FRONT) is None and s.latest("wrist") is None
    assert s.stale(100.0) == [(FRONT, None), ("wrist", None)]
    assert POLL_MS == 50


def test_parts_are_received_counted_and_the_newest_kept(tmp_path: Path) -> None:
    s = make(tmp_path)
    now = time.monotonic()
    s._drain(
        Socket(
            encode_part(FRONT, 1, now, image(value=1)),
            encode_part(FRONT, 2, now, image(value=2)),
            encode_part("wrist", 9, now, image((2, 2, 3))),
        )
    )
    assert s.received == {FRONT: 2, "wrist": 1} and s.refused == {FRONT: 0, "wrist": 0}
    front = s.latest(FRONT)
    assert front is not None and front.seq == 2 and int(front.array[0, 0, 0]) == 2
    assert s.latest(FRONT) is front  # a peek, not a take
    assert s.latest("wrist").seq == 9  # type: ignore[union-attr]


def test_a_part_that_does_not_fit_is_refused_counted_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = make(tmp_path)
    now = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="runtime.arm_control.streams"):
        s._drain(
            Socket(
                encode_part(FRONT, 1, now, image((2, 2, 3))),
                encode_part(FRONT, 2, now, image(dtype=np.float32)),
                encode_part(FRONT, 3, now, image(value=3)),
                encode_part("side", 4, now, image()),
                [b"wrist", b"not msgpack", b""],
            )
        )
    assert s.refused == {FRONT: 2, "wrist": 1} and s.received == {FRONT: 1, "wrist": 0}
    assert s.latest(FRONT).seq == 3  # type: ignore[union-attr]
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        f"observation stream {FRONT}",
        "observation stream side",
        "observation stream wrist",
    ]


def test_a_message_of_no_frames_is_refused_as_from_nobody(tmp_path: Path) -> None:
    s = make(tmp_path)
    sock = Socket()
    sock.messages = [[]]
    s._drain(sock)
    assert s.refused == {FRONT: 0, "wrist": 0} and s.received == {FRONT: 0, "wrist": 0}
    assert "?" in s._warned


def test_each_check_and_its_words(tmp_path: Path) -> None:
    s = make(tmp_path)
    now = time.monotonic()
    with pytest.raises(BadRequestError) as err:
        s._check(StreamPart("side", 1, now, image()))
    assert (err.value.message, err.value.field) == ("no stream is configured for 'side'", "(topic)")
    with pytest.raises(BadRequestError) as err:
        s._check(StreamPart(FRONT, 1, now, image((2, 2, 3), dtype=np.float32)))
    e = err.value
    assert (e.message, e.field, e.expected, e.received) == (
        "expected uint8[2, 3, 3], got float32[2, 2, 3]",
        FRONT,
        "uint8[2, 3, 3]",
        "float32[2, 2, 3]",
    )
    with pytest.raises(BadRequestError) as err:
        s._check(StreamPart(FRONT, 1, now, image((2, 2, 3))))
    assert err.value.message == "expected uint8[2, 3, 3], got uint8[2, 2, 3]"
    with pytest.raises(BadRequestError) as err:
        s._check(StreamPart(FRONT, 1, now, image(dtype=np.int8)))
    assert err.value.message == "expected uint8[2, 3, 3], got int8[2, 3, 3]"


def test_a_capture_time_more_than_a_second_ahead_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = make(tmp_path)
    monkeypatch.setattr(streams_module.time, "monotonic", lambda: 500.0)
    s._check(StreamPart(FRONT, 1, 501.0, image()))  # exactly a second: allowed
    with pytest.raises(BadRequestError) as err:
        s._check(StreamPart(FRONT, 1, 501.25, image()))
    assert (err.value.message, err.value.field) == (
        "capture_ts 501.250 is in the future (this host's CLOCK_MONOTONIC is 500.000); producers must stamp "
        "frames with time.monotonic() on this host",
        "capture_ts",
    )


def test_a_stream_is_stale_past_its_own_age_limit(tmp_path: Path) -> None:
    s = make(tmp_path)
    s._latest[FRONT].put(StreamPart(FRONT, 1, 10.0, image()))
    s._latest["wrist"].put(StreamPart("wrist", 1, 10.0, image((2, 2, 3))))
    assert s.stale(10.03125) == []
    assert s.stale(10.0625) == [("wrist", 62.5)]  # wrist allows 50 ms, front 100
    assert s.stale(10.125) == [(FRONT, 125.0), ("wrist", 125.0)]
    s2 = make(tmp_path, StreamConfig(FRONT, "ipc://f", 62.5))
    s2._latest[FRONT].put(StreamPart(FRONT, 1, 10.0, image()))
    assert s2.stale(10.0625) == []  # exactly at the limit: not stale


def test_a_stopped_receiver_that_never_started_stops_quietly(tmp_path: Path) -> None:
    s = make(tmp_path)
    s.stop()
    s.stop()


def test_frames_arrive_over_a_real_socket_and_stop_ends_the_thread(tmp_path: Path) -> None:
    s = make(tmp_path, StreamConfig(FRONT, "ipc://front.sock", 100.0))
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.linger = 0
    pub.bind(f"ipc://{tmp_path}/front.sock")
    try:
        s.start()
        thread = s._thread
        assert thread is not None and thread.name == "lerobot-runtime-streams" and thread.daemon
        deadline = time.monotonic() + 5.0
        while s.latest(FRONT) is None and time.monotonic() < deadline:
            pub.send_multipart(encode_part(FRONT, 1, time.monotonic(), image()))
            time.sleep(0.01)
        assert s.latest(FRONT) is not None and s.received[FRONT] >= 1
    finally:
        s.stop()
        pub.close()
    assert s._thread is None and s._context is None and not thread.is_alive()


def test_the_receiver_pins_itself_to_the_cpus_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[int, set[int]]] = []
    monkeypatch.setattr(streams_module.os, "sched_setaffinity", lambda pid, cpus: asked.append((pid, cpus)))
    s = make(tmp_path, cpus={1})
    s._stop.set()
    s._run([])
    assert asked == [(0, {1})]
    s = make(tmp_path, cpus=set())
    s._stop.set()
    s._run([])
    assert asked == [(0, {1})]


def test_the_receiver_closes_its_sockets(tmp_path: Path) -> None:
    ctx = zmq.Context.instance()
    socks = [ctx.socket(zmq.SUB), ctx.socket(zmq.SUB)]
    s = make(tmp_path)
    s._stop.set()
    s._run(socks)
    assert [sock.closed for sock in socks] == [True, True]


def test_a_topic_that_is_not_utf8_is_refused_and_the_receiver_goes_on(tmp_path: Path) -> None:
    s = make(tmp_path)
    now = time.monotonic()
    frames = encode_part(FRONT, 1, now, image())
    s._drain(Socket([b"\xff\xfe", frames[1], frames[2]], encode_part(FRONT, 2, now, image())))
    assert "\ufffd\ufffd" in s._warned
    assert s.received == {FRONT: 1, "wrist": 0} and s.latest(FRONT).seq == 2  # type: ignore[union-attr]
