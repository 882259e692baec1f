"""The runner, tick by tick: the order of decide, write, read and ask; when each write left; what each
tick publishes and records; the shutdown sequence; a bug in the tick; what status reports.

The small arm of ``small_arm.py`` on its stand-in bus (every read and write logged on the loop's clock),
a clock the test moves, and the ticker's sleep replaced by a jump of that clock to the deadline: the
loop's own ``_run`` runs in the test's thread, tick after tick, with no wall-clock wait. The loop runs
at 8 Hz (a period of 0.125 s, exact in binary), the clock starts at 100.0.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from drivers.errors import BusError, ServoFaultError
from runtime.control import loop as loop_module
from runtime.control.config import ControlConfig, SafetyConfig
from runtime.control.feed import Blocked
from runtime.control.latch import ControlRefused, Latch, StaleLatch
from runtime.control.loop import SHUTDOWN_REST_LIMIT_S, ControlLoop, joint_name
from runtime.control.mailbox import Release, Shutdown, Start, Stop, TakeOver
from runtime.control.mode import Mode, Source
from runtime.control.recorder import MODE_CODE
from runtime.errors import ConfigError
from runtime.teleop.config import TeleopConfig

from .small_arm import CAL, JOINTS, Bus, Clock, Feed, P, at, interface, rows, same

PERIOD = 0.125
SAFETY: dict[str, Any] = {
    "max_step_deg": 4.0,
    "max_step_change_deg": 10.0,
    "gripper_max_step_pct": 4.0,
    "gripper_max_step_change_pct": 10.0,
    "max_first_step_deg": 10.0,
    "stall_timeout_s": 1.0,
    "rest_speed_deg_s": 16.0,  # 2 per tick at 8 Hz
}


class Script:
    """The loop's hooks: ``actions[k](loop)`` before tick k; the snapshot after each tick; the loop
    stops after tick ``ticks``."""

    def __init__(self, ticks: int, actions: dict[int, Callable[[ControlLoop], Any]] | None = None) -> None:
        self.ticks = ticks
        self.actions = actions or {}
        self.before: list[int] = []
        self.snaps: list[Any] = []

    def before_tick(self, loop: ControlLoop) -> None:
        k = loop._ticker.tick
        self.before.append(k)
        if k in self.actions:
            self.actions[k](loop)

    def after_tick(self, loop: ControlLoop) -> None:
        self.snaps.append(loop.snapshot())
        if loop._ticker.tick >= self.ticks:
            loop._stop.set()


class Episodes:
    """The episode tap as the runner sees it."""

    def __init__(self) -> None:
        self.ticks: list[tuple[Any, ...]] = []
        self.ended = 0

    def tick(self, now: float, present: Any, goal: Any, requested: Any, source: str, intervention: bool) -> None:
        self.ticks.append((now, present, None if goal is None else np.array(goal), requested, source, intervention))

    def end(self) -> None:
        self.ended += 1

    def status(self) -> dict[str, Any]:
        return {"recording": "yes"}


class Rig:
    def __init__(
        self,
        ticks: int = 0,
        actions: dict[int, Callable[[ControlLoop], Any]] | None = None,
        *,
        names: tuple[str, ...] = JOINTS,
        rate_hz: float = 8.0,
        teleop: TeleopConfig | None = None,
        cpu: int | None = None,
        **safety: Any,
    ) -> None:
        self.clock = Clock()
        self.bus = Bus(self.clock)
        self.feed = Feed()
        self.script = Script(ticks, actions)
        self.config = ControlConfig(
            rate_hz=rate_hz, rt_priority=0, streams=(), recorder_s=20.0, safety=SafetyConfig(**{**SAFETY, **safety})
        )
        self.loop = ControlLoop(
            self.bus,
            CAL,
            interface(names=names),
            self.config,
            self.feed,
            clock=self.clock,
            teleop=teleop,
            hooks=self.script,
            cpu=cpu,
        )
        self.loop._ticker._sleep = self.clock.sleep  # wake at the deadline without waiting for it

    def run(self) -> ControlLoop:
        self.loop._run()
        return self.loop

    def said(self) -> list[tuple[int, str]]:
        return [(e.level, e.text()) for e in self.loop.events.drain()]

    def rec(self) -> dict[str, np.ndarray]:
        return self.loop.recorder.snapshot()


def start(loop: ControlLoop) -> None:
    loop.request("start", "op")


def goals(rig: Rig) -> list[list[float]]:
    return [[w[n] for n in JOINTS] for w in rig.bus.writes()]


# --- made from the bus, the manifest and the config --------------------------------------------------


def test_action_names_are_the_arms_joints_or_lerobots_joint_dot_pos() -> None:
    assert joint_name("a.pos", JOINTS) == "a"
    assert joint_name("a", JOINTS) == "a"
    assert joint_name("x.pos", JOINTS) == "x.pos"  # not a joint of the arm: left for the check to name
    assert joint_name("a.pos", ("a.pos", "a")) == "a.pos"  # the arm's own name wins
    assert joint_name("a.po", JOINTS) == "a.po"
    r = Rig(1, names=("a.pos", "b.pos", "gripper.pos"))
    assert r.loop.names == JOINTS


def test_a_policy_for_another_arm_is_refused_naming_the_joints_it_lacks() -> None:
    with pytest.raises(ConfigError) as e:
        Rig(names=("a", "elbow", "wrist"))
    assert str(e.value) == (
        "the policy's action names elbow, wrist are not joints of the arm (a, b, gripper); "
        "the bundle was made for another arm"
    )


def test_the_rate_is_the_configs_or_the_bundles() -> None:
    r = Rig(rate_hz=0.0)  # the manifest says 10 Hz
    assert (r.loop.rate_hz, r.loop.period, r.loop.controller.period) == (10.0, 0.1, 0.1)
    r = Rig()
    assert (r.loop.rate_hz, r.loop.period, r.loop.controller.period) == (8.0, PERIOD, PERIOD)
    assert r.loop.recorder.capacity == 160 and r.loop._writes.capacity == 80  # 20 s of ticks, 10 s of writes
    assert r.loop._ticker.period == PERIOD


def test_a_new_loop_has_not_started() -> None:
    r = Rig()
    loop = r.loop
    snap = loop.snapshot()
    assert (snap.scheduling, snap.tick, snap.mode) == ("not started", 0, Mode.IDLE)
    assert loop.alive is False and loop.death is None and loop.pid == os.getpid()
    assert loop.stalled_for(1e9) == 0.0
    assert loop.shutdown() is True and loop.shutdown_ok is True
    assert loop.teleop.received == 0 and not loop.dump_requests
    assert loop.teleop.config == TeleopConfig() and loop.episodes is None
    assert loop.controller.names == JOINTS and loop.controller.config is r.config
    assert loop.recorder.joints == JOINTS and loop.recorder.rate_hz == 8.0


def test_a_teleop_config_given_is_the_controllers() -> None:
    r = Rig(teleop=TeleopConfig(deadman_ms=150.0))
    assert r.loop.teleop.config.deadman_ms == 150.0


# --- requests from other threads ------------------------------------------------------------------------


def test_requests_by_word_or_command_go_to_the_mailbox() -> None:
    loop = Rig().loop
    box = loop.mailbox
    loop.request("start", "op")
    loop.request("release", "op", 3)
    loop.request(Stop("st"))
    assert [box.take_command() for _ in range(4)] == [Start("op"), Release("op", 3), Stop("st"), None]
    with pytest.raises(ControlRefused) as e:
        loop.request("bogus", "op")
    assert str(e.value) == "command: expected one of start, teleop, stop, release, got 'bogus'"
    assert e.value.__cause__ is None and e.value.__suppress_context__ is True


def test_estops_posted_or_requested_are_the_loops_estop() -> None:
    loop = Rig().loop
    assert loop.estop is None and loop.estop_reason is None and loop.source is Source.HOLD
    latch = loop.request_estop("button")
    assert latch.id == 1 and loop.estop == latch and loop.estop_reason == "button"
    posted = loop.post_estop(Latch(7, "from the daemon", 1.0))
    assert posted == Latch(7, "from the daemon", 1.0) and loop.estop == posted


def test_check_is_the_controllers() -> None:
    r = Rig()
    r.feed.gate = Blocked("untrusted", "policy not trusted: x")
    with pytest.raises(ControlRefused, match="policy not trusted: x"):
        r.loop.check("start")
    r.loop.check("stop")
    latch = r.loop.request_estop("button")
    with pytest.raises(ControlRefused, match="another e-stop"):
        r.loop.check("release", latch.id - 1)
    r.loop.check("release", latch.id)


# --- the tick ---------------------------------------------------------------------------------------------


def test_each_tick_writes_what_it_decided_from_the_reading_after_the_last_write_then_reads() -> None:
    def push(loop: ControlLoop) -> None:
        r.bus.positions["a"] = 13.0  # the arm is pushed during tick 3's wait
        loop.request_estop("button")

    r = Rig(3, {1: start, 3: push})
    r.run()
    log = [e[0] if e[0] != "torque" else f"torque {e[1]}" for e in r.bus.log]
    # the first reading before the first tick, then each tick: decide, write, read; the start writes its
    # hold (where the arm is) before torque goes on
    assert log == ["read", "write", "torque on", "read", "write", "read", "write", "read"]
    times = [e[1] for e in r.bus.log if e[0] in ("read", "write")]
    assert times == [100.0, 100.125, 100.125, 100.25, 100.25, 100.375, 100.375]
    # tick 3 holds where the arm was read after tick 2's write, not where the push left it
    assert goals(r)[-1] == [10.0, -5.0, 40.0]
    assert list(r.loop.snapshot().present) == [13.0, -5.0, 40.0]


def test_torque_comes_on_over_a_hold_the_envelope_made_of_the_present_pose() -> None:
    r = Rig(1, {1: start}, soft_limits={"a": (-90.0, 8.0)})  # the arm is at a = 10, past its soft limit
    made: list[Any] = []
    envelope = r.loop.controller.envelope
    hold_goal = envelope.hold_goal

    def recorded(goal: Any, present: Any) -> Any:
        made.append(hold_goal(goal, present))
        return made[-1]

    envelope.hold_goal = recorded  # type: ignore[method-assign]
    r.run()
    entries = [e for e in r.bus.log if e[0] != "read"]
    assert entries[0][0] == "write" and entries[1] == ("torque", "on")  # the hold, then torque
    written = [entries[0][2][n] for n in JOINTS]
    # the envelope's hold of the present pose: inside the limits, within max_step of where the arm is
    assert made and written == list(made[0]) and written == [8.0, P[1], P[2]]
    assert r.loop.controller.mode is Mode.RUNNING


@pytest.mark.parametrize(("command", "word"), [("start", "start"), ("teleop", "teleop")])
def test_a_start_or_take_over_whose_torque_does_not_come_on_is_refused(command: str, word: str) -> None:
    r = Rig(2, {1: lambda loop: loop.request(command, "op")})
    r.bus.torque_on_errors.append(BusError("no reply from servo 2"))
    loop = r.run()
    assert loop.controller.mode is Mode.IDLE and "starts" not in loop.controller.counters
    assert (logging.ERROR, f"control {word}: torque on failed: no reply from servo 2") in r.said()
    assert r.feed.submitted == []  # nothing asked for a start that was refused
    assert [s.mode for s in r.script.snaps] == [Mode.IDLE, Mode.IDLE]


def test_a_hold_that_could_not_be_written_keeps_torque_off_and_refuses_the_start() -> None:
    r = Rig(1, {1: start})
    r.bus.write_errors.append(BusError("no reply"))
    loop = r.run()
    assert ("torque", "on") not in r.bus.log and loop.controller.mode is Mode.IDLE
    assert (logging.ERROR, "control start: torque on failed: the hold before it could not be written") in r.said()


def test_an_estop_that_could_not_turn_torque_off_is_critical_and_torque_ok_turns_false() -> None:
    r = Rig(3, {1: start, 2: lambda loop: loop.request_estop("button")}, estop_action="torque_off")
    r.bus.torque_errors.append(BusError("no reply"))
    loop = r.run()
    assert loop.controller.torque_ok is False and loop.controller.mode is Mode.ESTOPPED
    assert (logging.CRITICAL, "control: torque off FAILED: no reply; check the arm by hand") in r.said()
    assert loop.dump_requests == deque(["estop"])


def test_the_first_tick_decides_from_the_reading_before_it() -> None:
    r = Rig(1, {1: start})
    r.bus.positions["a"] = 12.0
    r.run()
    assert goals(r) == [[12.0, -5.0, 40.0]]
    assert r.script.before == [1]


def test_every_write_is_stamped_when_it_completed_and_the_period_between_writes_measured() -> None:
    r = Rig(4, {1: start})

    def slow(loop: ControlLoop) -> None:
        r.bus.write_takes = 0.007

    r.script.actions[3] = slow
    r.bus.write_takes = 0.001
    loop = r.run()
    stamps, errors = loop.write_times()
    assert stamps == pytest.approx([100.126, 100.251, 100.382, 100.507])
    assert np.isnan(errors[0]) and errors[1:] == pytest.approx([0.0, 6.0, 0.0], abs=1e-6)
    rec = r.rec()
    assert rec["write_ms"] == pytest.approx([1.0, 1.0, 7.0, 7.0], abs=1e-6)
    assert np.isnan(rec["write_err_ms"][0]) and rec["write_err_ms"][1:] == pytest.approx([0.0, 6.0, 0.0], abs=1e-6)
    snap = loop.snapshot()
    assert snap.last_write_at == pytest.approx(100.507) and snap.last_write_error_ms == pytest.approx(0.0, abs=1e-6)
    assert (snap.write_periods, snap.writes_off) == (3, 1)  # the 6 ms one is more than 5 ms off
    assert loop.controller.counters["writes"] == 4


def test_a_write_that_fails_is_not_stamped_counted_or_taken_as_the_last_goal() -> None:
    r = Rig(3, {1: start})

    def fail(loop: ControlLoop) -> None:
        r.bus.write_errors.append(BusError("no reply"))

    r.script.actions[2] = fail
    loop = r.run()
    c = loop.controller
    assert c.counters["writes"] == 2 and c.counters["bus_write_failures"] == 1
    stamps, errors = loop.write_times()
    assert len(stamps) == 2 and np.isnan(errors).all()  # ticks 1 and 3: not consecutive
    assert np.isnan(r.rec()["write_ms"][1]) and np.isnan(r.rec()["write_err_ms"][1])
    assert r.rec()["write_ms"][2] == 0.0
    assert loop.snapshot().write_periods == 0


def test_a_failed_write_leaves_the_last_goal_as_it_was() -> None:
    r = Rig(2, {1: start})
    r.run()
    c = r.loop.controller
    before = c._last_goal
    r.bus.write_errors.append(BusError("no reply"))
    r.loop._write(np.array([1.0, 2.0, 3.0]))  # type: ignore[arg-type]
    assert c._last_goal is before and c.counters["bus_write_failures"] == 1 and c.arm_error == "no reply"


def test_what_each_tick_records() -> None:
    r = Rig(3, {1: start})
    r.script.actions[2] = lambda loop: r.feed.callbacks[-1](rows(1.0, 2.0, 3.0, 4.0), None)
    r.run()
    rec = r.rec()
    assert list(rec["t"]) == [100.125, 100.25, 100.375] and list(rec["tick"]) == [1, 2, 3]
    assert list(rec["mode"]) == [MODE_CODE[Mode.RUNNING]] * 3
    assert rec["present"].tolist() == [list(P)] * 3
    # tick 1 holds while priming (nothing requested, no clamp bits); ticks 2 and 3 follow the chunk
    assert rec["goal"].tolist() == [list(P), list(at(a=12.0)), list(at(a=13.0))]
    assert np.isnan(rec["requested"][0]).all() and rec["requested"][1:].tolist() == [list(at(a=12.0)), list(at(a=13.0))]
    assert list(rec["queue_depth"]) == [0, 2, 1]
    assert np.isnan(rec["latency_ticks"][0]) and list(rec["latency_ticks"][1:]) == [1.0, 1.0]
    assert list(rec["late_ms"]) == [0.0, 0.0, 0.0]
    assert r.loop.controller.counters["ticks"] == 3


def test_the_clamp_bits_are_recorded_only_for_a_request() -> None:
    r = Rig(3, {1: start, 3: lambda loop: loop.request("stop", "op")})
    r.script.actions[2] = lambda loop: r.feed.callbacks[-1](rows(1.0, 9.0, 9.0, 9.0), None)
    r.run()
    rec = r.rec()
    # tick 2: a asked 9 ahead, the step bound; tick 3 holds: no request, no bits (not tick 2's again)
    assert rec["clamps"].tolist() == [[0, 0, 0], [2, 0, 0], [0, 0, 0]]


def test_a_late_wake_is_recorded_and_a_whole_missed_period_counted_as_an_overrun() -> None:
    r = Rig(6, {1: start})
    original_after = r.script.after_tick

    def after(loop: ControlLoop) -> None:
        k = loop._ticker.tick
        original_after(loop)
        if k == 2:
            r.clock.now += 0.175  # a period and 50 ms: tick 3 wakes 50 ms late
        elif k == 3:
            r.clock.now += 0.375  # ticks 4 and 5 missed: tick 6 wakes 50 ms late

    r.script.after_tick = after  # type: ignore[method-assign]
    loop = r.run()
    rec = r.rec()
    assert list(rec["tick"]) == [1, 2, 3, 6]
    assert rec["late_ms"] == pytest.approx([0.0, 0.0, 50.0, 50.0])
    assert loop.snapshot().overruns == 2 and loop.status()["counters"]["overruns"] == 2


def test_a_servo_fault_keeps_the_last_good_reading_for_the_next_tick() -> None:
    fault = ServoFaultError("a", 1, ("overload",), 0x20)

    def faulty(loop: ControlLoop) -> None:
        r.bus.positions["a"] = 30.0  # never seen: the read that would see it fails
        r.bus.read_errors.append(fault)

    r = Rig(3, {1: start, 2: faulty})
    r.run()
    c = r.loop.controller
    assert c.counters["servo_faults"] == 1 and c.mode is Mode.ESTOPPED
    assert c.latch is not None and c.latch.reason == f"servo fault: {fault}"
    assert r.rec()["present"][2].tolist() == list(P)  # tick 3 decided from the last good reading
    assert goals(r)[-1] == list(P)  # and held there
    assert r.loop.snapshot().arm_error == "" and c.arm_error == ""  # the read after tick 3 answered


def test_a_failed_read_gives_the_next_tick_nothing_to_decide_from_and_a_good_one_clears_the_error() -> None:
    def fail(loop: ControlLoop) -> None:
        r.bus.read_errors.append(BusError("no reply"))

    r = Rig(4, {1: start, 2: fail})
    loop = r.run()
    c = loop.controller
    rec = r.rec()
    assert np.isnan(rec["present"][2]).all() and np.isnan(rec["goal"][2]).all()  # tick 3: nothing written
    assert c.counters["bus_read_failures"] == 1 and len(r.bus.writes()) == 3
    assert r.script.snaps[1].arm_error == "no reply" and r.script.snaps[2].arm_error == ""
    assert r.script.snaps[1].present.tolist() == list(P)  # the snapshot keeps the last good reading
    assert loop.snapshot().state["gripper"].temperature_c == 32


def test_each_tick_publishes_its_snapshot() -> None:
    r = Rig(2, {1: start})
    r.script.actions[2] = lambda loop: r.feed.callbacks[-1](rows(1.0, 2.0, 3.0, 4.0), None)
    loop = r.run()
    first, second = r.script.snaps
    assert (first.tick, first.at, first.next_due, first.mode) == (1, 100.125, 100.25, Mode.RUNNING)
    assert (second.tick, second.at, second.next_due) == (2, 100.25, 100.375)
    assert first.counters["ticks"] == 1 and second.counters["ticks"] == 2  # copies, not the live counters
    assert (first.queue_depth, second.queue_depth, second.dropped_actions) == (0, 2, 1)
    assert (first.latencies_measured, second.latencies_measured, second.last_latency_ticks) == (0, 1, 1.0)
    assert np.isnan(first.last_latency_ticks)
    assert loop.latencies().tolist() == [1.0] and loop.latencies(1).tolist() == []  # kept by the runner
    assert second.safety == loop.controller.envelope.counts and second.safety is not loop.controller.envelope.counts
    assert second.latch is None and second.latches_taken == 0 and second.arm_error == ""
    assert second.state["a"].position == 10.0 and list(second.present) == list(P)
    assert second.scheduling == "SCHED_OTHER (rt_priority = 0)" and second.native_id == threading.get_native_id()
    assert sum(second.cpu_seen.values()) == 2
    assert (second.teleop_phase, second.teleop_last_seq, second.intervention) == ("", -1, False)


def test_the_teleop_fields_of_the_snapshot_are_set_only_in_teleop() -> None:
    def take_over(loop: ControlLoop) -> None:
        loop.teleop.put(5, at(a=20.0), r.clock.now)
        loop.request(TakeOver("st"))

    r = Rig(4, {1: start, 2: take_over, 4: lambda loop: loop.request("stop", "op")})
    r.run()
    snaps = r.script.snaps
    assert [s.teleop_phase for s in snaps] == ["", "handover", "handover", ""]
    assert [s.teleop_last_seq for s in snaps] == [-1, 5, 5, 5]
    assert [s.intervention for s in snaps] == [False, True, True, False]
    assert r.loop.controller.intervention is True  # still set, but only teleop reports it


def test_a_target_that_lands_after_the_tick_it_reached_the_daemon_in_time_for_is_counted_late() -> None:
    period = 0.125
    due = lambda k: 100.0 + k * period  # noqa: E731 (the rig's clock starts at 100 s, ticks at 8 Hz)

    def take_over(loop: ControlLoop) -> None:
        loop.teleop.put(5, at(a=20.0), r.clock.now)
        loop.request(TakeOver("st"))

    r = Rig(
        5,
        {
            1: start,
            2: take_over,
            # as the arm process drains the link before each tick: received before tick 3 was due, landed at 4
            4: lambda loop: loop.teleop.put(6, at(a=20.0), due(3) - 0.001),
            # received after tick 4 was due: meant for tick 5, and there in time
            5: lambda loop: loop.teleop.put(7, at(a=20.0), due(4) + 0.001),
        },
    )
    r.run()
    snaps = r.script.snaps
    assert [s.teleop_late for s in snaps] == [0, 0, 0, 1, 1]
    assert [s.teleop_last_seq for s in snaps] == [-1, 5, 5, 6, 7]
    assert r.loop.status()["teleop"]["late"] == 1


def test_the_episode_tap_gets_each_tick_and_the_end_at_shutdown() -> None:
    def take_over(loop: ControlLoop) -> None:
        loop.teleop.put(5, at(a=12.0), r.clock.now)
        loop.request(TakeOver("st"))

    r = Rig(
        5,
        {
            1: start,
            2: lambda loop: r.feed.callbacks[-1](rows(1.0, 2.0, 3.0, 4.0), None),
            3: take_over,
            4: lambda loop: loop.request("stop", "op"),
            5: lambda loop: loop.request(Shutdown()),
        },
    )
    tap = Episodes()
    r.loop.episodes = tap  # type: ignore[assignment]
    r.run()
    assert [t[0] for t in tap.ticks] == [100.125, 100.25, 100.375, 100.5]
    assert [t[4] for t in tap.ticks] == ["hold", "policy", "teleop", "hold"]
    assert [t[5] for t in tap.ticks] == [False, False, True, False]
    assert tap.ticks[0][3] is None and tap.ticks[1][3].tolist() == list(at(a=12.0))
    assert [t[1].tolist() for t in tap.ticks] == [list(P)] * 4  # the reading each tick decided from
    assert tap.ticks[1][2].tolist() == list(at(a=12.0))  # the goal written, not the priming hold
    assert tap.ticks[3][2].tolist() == list(P)  # the stop's hold, written this tick
    assert tap.ended == 1


def test_a_holding_tick_gives_the_tap_the_goal_held() -> None:
    tap = Episodes()
    r = Rig(3, {1: start, 2: lambda loop: loop.request("stop", "op")})
    r.loop.episodes = tap  # type: ignore[assignment]
    r.run()
    assert tap.ticks[2][2].tolist() == list(P) and len(r.bus.writes()) == 2  # not written again


# --- the thread and the shutdown sequence --------------------------------------------------------------


def test_the_start_of_the_loop_is_logged_with_its_figures() -> None:
    r = Rig(1)
    r.run()
    assert r.said()[0] == (
        logging.INFO,
        "control loop: 8.0 Hz, 4 of 4 steps per chunk, next chunk at 2 queued, aggregate latest; CPU any; "
        "SCHED_OTHER (rt_priority = 0)",
    )


def test_a_loop_on_a_cpu_pins_its_thread_and_a_refused_priority_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    pinned: list[int] = []
    monkeypatch.setattr(loop_module, "pin_thread", lambda cpu: pinned.append(cpu) or True)
    monkeypatch.setattr(loop_module, "request_realtime", lambda p: f"SCHED_OTHER: SCHED_FIFO {p} refused (no)")
    r = Rig(1, cpu=1)
    r.run()
    assert pinned == [1]
    assert r.said()[0] == (
        logging.WARNING,
        "control loop: 8.0 Hz, 4 of 4 steps per chunk, next chunk at 2 queued, aggregate latest; CPU 1; "
        "SCHED_OTHER: SCHED_FIFO 0 refused (no)",
    )
    monkeypatch.setattr(loop_module, "request_realtime", lambda p: "SCHED_FIFO 50")
    r = Rig(1)
    r.run()
    assert r.said()[0][0] == logging.INFO


def test_a_shutdown_holds_then_turns_torque_off_and_the_loop_ends() -> None:
    r = Rig(10, {1: start, 3: lambda loop: loop.request(Shutdown())})
    loop = r.run()
    assert r.script.before == [1, 2, 3]  # the loop ended at the shutdown
    assert r.bus.log[-2:] == [("write", 100.375, dict(zip(JOINTS, P, strict=True))), ("torque", "off")]
    assert loop.controller.mode is Mode.IDLE and loop._shutdown_done.is_set()
    assert ("read", 100.375) not in r.bus.log  # nothing read after the shutdown tick's hold
    said = r.said()
    assert said[-1] == (logging.INFO, "control: shut down (mode was running, now idle)")
    assert loop.controller.counters["ticks"] == 2  # the shutdown tick is not a tick of its own


def test_a_shutdown_with_rest_rests_tick_by_tick_then_ends_holding() -> None:
    r = Rig(20, {1: start, 2: lambda loop: loop.request(Shutdown())}, shutdown_action="rest", rest_pose={"a": 4.0})
    r.bus.follow = True
    loop = r.run()
    assert [g[0] for g in goals(r)] == [10.0, 10.0, 8.0, 6.0, 4.0]  # the hold, then 2 per tick
    assert loop.controller.mode is Mode.HOLDING
    # each rest tick reads, then writes the step from where the arm is
    assert [e[0] for e in r.bus.log[-6:]] == ["read", "write", "read", "write", "read", "write"]
    # tick 1, each rest tick, then the shutdown tick's own, when its sequence is done
    assert [s.mode for s in r.script.snaps] == [Mode.RUNNING, Mode.RESTING, Mode.RESTING, Mode.HOLDING, Mode.HOLDING]
    assert r.said()[-2:] == [
        (logging.INFO, "control: rest pose reached; holding"),
        (logging.INFO, "control: shut down (mode was running, now holding)"),
    ]


def test_a_rest_at_shutdown_that_does_not_arrive_ends_after_the_limit() -> None:
    r = Rig(1000, {1: start, 2: lambda loop: loop.request(Shutdown())}, shutdown_action="rest", rest_pose={"a": 0.0})
    loop = r.run()  # the arm does not follow: the rest never gets there
    assert loop.controller.mode is Mode.RESTING
    rest_writes = len(r.bus.writes()) - 2
    assert rest_writes == round(SHUTDOWN_REST_LIMIT_S / PERIOD)
    assert r.said()[-1] == (logging.INFO, "control: shut down (mode was running, now resting)")


def test_a_failed_rest_read_at_shutdown_writes_nothing_that_tick() -> None:
    def shut(loop: ControlLoop) -> None:
        loop.request(Shutdown())
        r.bus.read_errors.append(BusError("no reply"))

    r = Rig(20, {1: start, 2: shut}, shutdown_action="rest", rest_pose={"a": 6.0})
    r.bus.follow = True
    r.run()
    assert [g[0] for g in goals(r)] == [10.0, 10.0, 8.0, 6.0]  # the first rest tick's read failed


def test_a_bug_in_the_tick_holds_the_arm_and_ends_the_loop_not_safely() -> None:
    def bug(loop: ControlLoop) -> None:
        r.bus.read_errors.append(RuntimeError("boom"))

    r = Rig(10, {1: start, 3: bug})
    r.bus.follow = True
    loop = r.run()
    assert loop.shutdown_ok is False and loop._shutdown_done.is_set() and r.script.before == [1, 2, 3]
    assert loop.controller.mode is Mode.HOLDING
    assert len(r.bus.writes()) == 4 and goals(r)[-1] == list(P)  # tick 3's write, then the hold
    assert len(r.script.snaps) == 3
    assert (logging.CRITICAL, "control loop failed: RuntimeError: boom; holding the arm") in r.said()


def test_a_bug_in_the_tick_of_an_idle_arm_writes_nothing_and_leaves_it_idle() -> None:
    def bug(loop: ControlLoop) -> None:
        r.bus.read_errors.append(RuntimeError("boom"))

    r = Rig(10, {2: bug})  # never started: torque never on
    loop = r.run()
    assert loop.shutdown_ok is False and r.script.before == [1, 2]
    assert loop.controller.mode is Mode.IDLE and r.bus.writes() == []
    assert (logging.CRITICAL, "control loop failed: RuntimeError: boom; the arm stays idle (torque off)") in r.said()


def test_a_bug_before_any_reading_writes_nothing() -> None:
    r = Rig(10)
    r.bus.read_errors.append(BusError("no reply"))  # the first reading
    r.loop.controller.step = lambda *a: (_ for _ in ()).throw(RuntimeError("boom"))  # type: ignore[method-assign]
    loop = r.run()
    assert r.bus.writes() == [] and loop.shutdown_ok is False
    assert loop.snapshot().at == 0.0  # no tick ran to its end


def test_the_loops_thread_runs_requests_and_shuts_down(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "getswitchinterval", lambda: 0.005)
    intervals: list[float] = []
    monkeypatch.setattr(sys, "setswitchinterval", intervals.append)
    bus = Bus(Clock())
    config = ControlConfig(rate_hz=100.0, rt_priority=0, streams=(), safety=SafetyConfig(**SAFETY))
    loop = ControlLoop(bus, CAL, interface(), config, Feed())
    loop.start()
    try:
        assert intervals == [0.0002]
        assert loop._thread is not None and loop._thread.name == "lerobot-runtime-control" and loop._thread.daemon
        end = time.monotonic() + 5
        while loop.snapshot().tick < 3 and time.monotonic() < end:
            time.sleep(0.01)
        assert loop.alive and loop.snapshot().tick >= 3
        assert loop.stalled_for(time.monotonic()) == 0.0
        assert loop.stalled_for(time.monotonic() + 1.0) > 0.9
        loop.request("start", "op")
        while loop.snapshot().mode is not Mode.RUNNING and time.monotonic() < end:
            time.sleep(0.01)
    finally:
        ok = loop.shutdown()
    assert ok is True and loop.alive is False and ("torque", "off") in bus.log
    assert loop.stalled_for(time.monotonic() + 1.0) == 0.0


def test_a_shutdown_that_could_not_turn_torque_off_is_not_ok() -> None:
    bus = Bus(Clock())
    bus.torque_errors.append(BusError("no reply"))
    config = ControlConfig(rate_hz=100.0, rt_priority=0, streams=(), safety=SafetyConfig(**SAFETY))
    loop = ControlLoop(bus, CAL, interface(), config, Feed())
    loop.start()
    loop.request("start", "op")
    end = time.monotonic() + 5
    while loop.snapshot().mode is not Mode.RUNNING and time.monotonic() < end:
        time.sleep(0.01)
    assert loop.shutdown() is False and loop.shutdown_ok is True and loop.controller.torque_ok is False


def test_a_shutdown_that_does_not_finish_in_time_is_not_ok() -> None:
    bus = Bus(Clock())
    config = ControlConfig(rate_hz=100.0, rt_priority=0, streams=(), safety=SafetyConfig(**SAFETY))
    loop = ControlLoop(bus, CAL, interface(), config, Feed())
    gate = threading.Event()
    original = loop.controller.begin_shutdown

    def slow() -> Any:
        gate.wait(5)
        return original()

    loop.controller.begin_shutdown = slow  # type: ignore[method-assign]
    loop.start()
    try:
        assert loop.shutdown(timeout=0.05) is False
    finally:
        gate.set()


# --- what other threads read ---------------------------------------------------------------------------


def test_latencies_since_a_snapshot_are_the_newest_measured() -> None:
    loop = Rig().loop
    assert loop.latencies().tolist() == []
    loop._latency_ring[:3] = [1.0, 2.0, 3.0]
    loop._latencies = 3
    assert loop.latencies().tolist() == [1.0, 2.0, 3.0] and loop.latencies(1).tolist() == [2.0, 3.0]
    assert loop.latencies().dtype == np.float64
    loop._latency_ring[:] = np.arange(256.0)
    loop._latencies = 300  # the ring holds the newest 256: measurements 44..299
    got = loop.latencies(10)
    assert len(got) == 256 and got[0] == 44.0 and got[-1] == 299 % 256
    assert loop.latencies(290).tolist() == [float(i % 256) for i in range(290, 300)]


def test_status_reports_the_newest_snapshot_with_figures_computed_off_the_tick() -> None:
    def take_over(loop: ControlLoop) -> None:
        loop.teleop.put(5, at(a=20.0), r.clock.now)
        loop.teleop.put(4, at(a=20.0), r.clock.now)  # out of order
        loop.request(TakeOver("st"))

    r = Rig(
        3,
        {
            1: start,
            2: lambda loop: r.feed.callbacks[-1](rows(1.0, 2.0, 3.0, 4.0), None),
            3: take_over,
        },
    )
    r.bus.write_takes = 0.001
    r.bus.positions["b"] = -5.254  # status rounds to 0.01
    loop = r.run()
    r.feed.gate = Blocked("stale:front", "stale observation stream: front", ("front",))
    status = loop.status()
    assert r.feed.blocked_at[-1] == r.clock.now
    expected_counters = {**loop.controller.counters, "overruns": 0, "dropped_actions": 1}
    assert status == {
        "mode": "teleop",
        "source": "teleop",
        "teleop": {
            "phase": "handover",
            "handover": "move",
            "last_seq": 5,
            "targets": 1,
            "out_of_order": 1,
            "late": 0,
            "intervention": True,
        },
        "recording": None,
        "estop": {"latched": False, "reason": "", "latch": 0},
        "rate_hz": 8.0,
        "n_action_steps": 4,
        "refill_at": 2,
        "aggregate": "latest",
        "tick": 3,
        "queue_depth": 0,
        "counters": expected_counters,
        "safety": dict(loop.controller.envelope.counts),
        "inference_latency_ticks": {"last": 1.0, "p50": 1.0, "max": 1.0},
        "jitter_ms": {"p50": 0.0, "p99": 0.0, "max": 0.0},
        "write_period_error_ms": loop._writes.stats(),
        "stale_streams": ["front"],
        "blocked": "stale observation stream: front",
        "arm": {
            "healthy": True,
            "error": "",
            "positions": {"a": 10.0, "b": -5.25, "gripper": 40.0},  # b is -5.254
            "temperatures_c": {"a": 30, "b": 31, "gripper": 32},
        },
        "cpus_seen": {str(cpu): n for cpu, n in loop.snapshot().cpu_seen.items()},
        "scheduling": "SCHED_OTHER (rt_priority = 0)",
    }
    assert sum(status["cpus_seen"].values()) == 3 and all(isinstance(k, str) for k in status["cpus_seen"])
    assert status["write_period_error_ms"]["periods"] == 2


def test_status_before_any_measurement_has_no_figures_and_a_failing_arm_says_so() -> None:
    r = Rig()
    r.bus.read_errors.append(BusError("no reply"))
    r.loop._reading = r.loop._read()
    r.loop._publish()
    status = r.loop.status()
    assert status["inference_latency_ticks"] == {"last": None, "p50": None, "max": None}
    assert status["jitter_ms"] == {"p50": None, "p99": None, "max": None}
    assert status["arm"] == {"healthy": False, "error": "no reply", "positions": {}, "temperatures_c": {}}
    assert status["stale_streams"] == [] and status["blocked"] == ""
    assert status["teleop"]["phase"] == "" and status["teleop"]["intervention"] is False


def test_status_jitter_is_over_the_last_ten_seconds_of_ticks() -> None:
    r = Rig(90, {1: start})
    original_after = r.script.after_tick

    def after(loop: ControlLoop) -> None:
        original_after(loop)
        k = loop._ticker.tick
        if k == 9:
            r.clock.now += 0.145  # tick 10 wakes 20 ms late: out of the last 80 ticks (10 s) at tick 90
        elif k == 85:
            r.clock.now += 0.135  # tick 86 wakes 10 ms late

    r.script.after_tick = after  # type: ignore[method-assign]
    loop = r.run()
    jitter = loop.status()["jitter_ms"]
    assert jitter["max"] == pytest.approx(10.0) and jitter["p50"] == pytest.approx(0.0)
    assert jitter["p99"] == pytest.approx(np.percentile([10.0] + [0.0] * 79, 99))


def test_status_latency_figures_are_over_the_chunks_measured() -> None:
    r = Rig()
    c = r.loop.controller
    r.loop._latency_ring[:3] = [1.0, 5.0, 2.0]
    r.loop._latencies = 3
    c.last_latency_ticks = 2.0
    r.loop._publish()
    assert r.loop.status()["inference_latency_ticks"] == {"last": 2.0, "p50": 2.0, "max": 5.0}


def test_status_names_the_estop_and_the_recording() -> None:
    r = Rig()
    r.loop.episodes = Episodes()  # type: ignore[assignment]
    r.loop.request_estop("button")
    status = r.loop.status()
    assert status["estop"] == {"latched": True, "reason": "button", "latch": 1}
    assert status["recording"] == {"recording": "yes"}


def test_release_and_start_through_the_loop_after_an_estop() -> None:
    def release(loop: ControlLoop) -> None:
        latch = loop.estop
        assert latch is not None
        loop.request("release", "op", latch.id)

    r = Rig(4, {1: start, 2: lambda loop: loop.request_estop("button"), 3: release})
    loop = r.run()
    assert [s.mode for s in r.script.snaps] == [Mode.RUNNING, Mode.ESTOPPED, Mode.HOLDING, Mode.HOLDING]
    assert same(loop.controller.hold_goal, P)


def test_status_jitter_percentiles_are_of_how_late_the_ticks_woke() -> None:
    r = Rig(80, {1: start})
    original_after = r.script.after_tick

    def after(loop: ControlLoop) -> None:
        original_after(loop)
        if loop._ticker.tick % 2:
            r.clock.now += 0.135  # every even tick wakes 10 ms late

    r.script.after_tick = after  # type: ignore[method-assign]
    jitter = r.run().status()["jitter_ms"]
    assert jitter == {"p50": pytest.approx(5.0), "p99": pytest.approx(10.0), "max": pytest.approx(10.0)}


def test_the_events_go_to_the_log_given() -> None:
    from runtime.control.events import EventLog

    events = EventLog()
    clock = Clock()
    config = ControlConfig(rate_hz=8.0, rt_priority=0, streams=(), safety=SafetyConfig(**SAFETY))
    loop = ControlLoop(Bus(clock), CAL, interface(), config, Feed(), clock=clock, events=events)
    assert loop.events is events
    loop.request("start", "op")
    loop._reading = loop._read()
    loop._tick(1, 0.0)  # the controller's events reach the log given after the tick
    assert [e.text() for e in events.drain()] == ["control: source policy (was idle), motion started (asked by op)"]


def test_only_a_start_asks_whether_the_policy_is_blocked_at_the_callers_time() -> None:
    r = Rig()
    r.feed.gate = Blocked("untrusted", "policy not trusted: self-check failed")
    r.clock.now = 123.0
    with pytest.raises(ControlRefused, match=r"^policy not trusted: self-check failed$"):
        r.loop.check("start")
    assert r.feed.blocked_at == [123.0]
    r.loop.check("teleop")
    r.loop.check("stop")
    assert r.feed.blocked_at == [123.0]
    latch = r.loop.request_estop("button")
    with pytest.raises(StaleLatch):
        r.loop.check("release", latch.id + 1)
    r.loop.check("release", latch.id)


def test_a_release_naming_no_latch_is_stale_once_the_latch_is_taken() -> None:
    r = Rig(1, {1: lambda loop: loop.request_estop("button")})
    loop = r.run()
    assert loop.mailbox.pending_estop() is None and loop.estop is not None
    with pytest.raises(StaleLatch):
        loop.check("release")


def test_requests_and_checks_without_a_name_or_a_latch() -> None:
    loop = Rig().loop
    loop.request("stop")
    loop.request("release")
    assert loop.mailbox.take_command() == Stop("")
    assert loop.mailbox.take_command() == Release("", 0)
    loop.request_estop("button")
    with pytest.raises(ControlRefused, match="names e-stop latch 0"):
        loop.check("release")


def test_each_tick_publishes_the_latch_in_effect() -> None:
    r = Rig(3, {1: start, 2: lambda loop: loop.request_estop("button")})
    r.run()
    assert [s.latch for s in r.script.snaps] == [None, r.loop.controller.latch, r.loop.controller.latch]
    assert r.loop.estop == r.loop.controller.latch  # taken: the requests are gone, the latch is published
    assert r.script.snaps[1].latch is not None and r.script.snaps[1].latch.reason == "button"
    assert [s.latches_taken for s in r.script.snaps] == [0, 1, 1]


def test_a_stall_holds_the_last_goal_written_even_where_the_arm_lags() -> None:
    r = Rig(5, {1: start})
    r.script.actions[2] = lambda loop: r.feed.callbacks[-1](rows(1.0, 2.0, 3.0, 4.0), None)
    r.run()  # the arm does not follow: goals 12, 13, 14, then nothing due
    assert [g[0] for g in goals(r)] == [10.0, 12.0, 13.0, 14.0, 14.0]
