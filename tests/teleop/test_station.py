"""The operator's station on a stand-in client and leader and a clock the test moves: opening, each
target and what its reply leaves in the status line, the phase lock to the loop's tick, the lead from
the trips it measured and the targets that missed their tick, every key's request and refusal word for
word, closing, and the stream's pace."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from drivers.errors import BusError
from runtime.client import RequestTimeoutError
from runtime.protocol.errors import ControlRefusedError, NoSessionError, SessionHeldError
from runtime.teleop import station as station_module
from runtime.teleop.lead import MARGIN_MS, MIN_SAMPLES, MISS_MS
from runtime.teleop.station import Station, StationStatus

PAD = " "


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(station_module, "time", SimpleNamespace(monotonic=c.monotonic, sleep=c.sleep))
    return c


TARGET_REPLY = {
    "mode": "teleop",
    "phase": "tracking",
    "estop": "",
    "clamps": 2,
    "recording": True,
    "next_tick_ms": 10.0,
}


class Client:
    """Answers like the daemon; records each call; ``fail[command]`` is raised instead of answering."""

    def __init__(self, target: dict[str, Any] | None = None, rtt: float = 2.0) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: dict[str, Exception] = {}
        self.target = TARGET_REPLY if target is None else target
        self.rtt = rtt

    def teleop(self, command: str, **body: Any) -> tuple[dict[str, Any], float]:
        self.calls.append((command, body))
        if command in self.fail:
            raise self.fail[command]
        if command == "open":
            return {"session": "tok", "rate_hz": 32, "joints": ["shoulder", "elbow"], "mode": "idle"}, 1.0
        if command == "target":
            return dict(self.target), self.rtt
        return {"accepted": True, "mode": "teleop"}, 1.0

    def control(self, command: str, **body: Any) -> dict[str, Any]:
        self.calls.append((f"control.{command}", body))
        if f"control.{command}" in self.fail:
            raise self.fail[f"control.{command}"]
        return {"mode": "estopped"}


class Leader:
    joints = ("shoulder", "elbow")

    def __init__(self) -> None:
        self.pose = np.array([1.5, -2.0])
        self.fail: Exception | None = None
        self.ordered: list[list[str]] = []

    def read(self) -> np.ndarray:
        if self.fail is not None:
            raise self.fail
        return self.pose

    def close(self) -> None:
        pass


class OrderedLeader(Leader):
    def order(self, names: list[str]) -> None:
        self.ordered.append(names)


def station(client: Client | None = None, leader: Leader | None = None, **kw: Any) -> Station:
    return Station(client or Client(), leader or Leader(), **kw)  # type: ignore[arg-type]


# --- the status line -----------------------------------------------------------------------


def test_a_fresh_status_line() -> None:
    assert StationStatus().line() == (
        "?" + PAD * 19 + " rtt   0.0 ms  lead  8.0 ms  misses 0  clamps 0     no e-stop  not recording  sent 0"
        "  timeouts 0"
    )


def test_a_full_status_line() -> None:
    s = StationStatus(
        mode="teleop",
        phase="handover",
        estop="e-stop from the teleop station",
        clamps=12,
        recording=True,
        rtt_ms=3.456,
        sent=41,
        timeouts=2,
        message="take over",
        lead_ms=4.449,
        misses=3,
    )
    assert s.line() == (
        "teleop (handover)" + PAD * 3 + " rtt   3.5 ms  lead  4.4 ms  misses 3  clamps 12    E-STOP: e-stop from the"
        " teleop station  REC  sent 41  timeouts 2  | take over"
    )


# --- opening --------------------------------------------------------------------------------


def test_a_new_station_has_no_session_leads_by_8_ms_and_paces_at_30_hz_until_told(clock: Clock) -> None:
    s = station(who="alice")
    assert (s.session, s.seq, s.rate_hz, s.quit, s.who, s.task) == ("", 0, 30.0, False, "alice", "teleop")
    assert s.lead_s == pytest.approx(0.008) and s.status == StationStatus() and s.status.lead_ms == 8.0
    assert (s.lead.configured_ms, s.lead.fixed, s.lead.samples) == (8.0, False, 0)
    assert station(lead_ms=5.0, fixed_lead=True).lead.fixed and station(lead_ms=5.0).status.lead_ms == 5.0
    assert s.next_send_at(5.0) == pytest.approx(5.0 + 1 / 30)  # not locked to the loop yet: one period


def test_open_takes_the_session_the_rate_and_the_joint_order() -> None:
    client, leader = Client(), OrderedLeader()
    s = station(client, leader, who="alice")
    body = s.open()
    assert client.calls == [("open", {"who": "alice"})]
    assert body["session"] == "tok" and s.session == "tok"
    assert s.rate_hz == 32.0 and isinstance(s.rate_hz, float)
    assert leader.ordered == [["shoulder", "elbow"]]
    assert s.status.mode == "idle" and s.status.message == "session open, 2 joints at 32 Hz"


def test_open_without_a_mode_in_the_reply_shows_a_question_mark() -> None:
    client = Client()
    client.teleop = lambda command, **body: ({"session": 7, "rate_hz": 12.5, "joints": ["a"]}, 1.0)  # type: ignore[method-assign]
    s = station(client)
    s.open()  # a leader without ``order`` is read as it is
    assert s.session == "7" and s.status.mode == "?" and s.status.message == "session open, 1 joints at 12.5 Hz"


# --- streaming ------------------------------------------------------------------------------


def test_a_step_sends_the_leader_pose_with_the_next_number_and_shows_the_reply(clock: Clock) -> None:
    client = Client()
    s = station(client)
    s.open()
    s.step()
    s.step()
    assert client.calls[1:] == [
        ("target", {"session": "tok", "seq": 1, "positions": [1.5, -2.0]}),
        ("target", {"session": "tok", "seq": 2, "positions": [1.5, -2.0]}),
    ]
    assert all(type(v) is float for v in client.calls[1][1]["positions"])
    assert s.seq == 2
    st = s.status
    assert (st.sent, st.rtt_ms, st.mode, st.phase, st.estop, st.clamps, st.recording, st.next_tick_ms) == (
        2,
        2.0,
        "teleop",
        "tracking",
        "",
        2,
        True,
        10.0,
    )
    # the loop's next tick: sent at 100 s, the server half the 2 ms round trip later, then 10 ms
    assert s._loop_tick_at == pytest.approx(100.011, abs=1e-12)


def test_a_reply_missing_fields_shows_their_defaults() -> None:
    client = Client(target={})
    s = station(client)
    s.open()
    s.status.recording, s.status.clamps, s.status.phase = True, 5, "handover"
    s.step()
    st = s.status
    assert (st.mode, st.phase, st.estop, st.clamps, st.recording, st.next_tick_ms) == ("?", "", "", 0, False, None)
    assert s._loop_tick_at is None


def test_a_whole_number_of_ms_to_the_next_tick_locks_too_and_anything_else_does_not(clock: Clock) -> None:
    client = Client(target={"next_tick_ms": 4, "estop": "latched by ana"}, rtt=3.0)
    s = station(client)
    s.open()
    s.step()
    assert s.status.next_tick_ms == 4.0 and s.status.estop == "latched by ana"
    assert s._loop_tick_at == pytest.approx(100.0055, abs=1e-12)
    client.target = {"next_tick_ms": "soon"}
    s.step()
    assert s.status.next_tick_ms == 4.0 and s._loop_tick_at == pytest.approx(100.0055, abs=1e-12)


def test_a_step_without_a_session_opens_one_first() -> None:
    client = Client()
    s = station(client, who="bo")
    s.step()
    assert [c for c, _ in client.calls] == ["open", "target"] and s.status.sent == 1


def test_a_refused_open_shows_why_and_sends_nothing() -> None:
    client = Client()
    client.fail["open"] = SessionHeldError("teleop.open: the arm is held by alice (client 7)")
    s = station(client)
    s.step()
    assert s.status.message == "[session_held] teleop.open: the arm is held by alice (client 7)"
    assert [c for c, _ in client.calls] == ["open"] and s.session == "" and s.seq == 0 and s.status.timeouts == 0


def test_an_open_without_a_reply_is_counted_and_shown() -> None:
    client = Client()
    client.fail["open"] = RequestTimeoutError("teleop.open: no reply within 1.0 s")
    s = station(client)
    s.step()
    s.step()
    assert s.status.timeouts == 2 and s.status.message == "teleop.open: no reply within 1.0 s"
    assert [c for c, _ in client.calls] == ["open", "open"] and s.seq == 0


def test_a_failed_leader_read_sends_nothing_and_is_counted() -> None:
    client, leader = Client(), Leader()
    s = station(client, leader)
    s.open()
    leader.fail = BusError("no reply from servo 3")
    s.step()
    s.step()
    assert s.status.leader_failures == 2 and s.status.message == "leader read failed: no reply from servo 3"
    assert s.seq == 0 and [c for c, _ in client.calls] == ["open"]
    leader.fail = None
    s.step()
    assert client.calls[-1][1]["seq"] == 1


def test_a_lost_session_is_shown_and_reopened_at_the_next_step() -> None:
    client = Client()
    s = station(client)
    s.open()
    client.fail["target"] = NoSessionError("teleop.target: session 'tok' is not the open teleop session")
    s.step()
    assert (
        s.session == ""
        and s.status.message == "session lost: teleop.target: session 'tok' is not the open teleop session"
    )
    assert s.status.sent == 0
    del client.fail["target"]
    s.step()
    assert [c for c, _ in client.calls] == ["open", "target", "open", "target"]
    assert client.calls[-1][1]["seq"] == 2 and s.status.sent == 1


def test_a_target_without_a_reply_is_counted_and_the_session_kept() -> None:
    client = Client()
    s = station(client)
    s.open()
    client.fail["target"] = RequestTimeoutError("teleop.target: no reply within 1.0 s")
    s.step()
    s.step()
    assert (s.status.timeouts, s.status.message, s.status.sent) == (2, "no reply from the daemon", 0)
    assert s.session == "tok"


# --- the lead and the misses -----------------------------------------------------------------


class TimedLeader(Leader):
    """A leader whose read takes ``takes`` seconds of the test's clock."""

    def __init__(self, clock: Clock, takes: float) -> None:
        super().__init__()
        self.clock, self.takes = clock, takes

    def read(self) -> np.ndarray:
        self.clock.t += self.takes
        return super().read()


def test_the_lead_follows_the_measured_read_and_round_trip_once_enough_are(clock: Clock) -> None:
    client = Client(rtt=3.0)
    s = station(client, TimedLeader(clock, 1 / 512), lead_ms=8.0)  # reads of 1.953125 ms
    s.open()
    for _ in range(MIN_SAMPLES - 1):
        s.step()
    assert s.lead.samples == MIN_SAMPLES - 1 and s.status.lead_ms == 8.0 and s.lead_s == pytest.approx(0.008)
    s.step()
    # p99 read + half the p99 round trip + the margin
    assert s.status.lead_ms == pytest.approx(1.953125 + 1.5 + MARGIN_MS, abs=1e-9)
    assert s.lead_s == pytest.approx((1.953125 + 1.5 + MARGIN_MS) / 1e3, abs=1e-12)
    assert "lead  4.5 ms  misses 0" in s.status.line()


def test_waking_late_for_a_placed_read_counts_in_the_read_and_an_open_places_nothing(clock: Clock) -> None:
    client = Client(rtt=2.0)
    s = station(client, TimedLeader(clock, 1 / 512))
    s.step(placed_at=99.998)  # no session: the open's round trip is not this read's
    assert [c for c, _ in client.calls] == ["open", "target"] and s.status.read_ms == pytest.approx(1.953125)
    s.step(placed_at=clock.t + 1.0)  # a time not yet come: from the read itself
    assert s.status.read_ms == pytest.approx(1.953125)
    clock.t = 100.25
    s.step(placed_at=100.249)  # woke a ms late for it
    assert s.status.read_ms == pytest.approx(1.0 + 1.953125)


def test_a_fixed_lead_stays_what_it_was_set_to(clock: Clock) -> None:
    s = station(Client(rtt=3.0), TimedLeader(clock, 1 / 512), lead_ms=6.0, fixed_lead=True)
    s.open()
    for _ in range(2 * MIN_SAMPLES):
        s.step()
    assert s.lead.samples == 2 * MIN_SAMPLES and s.status.lead_ms == 6.0 and s.lead_s == pytest.approx(0.006)


def test_a_target_the_daemon_got_after_the_tick_it_was_read_for_is_a_miss(clock: Clock) -> None:
    client = Client(rtt=2.0)
    s = station(client)
    s.open()  # 32 Hz: a period of 31.25 ms
    s.step()  # the loop's tick 11 ms after this send (half the round trip, then 10 ms): 100.011
    assert s.status.misses == 0  # not locked before: nothing to miss
    clock.t = 100.003  # read 8 ms before that tick
    client.target = {**TARGET_REPLY, "next_tick_ms": 7.0}  # got 1 ms later, 7 ms before the tick: in time
    s.step()
    assert s._loop_tick_at == pytest.approx(100.011, abs=1e-12) and s.status.misses == 0
    clock.t = 100.03425  # read 8 ms before the next tick (100.04225), but the trip takes 10 ms of a 20 ms
    client.rtt = 20.0  # round trip: the daemon got it after that tick, and says the next is 29.25 ms away
    client.target = {**TARGET_REPLY, "next_tick_ms": 29.25}
    s.step()
    assert s._loop_tick_at == pytest.approx(100.0735, abs=1e-12)  # the lock follows the loop as before
    assert s.status.misses == 1 and s.lead.misses == 1 and "misses 1" in s.status.line()
    clock.t = 100.0655  # read 8 ms before that tick, and in time
    client.rtt, client.target = 2.0, {**TARGET_REPLY, "next_tick_ms": 7.0}
    s.step()
    assert s._loop_tick_at == pytest.approx(100.0735, abs=1e-12) and s.status.misses == 1


def test_a_target_read_for_a_tick_that_reached_the_daemon_in_time_is_no_miss_however_it_was_placed(
    clock: Clock,
) -> None:
    client = Client(rtt=2.0)
    s = station(client)
    s.open()
    s.step()  # tick at 100.011
    clock.t = 100.0109  # read a hair before that tick: it is the one aimed at, and this reply misses it
    client.target = {**TARGET_REPLY, "next_tick_ms": 29.3}  # 100.0119 + 29.3 ms = 100.0412: a period on
    s.step()
    assert s.status.misses == 1
    clock.t = 100.0413  # read just after the tick: for the next one, reached in 30.25 ms: in time
    client.target = {**TARGET_REPLY, "next_tick_ms": 30.25}
    s.step()
    assert s.status.misses == 1


def test_targets_the_daemon_counts_late_are_misses_counted_from_the_sessions_first_reply(clock: Clock) -> None:
    client = Client(target={**TARGET_REPLY, "late": 5})
    s = station(client)
    s.open()
    s.step()  # the loop's count so far: earlier sessions', not this one's
    assert s.status.misses == 0
    s.step()
    assert s.status.misses == 0
    client.target = {**TARGET_REPLY, "late": 7}
    s.step()
    assert s.status.misses == 2 and s.lead.misses == 2
    client.target = {**TARGET_REPLY, "late": "many"}  # not a count: ignored
    s.step()
    client.target = {**TARGET_REPLY, "late": 7}
    s.step()
    assert s.status.misses == 2
    s.open()  # a new session counts from its own first reply
    client.target = {**TARGET_REPLY, "late": 9}
    s.step()
    assert s.status.misses == 2
    client.target = {**TARGET_REPLY, "late": 10}
    s.step()
    assert s.status.misses == 3


def test_misses_widen_the_lead(clock: Clock) -> None:
    client = Client(target={**TARGET_REPLY, "late": 0}, rtt=2.0)
    s = station(client)  # leader reads take no time: 0 + 1 + 1 ms
    s.open()
    for _ in range(MIN_SAMPLES):
        s.step()
    assert s.status.lead_ms == 2.0
    client.target = {**TARGET_REPLY, "late": 2}
    s.step()
    assert s.status.lead_ms == 2.0 + 2 * MISS_MS and s.status.misses == 2


def test_the_measured_lead_places_the_sends_as_the_configured_one_did(clock: Clock) -> None:
    client = Client(rtt=2.0)
    s = station(client, lead_ms=8.0)
    s.open()
    for _ in range(MIN_SAMPLES):
        s.step()  # every reply: the loop's tick 11 ms after the send, at 100.011
    assert s.lead_s == pytest.approx(0.002) and s._loop_tick_at == pytest.approx(100.011, abs=1e-12)
    # 2 ms before a tick of the loop, at least half a period (15.625 ms) away
    assert s.next_send_at(100.0) == pytest.approx(100.011 - 0.002 + 1 / 32, abs=1e-12)
    assert s.next_send_at(99.99) == pytest.approx(100.009, abs=1e-12)


# --- the pace -------------------------------------------------------------------------------


def locked(tick_at: float, rate_hz: float = 32.0, lead_ms: float = 7.8125) -> Station:
    s = station(lead_ms=lead_ms)  # 7.8125 ms and 1/32 s are exact in binary
    s.rate_hz = rate_hz
    s._loop_tick_at = tick_at
    return s


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (9.9765625, 9.9921875),  # the lead point ahead is exactly half a period away: that one
        (9.9765626, 10.0234375),  # a hair less than half a period: the one after
        (9.99, 10.0234375),
        (10.0, 10.0234375),
        (10.1, 10.1171875),  # many periods on
        (9.8, 9.8359375),  # before the locked tick: periods back
    ],
)
def test_the_next_send_is_the_lead_before_a_loop_tick_at_least_half_a_period_away(now: float, expected: float) -> None:
    s = locked(10.0)  # lead point 9.9921875, period 0.03125
    assert s.next_send_at(now) == pytest.approx(expected, abs=1e-12)


def test_run_streams_at_the_loops_pace_and_reads_keys_between_targets(clock: Clock) -> None:
    client = Client()
    s = station(client, lead_ms=8.0)
    keys = iter(["t", None, None, "R", None])
    shown: list[str] = []
    s.run(lambda: next(keys), shown.append, max_steps=3)
    assert [c for c, _ in client.calls] == ["open", "take_over", "target", "target", "episode_start", "target"]
    # each target 8 ms before a tick the reply placed 11 ms after its sending (rtt 2 ms, next tick 10 ms):
    # 3 ms on, plus a period (1/32 s) for the half-period margin
    assert clock.slept == pytest.approx([0.0, 0.03425, 0.03425], abs=1e-12)
    assert len(shown) == 3 and shown[-1] == s.status.line() and "sent 3" in shown[-1] and "sent 1" in shown[0]


def test_run_streams_one_target_when_told_one(clock: Clock) -> None:
    client = Client()
    s = station(client)
    s.run(lambda: None, lambda line: None, max_steps=1)
    assert [c for c, _ in client.calls] == ["open", "target"] and not s.quit


def test_run_stops_at_quit_and_keeps_an_open_session(clock: Clock) -> None:
    client = Client()
    s = station(client)
    s.open()
    keys = iter([None, None, "q", None])
    s.run(lambda: next(keys), lambda line: None)
    # the tick a q is read on still sends its target; none after
    assert s.quit and [c for c, _ in client.calls] == ["open", "target", "target", "target"]


# --- keys -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "action", "call"),
    [
        ("t", "take over", ("take_over", {"session": "tok"})),
        ("T", "take over", ("take_over", {"session": "tok"})),
        ("h", "hand back", ("hand_back", {"session": "tok"})),
        ("r", "episode start", ("episode_start", {"session": "tok", "task": "pick the cube"})),
        ("s", "episode stop", ("episode_stop", {"session": "tok"})),
        ("D", "episode discard", ("episode_discard", {"session": "tok"})),
    ],
)
def test_each_key_sends_its_request_and_shows_its_action(key: str, action: str, call: tuple[str, Any]) -> None:
    client = Client()
    s = station(client, task="pick the cube")
    s.open()
    assert s.key(key) == action
    assert client.calls[1:] == [call] and s.status.message == action


@pytest.mark.parametrize("key", ["e", "E", " "])
def test_e_and_space_latch_an_estop_with_or_without_a_session(key: str) -> None:
    client = Client()
    s = station(client, who="alice")
    assert s.key(key) == "e-stop"
    assert client.calls == [("control.estop", {"who": "alice", "reason": "e-stop from the teleop station"})]
    anonymous = Client()
    station(anonymous).key(key)
    assert anonymous.calls == [("control.estop", {"who": "teleop station", "reason": "e-stop from the teleop station"})]


def test_q_quits_without_a_request_and_unknown_keys_do_nothing() -> None:
    client = Client()
    s = station(client)
    s.status.message = "before"
    assert s.key("x") == "" and s.key("?") == "" and s.status.message == "before"
    assert not s.quit
    assert s.key("Q") == "quit" and s.quit and s.status.message == "quit"
    assert client.calls == []


@pytest.mark.parametrize("key", ["t", "h", "r", "s", "d"])
def test_a_key_needing_a_session_without_one_is_refused_locally(key: str) -> None:
    client = Client()
    s = station(client)
    action = station_module.KEYS[key]
    assert s.key(key) == f"{action} refused: no session is open"
    assert s.status.message == f"{action} refused: no session is open" and client.calls == []


def test_a_refused_key_shows_the_daemons_words() -> None:
    client = Client()
    s = station(client)
    s.open()
    client.fail["take_over"] = ControlRefusedError("teleop.take_over: the e-stop is latched (latch 3)")
    assert s.key("t") == "take over refused: teleop.take_over: the e-stop is latched (latch 3)"
    assert s.status.message == "take over refused: teleop.take_over: the e-stop is latched (latch 3)"
    client.fail["control.estop"] = ControlRefusedError("nope")
    assert s.key("e") == "e-stop refused: nope"


def test_a_key_without_a_reply_says_so() -> None:
    client = Client()
    s = station(client)
    s.open()
    client.fail["hand_back"] = RequestTimeoutError("teleop.hand_back: no reply within 1.0 s")
    assert s.key("h") == "hand back: no reply from the daemon"
    assert s.status.message == "hand back: no reply from the daemon"


# --- closing --------------------------------------------------------------------------------


def test_close_ends_the_session_once() -> None:
    client = Client()
    s = station(client)
    s.open()
    s.close()
    s.close()
    assert client.calls[1:] == [("close", {"session": "tok"})] and s.session == ""


@pytest.mark.parametrize(
    "error", [NoSessionError("teleop.close: lost"), RequestTimeoutError("teleop.close: no reply within 1.0 s")]
)
def test_a_close_that_fails_still_forgets_the_session(error: Exception) -> None:
    client = Client()
    s = station(client)
    s.open()
    client.fail["close"] = error
    s.close()
    assert s.session == "" and [c for c, _ in client.calls] == ["open", "close"]
