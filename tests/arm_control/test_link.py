"""The daemon's end of the link, without the arm process: what each message from the arm does
(``ArmLink._dispatch``), the gate, the e-stops it numbers and sends, the checks and requests it
answers for the handlers, a flight recording asked for, the arm process's death, and status.

The test holds the arm process's end of a real ``Link`` socket pair; the process itself is a stand-in
that only says how it ended.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from drivers.config import ArmConfig
from runtime.arm.messages import (
    ARM_MESSAGES,
    DAEMON_MESSAGES,
    Ask,
    Bye,
    Chunk,
    CommandRequest,
    Dump,
    Dumped,
    DumpRequest,
    EpisodeRecord,
    Estop,
    Gate,
    LoopEvent,
    Message,
    Observation,
    Ready,
    ShutdownRequest,
    StatusMap,
    TargetClear,
    TargetPut,
    Tick,
)
from runtime.arm.wire import Link
from runtime.arm_control import link as link_module
from runtime.arm_control.link import ArmLink, _exit_words
from runtime.control.config import ControlConfig
from runtime.control.feed import Blocked
from runtime.control.latch import ControlRefused, Latch, StaleLatch
from runtime.control.mailbox import Release, Shutdown, Start, Stop, TakeOver
from runtime.control.mode import Mode
from runtime.control.snapshot import Snapshot
from runtime.teleop.config import TeleopConfig
from tests.control.small_arm import JOINTS, interface


class Feed:
    """The daemon's StreamFeed as the link uses it."""

    def __init__(self) -> None:
        self.gate: Blocked | None = None
        self.fails: str | None = None
        self.accept = True
        self.blocked_at: list[float] = []
        self.submitted: list[tuple[np.ndarray, Any, bool]] = []
        self.observed: list[tuple[np.ndarray, bool]] = []

    def blocked(self, now: float) -> Blocked | None:
        self.blocked_at.append(now)
        if self.fails:
            raise RuntimeError(self.fails)
        return self.gate

    def submit(self, state: np.ndarray, on_done: Any, *, reset: bool = False, prefix: Any = None) -> bool:
        self.submitted.append((state, on_done, reset))
        return self.accept

    def observe(self, state: np.ndarray, *, reset: bool = False) -> None:
        self.observed.append((state, reset))


class Proc:
    """The arm process as far as the link waits for it."""

    def __init__(self, code: int | None = 0) -> None:
        self.pid = 4242
        self.code = code
        self.waited: list[float] = []

    def wait(self, timeout: float | None = None) -> int:
        self.waited.append(timeout if timeout is not None else -1)
        if self.code is None:
            raise subprocess.TimeoutExpired("arm", timeout or 0)
        return self.code


class Episodes:
    def __init__(self) -> None:
        self.ticks: list[tuple[Any, ...]] = []
        self.ended = 0

    def tick(self, *args: Any) -> None:
        self.ticks.append(args)

    def end(self) -> None:
        self.ended += 1

    def status(self) -> dict[str, Any]:
        return {"episode": 3}


@pytest.fixture
def rig() -> Iterator[tuple[ArmLink, Link, Feed]]:
    """(the daemon's ArmLink, the arm process's end of the link, the feed)."""
    feed = Feed()
    arm = ArmLink(
        arm=ArmConfig(),
        control=ControlConfig(rate_hz=8.0, rt_priority=0, streams=()),
        teleop=TeleopConfig(),
        policy=interface(),
        feed=feed,  # type: ignore[arg-type]
        cpu=None,
    )
    ours, other = Link.pair(ARM_MESSAGES)
    theirs = Link(other, DAEMON_MESSAGES)
    arm._link = ours
    yield arm, theirs, feed
    ours.close()
    theirs.close()


def got(end: Link) -> list[Message]:
    return list(end.receive())


def tick(**fields: Any) -> Tick:
    return Tick(Snapshot(**fields))


# --- made, and sending -------------------------------------------------------------------------------


def test_a_new_link_has_no_process_and_the_loops_figures() -> None:
    arm = ArmLink(
        arm=ArmConfig(),
        control=ControlConfig(rate_hz=0.0, rt_priority=0, streams=()),
        teleop=TeleopConfig(deadman_ms=150.0),
        policy=interface(),
        feed=Feed(),  # type: ignore[arg-type]
        cpu=1,
        record=True,
    )
    assert (arm.names, arm.rate_hz, arm.period, arm.cpu, arm.record) == (JOINTS, 10.0, 0.1, 1, True)
    assert (arm.pid, arm.memory, arm.link_dropped, arm.episodes) == (0, "", 0, None)
    assert arm.alive is False and arm.death is None and arm.estop is None and arm.estop_reason is None
    assert arm.snapshot().scheduling == "not started" and arm.stalled_for(1e9) == 0.0
    assert arm.teleop.config.deadman_ms == 150.0 and arm.teleop.received == 0 and arm.teleop.out_of_order == 0
    assert arm.send(Gate()) is False  # no link yet
    assert arm.arm_config == ArmConfig() and arm.config.rate_hz == 0.0 and arm.policy.action_names == JOINTS
    assert arm.shutdown() is True  # nothing was started


def test_a_message_the_link_cannot_carry_now_is_counted(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, theirs, _ = rig
    assert arm.record is False  # unless recording is configured
    assert arm.send(Gate(None)) is True and got(theirs) == [Gate(None)]
    pad = Dump(1, Path("/x"), "pad", {"pad": b"x" * 60_000})
    while arm.send(pad):
        pass
    assert arm.link_dropped == 1
    arm.send(pad)
    assert arm.link_dropped == 2


def test_nothing_is_sent_to_a_dead_arm_process(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, theirs, _ = rig
    arm._dead = "the arm process died (killed by SIGKILL)"
    assert arm.send(Gate()) is False and got(theirs) == [] and arm.link_dropped == 0


# --- the station's targets ------------------------------------------------------------------------------------


def test_targets_are_forwarded_in_order_and_older_ones_dropped(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, theirs, _ = rig
    inbox = arm.teleop
    assert inbox.put(2, np.array([1, 2, 3]), 7.5) is True
    assert inbox.put(2, np.array([1, 2, 3]), 7.6) is False and inbox.put(1, np.array([1, 2, 3]), 7.7) is False
    assert inbox.put(3, np.array([4.0, 5.0, 6.0]), 7.8) is True
    assert (inbox.received, inbox.out_of_order) == (2, 2)
    sent = got(theirs)
    assert all(isinstance(m, TargetPut) for m in sent)
    assert [(m.target.seq, m.target.positions.tolist(), m.target.received_at) for m in sent] == [  # type: ignore[union-attr]
        (2, [1.0, 2.0, 3.0], 7.5),
        (3, [4.0, 5.0, 6.0], 7.8),
    ]
    assert sent[0].target.positions.dtype == np.float64  # type: ignore[union-attr]
    inbox.clear()  # a new session starts from nothing: its first target may have any number
    assert got(theirs) == [TargetClear()]
    assert inbox.put(1, np.array([0.0, 0.0, 0.0]), 8.0) is True


def test_the_hand_over_phase_is_the_arms(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, _, _ = rig
    arm._dispatch(tick(teleop_phase="handover", mode=Mode.TELEOP))
    assert arm.teleop.phase == "handover"


# --- the gate -------------------------------------------------------------------------------------------------------


def test_the_gate_says_whether_the_policy_may_be_asked(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, theirs, feed = rig
    arm._send_gate(12.5)
    feed.gate = Blocked("stale:front", "stale observation stream: front", ("front",))
    arm._send_gate(13.0)
    feed.fails = "boom"
    arm._send_gate(13.5)
    assert feed.blocked_at == [12.5, 13.0, 13.5]
    assert got(theirs) == [
        Gate(None),
        Gate(Blocked("stale:front", "stale observation stream: front", ("front",))),
        Gate(Blocked("untrusted", "the policy check failed: boom")),
    ]


# --- what the arm process sends ----------------------------------------------------------------------------


def test_a_tick_is_the_newest_snapshot_and_drops_the_estops_it_has_taken(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, theirs, _ = rig
    first, second, third = (arm.request_estop(r) for r in ("one", "two", "three"))
    got(theirs)
    arm._dispatch(tick(tick=5, latches_taken=2, mode=Mode.ESTOPPED, latch=second))
    assert arm.snapshot().tick == 5 and list(arm._pending_estops) == [third]
    assert arm.estop == third  # requested, not taken yet: newer than the one in effect
    arm._dispatch(tick(tick=6, latches_taken=3, latch=third))
    assert list(arm._pending_estops) == [] and arm.estop == third and arm.estop_reason == "three"
    assert first.id == 1


def test_a_tick_carries_the_episode_record_and_its_end(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, _, _ = rig
    one = np.array([1.0])
    arm._dispatch(Tick(Snapshot(), EpisodeRecord(1.0, one, one, None, "hold", False)))  # no tap: ignored
    tap = Episodes()
    arm.episodes = tap
    present, goal, requested = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0])
    arm._dispatch(Tick(Snapshot(), EpisodeRecord(1.5, present, goal, requested, "policy", True)))
    arm._dispatch(Tick(Snapshot(), None, episode_end=True))
    assert tap.ticks == [(1.5, present, goal, requested, "policy", True)]
    assert tap.ended == 1
    arm._dispatch(Tick(Snapshot(), None, episode_end=False))
    assert tap.ended == 1 and len(tap.ticks) == 1


def test_an_ask_goes_to_the_feed_and_its_answer_back_to_the_arm(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, theirs, feed = rig
    state = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    arm._dispatch(Ask(7, state, True))
    [(got_state, done, reset)] = feed.submitted
    assert got_state is state and reset is True
    done(np.ones((2, 3), dtype=np.float64), None)
    done(None, "inference failed: boom")
    done(None, None)
    replies = got(theirs)
    first = replies[0]
    assert isinstance(first, Chunk) and first.id == 7 and first.error is None and first.actions is not None
    assert first.actions.dtype == np.float32 and first.actions.tolist() == [[1.0] * 3] * 2
    assert replies[1:] == [Chunk(7, error="inference failed: boom"), Chunk(7, error="no chunk")]
    feed.accept = False
    arm._dispatch(Ask(8, state, False))
    assert feed.submitted[-1][2] is False
    assert got(theirs) == [Chunk(8, error="the server is not taking work")]


def test_an_observation_goes_to_the_feed(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, _, feed = rig
    state = np.array([4.0, 5.0, 6.0], dtype=np.float32)
    arm._dispatch(Observation(state, False))
    arm._dispatch(Observation(state, True))
    [(got_state, reset), (_, reset_again)] = feed.observed
    assert got_state is state and reset is False and reset_again is True


def test_the_arms_events_status_and_requests_land_on_the_daemons_side(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, _, _ = rig
    arm._dispatch(LoopEvent(logging.WARNING, "safety: a 100% step"))
    arm._dispatch(StatusMap({"rate_hz": 8.0}))
    arm._dispatch(DumpRequest("estop"))
    arm._dispatch(Bye(True))
    [event] = arm.events.drain()
    assert (event.level, event.text()) == (logging.WARNING, "safety: a 100% step")
    assert arm._status == {"rate_hz": 8.0} and list(arm.dump_requests) == ["estop"] and arm._bye is True
    arm._dispatch(Bye(False))
    assert arm._bye is False


def test_a_hand_shake_message_after_the_start_is_only_logged(
    rig: tuple[ArmLink, Link, Feed], caplog: pytest.LogCaptureFixture
) -> None:
    arm, _, _ = rig
    with caplog.at_level(logging.WARNING, logger="runtime.arm_control.link"):
        arm._dispatch(Ready(1, "", ("x",), {}))
    assert arm.names == JOINTS and arm.memory == ""
    assert [r.getMessage() for r in caplog.records] == [
        "arm link: a Ready from the arm process after its start: ignored"
    ]


# --- the arm process's death ---------------------------------------------------------------------------------


def test_the_arm_process_dying_is_critical_and_wakes_whoever_waits_for_a_recording(
    rig: tuple[ArmLink, Link, Feed],
) -> None:
    arm, _, _ = rig
    arm._proc = Proc(-signal.SIGKILL)  # type: ignore[assignment]
    arm._thread = threading.current_thread()
    assert arm.alive is True
    waiting = threading.Event()
    arm._dumps[1] = (waiting, [])
    arm._died()
    dead = "the arm process died (killed by SIGKILL)"
    assert arm.death == dead and arm.alive is False and waiting.is_set() and arm._proc.waited == [2]  # type: ignore[attr-defined]
    [event] = arm.events.drain()
    assert (event.level, event.text()) == (
        logging.CRITICAL,
        f"{dead}: the arm is unattended (its servos keep their last goal); nothing restarts it: check the arm, "
        "then restart the service",
    )
    assert arm.snapshot().arm_error == dead


def test_the_arm_process_ending_at_shutdown_is_no_alarm(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, _, _ = rig
    arm._proc = Proc(0)  # type: ignore[assignment]
    arm._closing = True
    arm._died()
    assert arm.death == "the arm process ended (exit status 0)" and arm.events.drain() == []


def test_an_arm_process_that_does_not_say_how_it_ended_is_still_running_as_far_as_known(
    rig: tuple[ArmLink, Link, Feed],
) -> None:
    arm, _, _ = rig
    arm._proc = Proc(None)  # type: ignore[assignment]
    arm._died()
    assert arm.death == "the arm process died (still running)"
    arm._proc = None
    arm._died()
    assert arm.death == "the arm process died (still running)"


def test_alive_needs_the_process_and_the_links_thread(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, _, _ = rig
    arm._proc = Proc()  # type: ignore[assignment]
    assert arm.alive is False
    arm._thread = threading.current_thread()
    arm._proc = None
    assert arm.alive is False


def test_a_stalled_arm_process_is_seen_only_while_it_is_alive(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, _, _ = rig
    arm._dispatch(tick(tick=3, at=100.0))
    assert arm.stalled_for(101.0) == 0.0
    arm._proc, arm._thread = Proc(), threading.current_thread()  # type: ignore[assignment]
    assert arm.stalled_for(100.5) == 0.0 and arm.stalled_for(101.0) == pytest.approx(1.0)  # 5 periods: 0.625 s


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (None, "still running"),
        (0, "exit status 0"),
        (3, "exit status 3"),
        (-signal.SIGKILL, "killed by SIGKILL"),
        (-signal.SIGSEGV, "killed by SIGSEGV"),
        (-200, "killed by signal 200"),
    ],
)
def test_how_a_process_ended_in_words(code: int | None, words: str) -> None:
    assert _exit_words(code) == words


# --- e-stops, checks and requests ----------------------------------------------------------------------------


def test_an_estop_is_numbered_sent_and_in_effect_at_once(
    rig: tuple[ArmLink, Link, Feed], monkeypatch: pytest.MonkeyPatch
) -> None:
    arm, theirs, _ = rig
    monkeypatch.setattr(link_module.time, "monotonic", lambda: 321.0)
    latch = arm.request_estop("button")
    assert latch == Latch(1, "button", 321.0) and arm.estop == latch and arm.estop_reason == "button"
    assert got(theirs) == [Estop(Latch(1, "button", 321.0))]
    assert arm.request_estop("again").id == 2


def test_an_estop_is_numbered_after_every_latch_the_arm_has_given_out(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, _, _ = rig
    # the arm latched faults of its own: numbers 1..4 are taken, 3 is the one in effect
    arm._dispatch(tick(latches_taken=4, latch=Latch(3, "servo fault", 1.0)))
    assert arm.request_estop("button").id == 5 and arm.request_estop("again").id == 6
    arm._dispatch(tick(latches_taken=0, latch=Latch(9, "fault", 1.0)))
    assert arm.request_estop("third").id == 10
    arm._dispatch(tick(latches_taken=11))
    assert arm.request_estop("the next number is the arm's newest").id == 12


def test_the_handlers_checks_are_the_loops_on_the_arms_snapshot(
    rig: tuple[ArmLink, Link, Feed], monkeypatch: pytest.MonkeyPatch
) -> None:
    arm, _, feed = rig
    monkeypatch.setattr(link_module.time, "monotonic", lambda: 77.0)
    feed.gate = Blocked("untrusted", "policy not trusted: x")
    with pytest.raises(ControlRefused, match=r"^policy not trusted: x$"):
        arm.check("start")
    arm.check("teleop")
    arm.check("stop")
    assert feed.blocked_at == [77.0]
    arm._dispatch(tick(arm_error="no reply from servo 2"))
    with pytest.raises(ControlRefused, match=r"^the arm is failing: no reply from servo 2$"):
        arm.check("teleop")
    latch = arm.request_estop("button")
    with pytest.raises(StaleLatch):
        arm.check("release", latch.id + 1)
    with pytest.raises(StaleLatch):
        arm.check("release")
    arm.check("release", latch.id)


def test_a_dead_arm_process_refuses_everything_but_a_release(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, _, _ = rig
    arm._dead = "the arm process died (exit status 1)"
    for command in ("start", "teleop", "stop"):
        with pytest.raises(ControlRefused) as e:
            arm.check(command)
        assert str(e.value) == "the arm is unattended: the arm process died (exit status 1)"
    with pytest.raises(ControlRefused, match=r"^no e-stop is latched$"):
        arm.check("release")


def test_requests_are_sent_as_the_commands_they_name(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, theirs, _ = rig
    arm.request("start", "op")
    arm.request("stop")
    arm.request("release", "op", 4)
    arm.request(Start("st"))
    arm.request(Release("st", 2), "ignored", 9)
    arm.request(TakeOver("st"), latch=5)  # a latch names a release's only
    arm.request(Stop())
    arm.request(Shutdown())
    assert got(theirs) == [
        CommandRequest(Start("op")),
        CommandRequest(Stop("")),
        CommandRequest(Release("op", 4)),
        CommandRequest(Start("st")),
        CommandRequest(Release("st", 2)),
        CommandRequest(TakeOver("st")),
        CommandRequest(Stop("")),
        ShutdownRequest(),
    ]


def test_a_request_word_the_arm_does_not_know_is_refused_here_and_nothing_sent(
    rig: tuple[ArmLink, Link, Feed],
) -> None:
    arm, theirs, _ = rig
    with pytest.raises(ControlRefused, match=r"^command: expected one of start, teleop, stop, release, got 'dance'$"):
        arm.request("dance", "op")
    assert got(theirs) == []


# --- a flight recording asked for -------------------------------------------------------------------------------


def _answer(arm: ArmLink, theirs: Link, reply: dict[str, Any]) -> threading.Thread:
    def go() -> None:
        end = time.monotonic() + 5
        while time.monotonic() < end:
            for m in theirs.receive():
                if isinstance(m, Dump):
                    arm._dispatch(Dumped(m.id, **reply))
                    return
            time.sleep(0.005)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_a_recording_asked_for_is_written_by_the_arm_process(rig: tuple[ArmLink, Link, Feed], tmp_path: Path) -> None:
    arm, theirs, _ = rig
    t = _answer(arm, theirs, {"path": tmp_path / "flight.npz"})
    assert arm.recorder.dump(tmp_path, "estop", {"who": "op"}) == tmp_path / "flight.npz"
    t.join(5)
    assert arm._dumps == {}


def test_a_recording_the_arm_process_could_not_write_raises_its_error(
    rig: tuple[ArmLink, Link, Feed], tmp_path: Path
) -> None:
    arm, theirs, _ = rig
    t = _answer(arm, theirs, {"error": "disk full"})
    with pytest.raises(OSError, match=r"^disk full$"):
        arm.dump(tmp_path, "estop", {})
    t.join(5)
    assert arm._dumps == {}


def test_the_request_for_a_recording_carries_what_to_write(rig: tuple[ArmLink, Link, Feed], tmp_path: Path) -> None:
    arm, theirs, _ = rig
    seen: list[Message] = []

    def go() -> None:
        end = time.monotonic() + 5
        while time.monotonic() < end and not seen:
            seen.extend(theirs.receive())
            time.sleep(0.005)
        arm._dispatch(Dumped(1, path=Path("/p")))

    t = threading.Thread(target=go, daemon=True)
    t.start()
    assert arm.recorder.dump(tmp_path, "stall rest") == Path("/p")
    t.join(5)
    assert seen == [Dump(1, tmp_path, "stall rest", {})]


def test_a_recording_the_arm_process_does_not_answer_is_an_error_after_the_timeout(
    rig: tuple[ArmLink, Link, Feed], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arm, _, _ = rig
    monkeypatch.setattr(link_module, "DUMP_TIMEOUT_S", 0.05)
    with pytest.raises(OSError, match=r"^the arm process did not write it within 0.05 s$"):
        arm.dump(tmp_path, "estop", {})
    assert arm._dumps == {}


def test_a_recording_is_not_asked_of_an_arm_process_out_of_reach(
    rig: tuple[ArmLink, Link, Feed], tmp_path: Path
) -> None:
    arm, _, _ = rig
    pad = Dump(1, Path("/x"), "pad", {"pad": b"x" * 60_000})
    while arm.send(pad):
        pass
    with pytest.raises(OSError, match=r"^the arm process is not reachable \(link full\)$"):
        arm.dump(tmp_path, "estop", {})
    arm._dead = "the arm process died (exit status 1)"
    with pytest.raises(OSError, match=r"^the arm process is not reachable \(the arm process died \(exit status 1\)\)$"):
        arm.dump(tmp_path, "estop", {})
    assert arm._dumps == {}


def _ends_once_a_recording_is_asked(arm: ArmLink) -> threading.Thread:
    """The arm process ending (as its link thread sees it) once a recording has been asked of it."""

    def end() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not arm._dumps:
            time.sleep(0.005)
        arm._died()

    t = threading.Thread(target=end, daemon=True)
    t.start()
    return t


def test_an_arm_process_that_dies_while_writing_a_recording_names_its_death(
    rig: tuple[ArmLink, Link, Feed], tmp_path: Path
) -> None:
    arm, _, _ = rig
    arm._proc = Proc(1)  # type: ignore[assignment]
    t = _ends_once_a_recording_is_asked(arm)
    started = time.monotonic()
    with pytest.raises(OSError, match=r"^the arm process died \(exit status 1\)$"):
        arm.dump(tmp_path, "estop", {})
    assert time.monotonic() - started < 5
    t.join(5)


def test_a_recording_pending_when_the_arm_process_ends_at_shutdown_is_refused_at_once(
    rig: tuple[ArmLink, Link, Feed], tmp_path: Path
) -> None:
    """A deliberate stop ends the arm process with a recording asked for: its caller hears why at once,
    not after the recording's whole timeout."""
    arm, _, _ = rig
    arm._proc = Proc(0)  # type: ignore[assignment]
    arm._closing = True
    t = _ends_once_a_recording_is_asked(arm)
    started = time.monotonic()
    with pytest.raises(OSError, match=r"^the arm process ended \(exit status 0\)$"):
        arm.dump(tmp_path, "shutdown", {})
    assert time.monotonic() - started < 5 and arm.events.drain() == []
    t.join(5)


# --- status --------------------------------------------------------------------------------------------------


def test_status_is_the_arms_map_brought_up_to_date_with_what_the_daemon_knows(
    rig: tuple[ArmLink, Link, Feed], monkeypatch: pytest.MonkeyPatch
) -> None:
    arm, _, feed = rig
    arm.pid, arm.memory = 4242, "memory locked"
    arm._dispatch(
        StatusMap({"mode": "idle", "tick": 1, "teleop": {"phase": "", "targets": 0}, "arm": {"healthy": True}})
    )
    arm._dispatch(tick(tick=9, mode=Mode.TELEOP, queue_depth=3))
    arm.teleop.put(1, np.zeros(3), 1.0)
    arm.teleop.put(1, np.zeros(3), 1.0)
    feed.gate = Blocked("stale:front", "stale observation stream: front", ("front",))
    arm.episodes = Episodes()
    arm.link_dropped = 2
    monkeypatch.setattr(link_module.time, "monotonic", lambda: 88.0)
    status = arm.status()
    assert feed.blocked_at == [88.0]
    assert status == {
        "mode": "teleop",
        "source": "teleop",
        "tick": 9,
        "queue_depth": 3,
        "estop": {"latched": False, "reason": "", "latch": 0},
        "recording": {"episode": 3},
        "teleop": {"phase": "", "targets": 1, "out_of_order": 1},
        "arm": {"healthy": True},
        "stale_streams": ["front"],
        "blocked": "stale observation stream: front",
        "process": {
            "kind": "own",
            "pid": 4242,
            "alive": True,
            "death": "",
            "memory": "memory locked",
            "link_dropped": 2,
            "link_refused": 0,
        },
    }
    assert arm._status["teleop"] == {"phase": "", "targets": 0}  # the arm's map is copied, not changed


def test_status_of_a_dead_arm_process_says_so(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, _, _ = rig
    arm._dispatch(StatusMap({"arm": {"healthy": True, "positions": {"a": 1.0}}}))
    arm.request_estop("button")
    arm._dead = "the arm process died (killed by SIGKILL)"
    status = arm.status()
    assert status["arm"] == {"healthy": False, "error": arm._dead, "positions": {"a": 1.0}}
    assert status["process"]["alive"] is False and status["process"]["death"] == arm._dead
    assert status["estop"] == {"latched": True, "reason": "button", "latch": 1}
    assert status["recording"] is None and status["stale_streams"] == [] and status["blocked"] == ""
    assert status["teleop"] == {"targets": 0, "out_of_order": 0}


def test_status_without_the_arms_map_yet_still_says_what_the_daemon_knows(rig: tuple[ArmLink, Link, Feed]) -> None:
    arm, _, _ = rig
    arm._dead = "the arm process died (exit status 1)"
    status = arm.status()
    assert status["arm"] == {"healthy": False, "error": "the arm process died (exit status 1)"}
    assert status["mode"] == "idle" and status["tick"] == 0


# --- the link's thread ---------------------------------------------------------------------------------------


class Broken:
    """An episode tap with a bug."""

    def tick(self, *args: Any) -> None:
        raise RuntimeError("a bug in the tap")

    def status(self) -> None:
        return None


def _thread_cpu_s(thread: threading.Thread) -> float:
    """CPU seconds a thread of this process has used (user and system), from /proc."""
    fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_links_thread_sends_the_gate_reads_the_arm_and_sees_it_die(
    rig: tuple[ArmLink, Link, Feed], caplog: pytest.LogCaptureFixture
) -> None:
    arm, theirs, feed = rig
    arm._proc = Proc(-signal.SIGKILL)  # type: ignore[assignment]
    thread = threading.Thread(target=arm._run, daemon=True)
    arm._thread = thread
    thread.start()
    end = time.monotonic() + 5
    gates: list[Message] = []
    while len(gates) < 3 and time.monotonic() < end:
        gates.extend(m for m in theirs.receive() if isinstance(m, Gate))
        time.sleep(0.005)
    assert len(gates) >= 3  # every GATE_EVERY_S: the arm's sign that the daemon is alive
    # between gates the thread sleeps in poll: over half a second, about 25 gates and next to no CPU
    cpu_before = _thread_cpu_s(thread)
    gates_before = len(feed.blocked_at)
    time.sleep(0.5)
    assert 10 <= len(feed.blocked_at) - gates_before <= 30
    assert _thread_cpu_s(thread) - cpu_before < 0.1
    assert all(abs(t - time.monotonic()) < 5 for t in feed.blocked_at)
    arm.episodes = Broken()
    end = time.monotonic() + 5
    with caplog.at_level(logging.ERROR, logger="runtime.arm_control.link"):
        record = EpisodeRecord(1.0, None, None, None, "hold", False)
        theirs.send(Tick(Snapshot(tick=7), record))  # a bug in handling one message
        for _ in range(2):  # a message this side cannot take, twice: said once, counted twice
            theirs.sock.send(msgpack.packb({"t": "bye", "ok": "maybe"}))
        theirs.send(StatusMap({"after": "the bug"}))
        while arm._status != {"after": "the bug"} and time.monotonic() < end:
            time.sleep(0.005)
    assert arm._status == {"after": "the bug"} and thread.is_alive()
    assert arm.snapshot().tick == 7  # taken before the tap failed
    assert [r.getMessage() for r in caplog.records] == [
        "arm link: a Tick from the arm process failed",
        "arm link: refused a message from the arm process (more like it are counted, not logged): "
        "the arm process's 'bye' message: 'ok' expected true or false, got 'maybe' (str)",
    ]
    assert arm.status()["process"]["link_refused"] == 2 and arm._bye is None
    theirs.close()
    thread.join(5)
    assert not thread.is_alive() and arm.death == "the arm process died (killed by SIGKILL)"
    assert arm._link is not None and arm._link.closed
