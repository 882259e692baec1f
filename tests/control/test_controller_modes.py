"""The mode machine, tick by tick: what a start, a stop, an e-stop and its release, a stall, a hand-over,
a rest and a shutdown do to the goal the runner writes, to the mode, to the counters and to what the
operator reads in the log.

No bus, no thread, no export: the small arm of ``small_arm.py`` (a manifest made in code, stand-ins for
the policy's feed, a clock the test moves, its ``Runner`` playing the runner's part) and a stand-in for
the torque switch. Goals may lead
the present position by 4 per tick, the step may change by 10 per tick (so the acceleration bound stays
out of the way unless a test asks for it), a chunk's first executed step may be 10 from the present
position, the loop runs at 10 Hz and a rest moves 2 per tick (20 per second).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

import numpy as np
import pytest

from drivers.errors import BusError, ServoFaultError
from runtime.control.config import ControlConfig, SafetyConfig
from runtime.control.controller import ChunkResult, Controller, Decision
from runtime.control.feed import Blocked
from runtime.control.mailbox import Release, Shutdown, Start, Stop, TakeOver
from runtime.control.mode import Mode, Source
from runtime.errors import ConfigError
from runtime.teleop.config import TeleopConfig

from .small_arm import CAL, CHUNK, JOINTS, Clock, Feed, P, Runner, at, interface, rows, same

SAFETY: dict[str, Any] = {
    "max_step_deg": 4.0,
    "max_step_change_deg": 10.0,
    "gripper_max_step_pct": 4.0,
    "gripper_max_step_change_pct": 10.0,
    "max_first_step_deg": 10.0,
    "stall_timeout_s": 1.0,
    "rest_speed_deg_s": 20.0,
}
INFO, WARNING, ERROR, CRITICAL = logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL
RELEASE_HINT = "release with: lerobot-runtime control release"


class Torque:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.failing: set[str] = set()

    def enable_torque(self) -> None:
        self.calls.append("on")
        if "on" in self.failing:
            raise BusError("torque on: no reply")

    def disable_torque(self) -> None:
        self.calls.append("off")
        if "off" in self.failing:
            raise BusError("torque off: no reply")


_SAME: Any = object()


class Rig:
    def __init__(
        self,
        *,
        n_action_steps: int = 0,
        threshold: float = 0.5,
        chunk: int = CHUNK,
        history: int = 1,
        teleop: TeleopConfig | None = None,
        **safety: Any,
    ) -> None:
        self.clock, self.torque, self.feed = Clock(), Torque(), Feed()
        self.config = ControlConfig(
            rate_hz=10.0,
            n_action_steps=n_action_steps,
            chunk_size_threshold=threshold,
            rt_priority=0,
            streams=(),
            safety=SafetyConfig(**{**SAFETY, **safety}),
        )
        self.c = Controller(
            JOINTS,
            CAL,
            interface(chunk=chunk, history=history),
            self.config,
            teleop=teleop if teleop is not None else TeleopConfig(),
            period=0.1,
        )
        self.runner = Runner(self.c, self.feed, self.torque, self.clock)
        self.mailbox, self.results, self.teleop = self.runner.mailbox, self.runner.results, self.runner.teleop
        self.dumps = self.runner.dumps
        self.k = 0

    def tick(self, present: np.ndarray | None = P, read: Any = _SAME) -> Decision:
        """One tick as the runner makes it: decide, write the goal, read the joints again (the same pose
        unless ``read`` says otherwise), hand the reading to the policy if the step wanted it."""
        self.k += 1
        d = self.step(self.k, present)
        reading = present if read is _SAME else read
        if reading is not None:
            self.c.read_ok(reading)
        self.runner.after_read(d, reading, self.clock.now)
        return d

    def step(self, k: int, present: np.ndarray | None, now: float | None = None) -> Decision:
        return self.runner.step(k, self.clock.now if now is None else now, present)

    def command(self, command: Any, present: np.ndarray | None = P) -> Decision:
        self.mailbox.post(command)
        return self.tick(present)

    @property
    def estop(self) -> Any:
        return self.runner.estop

    @property
    def estop_reason(self) -> str | None:
        latch = self.runner.estop
        return latch.reason if latch is not None else None

    def servo_fault(self, error: BusError) -> None:
        self.runner.fault(self.c.servo_fault(error))

    def bus_failed(self, what: str, error: BusError) -> None:
        self.runner.fault(self.c.bus_failed(what, error))

    def end_with_torque_off(self) -> None:
        self.c.end_with_torque_off(self.runner.switch("off"))
        self.c.events.move_to(self.runner.events)

    def start(self, present: np.ndarray = P) -> Decision:
        d = self.command(Start("op"), present)
        assert self.c.mode is Mode.RUNNING
        return d

    def answer(self, actions: np.ndarray | None, error: str | None = None, n: int = -1) -> None:
        self.feed.callbacks[n](actions, error)

    def said(self) -> list[tuple[int, str]]:
        self.c.events.move_to(self.runner.events)
        return [(e.level, e.text()) for e in self.runner.events.drain()]


# --- made from the manifest and the config --------------------------------------------------------


def test_a_new_controller_is_idle_with_nothing_latched_measured_or_planned() -> None:
    r = Rig()
    c = r.c
    assert c.mode is Mode.IDLE and c.source is Source.HOLD
    assert (c.latch, c.latches_taken, c.intervention, c.last_teleop_seq, c.arm_error, c.hold_goal) == (
        None,
        0,
        False,
        -1,
        "",
        None,
    )
    assert c.intervention is False and c.torque_ok is True
    assert math.isnan(c.last_latency_ticks) and c.latencies_measured == 0
    assert c.inference_delay() == 0
    assert r.estop is None and r.estop_reason is None
    assert not c.counters and not r.dumps


@pytest.mark.parametrize(
    ("n_action_steps", "threshold", "n_steps", "refill_at"),
    [(0, 0.5, 4, 2), (3, 0.5, 3, 2), (9, 0.5, 4, 2), (4, 0.0, 4, 0), (3, 0.9, 3, 3), (4, 0.25, 4, 1)],
)
def test_the_steps_run_per_chunk_and_the_point_the_next_chunk_is_asked_for(
    n_action_steps: int, threshold: float, n_steps: int, refill_at: int
) -> None:
    c = Rig(n_action_steps=n_action_steps, threshold=threshold).c
    assert (c.n_steps, c.refill_at) == (n_steps, refill_at)


def test_the_action_queue_holds_four_chunks_with_the_configured_aggregation() -> None:
    c = Rig(chunk=5).c
    assert c.queue.size == 20 and c.queue.aggregate == "latest"
    config = ControlConfig(rate_hz=10.0, rt_priority=0, streams=(), aggregate="temporal_ensemble", ensemble_coeff=0.3)
    c = Controller(
        JOINTS,
        CAL,
        interface(),
        config,
        teleop=TeleopConfig(),
        period=0.1,
    )
    assert (c.queue.size, c.queue.aggregate, c.queue.coeff) == (16, "temporal_ensemble", 0.3)
    assert c._stalled.timeout_s == config.safety.stall_timeout_s == 2.0
    assert c.handover.config.deadman_ms == 200.0 and c.handover._step == pytest.approx(3.0)  # 30 deg/s at 10 Hz


def test_a_policy_without_exactly_one_state_input_is_refused_when_the_controller_is_made() -> None:
    config = ControlConfig(rate_hz=10.0, rt_priority=0, streams=())
    with pytest.raises(ConfigError, match="exactly one input with role 'state'"):
        Controller(
            JOINTS,
            CAL,
            interface(state=False),
            config,
            teleop=TeleopConfig(),
            period=0.1,
        )


def test_the_source_follows_the_mode() -> None:
    c = Rig().c
    expected = {
        Mode.IDLE: Source.HOLD,
        Mode.RUNNING: Source.POLICY,
        Mode.HOLDING: Source.HOLD,
        Mode.RESTING: Source.HOLD,
        Mode.ESTOPPED: Source.HOLD,
        Mode.TELEOP: Source.TELEOP,
    }
    for mode, source in expected.items():
        c.mode = mode
        assert c.source is source


# --- start, priming, chunks -----------------------------------------------------------------------


def test_a_start_turns_torque_on_holds_the_present_pose_and_asks_from_the_fresh_reading() -> None:
    r = Rig()
    assert r.tick().goal is None and r.c.mode is Mode.IDLE  # idle: nothing to write
    fresh = at(a=11.0)
    r.mailbox.post(Start("op"))
    d = r.tick(P, read=fresh)
    assert r.torque.calls == ["on"] and r.c.mode is Mode.RUNNING and r.c.source is Source.POLICY
    assert same(d.goal, P) and d.requested is None and d.shutdown is False
    # asked once, from the reading taken after the write, as float32, starting the policy's history
    [(state, reset)] = r.feed.submitted
    assert state.dtype == np.float32 and np.array_equal(state, fresh.astype(np.float32)) and reset is True
    assert r.c._plan.inflight_since == 100.0
    assert r.c.counters == Counter({"starts": 1, "priming": 1, "requests": 1})
    # priming is not reported as a hold
    assert r.said() == [(INFO, "control: source policy (was idle), motion started (asked by op)")]
    assert r.feed.observed == []


def test_a_start_whose_torque_fails_leaves_the_arm_idle() -> None:
    r = Rig()
    r.torque.failing.add("on")
    d = r.command(Start("op"))
    assert r.c.mode is Mode.IDLE and d.goal is None and r.feed.submitted == []
    assert r.said() == [(ERROR, "control start: torque on failed: torque on: no reply")]
    assert "starts" not in r.c.counters


def test_a_start_names_who_asked_or_a_question_mark() -> None:
    r = Rig()
    r.command(Start(""))
    assert r.said() == [(INFO, "control: source policy (was idle), motion started (asked by ?)")]


def test_a_start_from_holding_needs_no_torque_and_starts_a_new_run() -> None:
    r = Rig()
    r.start()
    r.command(Stop("op"))
    assert r.c.mode is Mode.HOLDING
    r.said()
    r.command(Start("op"))
    assert r.c.mode is Mode.RUNNING and r.torque.calls == ["on"] and r.c.counters["starts"] == 2
    assert r.said() == [(INFO, "control: source policy (was holding), motion started (asked by op)")]


def test_a_start_is_refused_while_the_policy_is_blocked_and_says_why() -> None:
    r = Rig()
    r.feed.gate = Blocked("stale:front", "stale observation stream: front")
    d = r.command(Start("op"))
    assert r.c.mode is Mode.IDLE and d.goal is None and r.torque.calls == []
    assert r.said() == [(WARNING, "control start (asked by op) refused: stale observation stream: front")]
    assert r.feed.blocked_at == [100.0]


def test_a_start_in_a_tick_whose_read_failed_is_refused() -> None:
    r = Rig()
    d = r.command(Start("op"), present=None)
    assert r.c.mode is Mode.IDLE and d.goal is None and r.torque.calls == []
    assert r.said() == [(WARNING, "control start (asked by op) refused: the arm did not answer this tick: ")]


def test_the_chunk_is_followed_from_the_tick_after_its_observation_within_the_envelope() -> None:
    r = Rig()
    r.start()  # tick 1 asks
    r.answer(rows(1.0, 2.0, 3.0, 6.0))  # for ticks 1..4
    d = r.tick()  # tick 2: tick 1's action is past
    assert same(d.requested, at(a=12.0)) and same(d.goal, at(a=12.0))
    assert r.c.last_latency_ticks == 1.0 and r.c.latencies_measured == 1 and r.c.inference_delay() == 1
    assert r.c.queue.dropped == 1 and r.c._plan.got_first is True
    # two actions are left for ticks 3 and 4, which is the refill point: tick 2 asks for the next chunk
    assert len(r.feed.submitted) == 2 and r.feed.submitted[1][1] is False
    assert same(r.tick().goal, at(a=13.0))
    d = r.tick()  # 16 is 6 from where the arm is: the envelope lets the goal lead it by 4
    assert same(d.requested, at(a=16.0)) and same(d.goal, at(a=14.0))
    assert len(r.feed.submitted) == 2  # one chunk in flight at a time
    assert r.c.counters == Counter({"starts": 1, "priming": 1, "requests": 2, "chunks": 1})
    r.said()
    d = r.tick()  # nothing due: hold the last goal written
    assert same(d.goal, at(a=14.0)) and d.requested is None
    assert r.c.counters["starved"] == 1 and same(r.c.hold_goal, at(a=14.0))
    assert r.said() == [(WARNING, "control: holding the last safe goal: starved: no action due")]
    r.tick()
    assert r.c.counters["starved"] == 2 and r.said() == []  # reported once
    assert r.feed.observed == []  # a policy without history is handed nothing but its asks


def test_the_next_chunk_is_asked_for_when_the_queue_falls_to_the_refill_point_not_before() -> None:
    r = Rig(threshold=0.25)  # refill at 1 queued
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    r.tick()  # tick 2: ticks 3 and 4 queued
    assert len(r.feed.submitted) == 1
    r.tick()  # tick 3: tick 4 queued
    assert len(r.feed.submitted) == 2


def test_only_n_action_steps_of_a_chunk_run() -> None:
    r = Rig(n_action_steps=2)
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    assert same(r.tick().goal, at(a=12.0))  # tick 2, the second of the two steps
    d = r.tick()
    assert same(d.goal, at(a=12.0)) and d.requested is None and r.c.counters["starved"] == 1


def test_a_chunk_with_a_nan_past_the_steps_run_is_refused_whole() -> None:
    r = Rig(n_action_steps=2)
    r.start()
    chunk = rows(1.0, 2.0, 3.0, 4.0)
    chunk[3, 1] = np.nan
    r.answer(chunk)
    r.said()
    d = r.tick()
    assert same(d.goal, P) and d.requested is None
    assert r.c.envelope.counts["refused_chunks"] == 1 and "chunks" not in r.c.counters
    assert r.c.counters["priming"] == 2 and r.c._plan.got_first is False
    assert r.said() == [(WARNING, "safety: chunk refused: chunk holds a non-finite value (nan) at step 3 for joint b")]


def test_the_first_step_checked_is_the_first_one_executed() -> None:
    r = Rig()
    r.start()
    r.answer(rows(20.0, 1.0, 2.0, 3.0))  # tick 1's action is far, but tick 1 is past
    assert same(r.tick().goal, at(a=11.0)) and r.c.counters["chunks"] == 1
    r = Rig()
    r.start()
    r.answer(rows(1.0, 20.0, 2.0, 3.0))
    r.said()
    assert same(r.tick().goal, P) and "chunks" not in r.c.counters
    assert r.said() == [
        (
            WARNING,
            "safety: chunk refused: first executed step is 20.00 from the present position of a "
            "(goal 30.00, present 10.00; max_first_step_deg 10)",
        )
    ]


def test_a_chunk_two_ticks_late_starts_two_actions_in() -> None:
    r = Rig(threshold=0.75)  # refill at 3: every tick with nothing in flight asks
    r.start()
    r.tick()  # tick 2: still priming
    r.answer(rows(20.0, 20.0, 1.0, 2.0))  # steps 0 and 1 are for ticks 1 and 2, both past
    d = r.tick()  # tick 3
    assert same(d.goal, at(a=11.0)) and r.c.last_latency_ticks == 2.0 and r.c.queue.dropped == 2


def test_every_chunk_measured_lands_in_the_delay_window_in_order() -> None:
    r = Rig()
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    r.tick()  # tick 2 merges (latency 1) and asks
    r.tick()  # tick 3
    r.answer(rows(3.0, 3.0, 3.0, 3.0))  # the answer to tick 2's ask, merged at tick 4
    r.tick()
    assert r.c.latencies_measured == 2 and r.c.last_latency_ticks == 2.0 and r.c.counters["chunks"] == 2
    assert list(r.c._recent) == [1, 2] and r.c.inference_delay() == 2


def test_a_chunk_asked_for_before_a_stop_is_discarded_and_the_next_run_asks_anew() -> None:
    r = Rig()
    r.start()
    r.command(Stop("op"))
    r.answer(rows(1.0, 2.0, 3.0, 4.0))  # for the plan the stop ended
    d = r.tick()
    assert d.goal is None and r.c.counters["chunks_discarded"] == 1
    assert r.c.latencies_measured == 0 and r.c._plan.inflight_since is None
    r.command(Start("op"))
    assert len(r.feed.submitted) == 2 and r.feed.submitted[1][1] is True  # a new run, a new history


def test_a_new_run_waits_for_the_answer_still_in_flight_before_it_asks() -> None:
    r = Rig()
    r.start()
    r.command(Stop("op"))
    r.command(Start("op"))
    assert len(r.feed.submitted) == 1  # the first run's request is still out
    r.answer(rows(1.0, 2.0, 3.0, 4.0), n=0)
    d = r.tick()
    assert same(d.goal, P) and r.c.counters["chunks_discarded"] == 1 and "chunks" not in r.c.counters
    assert len(r.feed.submitted) == 2 and r.feed.submitted[1][1] is True


def test_a_failed_inference_holds_and_is_asked_again() -> None:
    r = Rig()
    r.start()
    r.answer(None, "device lost")
    r.said()
    d = r.tick()
    assert same(d.goal, P) and r.c.counters["inference_failures"] == 1 and r.c.counters["priming"] == 2
    assert r.c.latencies_measured == 1 and "chunks" not in r.c.counters
    assert r.said() == [(ERROR, "control: inference failed: device lost; holding")]
    assert len(r.feed.submitted) == 2
    r.answer(None, "device lost")
    r.tick()
    assert r.c.counters["inference_failures"] == 2


def test_an_answer_without_actions_or_error_is_a_failure_too() -> None:
    r = Rig()
    r.start()
    r.answer(None, None)
    r.said()
    r.tick()
    assert r.c.counters["inference_failures"] == 1
    assert r.said() == [(ERROR, "control: inference failed: None; holding")]


def test_a_chunk_that_arrives_in_a_tick_whose_read_failed_is_discarded() -> None:
    r = Rig()
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    d = r.tick(None)
    assert d.goal is None and r.c.counters["chunks_discarded"] == 1 and "chunks" not in r.c.counters
    assert r.c.latencies_measured == 1 and r.c._plan.inflight_since is None


def test_a_request_unanswered_past_the_stall_timeout_is_given_up_and_asked_again() -> None:
    r = Rig(stall_action="hold")
    r.start()
    r.said()
    r.clock.now += 1.0
    r.tick()  # exactly the timeout: still waiting
    assert "inference_stalls" not in r.c.counters and len(r.feed.submitted) == 1
    r.clock.now += 0.25
    r.tick()
    assert r.c.counters["inference_stalls"] == 1 and r.c.counters["stall_actions"] == 1
    assert r.said() == [
        (ERROR, "control: no chunk 1.2 s after asking; dropping that request"),
        (ERROR, "control: stalled 1.25 s (waiting for the first chunk): hold"),
    ]
    assert len(r.feed.submitted) == 2 and r.feed.submitted[1][1] is False
    r.answer(rows(1.0, 2.0, 3.0, 4.0), n=0)  # the given-up request answers at last
    r.tick()
    assert r.c.counters["chunks_discarded"] == 1 and "chunks" not in r.c.counters
    assert len(r.feed.submitted) == 3  # the slot it held is free: asked again at once
    r.clock.now += 1.25
    r.tick()
    assert r.c.counters["inference_stalls"] == 2 and len(r.feed.submitted) == 4


def test_a_refused_submit_is_counted_and_asked_again_still_starting_the_history() -> None:
    r = Rig()
    r.feed.accept = False
    r.start()
    assert r.c.counters["submit_refused"] == 1 and "requests" not in r.c.counters
    assert r.c._plan.inflight_since is None
    r.tick()
    assert [reset for _, reset in r.feed.submitted] == [True, True] and r.c.counters["submit_refused"] == 2


def test_a_policy_with_history_is_handed_every_running_tick_it_is_not_asked() -> None:
    r = Rig(history=2)
    r.start()  # tick 1 asks
    r.tick(P, read=at(a=10.5))
    r.tick(P, read=at(a=11.0))
    assert [(s.dtype, float(s[0]), reset) for s, reset in r.feed.observed] == [
        (np.float32, 10.5, False),
        (np.float32, 11.0, False),
    ]
    assert r.c.counters["observations"] == 2 and len(r.feed.submitted) == 1


def test_the_first_observation_of_a_run_starts_the_history_whichever_call_hands_it() -> None:
    r = Rig(history=2)
    r.feed.accept = False
    r.start()
    r.c._plan.inflight_since = 100.0  # as if the refused ask were in flight: the next tick only observes
    r.tick()
    assert r.feed.observed[0][1] is True and r.c._plan.new_history is False


def test_a_failed_read_after_the_write_asks_at_the_next_tick() -> None:
    r = Rig()
    r.mailbox.post(Start("op"))
    r.tick(P, read=None)
    assert r.feed.submitted == [] and r.c._plan.inflight_since is None
    r.tick()
    assert len(r.feed.submitted) == 1


def test_nothing_is_decided_from_a_failed_read_while_running() -> None:
    r = Rig()
    r.start()
    d = r.tick(None)
    assert d.goal is None and d.requested is None
    assert r.c.counters == Counter({"starts": 1, "priming": 1, "requests": 1})


# --- stop, hold -------------------------------------------------------------------------------------


def test_a_stop_holds_where_the_arm_is_and_drops_the_plan() -> None:
    r = Rig()
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    r.tick()  # goal a = 12
    gen = r.c._plan.gen
    r.said()
    d = r.command(Stop("op"), present=at(a=11.0))
    assert r.c.mode is Mode.HOLDING and same(d.goal, at(a=11.0)) and same(r.c.hold_goal, at(a=11.0))
    assert r.c._plan.gen == gen + 1 and r.c.queue.depth(0) == 0
    assert r.said() == [(INFO, "control: motion stopped, holding (asked by op)")]
    assert r.tick().goal is None  # the servos keep the goal they have


def test_a_stop_while_idle_or_estopped_changes_nothing() -> None:
    r = Rig()
    d = r.command(Stop(""))
    assert r.c.mode is Mode.IDLE and d.goal is None and r.c.hold_goal is None
    assert r.said() == [(INFO, "control: motion stopped, holding (asked by ?)")]
    r.start()
    r.mailbox.estop("button")
    r.tick()
    r.command(Stop("op"))
    assert r.c.mode is Mode.ESTOPPED


def test_a_stop_during_teleop_or_a_rest_holds_and_a_take_over_after_it_is_counted_again() -> None:
    r = Rig(stall_action="rest", rest_pose={"a": 0.0})
    r.command(TakeOver("st"))
    assert r.c.mode is Mode.TELEOP
    r.command(Stop("op"), present=at(a=12.0))
    assert r.c.mode is Mode.HOLDING and same(r.c.hold_goal, at(a=12.0))
    r.said()
    r.command(TakeOver(""))
    assert r.c.mode is Mode.TELEOP and r.c.counters["takeovers"] == 2 and r.torque.calls == ["on"]
    assert r.said()[0] == (INFO, "control: source teleop (was holding), move hand-over (asked by ?)")
    r.clock.now += 1.5  # the deadman's stall: rest
    r.tick()
    assert r.c.mode is Mode.RESTING
    r.command(Stop("op"), present=at(a=9.0))
    assert r.c.mode is Mode.HOLDING and same(r.c.hold_goal, at(a=9.0))


def test_a_hold_keeps_inside_the_limits_and_within_a_step_of_the_arm() -> None:
    r = Rig()
    d = r.start(present=at(b=-60.0))  # b past its range (-50..50): the hold brings it back at 4 per tick
    assert same(d.goal, at(b=-56.0))
    assert same(r.tick(at(b=-58.0)).goal, at(b=-54.0))


# --- e-stop -------------------------------------------------------------------------------------------


def test_an_estop_while_running_holds_the_present_pose_in_the_tick_it_is_taken() -> None:
    r = Rig()
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    r.tick()
    gen = r.c._plan.gen
    latch = r.mailbox.estop("button")
    assert r.estop == latch and r.estop_reason == "button"  # pending, already the e-stop in effect
    r.said()
    r.clock.now += 0.25
    d = r.tick(at(a=12.5))
    assert r.c.mode is Mode.ESTOPPED and r.c.latch == latch and r.c.latches_taken == 1
    assert same(d.goal, at(a=12.5)) and same(r.c.hold_goal, at(a=12.5)) and d.requested is None
    assert r.c._plan.gen == gen + 1 and r.c.queue.depth(0) == 0
    assert r.c.counters["estops"] == 1 and list(r.dumps) == ["estop"]
    assert r.said() == [
        (
            ERROR,
            "E-STOP latched (latch 1): button; holding the present pose 250.0 ms after the request "
            f"(mode was running); {RELEASE_HINT}",
        )
    ]
    assert r.mailbox.pending_estop() is None and r.estop == latch
    assert r.tick().goal is None  # latched: nothing more is written


def test_an_estop_in_a_tick_whose_read_failed_holds_the_last_reading() -> None:
    r = Rig()
    r.start(present=at(a=3.0))
    r.mailbox.estop("button")
    d = r.tick(None)
    assert same(d.goal, at(a=3.0))


def test_an_estop_while_idle_writes_nothing_and_its_release_leaves_the_arm_idle() -> None:
    r = Rig()
    r.tick()
    latch = r.mailbox.estop("button")
    d = r.tick()
    assert r.c.mode is Mode.ESTOPPED and d.goal is None and r.c.hold_goal is None and r.torque.calls == []
    assert r.said() == [
        (ERROR, f"E-STOP latched (latch 1): button; arm idle 0.0 ms after the request (mode was idle); {RELEASE_HINT}")
    ]
    r.command(Release("op", latch.id))
    assert r.c.mode is Mode.IDLE and r.c.latch is None and r.estop is None
    assert r.said() == [(WARNING, "control: e-stop latch 1 released by op; arm idle")]


def test_an_estop_with_torque_off_turns_torque_off_and_its_release_leaves_the_arm_idle() -> None:
    r = Rig(estop_action="torque_off")
    r.start()
    latch = r.mailbox.estop("button")
    r.said()
    d = r.tick()
    assert r.c.mode is Mode.ESTOPPED and d.goal is None and r.torque.calls == ["on", "off"]
    assert r.c.hold_goal is None and r.c.counters["torque_offs"] == 1 and r.c.torque_ok is True
    assert r.said() == [
        (
            ERROR,
            f"E-STOP latched (latch 1): button; torque off 0.0 ms after the request (mode was running); {RELEASE_HINT}",
        )
    ]
    r.command(Release("", latch.id))
    assert r.c.mode is Mode.IDLE
    assert r.said() == [(WARNING, "control: e-stop latch 1 released by ?; arm idle")]
    r.command(Start("op"))  # from idle: torque on again
    assert r.c.mode is Mode.RUNNING and r.torque.calls == ["on", "off", "on"]
    r.mailbox.estop("again")
    r.tick()
    assert r.torque.calls == ["on", "off", "on", "off"] and r.c.counters["torque_offs"] == 2


def test_a_torque_off_that_fails_is_critical_and_remembered_and_the_release_still_leaves_idle() -> None:
    r = Rig(estop_action="torque_off")
    r.start()
    r.torque.failing.add("off")
    latch = r.mailbox.estop("button")
    r.said()
    r.tick()
    assert r.c.torque_ok is False and "torque_offs" not in r.c.counters
    assert same(r.c.hold_goal, P)  # the priming hold before the e-stop: the servos may still hold it
    said = r.said()  # the latch is taken, then the runner's torque off fails
    assert said[0][0] == ERROR and said[0][1].startswith("E-STOP latched (latch 1): button; torque off")
    assert said[1] == (CRITICAL, "control: torque off FAILED: torque off: no reply; check the arm by hand")
    r.command(Release("op", latch.id))
    assert r.c.mode is Mode.IDLE  # torque_off e-stops never release into a hold


def test_an_estop_latched_again_only_makes_the_older_release_stale() -> None:
    r = Rig()
    r.start()
    first = r.mailbox.estop("first")
    r.tick()
    hold = r.c.hold_goal
    r.said()
    r.clock.now += 0.5
    second = r.mailbox.estop("second")
    r.clock.now += 0.1
    d = r.tick(at(a=20.0))
    assert d.goal is None and r.c.latch == second and r.c.latches_taken == 2 and same(r.c.hold_goal, hold)
    assert r.c.counters["estops"] == 2 and list(r.dumps) == ["estop"]
    assert r.said() == [(ERROR, f"E-STOP latched again (latch 2): second; 100.0 ms after the request; {RELEASE_HINT}")]
    r.command(Release("op", first.id))
    assert r.c.mode is Mode.ESTOPPED
    assert r.said() == [
        (
            WARNING,
            "control release (asked by op) refused: the release names e-stop latch 1, but the latch now is 2 "
            "(second): another e-stop came since; check the arm, then release latch 2",
        )
    ]
    r.command(Release("op", second.id))
    assert r.c.mode is Mode.HOLDING and r.c.latch is None


def test_a_start_or_teleop_while_latched_is_refused_naming_the_latch() -> None:
    r = Rig()
    r.mailbox.estop("button")
    r.tick()
    r.said()
    r.command(Start("op"))
    r.command(TakeOver("st"))
    assert r.c.mode is Mode.ESTOPPED and r.torque.calls == []
    why = "e-stop is latched (latch 1: button); release it first (control release)"
    assert r.said() == [
        (WARNING, f"control start (asked by op) refused: {why}"),
        (WARNING, f"control teleop (asked by st) refused: {why}"),
    ]


def test_a_release_with_nothing_latched_is_refused() -> None:
    r = Rig()
    r.command(Release("op", 1))
    assert r.said() == [(WARNING, "control release (asked by op) refused: no e-stop is latched")]


# --- faults of the bus and the servos -------------------------------------------------------------


def test_a_servo_fault_latches_an_estop_naming_it_once_while_it_lasts() -> None:
    r = Rig()
    r.start()
    fault = ServoFaultError("a", 1, ("overload",), 0x20)
    r.servo_fault(fault)
    assert r.c.counters["servo_faults"] == 1 and r.c.arm_error == str(fault)
    assert r.estop_reason == f"servo fault: {fault}"
    r.tick()
    assert r.c.mode is Mode.ESTOPPED
    r.servo_fault(fault)  # the same fault on the next read: no new latch to release
    assert r.c.counters["servo_faults"] == 2 and r.mailbox.pending_estop() is None
    r.tick()
    assert r.c.latches_taken == 1


def test_bus_failures_in_a_row_latch_an_estop_and_a_good_read_starts_the_count_over() -> None:
    r = Rig()
    e = BusError("no reply from servo 2")
    r.bus_failed("read", e)
    r.bus_failed("read", e)
    assert r.estop is None and r.c.arm_error == "no reply from servo 2"
    r.c.read_ok(P)
    assert r.c.arm_error == ""
    r.bus_failed("write", e)
    r.bus_failed("read", e)
    assert r.estop is None
    r.bus_failed("read", e)
    assert r.estop_reason == "3 bus failures in a row (last: no reply from servo 2)"
    assert r.c.counters == Counter({"bus_read_failures": 4, "bus_write_failures": 1})
    # the first of each run is logged, not every one
    assert r.said() == [
        (ERROR, "control: arm read failed: no reply from servo 2"),
        (ERROR, "control: arm write failed: no reply from servo 2"),
    ]
    r.bus_failed("read", e)  # a latch is pending: no second one
    r.tick(None)
    assert r.c.latches_taken == 1


def test_one_bus_failure_latches_when_the_limit_is_one() -> None:
    r = Rig(max_bus_failures=1)
    r.bus_failed("read", BusError("gone"))
    assert r.estop_reason == "1 bus failures in a row (last: gone)"


def test_a_start_or_teleop_is_refused_while_the_arm_is_failing() -> None:
    r = Rig()
    r.bus_failed("read", BusError("gone"))
    r.said()
    r.mailbox.post(Start("op"))
    r.command(TakeOver("st"))  # both in the tick after the failure, before a good read
    assert r.c.mode is Mode.IDLE
    assert r.said() == [
        (WARNING, "control start (asked by op) refused: the arm is failing: gone"),
        (WARNING, "control teleop (asked by st) refused: the arm is failing: gone"),
    ]


# --- stalls: blocked, starved, deadman ------------------------------------------------------------------


def test_a_blocked_policy_holds_and_a_new_cause_drops_the_plan_once() -> None:
    r = Rig()
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    r.tick()  # a = 12 written
    gen = r.c._plan.gen
    r.said()
    r.feed.gate = Blocked("stale:front", "stale observation stream: front")
    d = r.tick(at(a=11.0))
    assert same(d.goal, at(a=12.0)) and d.requested is None and r.c._plan.gen == gen + 1
    assert r.said() == [(WARNING, "control: holding the last safe goal: stale observation stream: front")]
    r.tick()
    assert r.c._plan.gen == gen + 1 and r.said() == []  # the same cause: reported and dropped once
    r.feed.gate = Blocked("untrusted", "policy not trusted: x")
    r.tick()
    assert r.c._plan.gen == gen + 2 and r.c.counters["blocked_ticks"] == 3
    assert r.said() == [(WARNING, "control: holding the last safe goal: policy not trusted: x")]
    assert len(r.feed.submitted) == 2  # nothing asked while blocked


def test_a_stall_holds_the_last_goal_written_checked_against_where_the_arm_is() -> None:
    r = Rig()
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    r.tick()  # a = 12 written
    r.feed.gate = Blocked("untrusted", "x")
    assert same(r.tick(at(a=10.0)).goal, at(a=12.0))
    assert same(r.tick(at(a=5.0)).goal, at(a=9.0))  # the arm was pushed: the hold leads it by 4 at most
    assert same(r.c.hold_goal, at(a=12.0))


@pytest.mark.parametrize("action", ["hold", "rest", "torque_off"])
def test_the_stall_action_comes_once_after_the_timeout(action: str) -> None:
    r = Rig(stall_action=action, rest_pose={"a": 0.0})
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    r.tick()  # a = 12 written
    r.feed.gate = Blocked("untrusted", "policy not trusted: x")
    r.tick()  # the stall starts at 100.0
    r.answer(rows(1.0, 1.0, 1.0, 1.0))  # the chunk asked for at tick 2, for the plan the block dropped
    r.clock.now += 1.0
    r.tick()
    assert "stall_actions" not in r.c.counters and r.c.mode is Mode.RUNNING
    r.said()
    r.clock.now += 0.1
    d = r.tick()
    assert r.c.counters["stall_actions"] == 1 and list(r.dumps) == [f"stall {action}"]
    assert r.said()[0] == (ERROR, f"control: stalled 1.10 s (policy not trusted: x): {action}")
    if action == "hold":
        assert r.c.mode is Mode.RUNNING and same(d.goal, at(a=12.0))
    elif action == "rest":  # toward a = 0 from where the arm is (a = 10), 2 per tick, from this tick
        assert r.c.mode is Mode.RESTING and same(d.goal, at(a=8.0))
    else:
        assert r.c.mode is Mode.IDLE and d.goal is None and r.torque.calls == ["on", "off"]
        assert r.c.hold_goal is None and r.c.counters["torque_offs"] == 1
        assert r.c.queue.depth(0) == 0
    r.clock.now += 5.0
    r.tick()
    assert r.c.counters["stall_actions"] == 1  # once per stall


def test_motion_after_a_stall_is_reported_with_how_long_it_held_whatever_the_causes_meanwhile() -> None:
    r = Rig()
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    r.tick()  # tick 2: a = 12, the next chunk asked for
    r.feed.gate = Blocked("untrusted", "x")
    r.tick()  # the stall starts, the plan is dropped
    r.answer(rows(2.0, 2.0, 2.0, 2.0))  # stale
    r.feed.gate = None
    r.clock.now += 0.3
    r.tick()  # nothing queued: starved now, still the same stall; asks again
    r.said()
    r.answer(rows(2.0, 2.0, 2.0, 2.0))
    r.clock.now += 0.2
    d = r.tick()
    assert same(d.goal, at(a=12.0)) and d.requested is not None
    assert r.said() == [(INFO, "control: moving again after 0.50 s (starved: no action due)")]


def test_the_tick_that_starts_a_rest_asks_for_no_chunk() -> None:
    r = Rig(stall_action="rest", rest_pose={"a": 0.0})
    r.feed.accept = False  # every running tick asks again
    r.start()
    asked = len(r.feed.submitted)
    r.clock.now += 1.5
    r.tick()
    assert r.c.mode is Mode.RESTING and len(r.feed.submitted) == asked


# --- teleop ----------------------------------------------------------------------------------------------


def test_a_take_over_from_idle_turns_torque_on_and_holds_until_a_target_comes() -> None:
    r = Rig()
    d = r.command(TakeOver("st"))
    assert r.torque.calls == ["on"] and r.c.mode is Mode.TELEOP and r.c.source is Source.TELEOP
    assert r.c.intervention is False and r.c.handover.phase == "handover" and r.c.counters["takeovers"] == 1
    assert same(d.goal, P) and r.c.counters["deadman_ticks"] == 1
    assert r.said() == [
        (INFO, "control: source teleop (was idle), move hand-over (asked by st)"),
        (WARNING, "control: holding the last safe goal: deadman: no teleop target for more than 200 ms"),
    ]
    r.teleop.put(1, at(a=20.0), r.clock.now)
    d = r.tick()  # the hand-over moves 3 per tick (30 deg/s) from the last goal
    assert same(d.requested, at(a=13.0)) and same(d.goal, at(a=13.0)) and r.c.last_teleop_seq == 1
    assert r.said() == [(INFO, "control: moving again after 0.00 s (deadman: no teleop target for more than 200 ms)")]
    assert same(r.tick(at(a=13.0)).goal, at(a=16.0))
    r.clock.now += 0.25  # the station went quiet: its last target is too old
    d = r.tick(at(a=16.0))
    assert same(d.goal, at(a=16.0)) and d.requested is None and r.c.counters["deadman_ticks"] == 2


def test_a_take_over_whose_torque_fails_leaves_the_arm_idle() -> None:
    r = Rig()
    r.torque.failing.add("on")
    r.command(TakeOver(""))
    assert r.c.mode is Mode.IDLE and "takeovers" not in r.c.counters
    assert r.said() == [(ERROR, "control teleop: torque on failed: torque on: no reply")]


def test_a_take_over_from_a_running_policy_starts_from_the_last_goal_and_is_an_intervention() -> None:
    r = Rig()
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    r.tick()  # a = 12 written, the next chunk asked for
    r.teleop.put(1, at(a=20.0), r.clock.now)
    r.said()
    d = r.command(TakeOver("st"), present=at(a=10.0))  # the arm lags its goal
    assert r.c.mode is Mode.TELEOP and r.c.intervention is True and r.torque.calls == ["on"]
    # from the last goal (12) by 3, then the envelope: at most 4 ahead of the arm
    assert same(d.requested, at(a=15.0)) and same(d.goal, at(a=14.0))
    assert r.said() == [
        (INFO, "control: source teleop (was running), move hand-over (asked by st)"),
        (
            WARNING,
            "safety: a step: requested 15.00, commanded 14.00 (present 10.00, limits -90.00..90.00, max step 4.00, "
            "max step change 10.00)",
        ),
    ]
    r.answer(rows(1.0, 1.0, 1.0, 1.0))  # the policy's chunk in flight ends with its plan
    r.tick()
    assert r.c.counters["chunks_discarded"] == 1 and r.c.counters["chunks"] == 1


def test_a_take_over_from_a_hold_starts_from_where_the_arm_is() -> None:
    r = Rig()
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    r.tick()  # a = 12
    r.command(Stop("op"), present=at(a=12.0))
    r.tick(at(a=11.0))  # the arm sags below the hold
    r.teleop.put(1, at(a=20.0), r.clock.now)
    d = r.command(TakeOver("st"), present=at(a=11.0))
    assert r.c.intervention is False and same(d.requested, at(a=14.0)) and same(d.goal, at(a=14.0))


def test_a_second_take_over_changes_nothing() -> None:
    r = Rig()
    r.command(TakeOver("st"))
    r.teleop.put(1, at(a=11.0), r.clock.now)
    r.tick()
    assert r.c.handover.phase == "tracking"
    r.said()
    r.command(TakeOver("st"))
    assert r.c.handover.phase == "tracking" and r.c.counters["takeovers"] == 1 and r.torque.calls == ["on"]
    assert r.said() == []


def test_a_take_over_in_a_tick_whose_read_failed_is_refused() -> None:
    r = Rig()
    r.command(TakeOver("st"), present=None)
    assert r.c.mode is Mode.IDLE and r.torque.calls == []
    assert r.said() == [(WARNING, "control teleop (asked by st) refused: the arm did not answer")]
    r.command(TakeOver(""), present=None)
    assert r.said() == [(WARNING, "control teleop (asked by ?) refused: the arm did not answer")]


def test_a_take_over_is_not_refused_by_a_blocked_policy() -> None:
    r = Rig()
    r.feed.gate = Blocked("stale:front", "stale")
    r.command(TakeOver("st"))
    assert r.c.mode is Mode.TELEOP


def test_teleop_holds_when_the_daemon_is_lost_whatever_target_it_left() -> None:
    r = Rig()
    r.command(TakeOver("st"))
    r.teleop.put(1, at(a=13.0), r.clock.now)
    r.said()
    r.feed.gone = "the daemon's process is gone"
    d = r.tick()
    assert same(d.goal, P) and d.requested is None and r.c.counters["blocked_ticks"] == 1
    assert r.c.last_teleop_seq == -1 and r.c.counters["deadman_ticks"] == 1  # only the first tick's
    assert r.said() == [(WARNING, "control: holding the last safe goal: the daemon's process is gone")]
    r.tick()
    assert r.c.counters["blocked_ticks"] == 2


def test_the_deadman_ends_in_the_stall_action() -> None:
    r = Rig(stall_action="torque_off", teleop=TeleopConfig(deadman_ms=150.0))
    r.command(TakeOver("st"))
    r.clock.now += 1.5
    r.said()
    d = r.tick()
    assert r.c.mode is Mode.IDLE and d.goal is None and r.torque.calls == ["on", "off"]
    assert r.said() == [(ERROR, "control: stalled 1.50 s (deadman: no teleop target for more than 150 ms): torque_off")]


# --- rest ---------------------------------------------------------------------------------------------


def test_a_rest_goes_to_the_rest_pose_at_its_speed_then_holds_it() -> None:
    r = Rig(stall_action="rest", rest_pose={"a": 0.0, "gripper": 45.0})
    r.start()  # priming: the stall starts now
    r.clock.now += 1.5
    present, goals = P, []
    for _ in range(6):
        d = r.tick(present)
        goals.append(np.asarray(d.goal).copy())
        present = goals[-1]  # the arm follows
        if r.c.mode is not Mode.RESTING:
            break
    assert [list(g) for g in goals] == [
        [8.0, -5.0, 42.0],
        [6.0, -5.0, 44.0],
        [4.0, -5.0, 45.0],
        [2.0, -5.0, 45.0],
        [0.0, -5.0, 45.0],
    ]
    assert r.c.mode is Mode.HOLDING and same(r.c.hold_goal, at(a=0.0, g=45.0))
    assert r.said()[-1] == (INFO, "control: rest pose reached; holding")
    assert r.tick(present).goal is None


def test_a_rest_is_bounded_by_the_envelope_its_limits_and_its_step() -> None:
    r = Rig(stall_action="rest", rest_pose={"b": 80.0}, soft_limits={"b": (-20.0, 20.0)}, rest_speed_deg_s=100.0)
    r.start()
    r.clock.now += 1.5
    present, bs = P, []
    for _ in range(10):
        d = r.tick(present)
        present = np.asarray(d.goal).copy()
        bs.append(float(present[1]))
        if r.c.mode is not Mode.RESTING:
            break
    assert bs == [-1.0, 3.0, 7.0, 11.0, 15.0, 19.0, 20.0]  # 4 per tick, not 10, and no further than 20
    assert r.c.mode is Mode.HOLDING and same(r.c.hold_goal, at(b=20.0))


def test_a_rest_steps_from_where_the_arm_is_so_a_blocked_joint_is_not_run_away_from() -> None:
    r = Rig(stall_action="rest", rest_pose={"a": 0.0})
    r.start()
    r.clock.now += 1.5
    for _ in range(4):
        assert same(r.tick(P).goal, at(a=8.0))  # the arm does not move: the goal stays 2 ahead of it
    assert r.c.mode is Mode.RESTING


def test_a_rest_starts_from_the_last_goal_written() -> None:
    r = Rig(stall_action="rest")  # no rest pose: rest where the last goal was
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    r.tick()  # a = 12
    r.feed.gate = Blocked("untrusted", "x")
    r.tick(at(a=11.0))
    r.clock.now += 1.5
    d = r.tick(at(a=11.0))
    assert same(d.goal, at(a=12.0)) and r.c.mode is Mode.HOLDING and same(r.c.hold_goal, at(a=12.0))


# --- shutdown -------------------------------------------------------------------------------------------


def test_a_shutdown_is_taken_before_the_commands_after_it() -> None:
    r = Rig()
    r.start()
    r.mailbox.post(Shutdown())
    r.mailbox.post(Stop("op"))
    d = r.step(2, P)
    assert d.shutdown is True and d.goal is None and d.requested is None and r.c.mode is Mode.RUNNING
    assert r.mailbox.take_command() == Stop("op")


def test_a_shutdown_in_the_tick_of_an_estop_carries_its_hold() -> None:
    r = Rig()
    r.start()
    r.mailbox.estop("button")
    r.mailbox.post(Shutdown())
    d = r.step(2, at(a=11.0))
    assert d.shutdown is True and same(d.goal, at(a=11.0)) and r.c.mode is Mode.ESTOPPED


def test_a_shutdown_while_running_holds_where_the_arm_was_last_read_then_turns_torque_off() -> None:
    r = Rig()
    r.start()
    r.tick(P, read=at(a=12.0))  # the newest reading, after this tick's write
    held, then = r.c.begin_shutdown()
    assert same(held, at(a=12.0)) and then == "torque_off" and r.c.mode is Mode.HOLDING
    r.end_with_torque_off()
    assert r.c.mode is Mode.IDLE and r.torque.calls == ["on", "off"] and r.c.counters["torque_offs"] == 1


def test_a_shutdown_while_holding_keeps_the_hold_not_where_the_arm_sagged() -> None:
    r = Rig(shutdown_action="hold")
    r.start()
    r.command(Stop("op"))
    r.tick(at(a=9.0))
    held, then = r.c.begin_shutdown()
    assert same(held, P) and then == "" and r.c.mode is Mode.HOLDING


def test_a_shutdown_with_rest_holds_then_rests() -> None:
    r = Rig(shutdown_action="rest", rest_pose={"a": 0.0})
    r.start()
    held, then = r.c.begin_shutdown()
    assert same(held, P) and then == "rest" and r.c.mode is Mode.RESTING
    assert r.c.rest_step(None) is None and r.c.mode is Mode.RESTING
    assert same(r.c.rest_step(at(a=9.0)), at(a=7.0))


def test_a_shutdown_with_rest_and_no_room_to_move_ends_holding() -> None:
    r = Rig(shutdown_action="rest")
    r.start()
    held, then = r.c.begin_shutdown()  # the rest pose is where the arm is
    assert same(held, P) and then == "rest"
    assert same(r.c.rest_step(P), P) and r.c.mode is Mode.HOLDING


@pytest.mark.parametrize("action", ["hold", "rest", "torque_off"])
def test_a_shutdown_while_idle_or_estopped_writes_nothing_and_leaves_torque_alone(action: str) -> None:
    r = Rig(shutdown_action=action)
    assert r.c.begin_shutdown() == (None, "") and r.c.mode is Mode.IDLE
    r.start()
    r.mailbox.estop("button")
    r.tick()
    assert r.c.begin_shutdown() == (None, "") and r.c.mode is Mode.ESTOPPED and r.torque.calls == ["on"]


def test_the_runners_hold_after_a_bug_holds_the_newest_reading() -> None:
    r = Rig()
    r.start()
    gen = r.c._plan.gen
    r.tick(P, read=at(a=11.0))
    held = r.c.hold_present()
    assert same(held, at(a=11.0)) and r.c.mode is Mode.HOLDING and r.c._plan.gen == gen + 1


def test_a_chunk_result_names_the_plan_and_the_tick_of_its_observation() -> None:
    r = Rig()
    r.start()
    r.answer(rows(1.0, 2.0, 3.0, 4.0))
    result = r.results.take()
    assert isinstance(result, ChunkResult)
    assert (result.gen, result.obs_tick, result.error) == (r.c._plan.gen, 1, None)


def test_a_wait_hand_over_holds_until_the_leader_is_brought_to_the_follower() -> None:
    r = Rig(teleop=TeleopConfig(handover="wait", handover_tolerance_deg=5.0))
    r.command(TakeOver("st"))
    r.teleop.put(1, at(a=20.0), r.clock.now)
    d = r.tick()  # 10 from the follower: the follower holds
    assert same(d.requested, P) and same(d.goal, P) and r.c.handover.phase == "handover"
    r.teleop.put(2, at(a=14.0), r.clock.now)
    d = r.tick()  # within 5 of where the follower is: tracking from here
    assert same(d.requested, at(a=14.0)) and same(d.goal, at(a=14.0)) and r.c.handover.phase == "tracking"


def test_every_discarded_chunk_is_counted() -> None:
    r = Rig()
    for n in (1, 2):  # answers for a plan a stop ended
        r.start()
        r.command(Stop("op"))
        r.answer(rows(1.0, 2.0, 3.0, 4.0))
        r.tick()
        assert r.c.counters["chunks_discarded"] == n
    r.start()
    for n in (3, 4):  # answers that arrive in a tick whose read failed
        r.answer(rows(1.0, 2.0, 3.0, 4.0))
        r.tick(None)
        r.tick()  # asks again
        assert r.c.counters["chunks_discarded"] == n


def test_each_stall_takes_its_action_once() -> None:
    r = Rig(stall_action="hold")
    r.start()
    r.clock.now += 1.5
    r.tick()  # priming too long
    r.answer(rows(1.0, 1.0, 1.0, 1.0))  # for ticks 2..5
    for _ in range(3):
        assert r.tick().requested is not None  # moving: the stall is over
    assert r.tick().requested is None and r.c.counters["starved"] == 1
    r.clock.now += 1.5
    r.tick()
    assert r.c.counters["stall_actions"] == 2 and list(r.dumps) == ["stall hold", "stall hold"]


def test_the_policy_is_asked_whether_it_is_blocked_at_the_ticks_time() -> None:
    r = Rig()
    r.start()
    r.clock.now = 100.5
    r.step(2, P, now=100.4)  # the runner's time for the tick, not the clock's now
    assert r.feed.blocked_at[-1] == 100.4


def test_the_runners_hold_of_an_idle_arm_has_nothing_to_write_and_it_stays_idle() -> None:
    r = Rig()  # before any reading, torque never on
    assert r.c.hold_present() is None and r.c.mode is Mode.IDLE and r.c.hold_goal is None
    r.tick()  # a reading now, still idle
    assert r.c.hold_present() is None and r.c.mode is Mode.IDLE and r.c.hold_goal is None


def test_a_refusal_without_a_name_says_so() -> None:
    r = Rig()
    r.mailbox.estop("button")
    r.tick()
    r.said()
    r.command(Start(""))
    assert r.said() == [
        (
            WARNING,
            "control start (asked by ?) refused: e-stop is latched (latch 1: button); release it first "
            "(control release)",
        )
    ]


def test_a_take_over_from_idle_with_the_stations_targets_already_coming_steps_from_where_the_arm_is() -> None:
    r = Rig()
    r.teleop.put(1, at(a=20.0), r.clock.now)  # a station streams before it asks to take over
    d = r.command(TakeOver("st"))
    assert same(d.requested, at(a=13.0)) and same(d.goal, at(a=13.0)) and r.c.counters["deadman_ticks"] == 0
