"""The arm process's end of the link, without the process: what each message from the daemon does to
the loop (``ArmSide._dispatch``), what the loop sends back after each tick, the policy across the link
(``LinkPolicy``: asks and their chunks, the gate, silence taken as a loss for good), the main thread's
wait and flight recordings, and the configuration that must come first.

A socket pair of the real ``Link`` (the test holds the daemon's end; what it sends that no daemon
would is written as raw msgpack), the small arm of
``tests/control/small_arm.py`` with a loop that is built but never started, and the module's clock
replaced by one the test moves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from drivers.config import ArmConfig
from runtime.arm import process
from runtime.arm.codec import encode
from runtime.arm.messages import (
    ARM_MESSAGES,
    DAEMON_MESSAGES,
    LINK_VERSION,
    Ask,
    Chunk,
    CommandRequest,
    Dump,
    Dumped,
    DumpRequest,
    EpisodeRecord,
    Estop,
    Gate,
    Init,
    LoopEvent,
    Message,
    Observation,
    ShutdownRequest,
    StatusMap,
    TargetClear,
    TargetPut,
    Tick,
)
from runtime.arm.process import ArmSide, LinkPolicy, _EpisodeTap
from runtime.arm.wire import Link
from runtime.control.config import ControlConfig, SafetyConfig
from runtime.control.feed import Blocked, Prefix
from runtime.control.latch import Latch
from runtime.control.loop import ControlLoop
from runtime.control.mailbox import Release, Start, Stop, TakeOver
from runtime.control.mode import Mode
from runtime.control.target import Target
from runtime.errors import LinkProtocolError, LinkVersionError
from runtime.teleop.config import TeleopConfig
from tests.control.small_arm import CAL, Bus, Clock, at, interface


class FakeTime:
    """``time`` as the arm process's module sees it: ``monotonic`` and ``sleep`` on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 500.0
        self.slept = 0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += 1


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    t = FakeTime()
    monkeypatch.setattr(process, "time", t)
    return t


@pytest.fixture
def ends() -> Iterator[tuple[Link, Link]]:
    """(the arm process's end, the daemon's end)."""
    link, other = Link.pair(DAEMON_MESSAGES)
    daemon = Link(other, ARM_MESSAGES)
    yield link, daemon
    link.close()
    daemon.close()


def got(end: Link) -> list[Message]:
    return list(end.receive())


def raw(end: Link, message: Any) -> None:
    """Send what no daemon would: a map written by hand."""
    end.sock.send(msgpack.packb(message, use_bin_type=True))


class Rig:
    def __init__(self, link: Link, clock: FakeTime, *, rate_hz: float = 8.0, timeout_s: float = 0.5) -> None:
        self.policy = LinkPolicy(link, timeout_s)
        self.side = ArmSide(link, self.policy, rate_hz)
        config = ControlConfig(
            rate_hz=rate_hz,
            rt_priority=0,
            streams=(),
            link_timeout_s=timeout_s,
            safety=SafetyConfig(stall_action="rest"),
        )
        self.loop = ControlLoop(
            Bus(Clock()), CAL, interface(), config, self.policy, clock=clock.monotonic, hooks=self.side
        )

    def said(self) -> list[tuple[int, str]]:
        return [(e.level, e.text()) for e in self.loop.events.drain()]


# --- the policy across the link ---------------------------------------------------------------------


def test_until_the_daemon_is_heard_the_policy_is_blocked_but_not_lost(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, _ = ends
    policy = LinkPolicy(link, 0.5)
    assert policy.blocked(clock.now) == Blocked("daemon", "no word from the daemon yet")
    assert policy.lost() is None and policy.timeout_s == 0.5


def test_the_daemons_gate_blocks_or_frees_the_policy(ends: tuple[Link, Link], clock: FakeTime) -> None:
    policy = LinkPolicy(ends[0], 0.5)
    policy.on_gate(None)
    assert policy.blocked(clock.now) is None
    policy.on_gate(Blocked("stale:front", "stale observation stream: front", ("front",)))
    assert policy.blocked(clock.now) == Blocked("stale:front", "stale observation stream: front", ("front",))
    policy.on_gate(None)
    assert policy.blocked(clock.now) is None


def test_each_ask_goes_to_the_daemon_numbered_and_its_chunk_comes_back_to_it(
    ends: tuple[Link, Link], clock: FakeTime
) -> None:
    link, daemon = ends
    policy = LinkPolicy(link, 0.5)
    answers: list[tuple[int, Any, Any]] = []
    state = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    plan = Prefix(np.ones((2, 3), dtype=np.float32), 2)
    assert policy.submit(state, lambda a, e: answers.append((1, a, e)), reset=True) is True
    assert policy.submit(state + 1, lambda a, e: answers.append((2, a, e)), prefix=plan) is True
    first, second = got(daemon)
    assert isinstance(first, Ask) and (first.id, first.reset, first.prefix) == (1, True, None)
    assert first.state.dtype == np.float32 and first.state.tolist() == [1.0, 2.0, 3.0]
    assert isinstance(second, Ask) and (second.id, second.reset) == (2, False) and second.prefix is not None
    assert second.state.tolist() == [2.0, 3.0, 4.0]
    assert second.prefix.delay == 2 and second.prefix.actions.tolist() == plan.actions.tolist()
    chunk = np.arange(6, dtype=np.float32).reshape(2, 3)
    policy.on_chunk(Chunk(2, actions=chunk))
    policy.on_chunk(Chunk(2, actions=chunk))  # answered already: ignored
    policy.on_chunk(Chunk(7, error="never asked"))
    policy.on_chunk(Chunk(1, error="inference failed: boom"))
    assert [(n, e) for n, _, e in answers] == [(2, None), (1, "inference failed: boom")]
    assert answers[0][1] is chunk and answers[1][1] is None


def test_an_ask_the_link_cannot_carry_is_refused_and_not_kept(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, daemon = ends
    policy = LinkPolicy(link, 0.5)
    daemon.close()
    answers: list[Any] = []
    assert policy.submit(np.zeros(3, dtype=np.float32), lambda a, e: answers.append(e)) is False
    policy.on_lost("gone")
    assert answers == []  # nothing was pending


def test_an_observation_goes_to_the_daemon(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, daemon = ends
    policy = LinkPolicy(link, 0.5)
    state = np.array([4.0, 5.0, 6.0], dtype=np.float32)
    policy.observe(state, reset=True)
    policy.observe(state)
    first, second = got(daemon)
    assert isinstance(first, Observation) and first.reset is True and first.state.tolist() == [4.0, 5.0, 6.0]
    assert isinstance(second, Observation) and second.reset is False and second.state.dtype == np.float32


def test_silence_past_the_timeout_is_a_loss_for_good_and_answers_every_ask(
    ends: tuple[Link, Link], clock: FakeTime
) -> None:
    link, daemon = ends
    policy = LinkPolicy(link, 0.5)
    answers: list[Any] = []
    policy.submit(np.zeros(3, dtype=np.float32), lambda a, e: answers.append((a, e)))
    got(daemon)
    clock.now += 0.5
    assert policy.lost() is None and policy.blocked(clock.now) == Blocked("daemon", "no word from the daemon yet")
    reason = "the daemon has not answered for 0.51 s (control.link_timeout_s 0.5)"
    assert policy.blocked(clock.now + 0.01) == Blocked("lost", reason)  # the loop's time, not the module's
    assert answers == [(None, reason)] and policy.lost() == reason
    policy.heard()  # too late: a daemon that comes back is not trusted to drive the arm again
    clock.now += 0.1
    assert policy.lost() == reason and policy.blocked(clock.now) == Blocked("lost", reason)
    assert policy.submit(np.zeros(3, dtype=np.float32), lambda a, e: None) is False
    policy.observe(np.zeros(3, dtype=np.float32))
    assert got(daemon) == [] and answers == [(None, reason)]


def test_hearing_the_daemon_starts_the_silence_over(ends: tuple[Link, Link], clock: FakeTime) -> None:
    policy = LinkPolicy(ends[0], 0.5)
    clock.now += 0.4
    policy.heard()
    clock.now += 0.4
    assert policy.lost() is None
    clock.now += 0.2
    assert policy.lost() == "the daemon has not answered for 0.60 s (control.link_timeout_s 0.5)"


def test_a_loss_answers_each_pending_ask_once(ends: tuple[Link, Link], clock: FakeTime) -> None:
    policy = LinkPolicy(ends[0], 0.5)
    answers: list[Any] = []
    for n in (1, 2):
        policy.submit(np.zeros(3, dtype=np.float32), lambda a, e, n=n: answers.append((n, a, e)))
    policy.on_lost("the daemon side is gone (x)")
    policy.on_lost("again")
    policy.on_chunk(Chunk(1, actions=np.zeros((1, 3), dtype=np.float32)))
    assert answers == [(1, None, "the daemon side is gone (x)"), (2, None, "the daemon side is gone (x)")]
    assert policy.lost() == "again"


# --- an episode's record -------------------------------------------------------------------------------


def test_an_episode_record_is_the_ticks_own_values_for_the_daemon() -> None:
    tap = _EpisodeTap()
    assert (tap.record, tap.ended, tap.status()) == (None, False, None)
    present, goal = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    tap.tick(1.5, present, goal, None, "policy", True)
    assert tap.record == EpisodeRecord(1.5, present, goal, None, "policy", True)
    requested = np.array([5.0])
    tap.tick(2.0, None, None, requested, "hold", False)
    assert tap.record == EpisodeRecord(2.0, None, None, requested, "hold", False)
    tap.end()
    assert tap.ended is True


# --- what the daemon sends ---------------------------------------------------------------------------------


def test_every_message_from_the_daemon_reaches_the_loop(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    answers: list[Any] = []
    r.policy.submit(np.zeros(3, dtype=np.float32), lambda a, e: answers.append(e))
    got(daemon)
    dump = Dump(9, Path("/x"), "estop", {})
    for m in (
        Gate(None),
        Chunk(1, error="no chunk"),
        TargetPut(Target(3, np.array([11.0, 12.0, 13.0]), 7.0)),
        Estop(Latch(4, "from the daemon", 499.0)),
        CommandRequest(Stop("op")),
        CommandRequest(Release("op", 4)),
        CommandRequest(TakeOver()),
        CommandRequest(Release("st")),
        dump,
    ):
        daemon.send(m)
    r.side.before_tick(r.loop)
    assert r.policy.blocked(clock.now) is None and answers == ["no chunk"]
    target = r.loop.teleop.fresh(7.0)
    assert target is not None and target.seq == 3 and target.received_at == 7.0
    assert target.positions.dtype == np.float64 and target.positions.tolist() == [11.0, 12.0, 13.0]
    box = r.loop.mailbox
    assert box.estop_requests() == (Latch(4, "from the daemon", 499.0),)
    assert [box.take_command() for _ in range(5)] == [
        Stop("op"),
        Release("op", 4),
        TakeOver(""),
        Release("st", 0),  # names no latch: refused as stale by the loop's check
        None,
    ]
    assert list(r.side.dumps) == [dump]
    assert r.side.shutdown_requested is False
    daemon.send(TargetClear())
    daemon.send(ShutdownRequest())
    r.side.before_tick(r.loop)
    assert r.loop.teleop.fresh(7.0) is None and r.side.shutdown_requested is True


def test_a_command_the_arm_does_not_know_is_refused_in_the_log(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    r.loop.events.drain()
    raw(daemon, {"t": "command_request", "command": ["dance", "op", 0]})
    r.side.before_tick(r.loop)
    assert r.loop.mailbox.take_command() is None
    assert r.said() == [
        (
            logging.ERROR,
            "arm: refused a message from the daemon (more like it are counted, not logged): the daemon's "
            "'command_request' message: 'command.word' command: expected one of start, teleop, stop, release, "
            "got 'dance'",
        )
    ]


def test_a_bad_message_from_the_daemon_is_refused_counted_said_once_and_the_rest_still_taken(
    ends: tuple[Link, Link], clock: FakeTime
) -> None:
    link, daemon = ends
    r = Rig(link, clock, rate_hz=1.0)  # the status every tick
    r.loop.events.drain()
    for _ in range(3):
        raw(daemon, {"t": "estop", "latch": [5, "button", "soon"]})  # the same fault, three times
    raw(daemon, {"t": "dance"})
    daemon.sock.send(b"\x92\x01")  # a list cut short
    daemon.send(Gate(None))
    daemon.send(CommandRequest(Stop("op")))
    r.side.before_tick(r.loop)  # takes what it can, raises nothing
    assert r.policy.blocked(clock.now) is None and r.loop.mailbox.take_command() == Stop("op")
    assert r.loop.mailbox.estop_requests() == ()
    said = [text for level, text in r.said() if level == logging.ERROR]
    assert len(said) == 3  # the estop's fault once, the unknown kind, the cut datagram
    assert said[0].endswith("the daemon's 'estop' message: 'latch.requested_at' expected a number, got 'soon' (str)")
    assert "a link message of kind 'dance' (str)" in said[1] and "that is not msgpack" in said[2]
    assert link.refused == 5
    r.side.send_status(r.loop)
    status = [m for m in got(daemon) if isinstance(m, StatusMap)]
    assert status[0].status["link"] == {"dropped": 0, "refused": 5}


def test_a_refused_message_is_no_word_from_the_daemon(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    clock.now += 0.4
    raw(daemon, {"t": "gate", "blocked": 3})
    r.side.before_tick(r.loop)
    clock.now += 0.2
    assert r.policy.lost() == "the daemon has not answered for 0.60 s (control.link_timeout_s 0.5)"


def test_a_kind_only_the_arm_sends_or_a_second_configuration_is_refused(
    ends: tuple[Link, Link], clock: FakeTime
) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    r.loop.events.drain()
    daemon.sock.send(encode(LoopEvent(30, "from the daemon?")))  # the arm process's own kind
    daemon.send(_init())
    r.side.before_tick(r.loop)
    said = [text for _, text in r.said()]
    assert len(said) == 2 and "a 'loop_event' message is the arm process's to send" in said[0]
    assert said[1].endswith("the daemon's 'init' message comes only first")
    assert link.refused == 2


def test_each_message_counts_as_word_from_the_daemon(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    clock.now += 0.4
    daemon.send(Gate(None))
    r.side.before_tick(r.loop)
    clock.now += 0.4
    assert r.policy.lost() is None


def test_the_daemon_closing_the_link_is_a_loss_logged_once(
    ends: tuple[Link, Link], clock: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    daemon.close()
    with caplog.at_level(logging.CRITICAL, logger="runtime.arm"):
        r.side.before_tick(r.loop)
        r.side.before_tick(r.loop)
        r.side._lost(r.loop, "again")
    reason = "the daemon side is gone (the other end closed the link)"
    assert r.policy.lost() == reason
    assert [(rec.levelno, rec.getMessage()) for rec in caplog.records] == [
        (logging.CRITICAL, f"arm: {reason}; holding the last safe goal, then rest")
    ]


def test_after_a_loss_nothing_more_is_read_from_the_link(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    r.policy.on_lost("silent")
    daemon.send(ShutdownRequest())
    r.side.before_tick(r.loop)
    assert r.side.shutdown_requested is False
    assert got(link) == [ShutdownRequest()]  # still there, unread


def test_a_closed_link_is_not_read(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    daemon.send(ShutdownRequest())
    link.closed = True
    r.side.before_tick(r.loop)
    assert r.side.shutdown_requested is False and r.policy.lost() is None


# --- an e-stop signal reaching both processes -------------------------------------------------------------


def test_a_signal_latches_an_estop_once_whichever_copy_comes_first(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, daemon = ends
    r = Rig(link, clock, timeout_s=5.0)
    box = r.loop.mailbox
    # this process's own signal first: the daemon's copy of it, within a second, is the same e-stop
    r.side.signal_estop = "signal SIGUSR1"
    daemon.send(Estop(Latch(1, "signal SIGUSR1", clock.now)))
    r.side.before_tick(r.loop)
    assert [latch.reason for latch in box.estop_requests()] == ["signal SIGUSR1"] and r.side.signal_estop == ""
    clock.now += 0.75
    daemon.send(Estop(Latch(2, "signal SIGUSR1", clock.now)))
    r.side.before_tick(r.loop)
    assert len(box.estop_requests()) == 1
    clock.now += 0.25  # a second after this process latched: another signal
    daemon.send(Estop(Latch(3, "signal SIGUSR1", clock.now)))
    r.side.before_tick(r.loop)
    assert len(box.estop_requests()) == 2
    daemon.send(Estop(Latch(4, "button", clock.now)))  # not a signal: always latched
    r.side.before_tick(r.loop)
    assert len(box.estop_requests()) == 3


def test_the_daemons_copy_of_a_signal_first_makes_this_processs_own_the_same_estop(
    ends: tuple[Link, Link], clock: FakeTime
) -> None:
    link, daemon = ends
    r = Rig(link, clock, timeout_s=5.0)
    box = r.loop.mailbox
    daemon.send(Estop(Latch(1, "signal SIGUSR1", clock.now)))
    r.side.before_tick(r.loop)
    clock.now += 0.75
    r.side.signal_estop = "signal SIGUSR1"
    r.side.before_tick(r.loop)
    assert len(box.estop_requests()) == 1 and r.side.signal_estop == ""
    clock.now += 0.25  # a second after the daemon's copy was requested: another signal
    r.side.signal_estop = "signal SIGUSR1"
    r.side.before_tick(r.loop)
    assert [latch.id for latch in box.estop_requests()] == [1, 2]


def test_a_signal_while_another_estop_is_latched_latches_its_own(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, _ = ends
    r = Rig(link, clock)
    r.loop.request_estop("button")
    r.side.signal_estop = "signal SIGUSR1"
    r.side.before_tick(r.loop)
    assert [latch.reason for latch in r.loop.mailbox.estop_requests()] == ["button", "signal SIGUSR1"]


def test_a_signal_is_latched_even_after_the_daemon_is_lost(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, _ = ends
    r = Rig(link, clock)
    r.policy.on_lost("silent")
    r.side.signal_estop = "signal SIGUSR1"
    r.side.before_tick(r.loop)
    assert r.loop.estop_reason == "signal SIGUSR1"


# --- what the arm sends after each tick -------------------------------------------------------------------


def test_each_tick_sends_its_snapshot_record_events_and_dump_requests(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, daemon = ends
    r = Rig(link, clock, rate_hz=30.0)
    r.loop.events.drain()
    r.side.episode.tick(1.0, np.array([1.0]), None, None, "hold", False)
    r.side.episode.end()
    r.loop.events.emit(logging.WARNING, "safety: %s", "a step")
    r.loop.dump_requests.append("estop")
    r.side.after_tick(r.loop)
    tick, ev, dumpreq = got(daemon)
    assert isinstance(tick, Tick) and tick.episode_end is True and tick.episode is not None
    record = tick.episode
    assert (record.now, record.goal, record.requested, record.source, record.intervention) == (
        1.0,
        None,
        None,
        "hold",
        False,
    )
    assert record.present is not None and record.present.tolist() == [1.0]
    assert tick.snapshot.scheduling == "not started"
    assert ev == LoopEvent(logging.WARNING, "safety: a step")
    assert dumpreq == DumpRequest("estop")
    assert r.side.episode.record is None and r.side.episode.ended is False
    assert not r.loop.dump_requests and r.loop.events.drain() == []
    r.side.after_tick(r.loop)
    [tick] = got(daemon)
    assert isinstance(tick, Tick) and tick.episode is None and tick.episode_end is False
    for _ in range(6):
        r.side.after_tick(r.loop)
    assert [type(m) for m in got(daemon)] == [Tick] * 6  # the full status is never the tick's
    assert r.side.collector._ticks == 8  # a collection slot after every write


def test_the_full_status_is_the_main_threads_built_from_what_the_loop_published(
    ends: tuple[Link, Link], clock: FakeTime
) -> None:
    link, daemon = ends
    r = Rig(link, clock, rate_hz=30.0)
    r.policy.on_gate(Blocked("stale:front", "stale observation stream: front", ("front",)))
    r.side.send_status(r.loop)
    [status] = got(daemon)
    assert isinstance(status, StatusMap) and status.status["mode"] == "idle"
    assert status.status["link"] == {"dropped": 0, "refused": 0}
    assert status.status["gc"] == r.side.collector.status()
    # the gate as the loop's last tick read it (none yet), not asked of the loop's feed from this thread
    assert status.status["blocked"] == "" and status.status["stale_streams"] == []
    r.policy.on_lost("silent")
    r.side.send_status(r.loop)
    assert got(daemon) == []  # the daemon is gone: nothing for it


@pytest.mark.parametrize("rate_hz", [8.0, 30.0, 1.0, 100.0])
def test_the_collector_runs_every_second_of_ticks(ends: tuple[Link, Link], clock: FakeTime, rate_hz: float) -> None:
    r = Rig(ends[0], clock, rate_hz=rate_hz)
    assert r.side.collector._young_every == max(1, round(rate_hz))


def test_nothing_is_sent_once_the_daemon_is_lost_and_the_events_stay_for_this_process(
    ends: tuple[Link, Link], clock: FakeTime
) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    r.loop.events.drain()
    r.policy.on_lost("silent")
    r.loop.events.emit(logging.ERROR, "control: stalled")
    r.side.after_tick(r.loop)
    r.side.after_tick(r.loop)
    assert got(daemon) == [] and [e.text() for e in r.loop.events.drain()] == ["control: stalled"]
    assert r.side.collector._ticks == 2


def test_nothing_is_sent_on_a_closed_link(ends: tuple[Link, Link], clock: FakeTime) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    link.closed = True
    r.side.after_tick(r.loop)
    link.closed = False
    assert got(daemon) == []


def test_a_status_map_msgpack_cannot_carry_is_reported_once_and_the_ticks_go_on(
    ends: tuple[Link, Link], clock: FakeTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    link, daemon = ends
    r = Rig(link, clock, rate_hz=1.0)
    r.loop.events.drain()
    monkeypatch.setattr(r.loop, "status", lambda **kw: {"odd": object()})
    for _ in range(3):
        r.side.send_status(r.loop)
        r.side.after_tick(r.loop)
    sent = got(daemon)
    assert [type(m) for m in sent] == [Tick, LoopEvent, Tick, Tick]  # said once, with the next tick
    assert sent[1] == LoopEvent(
        logging.ERROR, "arm: the status map could not be sent: can not serialize 'object' object"
    )
    assert r.loop.events.drain() == []


def test_a_status_with_an_integer_msgpack_cannot_carry_is_reported_and_the_ticks_go_on(
    ends: tuple[Link, Link], clock: FakeTime, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = Rig(ends[0], clock, rate_hz=1.0)
    r.loop.events.drain()
    monkeypatch.setattr(r.loop, "status", lambda **kw: {"big": 1 << 70})
    r.side.send_status(r.loop)  # OverflowError from msgpack: uncaught, it would end the main thread
    assert [(e.level, e.text()) for e in r.loop.events.drain()] == [
        (logging.ERROR, "arm: the status map could not be sent: Integer value out of range")
    ]


# --- flight recordings and the main thread's wait -----------------------------------------------------------


def test_a_flight_recording_is_written_and_its_path_sent(
    ends: tuple[Link, Link], clock: FakeTime, tmp_path: Path
) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    process._dump(r.loop, link, Dump(4, tmp_path, "estop", {"who": "op"}))
    [reply] = got(daemon)
    assert isinstance(reply, Dumped) and reply.id == 4 and reply.error is None
    assert reply.path is not None and reply.path.parent == tmp_path
    from runtime.control.recorder import load_flight

    meta, _ = load_flight(reply.path)
    assert meta["reason"] == "estop" and meta["who"] == "op"


def test_a_flight_recording_that_cannot_be_written_sends_the_error(
    ends: tuple[Link, Link], clock: FakeTime, tmp_path: Path
) -> None:
    link, daemon = ends
    r = Rig(link, clock)
    blocker = tmp_path / "file"
    blocker.write_text("")
    process._dump(r.loop, link, Dump(6, blocker / "sub", "estop"))
    [reply] = got(daemon)
    assert isinstance(reply, Dumped) and reply.id == 6 and reply.path is None
    assert reply.error is not None and "Not a directory" in reply.error


class WaitingLoop:
    """What ``_wait`` reads of the loop: alive, its mode, its events, its shutdown and recorder."""

    def __init__(self, mode: Mode = Mode.IDLE, alive_for: int = 1000, ok: bool = True) -> None:
        self.mode = mode
        self.alive_for = alive_for
        self.ok = ok
        self.flushed = 0
        self.shutdowns = 0
        self.dumped: list[str] = []
        self.events = self
        self.recorder = self

    @property
    def alive(self) -> bool:
        self.alive_for -= 1
        return self.alive_for >= 0

    def snapshot(self) -> Any:
        return type("S", (), {"mode": self.mode})()

    def flush_to_log(self) -> int:
        self.flushed += 1
        return 0

    def shutdown(self) -> bool:
        self.shutdowns += 1
        return self.ok

    def dump(self, directory: Path, reason: str, extra: dict[str, Any]) -> Path:
        self.dumped.append(reason)
        return directory / reason


def test_the_main_thread_waits_writes_recordings_and_shuts_down_on_sigterm(
    ends: tuple[Link, Link], clock: FakeTime
) -> None:
    link, daemon = ends
    side = ArmSide(link, LinkPolicy(link, 5.0), 8.0)
    loop = WaitingLoop()
    stop = {"term": False}
    side.dumps.append(Dump(1, Path("/d"), "first"))
    sleeps = {"n": 0}

    def sleep(seconds: float) -> None:
        assert seconds == 0.05
        sleeps["n"] += 1
        if sleeps["n"] == 3:
            stop["term"] = True
            side.dumps.append(Dump(2, Path("/d"), "late"))

    clock.sleep = sleep  # type: ignore[method-assign]
    assert process._wait(loop, side, stop) == 0  # type: ignore[arg-type]
    assert sleeps["n"] == 3 and loop.shutdowns == 1 and loop.dumped == ["first", "late"] and loop.flushed == 0
    assert got(daemon) == [Dumped(1, path=Path("/d/first")), Dumped(2, path=Path("/d/late"))]


def test_the_main_thread_shuts_down_when_the_daemon_asks(ends: tuple[Link, Link], clock: FakeTime) -> None:
    side = ArmSide(ends[0], LinkPolicy(ends[0], 5.0), 8.0)
    side.shutdown_requested = True
    loop = WaitingLoop(ok=False)
    assert process._wait(loop, side, {"term": False}) == 1  # type: ignore[arg-type]
    assert loop.shutdowns == 1 and clock.slept == 0


def test_after_a_loss_the_main_thread_logs_and_shuts_down_once_the_arm_is_still(
    ends: tuple[Link, Link], clock: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    side = ArmSide(ends[0], LinkPolicy(ends[0], 5.0), 8.0)
    side.policy.on_lost("silent")
    loop = WaitingLoop(mode=Mode.RESTING)

    def sleep(seconds: float) -> None:
        clock.slept += 1
        if clock.slept == 3:
            loop.mode = Mode.HOLDING

    clock.sleep = sleep  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="runtime.arm"):
        assert process._wait(loop, side, {"term": False}) == 0  # type: ignore[arg-type]
    assert clock.slept == 3 and loop.flushed == 4 + 1  # each round while lost, and after the shutdown
    assert [r.getMessage() for r in caplog.records] == [
        "arm: the daemon side is gone and the arm is still: shutting down"
    ]


def test_a_loop_that_ends_on_its_own_ends_the_wait(ends: tuple[Link, Link], clock: FakeTime) -> None:
    side = ArmSide(ends[0], LinkPolicy(ends[0], 5.0), 8.0)
    loop = WaitingLoop(alive_for=2)
    assert process._wait(loop, side, {"term": False}) == 0  # type: ignore[arg-type]
    assert clock.slept == 2 and loop.shutdowns == 1 and loop.flushed == 0


# --- the configuration comes first -------------------------------------------------------------------------------


def _init(**fields: Any) -> Init:
    return Init(
        LINK_VERSION,
        ControlConfig(rate_hz=8.0, rt_priority=0, streams=()),
        TeleopConfig(),
        ArmConfig(port="/dev/ttyTEST"),
        interface(),
        **fields,
    )


def test_the_configuration_is_the_first_message(ends: tuple[Link, Link]) -> None:
    link, daemon = ends
    daemon.send(_init(cpu=1))
    daemon.send(Gate())
    init = process._receive_init(link)
    assert init == _init(cpu=1)
    assert got(link) == [Gate()]  # what came after it is left for the loop


@pytest.mark.parametrize(
    ("sent", "says"),
    [
        ({"t": "gate"}, "the daemon's first message must be its configuration ('init'), got a 'gate' message"),
        (
            [1, 2],
            "a link message must be a msgpack map naming its kind in 't', got [1, 2] (list)",
        ),
        (
            {"t": "init", "version": LINK_VERSION},
            "the daemon's 'init' message has no 'control' (expected a [control] table)",
        ),
    ],
)
def test_anything_else_first_is_refused_naming_what_came(ends: tuple[Link, Link], sent: Any, says: str) -> None:
    link, daemon = ends
    raw(daemon, sent)
    with pytest.raises(LinkProtocolError) as e:
        process._receive_init(link)
    assert str(e.value) == says


def test_a_daemon_of_another_version_is_refused_first(ends: tuple[Link, Link]) -> None:
    link, daemon = ends
    init = msgpack.unpackb(encode(_init()), raw=False, strict_map_key=False)
    raw(daemon, {**init, "version": LINK_VERSION + 1})
    with pytest.raises(LinkVersionError) as e:
        process._receive_init(link)
    assert f"version {LINK_VERSION + 1}, this arm process speaks version {LINK_VERSION}" in str(e.value)


def test_a_daemon_that_closes_before_the_configuration_ends_the_arm_process(ends: tuple[Link, Link]) -> None:
    link, daemon = ends
    daemon.close()
    with pytest.raises(SystemExit) as e:
        process._receive_init(link)
    assert str(e.value) == "arm: the daemon closed the link before its configuration"


def test_a_daemon_that_says_nothing_ends_the_arm_process_after_the_wait(ends: tuple[Link, Link]) -> None:
    link, _ = ends
    with pytest.raises(SystemExit) as e:
        process._receive_init(link, timeout_s=0.05)
    assert str(e.value) == "arm: no configuration from the daemon within 0.05 s"
    assert process.INIT_TIMEOUT_S == 30.0


def test_a_start_from_the_daemon_runs_the_loop_on_the_chunks_it_sends(ends: tuple[Link, Link], clock: FakeTime) -> None:
    """The whole round: a start, the loop's ask over the link, the daemon's chunk, the goal."""
    link, daemon = ends
    r = Rig(link, clock)
    loop = r.loop
    daemon.send(Gate(None))
    daemon.send(CommandRequest(Start("op")))
    r.side.before_tick(loop)
    loop._reading = loop._read()
    loop._tick(1, 0.0)
    assert loop.controller.mode is Mode.RUNNING
    [ask] = [m for m in got(daemon) if isinstance(m, Ask)]
    chunk = np.repeat(at(a=11.0)[None, :], 4, axis=0).astype(np.float32)
    daemon.send(Chunk(ask.id, actions=chunk))
    r.side.before_tick(loop)
    loop._tick(2, 0.0)
    assert loop.bus.writes()[-1]["a"] == 11.0  # type: ignore[attr-defined]
    assert loop.mailbox.take_command() is None


# --- the process's entry: its memory locked, its one argument ---------------------------------------------------


class _Libc:
    def __init__(self, result: int, errno: int = 0) -> None:
        self.result, self.errno, self.flags = result, errno, []

    def mlockall(self, flags: int) -> int:
        self.flags.append(flags)
        if self.result != 0:
            import ctypes

            ctypes.set_errno(self.errno)
        return self.result


def test_memory_is_locked_now_and_for_the_future_or_the_reason_and_the_way_out_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ctypes
    import errno
    import os

    libc = _Libc(0)
    opened: list[tuple[Any, bool]] = []

    def cdll(name: Any, use_errno: bool = False) -> _Libc:
        opened.append((name, use_errno))
        return libc

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    assert process._mlockall() == "memory locked"
    assert libc.flags == [3] and opened == [(None, True)]  # MCL_CURRENT | MCL_FUTURE, errno kept
    libc = _Libc(-1, errno.EPERM)
    assert process._mlockall() == (f"memory not locked ({os.strerror(errno.EPERM)}; grant LimitMEMLOCK=infinity)")

    def missing(name: Any, use_errno: bool = False) -> Any:
        raise OSError("no libc here")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert process._mlockall() == "memory not locked (no libc here)"
    monkeypatch.setattr(ctypes, "CDLL", lambda name, use_errno=False: object())  # no mlockall
    assert process._mlockall() == "memory not locked ('object' object has no attribute 'mlockall')"


def test_the_process_takes_its_link_as_fd_and_logs_at_info(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []
    levels: list[str] = []
    monkeypatch.setattr(process, "run", lambda fd: ran.append(fd) or 7)
    monkeypatch.setattr("runtime.log.setup_logging", lambda level: levels.append(level))
    assert process.main(["--fd", "12"]) == 7
    assert (ran, levels) == ([12], ["INFO"])
    with pytest.raises(SystemExit) as e:
        process.main([])
    assert e.value.code == 2 and ran == [12]
