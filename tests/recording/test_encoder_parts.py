"""The encoder process's parts, in this process: its loop (``_main``) on stand-in pipes, video,
statistics, clock and OS calls over a buffer the test fills; the daemon's handle (``CameraEncoder``)
on a stand-in process with real pipes, the test playing the child: the start and its refusals, every
command on the pipe, replies and results, a death and its replacement, closing step by step. Starting
a real spawned process is left to ``test_encoder_process.py``."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from runtime.errors import RecordingError
from runtime.recording import encoder_process as ep
from runtime.recording.encoder_process import CameraEncoder, EncodedVideo, EncoderSpec, Link
from runtime.recording.video import VideoSettings

KEY = "observation.images.front"
H, W, SLOTS = 4, 6, 3


# -- the encoder process's loop --------------------------------------------------------------------


class Commands:
    """The command pipe's child end: the messages, then end-of-file (or ``end``)."""

    def __init__(self, messages: list[tuple[Any, ...]], end: Exception | None = None) -> None:
        self.messages = list(messages)
        self.end = end or EOFError()

    def recv(self) -> tuple[Any, ...]:
        if not self.messages:
            raise self.end
        return self.messages.pop(0)


class Replies:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def send(self, msg: tuple[Any, ...]) -> None:
        self.log.append(("reply", *msg))


class Shm:
    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.buf = memoryview(bytearray(SLOTS * H * W * 3))

    def close(self) -> None:
        self.log.append(("shm closed",))


class Video:
    """The episode's file: what it is given; ``fail`` names a call that raises."""

    fail: ClassVar[dict[str, str]] = {}

    def __init__(self, path: Path, fps: int, height: int, width: int, settings: VideoSettings, log: list[Any]) -> None:
        self.log, self.path, self.frames = log, path, 0
        log.append(("open", str(path), fps, height, width, settings.codec))
        if "open" in self.fail:
            raise OSError(self.fail["open"])

    def add(self, image: np.ndarray) -> None:
        self.log.append(("add", int(image[0, 0, 0]), image.shape))
        if "add" in self.fail:
            raise ValueError(self.fail["add"])
        self.frames += 1

    def finish(self) -> Path:
        self.log.append(("finish", str(self.path)))
        if "finish" in self.fail:
            raise OSError(self.fail["finish"])
        return self.path

    def abort(self) -> None:
        self.log.append(("abort", str(self.path)))


class Stats:
    def __init__(self, log: list[Any]) -> None:
        self.log, self.levels = log, []

    def add(self, image: np.ndarray) -> None:
        self.levels.append(int(image[0, 0, 0]))

    def result(self) -> dict[str, Any]:
        return {"levels": self.levels}


class Clock:
    """``time`` as the process sees it: CPU time the test sets, sleeps logged."""

    def __init__(self, log: list[Any]) -> None:
        self.log, self.cpu = log, 0.0

    def process_time(self) -> float:
        return self.cpu

    def sleep(self, s: float) -> None:
        self.log.append(("sleep", s))


class ProcLogging:
    """``logging`` for the process: what its root logger is set up with."""

    WARNING = 30

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def basicConfig(self, **kwargs: Any) -> None:
        self.log.append(("logging", kwargs))


class ProcOs:
    """``os`` for the process: its threads, their affinity, its niceness."""

    def __init__(self, log: list[Any], gone: str = "") -> None:
        self.log, self.gone = log, gone

    def listdir(self, path: str) -> list[str]:
        self.log.append(("listdir", path))
        return ["101", "102", "103"]

    def sched_setaffinity(self, tid: int, cpus: frozenset[int]) -> None:
        if str(tid) == self.gone:
            raise ProcessLookupError(tid)
        self.log.append(("affinity", tid, sorted(cpus)))

    def nice(self, n: int) -> None:
        self.log.append(("nice", n))


class Loop:
    """``_main`` with every stand-in in place; ``run`` feeds it commands and returns the log."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail: dict[str, str] | None = None, gone: str = ""):
        self.log: list[Any] = []
        self.clock = Clock(self.log)
        self.shm = Shm(self.log)
        log = self.log
        video_fail = dict(fail or {})

        class _Video(Video):
            fail = video_fail

            def __init__(self, path: Path, fps: int, height: int, width: int, settings: VideoSettings) -> None:
                super().__init__(path, fps, height, width, settings, log)

        def attach(name: str) -> Shm:
            log.append(("attach", name))
            return self.shm

        monkeypatch.setattr(ep, "attach", attach)
        monkeypatch.setattr(ep, "EpisodeVideo", _Video)
        monkeypatch.setattr(ep, "ImageStats", lambda: Stats(log))
        monkeypatch.setattr(ep, "normal_scheduling", lambda: log.append(("normal scheduling",)))
        monkeypatch.setattr(ep, "time", self.clock)
        monkeypatch.setattr(ep, "os", ProcOs(log, gone))
        monkeypatch.setattr(ep, "logging", ProcLogging(log))
        for k in range(SLOTS):  # slot k holds grey level 10 + k
            self.shm.buf[k * H * W * 3 : (k + 1) * H * W * 3] = bytes([10 + k]) * (H * W * 3)

    def run(
        self,
        messages: list[tuple[Any, ...]],
        *,
        cpus: frozenset[int] | None = None,
        delay_ms: float = 0.0,
        end: Exception | None = None,
    ) -> list[Any]:
        spec = EncoderSpec(KEY, "lrr-frames-x", SLOTS, H, W, 30, VideoSettings(codec="libx264"), delay_ms, cpus)
        ep._main(spec, Commands(messages, end), Replies(self.log))  # type: ignore[arg-type]
        return self.log


LOGGING = ("logging", {"level": 30, "format": f"encoder {KEY}: %(levelname)s %(message)s"})
START = [LOGGING, ("attach", "lrr-frames-x"), ("nice", 10), ("reply", "ready")]


def test_the_process_is_pinned_before_it_lowers_its_priority_and_says_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    log = Loop(monkeypatch, gone="102").run([], cpus=frozenset({3, 1}))
    assert log == [
        LOGGING,
        ("attach", "lrr-frames-x"),
        ("listdir", "/proc/self/task"),
        ("affinity", 101, [1, 3]),
        ("affinity", 103, [1, 3]),  # 102 ended meanwhile: passed over
        ("nice", 10),
        ("reply", "ready"),
        ("shm closed",),
    ]


@pytest.mark.parametrize("cpus", [None, frozenset()])
def test_without_cpus_the_process_stays_where_it_was_started(
    monkeypatch: pytest.MonkeyPatch, cpus: frozenset[int] | None
) -> None:
    assert Loop(monkeypatch).run([], cpus=cpus) == [*START, ("shm closed",)]


def test_an_episode_is_encoded_frame_by_frame_and_its_file_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = Loop(monkeypatch)
    loop.clock.cpu = 5.0

    class Timed(Commands):
        def recv(self) -> tuple[Any, ...]:
            msg = super().recv()
            loop.clock.cpu += 0.25  # each command costs a quarter second of CPU
            return msg

    spec = EncoderSpec(KEY, "lrr-frames-x", SLOTS, H, W, 30, VideoSettings(codec="libx264"))
    commands = [("begin", 7, "/d/ep.mp4"), ("frame", 2, 0), ("frame", 0, 1), ("end", 7), ("stop",)]
    ep._main(spec, Timed(commands), Replies(loop.log))  # type: ignore[arg-type]
    assert loop.log == [
        *START,
        ("open", "/d/ep.mp4", 30, H, W, "libx264"),
        ("add", 12, (H, W, 3)),
        ("normal scheduling",),  # once the codec is open, after the first frame
        ("reply", "free", 2),
        ("add", 10, (H, W, 3)),
        ("reply", "free", 0),
        ("finish", "/d/ep.mp4"),
        ("reply", "done", 7, "/d/ep.mp4", 2, {"levels": [12, 10]}, 0.75),
        ("shm closed",),
    ]


def test_a_slow_encoder_sleeps_its_delay_after_each_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    log = Loop(monkeypatch).run([("begin", 1, "/d/ep.mp4"), ("frame", 1, 0)], delay_ms=40.0)
    assert log[-4:] == [("sleep", 0.04), ("reply", "free", 1), ("abort", "/d/ep.mp4"), ("shm closed",)]


def test_a_frame_outside_an_episode_is_only_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    log = Loop(monkeypatch).run([("frame", 1, 0), ("nonsense", 1), ("abort", 0)])
    assert log == [*START, ("reply", "free", 1), ("shm closed",)]


def test_a_frame_out_of_order_fails_the_episode_and_frames_after_it_are_given_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    messages = [("begin", 3, "/d/ep.mp4"), ("frame", 0, 0), ("frame", 1, 5), ("frame", 2, 1), ("end", 3)]
    log = Loop(monkeypatch).run(messages)
    assert log[len(START) :] == [
        ("open", "/d/ep.mp4", 30, H, W, "libx264"),
        ("add", 10, (H, W, 3)),
        ("normal scheduling",),
        ("reply", "free", 0),
        ("abort", "/d/ep.mp4"),
        ("reply", "error", 3, "encoding frame 5: frame pts: expected 1, got 5"),
        ("reply", "free", 1),
        ("reply", "free", 2),
        ("reply", "error", 3, "no such episode is being encoded"),
        ("shm closed",),
    ]


def test_a_frame_the_codec_refuses_fails_the_episode(monkeypatch: pytest.MonkeyPatch) -> None:
    log = Loop(monkeypatch, fail={"add": "bad frame"}).run([("begin", 3, "/d/ep.mp4"), ("frame", 0, 0)])
    assert log[len(START) + 1 :] == [
        ("add", 10, (H, W, 3)),
        ("abort", "/d/ep.mp4"),
        ("reply", "error", 3, "encoding frame 0: bad frame"),
        ("reply", "free", 0),
        ("shm closed",),
    ]


def test_a_file_that_cannot_be_opened_is_reported_and_its_frames_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    log = Loop(monkeypatch, fail={"open": "read-only"}).run([("begin", 4, "/ro/ep.mp4"), ("frame", 0, 0), ("end", 4)])
    assert log[len(START) :] == [
        ("open", "/ro/ep.mp4", 30, H, W, "libx264"),
        ("reply", "error", 4, "opening /ro/ep.mp4: read-only"),
        ("reply", "free", 0),
        ("reply", "error", 4, "no such episode is being encoded"),
        ("shm closed",),
    ]


def test_a_file_that_cannot_be_finished_is_removed_and_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    log = Loop(monkeypatch, fail={"finish": "disk full"}).run([("begin", 4, "/d/ep.mp4"), ("end", 4), ("stop",)])
    assert log[len(START) + 1 :] == [
        ("finish", "/d/ep.mp4"),
        ("abort", "/d/ep.mp4"),
        ("reply", "error", 4, "finishing the file: disk full"),
        ("shm closed",),
    ]


def test_an_episode_without_frames_has_no_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    log = Loop(monkeypatch).run([("begin", 4, "/d/ep.mp4"), ("end", 4)])
    assert log[-2:] == [("reply", "done", 4, "/d/ep.mp4", 0, {}, 0.0), ("shm closed",)]


def test_the_end_of_another_episode_is_refused_and_the_open_one_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [("begin", 4, "/d/ep.mp4"), ("end", 3), ("frame", 1, 0), ("end", 4)]
    log = Loop(monkeypatch).run(messages)
    assert log[len(START) + 1 :] == [
        ("reply", "error", 3, "no such episode is being encoded"),
        ("add", 11, (H, W, 3)),
        ("normal scheduling",),
        ("reply", "free", 1),
        ("finish", "/d/ep.mp4"),
        ("reply", "done", 4, "/d/ep.mp4", 1, {"levels": [11]}, 0.0),
        ("shm closed",),
    ]


def test_a_new_episode_drops_the_open_one_and_starts_its_statistics_over(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [("begin", 1, "/d/a.mp4"), ("frame", 0, 0), ("begin", 2, "/d/b.mp4"), ("frame", 2, 0), ("end", 2)]
    log = Loop(monkeypatch).run(messages)
    assert log[len(START) + 4 :] == [
        ("abort", "/d/a.mp4"),
        ("open", "/d/b.mp4", 30, H, W, "libx264"),
        ("add", 12, (H, W, 3)),
        ("normal scheduling",),
        ("reply", "free", 2),
        ("finish", "/d/b.mp4"),
        ("reply", "done", 2, "/d/b.mp4", 1, {"levels": [12]}, 0.0),
        ("shm closed",),
    ]


def test_only_the_open_episode_is_aborted(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [("begin", 1, "/d/a.mp4"), ("abort", 2), ("frame", 0, 0), ("abort", 1), ("frame", 1, 1), ("end", 1)]
    log = Loop(monkeypatch).run(messages)
    assert log[len(START) + 1 :] == [
        ("add", 10, (H, W, 3)),
        ("normal scheduling",),
        ("reply", "free", 0),
        ("abort", "/d/a.mp4"),
        ("reply", "free", 1),
        ("reply", "error", 1, "no such episode is being encoded"),
        ("shm closed",),
    ]


@pytest.mark.parametrize("end", [EOFError(), OSError("bad handle")])
def test_a_daemon_gone_ends_the_process_and_drops_the_open_file(
    monkeypatch: pytest.MonkeyPatch, end: Exception
) -> None:
    log = Loop(monkeypatch).run([("begin", 1, "/d/a.mp4"), ("frame", 0, 0)], end=end)
    assert log[-2:] == [("abort", "/d/a.mp4"), ("shm closed",)]


def test_stop_ends_the_loop_before_later_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    log = Loop(monkeypatch).run([("stop",), ("frame", 0, 0)])
    assert log == [*START, ("shm closed",)]


# -- the daemon's handle, on a stand-in process ----------------------------------------------------


class Ring:
    made: ClassVar[list[Ring]] = []

    def __init__(self, slots: int, height: int, width: int) -> None:
        self.shape = (slots, height, width)
        self.name = f"ring-{len(Ring.made)}"
        self.given: list[int] = []
        self.closed = 0
        Ring.made.append(self)

    def give_back(self, index: int) -> None:
        self.given.append(index)

    def close(self) -> None:
        self.closed += 1


class Process:
    """A spawned process as the handle sees it; the test plays the child on ``commands``/``replies``."""

    def __init__(self, ctx: Context, target: Any, args: tuple[Any, ...], name: str, daemon: bool) -> None:
        self.ctx, self.target, self.args, self.name, self.daemon = ctx, target, args, name, daemon
        self.pid = 40 + len(ctx.processes)
        self.exitcode: int | None = None
        self.calls: list[Any] = []
        self.ignores: set[str] = set()

    def start(self) -> None:
        if self.ctx.start_fails:
            raise OSError("no more processes")
        if self.ctx.processes and self.ctx.hold is not None:  # a replacement that takes its time
            self.ctx.starting.set()
            self.ctx.hold.wait()
        self.ctx.processes.append(self)
        # the child's own copies of its ends: the handle closes the ones it passed
        self.commands = Connection(os.dup(self.args[1].fileno()), writable=False)
        self.replies = Connection(os.dup(self.args[2].fileno()), readable=False)

    def exit(self, code: int) -> None:
        if self.exitcode is None:
            self.exitcode = code
            self.replies.close()
            self.commands.close()

    def received(self) -> list[tuple[Any, ...]]:
        got = []
        while not self.commands.closed and self.commands.poll(0):
            got.append(self.commands.recv())
        return got

    def join(self, timeout: float | None = None) -> None:
        self.calls.append(("join", timeout))
        if self.exitcode is None and "stop" not in self.ignores and ("stop",) in self.received():
            self.exit(0)

    def is_alive(self) -> bool:
        return self.exitcode is None

    def terminate(self) -> None:
        self.calls.append(("terminate",))
        if "terminate" not in self.ignores:
            self.exit(-15)

    def kill(self) -> None:
        self.calls.append(("kill",))
        self.exit(-9)

    def close(self) -> None:
        self.calls.append(("close",))


class Context:
    def __init__(self) -> None:
        self.processes: list[Process] = []
        self.start_fails = False
        self.hold: threading.Event | None = None
        self.starting = threading.Event()
        self.pipes: list[tuple[Connection, Connection]] = []

    def Pipe(self, duplex: bool) -> tuple[Connection, Connection]:
        pair = Pipe(duplex=duplex)
        self.pipes.append(pair)
        return pair

    def Process(self, target: Any, args: tuple[Any, ...], name: str, daemon: bool) -> Process:
        return Process(self, target, args, name, daemon)


def eventually(check: Any) -> None:
    """Wait for the reply thread to do what the test just told it (no timing asserted)."""
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "the reply thread never got there"
        time.sleep(0.001)


@pytest.fixture
def ctx(monkeypatch: pytest.MonkeyPatch) -> Context:
    context = Context()
    Ring.made = []
    monkeypatch.setattr(ep, "_CONTEXT", context)
    monkeypatch.setattr(ep, "FrameRing", Ring)
    # the stand-in child says ready at once: a handle that misses it fails in seconds, not half a minute
    monkeypatch.setattr(ep, "START_TIMEOUT_S", 5.0)
    return context


def started(ctx: Context, **kwargs: Any) -> CameraEncoder:
    """A handle whose child says ready at once."""
    ready = threading.Thread(
        target=lambda: (eventually(lambda: ctx.processes), ctx.processes[0].replies.send(("ready",)))
    )
    ready.start()
    args: dict[str, Any] = {"slots": SLOTS, "height": H, "width": W, "fps": 30, "video": VideoSettings(codec="libx264")}
    enc = CameraEncoder(KEY, **{**args, **kwargs})
    ready.join()
    return enc


def replaced(ctx: Context, enc: CameraEncoder, processes: int) -> None:
    """Wait until the reply thread has started the replacement whole."""
    eventually(lambda: len(ctx.processes) == processes)
    with enc._spawning:
        pass


def closed(enc: CameraEncoder) -> None:
    enc.close()
    assert not enc._reader.is_alive()


def test_the_process_is_given_its_spec_and_pipes_and_a_reply_thread_is_started(ctx: Context) -> None:
    video = VideoSettings(codec="libx264", crf=20)
    enc = started(ctx, video=video, delay_ms=2.5, cpus=frozenset({1}))
    try:
        process = ctx.processes[0]
        assert process.target is ep._main
        assert process.args[0] == EncoderSpec(KEY, "ring-0", SLOTS, H, W, 30, video, 2.5, frozenset({1}))
        assert (process.name, process.daemon) == (f"encoder-{KEY}", True)
        assert Ring.made[0].shape == (SLOTS, H, W)
        assert enc.ring is Ring.made[0] and enc.link.ring is Ring.made[0]
        assert (enc.pid, enc.alive, enc.deaths, enc.last_death) == (40, True, 0, None)
        # the child's ends were closed here: only the child holds them
        (cmd_read, cmd_write), (rep_read, rep_write) = ctx.pipes
        assert cmd_read.closed and rep_write.closed and not cmd_write.closed and not rep_read.closed
        assert enc.link.commands is cmd_write
        readers = [t for t in threading.enumerate() if t.name == f"encoder-{KEY}-replies"]
        assert len(readers) == 1 and readers[0].daemon
    finally:
        closed(enc)


def test_by_default_the_process_is_not_slowed_and_runs_where_the_daemon_may(ctx: Context) -> None:
    enc = started(ctx)
    try:
        spec = ctx.processes[0].args[0]
        assert spec == EncoderSpec(KEY, "ring-0", SLOTS, H, W, 30, VideoSettings(codec="libx264"))
        assert (spec.delay_ms, spec.cpus, enc.on_death) == (0.0, None, None)
    finally:
        closed(enc)


def test_a_process_that_never_says_ready_is_refused_and_stopped(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ep, "START_TIMEOUT_S", 0.0)
    with pytest.raises(RecordingError) as info:
        CameraEncoder(KEY, slots=SLOTS, height=H, width=W, fps=30, video=VideoSettings())
    assert str(info.value) == f"recording: the encoder process for {KEY} did not start: no word from it within 0.0 s"
    assert ctx.processes[0].calls[0] == ("join", 5.0) and ctx.processes[0].calls[-1] == ("close",)
    assert Ring.made[0].closed == 1


def test_a_process_that_dies_before_it_is_ready_is_refused_with_its_exit_code_and_not_restarted(
    ctx: Context,
) -> None:
    died = threading.Thread(target=lambda: (eventually(lambda: ctx.processes), ctx.processes[0].exit(1)))
    died.start()
    with pytest.raises(RecordingError) as info:
        CameraEncoder(KEY, slots=SLOTS, height=H, width=W, fps=30, video=VideoSettings())
    died.join()
    assert str(info.value) == (
        f"recording: the encoder process for {KEY} did not start: the encoder process (pid 40) exited with code 1"
    )
    assert len(ctx.processes) == 1
    assert ctx.processes[0].calls[0] == ("join", 1.0)  # the reply thread waits for its exit code


def test_each_command_goes_down_the_pipe(ctx: Context, tmp_path: Path) -> None:
    enc = started(ctx)
    child = ctx.processes[0]
    try:
        enc.begin(3, tmp_path / "ep.mp4")
        assert enc.send_frame(2, 0) is True
        enc.end(3)
        enc.abort(4)
        eventually(lambda: child.commands.poll(0))
        assert [child.commands.recv() for _ in range(4)] == [
            ("begin", 3, str(tmp_path / "ep.mp4")),
            ("frame", 2, 0),
            ("end", 3),
            ("abort", 4),
        ]
    finally:
        closed(enc)


def test_a_frame_goes_down_the_pipe_of_the_link_its_slot_came_from(ctx: Context) -> None:
    enc = started(ctx)
    try:
        other_read, other_write = Pipe(duplex=False)
        old = Link(enc.ring, other_write)  # type: ignore[arg-type]
        assert enc.send_frame(1, 5, old) is True
        assert other_read.recv() == ("frame", 1, 5)
        assert not ctx.processes[0].commands.poll(0)
        other_read.close()
        assert enc.send_frame(1, 6, old) is False  # that process is gone
    finally:
        closed(enc)


def test_a_command_to_a_closed_pipe_is_not_an_error(ctx: Context) -> None:
    enc = started(ctx)
    try:

        class Refusing:
            def send(self, msg: object) -> None:
                raise ValueError("closed")

        assert enc.send_frame(0, 0, Link(enc.ring, Refusing())) is False  # type: ignore[arg-type]
        ctx.processes[0].commands.close()  # the child is gone: its end of the pipe with it
        enc.begin(1, Path("x.mp4"))  # broken pipe: swallowed, the reply thread reports the death
        enc.end(1)
        enc.abort(1)
        assert enc.send_frame(0, 0) is False
    finally:
        closed(enc)


def test_free_slots_come_back_to_the_ring_and_results_wait_for_their_episode(ctx: Context) -> None:
    enc = started(ctx)
    child = ctx.processes[0]
    try:
        child.replies.send(("free", 2))
        child.replies.send(("free", 0))
        child.replies.send(("done", 1, "/d/old.mp4", 3, {}, 0.5))  # an earlier episode's: stale
        child.replies.send(("died", "the encoder process (pid 1) exited with code 1", 1))  # stale too
        child.replies.send(("error", 1, "stale"))
        child.replies.send(("done", 2, "/d/ep.mp4", 4, {"count": [4]}, 1))
        assert enc.result(2, 10.0) == EncodedVideo(Path("/d/ep.mp4"), 4, {"count": [4]}, 1.0)
        assert Ring.made[0].given == [2, 0]
        child.replies.send(("error", 3, "encoding frame 5: frame pts: expected 1, got 5"))
        with pytest.raises(RecordingError) as info:
            enc.result(3, 10.0)
        assert str(info.value) == f"{KEY}: encoding frame 5: frame pts: expected 1, got 5"
    finally:
        closed(enc)


class Results:
    """The reply queue, empty: each wait moves the handle's clock by the time it would have waited."""

    def __init__(self, clock: MonotonicClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def get(self, timeout: float) -> tuple[Any, ...]:
        self.waits.append(timeout)
        self.clock.now += timeout
        raise queue.Empty


class MonotonicClock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def test_no_result_in_time_is_an_error_naming_the_camera_and_episode(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    enc = started(ctx)
    try:
        clock = MonotonicClock()
        monkeypatch.setattr(ep, "time", clock)
        results = Results(clock)
        enc._results = results  # type: ignore[assignment]
        with pytest.raises(RecordingError) as info:
            enc.result(3, 1.25)
        assert str(info.value) == f"{KEY}: the encoder gave no file for episode 3 within 1.25 s"
        assert results.waits == [0.5, 0.5, 0.25]
        results.waits.clear()
        with pytest.raises(RecordingError):
            enc.result(3, 0.0)
        assert results.waits == []
    finally:
        monkeypatch.undo()
        closed(enc)


def test_a_death_is_reported_once_and_a_replacement_started_with_a_fresh_ring(
    ctx: Context, caplog: pytest.LogCaptureFixture
) -> None:
    deaths: list[tuple[str, str]] = []
    enc = started(ctx, on_death=lambda key, why: deaths.append((key, why)))
    first = ctx.processes[0]
    try:
        enc.begin(5, Path("ep.mp4"))
        with caplog.at_level(logging.ERROR, logger="runtime.recording.encoder_process"):
            first.exit(-9)
            replaced(ctx, enc, 2)
        reason = "the encoder process (pid 40) exited with code -9"
        assert deaths == [(KEY, reason)]
        assert (enc.deaths, enc.last_death) == (1, reason)
        with pytest.raises(RecordingError) as info:
            enc.result(5, 10.0)
        assert str(info.value) == f"{KEY}: {reason}"
        assert first.calls == [("join", 1.0)]
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
            f"recording: {KEY}: {reason}; its episode is dropped, a new encoder is started"
        ]
        second = ctx.processes[1]
        assert second.args[0].shm_name == "ring-1"
        assert enc.ring is Ring.made[1] and enc.pid == 41
        assert Ring.made[0].closed == 0  # retired: frames may still be read from it
        second.replies.send(("free", 1))
        second.replies.send(("done", 6, "/d/ep6.mp4", 2, {}, 0.25))
        assert enc.result(6, 10.0).frames == 2
        assert (Ring.made[0].given, Ring.made[1].given) == ([], [1])
    finally:
        closed(enc)
    assert [r.closed for r in Ring.made] == [1, 1]


def test_a_death_before_any_episode_is_not_taken_for_the_first_episodes_and_deaths_add_up(ctx: Context) -> None:
    enc = started(ctx)
    try:
        ctx.processes[0].exit(1)
        replaced(ctx, enc, 2)
        second = ctx.processes[1]
        enc.begin(1, Path("ep1.mp4"))
        second.replies.send(("done", 1, "/d/ep1.mp4", 2, {}, 0.5))
        assert enc.result(1, 10.0) == EncodedVideo(Path("/d/ep1.mp4"), 2, {}, 0.5)
        second.exit(-9)
        replaced(ctx, enc, 3)
        assert (enc.deaths, enc.last_death) == (2, "the encoder process (pid 41) exited with code -9")
    finally:
        closed(enc)


def test_closing_while_a_replacement_starts_stops_the_replacement(ctx: Context) -> None:
    """A bug these tests found: close() on the daemon's thread while the reply thread was starting a
    replacement joined a reply thread not yet started (RuntimeError) or stopped the dead process
    instead, and the replacement went on running after close()."""
    enc = started(ctx)
    first = ctx.processes[0]
    ctx.hold = threading.Event()
    first.exit(1)
    assert ctx.starting.wait(10)
    closer = threading.Thread(target=enc.close)
    closer.start()
    deadline = time.monotonic() + 0.5  # time for close() to act on the dead process if it does not wait
    while ("join", 5.0) not in first.calls and time.monotonic() < deadline:
        time.sleep(0.001)
    ctx.hold.set()
    closer.join(10)
    assert not closer.is_alive()
    second = ctx.processes[1]
    assert first.calls == [("join", 1.0)]
    assert second.calls == [("join", 5.0), ("close",)] and second.exitcode == 0
    assert [r.closed for r in Ring.made] == [1, 1]
    assert not enc._reader.is_alive()


def test_a_death_after_close_starts_no_replacement(ctx: Context) -> None:
    enc = started(ctx)
    process = ctx.processes[0]
    process.ignores = {"stop", "terminate"}
    enc.close()  # killed: its pipe closes while the handle is stopping
    assert len(ctx.processes) == 1 and enc.deaths == 0


def test_a_replacement_that_cannot_start_is_logged_and_the_handle_stays(
    ctx: Context, caplog: pytest.LogCaptureFixture
) -> None:
    enc = started(ctx)
    try:
        ctx.start_fails = True
        with caplog.at_level(logging.ERROR, logger="runtime.recording.encoder_process"):
            ctx.processes[0].exit(1)
            eventually(lambda: any("replacement" in r.getMessage() for r in caplog.records))
        assert caplog.records[-1].getMessage() == f"recording: {KEY}: starting a replacement encoder failed"
        assert enc.deaths == 1 and enc.pid == 40
    finally:
        enc.close()


def test_close_asks_first_and_the_process_stops(ctx: Context) -> None:
    enc = started(ctx)
    process = ctx.processes[0]
    enc.close()
    assert process.calls == [("join", 5.0), ("close",)]
    assert process.exitcode == 0 and enc.link.commands.closed
    assert Ring.made[0].closed == 1 and enc.deaths == 0  # a stop asked for is no death
    assert not enc._reader.is_alive()


def test_close_terminates_a_process_that_does_not_stop(ctx: Context, caplog: pytest.LogCaptureFixture) -> None:
    enc = started(ctx)
    process = ctx.processes[0]
    process.ignores = {"stop"}
    with caplog.at_level(logging.WARNING, logger="runtime.recording.encoder_process"):
        enc.close()
    assert process.calls == [("join", 5.0), ("terminate",), ("join", 5.0), ("close",)]
    assert process.exitcode == -15
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        f"recording: the {KEY} encoder did not stop within 5.0 s; terminating it"
    ]


def test_close_kills_a_process_that_ignores_terminate(ctx: Context) -> None:
    enc = started(ctx)
    process = ctx.processes[0]
    process.ignores = {"stop", "terminate"}
    enc.close()
    assert process.calls == [("join", 5.0), ("terminate",), ("join", 5.0), ("kill",), ("join", None), ("close",)]
    assert process.exitcode == -9 and enc.deaths == 0


# -- the CPUs the encoders may use -----------------------------------------------------------------


class CpuOs:
    def __init__(self, affinity: set[int] | None, count: int | None) -> None:
        self.affinity, self.count = affinity, count

    def sched_getaffinity(self, pid: int) -> set[int]:
        if self.affinity is None:
            raise AttributeError("sched_getaffinity")
        assert pid == 0
        return self.affinity

    def cpu_count(self) -> int | None:
        return self.count


@pytest.mark.parametrize(("affinity", "count", "want"), [({0, 2, 5}, 8, 3), ({1}, 8, 1), (None, 8, 8), (None, None, 1)])
def test_cpu_count_is_this_process_affinity_else_the_machine(
    monkeypatch: pytest.MonkeyPatch, affinity: set[int] | None, count: int | None, want: int
) -> None:
    monkeypatch.setattr(ep, "os", CpuOs(affinity, count))
    assert ep.cpu_count() == want
