"""The arm process's body, ``run``, in the test's own process: the configuration taken from the link, the
signals it answers, its CPU, the arm opened (simulated servos on a pseudo-terminal), the loop started and
said ready, a shutdown asked by the daemon, and each way it refuses to start with nothing moved.

The test holds the daemon's end of a real socket pair and plays the daemon from a thread (its first
message written as the map it travels as, so that a test can spoil it); ``run`` keeps
the test's main thread, as it keeps the arm process's. What would change the test process for good is
recorded instead of done: the signal handlers, the memory lock, the garbage collector taken over, the
scheduling of its threads. ``tests/arm/test_faults.py`` runs the real process under a real daemon.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import numpy as np
import pytest

from drivers.config import ArmConfig
from runtime.arm import process
from runtime.arm.codec import encode
from runtime.arm.messages import (
    ARM_MESSAGES,
    KINDS,
    LINK_VERSION,
    Ask,
    Bye,
    CommandRequest,
    Failed,
    Gate,
    Init,
    LoopEvent,
    Message,
    Ready,
    ShutdownRequest,
    StatusMap,
    Tick,
    Waiting,
)
from runtime.arm.wire import Link, LinkClosed
from runtime.control.config import ControlConfig
from runtime.control.mailbox import Start
from runtime.teleop.config import TeleopConfig
from tests.control.small_arm import interface as small_interface

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = str(ROOT / "configs" / "calibration" / "so101_sim.toml")
M = TypeVar("M", bound=Message)
SO101 = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
WAIT_S = 20.0

pytestmark = pytest.mark.timeout(60, method="thread")


@dataclass
class Changes:
    """What ``run`` asked of the process, recorded rather than done."""

    handlers: dict[int, Any] = field(default_factory=dict)
    affinity: list[tuple[str, set[int]]] = field(default_factory=list)  # (thread, CPUs) of each pin
    normal: int = 0
    taken_over: int = 0
    realtime: list[int] = field(default_factory=list)


@pytest.fixture
def changes(monkeypatch: pytest.MonkeyPatch) -> Changes:
    c = Changes()
    monkeypatch.setattr(process.signal, "signal", lambda sig, handler: c.handlers.__setitem__(sig, handler))

    def setaffinity(pid: int, cpus: Any) -> None:
        assert pid == 0  # the calling thread's own
        c.affinity.append((threading.current_thread().name, set(cpus)))

    monkeypatch.setattr(os, "sched_setaffinity", setaffinity)

    def normal() -> int:
        c.normal += 1
        return 0

    monkeypatch.setattr("runtime.scheduling.normal_scheduling", normal)
    monkeypatch.setattr(process, "_mlockall", lambda: "memory locked (recorded)")

    def take_over() -> None:
        c.taken_over += 1

    monkeypatch.setattr(process.Collector, "take_over", staticmethod(take_over))

    def realtime(priority: int) -> str:
        c.realtime.append(priority)
        return "recorded"

    monkeypatch.setattr("runtime.control.clock.request_realtime", realtime)
    return c


def init(
    arm: ArmConfig | None = None, *, names: tuple[str, ...] = SO101, cpu: int | None = None, **control: Any
) -> dict[str, Any]:
    """The configuration as the map it travels as."""
    control.setdefault("rt_priority", 0)
    message = Init(
        LINK_VERSION,
        ControlConfig(**control),
        TeleopConfig(),
        arm or ArmConfig(kind="sim", calibration=CALIBRATION),
        small_interface(names=names, rate_hz=30),
        cpu=cpu,
    )
    wire: dict[str, Any] = msgpack.unpackb(encode(message), raw=False, strict_map_key=False)
    return wire


class Daemon:
    """The daemon's end: sends the configuration, keeps what comes back, answers ``ready`` with ``then``."""

    def __init__(
        self,
        sock: socket.socket,
        then: Callable[[Daemon], None] | None,
        watch: Callable[[Daemon, Message], None] | None = None,
    ) -> None:
        self.link = Link(sock, ARM_MESSAGES)
        self.then = then
        self.watch = watch
        self.heard: list[Message] = []
        self.errors: list[Exception] = []
        self._thread = threading.Thread(target=self._run, name="test-daemon", daemon=True)

    def start(self, message: dict[str, Any]) -> Daemon:
        self.link.sock.send(msgpack.packb(message, use_bin_type=True))
        self._thread.start()
        return self

    def kinds(self) -> list[str]:
        return [KINDS[type(m)] for m in self.heard]

    def first(self, kind: type[M]) -> M:
        return next(m for m in self.heard if isinstance(m, kind))

    def _run(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                for m in self.link.receive():
                    self.heard.append(m)
                    if isinstance(m, Ready) and self.then is not None:
                        self.then(self)
                    if self.watch is not None:
                        try:
                            self.watch(self, m)
                        except Exception as e:  # a handler that failed: the test reads it
                            self.errors.append(e)
                    if isinstance(m, Bye):
                        return
            except LinkClosed:
                return
            if self.then is not None and any(isinstance(m, Ready) for m in self.heard):
                self.link.send(Gate(None))  # the daemon is alive: no silence
            # read as soon as a message comes, as the daemon's link thread does: the arm process's
            # datagrams queue only so deep before they are dropped
            select.select([self.link.sock], [], [], 0.02)

    def join(self) -> None:
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), f"the daemon side heard {self.kinds()}"


@pytest.fixture
def ends() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    yield a, b
    for s in (a, b):
        s.close()


def _run(
    ends: tuple[socket.socket, socket.socket], message: dict[str, Any], then: Any = None, watch: Any = None
) -> tuple[int, Daemon]:
    arm_end, daemon_end = ends
    daemon = Daemon(daemon_end, then, watch).start(message)
    code = process.run(arm_end.detach())  # the arm process owns its end
    daemon.join()
    return code, daemon


def _shutdown(daemon: Daemon) -> None:
    daemon.link.send(ShutdownRequest())


def test_the_arm_process_starts_says_ready_and_ends_cleanly_when_the_daemon_asks(
    ends: tuple[socket.socket, socket.socket], changes: Changes
) -> None:
    code, daemon = _run(ends, init(), _shutdown)
    assert code == 0
    kinds = daemon.kinds()
    assert kinds[:2] == ["status_map", "ready"] and kinds[-1] == "bye"
    ready = daemon.first(Ready)
    assert ready.pid == os.getpid() and ready.memory == "memory locked (recorded)"
    assert ready.joints == SO101
    assert sorted(ready.positions) == sorted(SO101)
    assert all(isinstance(v, float) for v in ready.positions.values())
    status = daemon.first(StatusMap).status
    assert (status["tick"], status["rate_hz"], status["mode"]) == (0, 30.0, "idle")  # the bundle's rate
    assert daemon.first(Bye) == Bye(True)
    assert "tick" in kinds  # each one read by the daemon's side as the snapshot it is
    # SIGTERM ends it, Ctrl-C and a reload are the daemon's, SIGUSR1 is an e-stop
    assert set(changes.handlers) == {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1}
    assert changes.handlers[signal.SIGINT] is signal.SIG_IGN and changes.handlers[signal.SIGHUP] is signal.SIG_IGN
    assert callable(changes.handlers[signal.SIGTERM]) and callable(changes.handlers[signal.SIGUSR1])
    assert (changes.normal, changes.taken_over, changes.affinity, changes.realtime) == (1, 1, [], [])


def test_sigusr1_latches_an_estop_and_sigterm_then_ends_it(
    ends: tuple[socket.socket, socket.socket], changes: Changes
) -> None:
    def estop(daemon: Daemon) -> None:
        changes.handlers[signal.SIGUSR1](signal.SIGUSR1, None)

    said: list[str] = []

    def watch(daemon: Daemon, m: Message) -> None:
        if isinstance(m, LoopEvent):
            said.append(m.text)
            if "SIGUSR1" in m.text:
                changes.handlers[signal.SIGTERM](signal.SIGTERM, None)

    code, daemon = _run(ends, init(), estop, watch)
    assert code == 0 and daemon.kinds()[-1] == "bye"
    assert any("SIGUSR1" in text for text in said), said


def test_it_keeps_to_its_cpu_and_sits_just_below_the_loops_priority(
    ends: tuple[socket.socket, socket.socket], changes: Changes
) -> None:
    code, _ = _run(ends, init(cpu=1, rt_priority=2), _shutdown)
    assert code == 0
    # the process on its CPU first, then the loop's thread pins itself there too
    assert changes.affinity[0] == ("MainThread", {1})
    assert [cpus for name, cpus in changes.affinity[1:] if name != "MainThread"] == [{1}]
    assert changes.realtime[-1] == 1  # the loop's thread asked for 2 (recorded too); this one for 1


def test_a_cpu_it_may_not_use_is_said_and_the_arm_still_runs(
    ends: tuple[socket.socket, socket.socket],
    changes: Changes,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def refuse(pid: int, cpus: Any) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    code, daemon = _run(ends, init(cpu=7), _shutdown)
    assert code == 0 and "ready" in daemon.kinds()
    assert "arm: could not keep to CPU 7: [Errno 22] Invalid argument" in caplog.text


def test_an_arm_that_cannot_be_opened_is_told_to_the_daemon_and_nothing_starts(
    ends: tuple[socket.socket, socket.socket], changes: Changes, tmp_path: Path
) -> None:
    port = str(tmp_path / "ttyNONE")
    message = init(ArmConfig(kind="feetech", port=port, calibration=CALIBRATION))
    del message["arm_wait_s"]  # not said: not waited for
    code, daemon = _run(ends, message)
    assert code == 1
    assert daemon.kinds() == ["failed"]  # and nothing after it: the link is closed
    assert port in daemon.first(Failed).error
    assert changes.taken_over == 0


def test_an_absent_arm_is_waited_for_as_the_daemon_says_and_a_sigterm_ends_the_wait(
    ends: tuple[socket.socket, socket.socket], changes: Changes, tmp_path: Path
) -> None:
    port = str(tmp_path / "ttyLATER")
    message = {**init(ArmConfig(kind="feetech", port=port, calibration=CALIBRATION)), "arm_wait_s": 30.0}

    def watch(daemon: Daemon, m: Message) -> None:
        if isinstance(m, Waiting):
            try:
                changes.handlers[signal.SIGUSR1](signal.SIGUSR1, None)  # nothing to latch yet: nothing happens
            finally:
                changes.handlers[signal.SIGTERM](signal.SIGTERM, None)

    code, daemon = _run(ends, message, watch=watch)
    assert code == 1 and daemon.errors == []
    assert daemon.kinds() == ["waiting", "failed"]
    assert daemon.first(Waiting).text.startswith(f"waiting for the arm on {port} (30 s left): ")
    assert daemon.first(Failed).error == "stopped while waiting for the arm"


def _after_three_ticks(daemon: Daemon, m: Message) -> None:
    if isinstance(m, Tick) and daemon.kinds().count("tick") == 3:
        _shutdown(daemon)


@pytest.mark.parametrize("record", [True, False])
def test_a_recording_daemon_gets_each_ticks_record_with_its_snapshot(
    ends: tuple[socket.socket, socket.socket], changes: Changes, record: bool
) -> None:
    code, daemon = _run(ends, {**init(), "record": record}, watch=_after_three_ticks)
    assert code == 0
    records = [m.episode for m in daemon.heard if isinstance(m, Tick)][:3]
    assert len(records) == 3
    if not record:
        assert records == [None, None, None]
        return
    for r in records:
        assert r is not None and isinstance(r.now, float)
        assert r.present is not None and len(r.present) == len(SO101)
        assert (r.source, r.intervention) == ("hold", False)  # nothing commanded: the arm holds where it is


def test_a_policy_for_another_arm_is_told_to_the_daemon_and_nothing_moves(
    ends: tuple[socket.socket, socket.socket], changes: Changes
) -> None:
    code, daemon = _run(ends, init(names=("a", "b", "gripper")))
    assert code == 1
    kinds = daemon.kinds()
    assert "ready" not in kinds and "failed" in kinds
    assert "a" in daemon.first(Failed).error
    assert changes.taken_over == 0
    assert daemon.first(Bye) == Bye(True)  # the arm let go as it was found


@pytest.mark.parametrize(
    ("section", "value", "says"),
    [
        ("control", {"rate": 1}, "control: unknown key(s) rate; expected some of "),
        ("teleop", {"handover": "jump"}, "teleop.handover: expected one of "),
        ("arm", {"kind": "robot"}, "arm.kind: expected one of "),
        ("policy", {"policy_name": 3}, "the daemon's policy interface: field 'policy_name'"),
    ],
)
def test_a_configuration_that_does_not_parse_is_told_to_the_daemon_naming_its_section(
    ends: tuple[socket.socket, socket.socket], changes: Changes, section: str, value: Any, says: str
) -> None:
    code, daemon = _run(ends, {**init(), section: value})
    assert code == 1 and daemon.kinds() == ["failed"]
    error = daemon.first(Failed).error
    assert error.startswith(
        f"the arm process cannot take the daemon's configuration: the daemon's 'init' message: {section!r} is not "
    ), error
    assert f"this version takes: {says}" in error, error
    assert changes.handlers == {}  # refused before anything was set up


@pytest.mark.parametrize(
    ("first", "says"),
    [
        ({"version": LINK_VERSION + 1}, f"the daemon speaks link protocol version {LINK_VERSION + 1}, this arm"),
        ({"t": "gate", "blocked": None}, "the daemon's first message must be its configuration ('init'), got a 'gate'"),
    ],
)
def test_a_first_message_of_another_version_or_kind_is_told_to_the_daemon_and_nothing_starts(
    ends: tuple[socket.socket, socket.socket], changes: Changes, first: dict[str, Any], says: str
) -> None:
    message = first if "t" in first else {**init(), **first}
    code, daemon = _run(ends, message)
    assert code == 1 and daemon.kinds() == ["failed"]
    assert daemon.first(Failed).error.startswith(f"the arm process cannot take the daemon's configuration: {says}")
    assert changes.handlers == {} and changes.taken_over == 0


def test_the_teleop_settings_are_the_daemons(ends: tuple[socket.socket, socket.socket], changes: Changes) -> None:
    message = {**init(), "teleop": {**asdict(TeleopConfig()), "handover": "wait"}}
    code, daemon = _run(ends, message, _shutdown)
    assert code == 0 and daemon.first(StatusMap).status["teleop"]["handover"] == "wait"


def test_its_usage_names_the_module_and_the_link(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        process.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m runtime.arm [-h] --fd FD\n\nthe arm's own process\n")
    assert "--fd FD     the link socket inherited from the daemon" in out


def test_a_failure_without_words_is_named_by_its_kind(
    ends: tuple[socket.socket, socket.socket], changes: Changes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.arm_monitor import ArmMonitor

    def silent(self: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError()

    monkeypatch.setattr(ArmMonitor, "open_waiting", silent)
    code, daemon = _run(ends, init())
    assert code == 1 and daemon.first(Failed).error == "OSError: "


def test_a_start_from_the_daemon_asks_it_for_a_chunk_over_the_link(
    ends: tuple[socket.socket, socket.socket], changes: Changes
) -> None:
    def start(daemon: Daemon) -> None:
        daemon.link.send(CommandRequest(Start("test")))

    def watch(daemon: Daemon, m: Message) -> None:
        if isinstance(m, Ask):
            _shutdown(daemon)

    code, daemon = _run(ends, init(), start, watch)
    assert code == 0
    ask = daemon.first(Ask)
    assert ask.id == 1 and ask.reset is True
    assert ask.state.dtype == np.float32 and ask.state.shape == (len(SO101),)


def test_an_arm_left_with_its_torque_on_is_said_in_the_last_word(
    ends: tuple[socket.socket, socket.socket], changes: Changes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.arm_monitor import ArmMonitor

    close = ArmMonitor.close

    def torque_left_on(self: ArmMonitor) -> bool:
        close(self)
        return False

    monkeypatch.setattr(ArmMonitor, "close", torque_left_on)
    code, daemon = _run(ends, init(), _shutdown)
    assert code == 0 and daemon.first(Bye) == Bye(False)


def test_a_loop_that_did_not_shut_down_cleanly_is_said_in_the_last_word(
    ends: tuple[socket.socket, socket.socket], changes: Changes, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.control.loop import ControlLoop

    shutdown = ControlLoop.shutdown

    def unclean(self: ControlLoop, *args: Any, **kwargs: Any) -> Any:
        result = shutdown(self, *args, **kwargs)
        self.shutdown_ok = False  # its last writes did not all go out
        return result

    monkeypatch.setattr(ControlLoop, "shutdown", unclean)
    _, daemon = _run(ends, init(), _shutdown)
    assert daemon.first(Bye) == Bye(False)
