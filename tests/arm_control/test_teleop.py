"""``teleop.*`` requests on a stand-in loop and a clock the test moves: opening and each refusal word for
word (another station, the daemon's own leader), a token not the open session's, targets and the reply
a station paces itself by, take-over and hand-back through the loop's checks, episodes, closing, a
session lost for silence (the arm to hold, unless it was just handed back), and status."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from runtime.arm_control.teleop import TeleopControl
from runtime.control.events import EventLog
from runtime.control.latch import ControlRefused
from runtime.control.mode import Mode
from runtime.control.snapshot import Snapshot
from runtime.control.target import TeleopTarget
from runtime.protocol.errors import BadRequestError, ControlRefusedError, NoSessionError, SessionHeldError
from runtime.protocol.messages import TeleopRequest
from runtime.teleop.config import TeleopConfig


class Clock:
    def __init__(self, t: float = 10.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Episodes:
    def __init__(self, active: bool = False) -> None:
        self.active = active
        self.requests: list[tuple[str, str, str]] = []

    def request(self, op: str, task: str, who: str) -> None:
        self.requests.append((op, task, who))


class Loop:
    """The loop's side: a real target slot and event log, a snapshot the test sets, and the commands
    it is asked (``refuse`` is what ``check`` raises)."""

    def __init__(self) -> None:
        self.names = ("shoulder", "elbow")
        self.rate_hz = 8.0
        self.period = 0.125
        self.teleop = TeleopTarget(2, TeleopConfig(deadman_ms=200.0, session_timeout_ms=1000.0))
        self.events = EventLog()
        self.episodes: Episodes | None = None
        self.mode = Mode.IDLE
        self.next_due = 0.0
        self.late = 0
        self.phase = ""
        self.safety: dict[str, int] = {}
        self.estop_reason: str | None = None
        self.refuse: Exception | None = None
        self.calls: list[tuple[str, ...]] = []

    def snapshot(self) -> Snapshot:
        return Snapshot(
            mode=self.mode, next_due=self.next_due, teleop_phase=self.phase, safety=self.safety, teleop_late=self.late
        )

    def check(self, command: str) -> None:
        self.calls.append(("check", command))
        if self.refuse is not None:
            raise self.refuse

    def request(self, command: str, who: str) -> None:
        self.calls.append(("request", command, who))

    def said(self) -> list[tuple[int, str]]:
        return [(e.level, e.text()) for e in self.events.drain()]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def loop() -> Loop:
    return Loop()


@pytest.fixture
def ctl(loop: Loop, clock: Clock) -> TeleopControl:
    return TeleopControl(loop, clock)  # type: ignore[arg-type]


def open_(ctl: TeleopControl, who: str = "alice", client: str = "7") -> str:
    return str(ctl.handle(TeleopRequest(1, "teleop.open", who=who), client)["session"])


def target(ctl: TeleopControl, session: str, seq: int, positions: tuple[float, ...] = (1.0, 2.0)) -> dict[str, Any]:
    return ctl.handle(TeleopRequest(5, "teleop.target", session=session, seq=seq, positions=positions), "7")


# --- open ------------------------------------------------------------------------------------


def test_open_answers_the_session_and_what_a_station_needs(ctl: TeleopControl, loop: Loop) -> None:
    loop.teleop.put(9, np.zeros(2), 10.0)  # a target left from before: a new session starts from nothing
    body = ctl.handle(TeleopRequest(1, "teleop.open", who="alice"), "7")
    token = body.pop("session")
    assert isinstance(token, str) and len(token) == 16
    assert body == {
        "joints": ["shoulder", "elbow"],
        "rate_hz": 8.0,
        "deadman_ms": 200.0,
        "session_timeout_ms": 1000.0,
        "mode": "idle",
    }
    assert loop.teleop.fresh(10.0) is None
    assert loop.said() == [(logging.INFO, "teleop: session opened by alice (client 7)")]
    assert ctl.holder() == "alice (client 7)" and loop.calls == []


def test_a_station_without_a_name_is_named_by_its_client(ctl: TeleopControl, loop: Loop) -> None:
    loop.mode = Mode.RUNNING
    body = ctl.handle(TeleopRequest(1, "teleop.open"), "12")
    assert body["mode"] == "running"
    assert ctl.holder() == "client 12"


def test_a_second_station_is_refused_naming_the_holder(ctl: TeleopControl, loop: Loop, clock: Clock) -> None:
    open_(ctl)
    loop.said()
    loop.teleop.put(1, np.ones(2), 10.4)
    clock.t = 10.5
    with pytest.raises(SessionHeldError) as err:
        ctl.handle(TeleopRequest(4, "teleop.open", who="bob"), "8")
    e = err.value
    assert e.message == (
        "teleop.open: the arm is held by alice (client 7) (session open 0 s, last heard 500 ms ago); "
        "watch with control status, or ask them to close"
    )
    assert (e.field, e.request_id) == ("kind", 4)
    assert loop.teleop.fresh(10.5) is not None and loop.said() == []  # the holder's target stays
    assert ctl.status() == {"holder": "alice (client 7)", "opened": 1, "refused": 1, "lost": 0}


def test_stations_are_refused_while_the_daemon_reads_its_own_leader(ctl: TeleopControl) -> None:
    ctl.local = "leader on /dev/ttyACM1"
    with pytest.raises(SessionHeldError) as err:
        ctl.handle(TeleopRequest(6, "teleop.open", who="bob"), "8")
    assert err.value.message == (
        "teleop.open: the arm is driven by the daemon's own leader (leader on /dev/ttyACM1); "
        "switch with control teleop / control start on the robot"
    )
    assert (err.value.field, err.value.request_id) == ("kind", 6)
    assert ctl.status() == {"holder": None, "opened": 0, "refused": 0, "lost": 0}


@pytest.mark.parametrize(
    "kind",
    ["teleop.target", "teleop.take_over", "teleop.hand_back", "teleop.episode_start", "teleop.close"],
)
def test_a_request_without_the_open_sessions_token_is_refused(ctl: TeleopControl, loop: Loop, kind: str) -> None:
    with pytest.raises(NoSessionError) as err:
        ctl.handle(TeleopRequest(3, kind, session="stale", positions=(1.0, 2.0), seq=1), "7")
    assert (
        err.value.message
        == f"{kind}: session 'stale' is not the open teleop session (closed or lost); no session is open"
    )
    assert (err.value.field, err.value.request_id) == ("body.session", 3)
    open_(ctl)
    with pytest.raises(NoSessionError, match="held by alice"):
        ctl.handle(TeleopRequest(3, kind, session="stale", positions=(1.0, 2.0), seq=1), "7")
    assert loop.calls == [] and loop.teleop.received == 0


# --- targets ---------------------------------------------------------------------------------


def test_a_target_goes_into_the_loops_slot_and_the_reply_says_when_the_loop_reads_it(
    ctl: TeleopControl, loop: Loop, clock: Clock
) -> None:
    token = open_(ctl)
    clock.t = 10.03
    loop.mode, loop.phase, loop.next_due = Mode.TELEOP, "handover", 10.08
    loop.safety = {"step": 2, "envelope": 3}
    assert target(ctl, token, 4, (1.5, -2.0)) == {
        "next_tick_ms": 50.0,
        "seq": 4,
        "accepted": True,
        "mode": "teleop",
        "phase": "handover",
        "estop": "",
        "clamps": 5,
        "recording": False,
        "late": 0,
    }
    loop.late = 3  # the loop's count of targets that landed after the tick they were in time for
    assert target(ctl, token, 5, (1.5, -2.0))["late"] == 3
    got = loop.teleop.fresh(10.03)
    assert got is not None and got.seq == 5 and got.received_at == 10.03
    assert got.positions.dtype == np.float64 and got.positions.tolist() == [1.5, -2.0]
    target(ctl, token, 6, (3, -4))  # whole numbers are taken as float64 too
    got = loop.teleop.fresh(10.03)
    assert got is not None and got.positions.dtype == np.float64 and got.positions.tolist() == [3.0, -4.0]


def test_the_next_tick_is_counted_modulo_the_period(ctl: TeleopControl, loop: Loop, clock: Clock) -> None:
    token = open_(ctl)
    clock.t = 10.03
    loop.next_due = 9.98  # the tick after the published one may be running already
    assert target(ctl, token, 1)["next_tick_ms"] == 75.0
    loop.next_due = 10.03 + 0.125 + 0.0123456
    assert target(ctl, token, 2)["next_tick_ms"] == 12.346


def test_an_older_target_is_answered_not_accepted(ctl: TeleopControl, loop: Loop) -> None:
    token = open_(ctl)
    target(ctl, token, 7)
    reply = target(ctl, token, 6, (9.0, 9.0))
    assert (reply["accepted"], reply["seq"]) == (False, 6)
    got = loop.teleop.fresh(10.0)
    assert got is not None and got.seq == 7


def test_the_reply_carries_the_estop_and_the_recording(ctl: TeleopControl, loop: Loop) -> None:
    token = open_(ctl)
    loop.estop_reason = "e-stop from the teleop station"
    loop.episodes = Episodes(active=True)
    reply = target(ctl, token, 1)
    assert (reply["estop"], reply["recording"]) == ("e-stop from the teleop station", True)
    loop.episodes.active = False
    assert target(ctl, token, 2)["recording"] is False


def test_a_target_with_the_wrong_number_of_joints_is_refused(ctl: TeleopControl, loop: Loop) -> None:
    token = open_(ctl)
    with pytest.raises(BadRequestError) as err:
        target(ctl, token, 1, (1.0, 2.0, 3.0))
    e = err.value
    assert e.message == "teleop.target body.positions: expected 2 numbers (shoulder, elbow), got 3"
    assert (e.field, e.expected, e.received, e.request_id) == ("body.positions", "2 numbers", "3 numbers", 5)
    assert loop.teleop.received == 0


# --- take-over, hand-back, episodes ----------------------------------------------------------


def test_take_over_and_hand_back_go_through_the_loops_checks(ctl: TeleopControl, loop: Loop) -> None:
    token = open_(ctl)
    loop.mode = Mode.HOLDING
    assert ctl.handle(TeleopRequest(2, "teleop.take_over", session=token), "7") == {"accepted": True, "mode": "holding"}
    ctl.handle(TeleopRequest(3, "teleop.hand_back", session=token), "7")
    assert loop.calls == [
        ("check", "teleop"),
        ("request", "teleop", "alice (client 7)"),
        ("check", "start"),
        ("request", "start", "alice (client 7)"),
    ]


@pytest.mark.parametrize(("kind", "command"), [("teleop.take_over", "teleop"), ("teleop.hand_back", "start")])
def test_a_refused_take_over_or_hand_back_says_why(ctl: TeleopControl, loop: Loop, kind: str, command: str) -> None:
    token = open_(ctl)
    loop.refuse = ControlRefused("the e-stop is latched (latch 3: hand in the way); release it first")
    with pytest.raises(ControlRefusedError) as err:
        ctl.handle(TeleopRequest(8, kind, session=token), "7")
    assert err.value.message == f"{kind}: the e-stop is latched (latch 3: hand in the way); release it first"
    assert (err.value.field, err.value.request_id) == ("kind", 8)
    assert loop.calls == [("check", command)]


@pytest.mark.parametrize("op", ["start", "stop", "discard"])
def test_episode_requests_go_to_the_recorder_with_the_task_and_who(ctl: TeleopControl, loop: Loop, op: str) -> None:
    token = open_(ctl)
    loop.episodes = Episodes()
    reply = ctl.handle(TeleopRequest(2, f"teleop.episode_{op}", session=token, task="pick the cube"), "7")
    assert reply == {"accepted": True, "mode": "idle"}
    assert loop.episodes.requests == [(op, "pick the cube", "alice (client 7)")]


def test_episode_requests_are_refused_when_recording_is_off(ctl: TeleopControl) -> None:
    token = open_(ctl)
    with pytest.raises(ControlRefusedError) as err:
        ctl.handle(TeleopRequest(2, "teleop.episode_start", session=token, task="pick"), "7")
    assert err.value.message == (
        "teleop.episode_start: recording is off on this daemon; set [recording] dataset_dir in its config"
    )
    assert (err.value.field, err.value.request_id) == ("kind", 2)


# --- close -----------------------------------------------------------------------------------


def test_close_frees_the_arm_clears_the_slot_and_stops_teleop(ctl: TeleopControl, loop: Loop, clock: Clock) -> None:
    token = open_(ctl)
    target(ctl, token, 1)
    loop.said()
    loop.mode = Mode.TELEOP
    clock.t = 10.25
    assert ctl.handle(TeleopRequest(9, "teleop.close", session=token), "7") == {"accepted": True, "mode": "teleop"}
    assert loop.teleop.fresh(10.25) is None
    assert loop.said() == [(logging.INFO, "teleop: session of alice (client 7) closed")]
    assert loop.calls == [("request", "stop", "alice (client 7) (session closed)")]
    assert ctl.holder() is None
    with pytest.raises(NoSessionError):
        ctl.handle(TeleopRequest(10, "teleop.take_over", session=token), "7")
    assert ctl.status() == {"holder": None, "opened": 1, "refused": 0, "lost": 0}


def test_close_outside_teleop_commands_nothing(ctl: TeleopControl, loop: Loop) -> None:
    token = open_(ctl)
    loop.mode = Mode.RUNNING
    ctl.handle(TeleopRequest(9, "teleop.close", session=token), "7")
    assert loop.calls == []


def test_close_right_after_a_hand_back_leaves_the_policy_its_arm(ctl: TeleopControl, loop: Loop) -> None:
    token = open_(ctl)
    loop.mode = Mode.TELEOP  # the hand-back is queued: the mode reads teleop until the loop's next tick
    ctl.handle(TeleopRequest(2, "teleop.hand_back", session=token), "7")
    ctl.handle(TeleopRequest(3, "teleop.close", session=token), "7")
    assert [c[:2] for c in loop.calls] == [("check", "start"), ("request", "start")]


def test_a_take_over_after_a_hand_back_is_stopped_by_a_close_again(ctl: TeleopControl, loop: Loop) -> None:
    token = open_(ctl)
    loop.mode = Mode.TELEOP
    for kind in ("teleop.hand_back", "teleop.take_over", "teleop.close"):
        ctl.handle(TeleopRequest(2, kind, session=token), "7")
    assert loop.calls[-1] == ("request", "stop", "alice (client 7) (session closed)")


def test_a_closed_hand_back_does_not_spare_the_next_session(ctl: TeleopControl, loop: Loop) -> None:
    first = open_(ctl)
    loop.mode = Mode.TELEOP
    ctl.handle(TeleopRequest(2, "teleop.hand_back", session=first), "7")
    ctl.handle(TeleopRequest(3, "teleop.close", session=first), "7")
    second = open_(ctl, "bob", "8")
    ctl.handle(TeleopRequest(4, "teleop.take_over", session=second), "8")
    loop.calls.clear()
    ctl.handle(TeleopRequest(5, "teleop.close", session=second), "8")
    assert loop.calls == [("request", "stop", "bob (client 8) (session closed)")]


# --- a session lost for silence ---------------------------------------------------------------


def test_every_request_keeps_the_session_alive(ctl: TeleopControl, clock: Clock) -> None:
    token = open_(ctl)
    clock.t = 10.9
    target(ctl, token, 1)
    clock.t = 11.9  # exactly the timeout after the target: still held
    assert ctl.holder() == "alice (client 7)"


def test_a_silent_session_is_lost_and_teleop_goes_to_hold(ctl: TeleopControl, loop: Loop, clock: Clock) -> None:
    token = open_(ctl)
    target(ctl, token, 1)
    loop.said()
    loop.mode = Mode.TELEOP
    clock.t = 11.0001
    assert ctl.holder() is None
    assert loop.teleop.fresh(10.0) is None
    assert loop.said() == [
        (logging.WARNING, "teleop: session of alice (client 7) lost (no message for 1000 ms); arm to hold")
    ]
    assert loop.calls == [("request", "stop", "alice (client 7) (session lost)")]
    assert ctl.status() == {"holder": None, "opened": 1, "refused": 0, "lost": 1}
    ctl.expire(20.0)  # lost once
    assert loop.calls == [("request", "stop", "alice (client 7) (session lost)")] and loop.said() == []


def test_a_lost_session_outside_teleop_commands_nothing(ctl: TeleopControl, loop: Loop, clock: Clock) -> None:
    open_(ctl)
    loop.mode = Mode.RUNNING
    ctl.expire(11.5)
    assert loop.calls == [] and ctl.status()["lost"] == 1


def test_a_session_lost_right_after_its_hand_back_leaves_the_policy_its_arm(
    ctl: TeleopControl, loop: Loop, clock: Clock
) -> None:
    token = open_(ctl)
    loop.mode = Mode.TELEOP
    ctl.handle(TeleopRequest(2, "teleop.hand_back", session=token), "7")
    ctl.expire(12.0)
    assert [c[:2] for c in loop.calls] == [("check", "start"), ("request", "start")]
    # and the next station's session, lost in teleop, is stopped
    second = open_(ctl, "bob", "8")
    ctl.handle(TeleopRequest(3, "teleop.take_over", session=second), "8")
    loop.calls.clear()
    ctl.expire(14.0)
    assert loop.calls == [("request", "stop", "bob (client 8) (session lost)")]


def test_a_new_station_gets_the_arm_once_the_silent_one_is_lost(ctl: TeleopControl, loop: Loop, clock: Clock) -> None:
    open_(ctl)
    clock.t = 11.5
    open_(ctl, "bob", "8")
    assert ctl.holder() == "bob (client 8)"
    assert ctl.status() == {"holder": "bob (client 8)", "opened": 2, "refused": 0, "lost": 1}
    assert [text for _, text in loop.said()] == [
        "teleop: session opened by alice (client 7)",
        "teleop: session of alice (client 7) lost (no message for 1000 ms); arm to hold",
        "teleop: session opened by bob (client 8)",
    ]


def test_the_clock_defaults_to_the_monotonic_one(loop: Loop) -> None:
    ctl = TeleopControl(loop)  # type: ignore[arg-type]
    open_(ctl)
    assert ctl.holder() == "alice (client 7)"  # a session opened now is not lost now


def test_a_garbled_token_is_answered_no_session_naming_the_holder(ctl: TeleopControl) -> None:
    open_(ctl)
    with pytest.raises(NoSessionError) as err:
        ctl.handle(TeleopRequest(3, "teleop.target", session="sessión", seq=1, positions=(1.0, 2.0)), "8")
    assert err.value.message == (
        "teleop.target: session 'sessión' is not the open teleop session (closed or lost); "
        "the arm is held by alice (client 7)"
    )
