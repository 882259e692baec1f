"""The control loop on simulated servos: every safety behaviour asserted from what the servos received.

The servos are the simulator on a pseudo-terminal driven by the real Feetech driver; the camera is a
real ZeroMQ stream; inference is scripted per test so each test can send the chunk that provokes the
behaviour under test (NaN, a jump, a pose past the limits) or stop answering.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time

import numpy as np
import pytest

from drivers.sim.servo import FEETECH_OVERLOAD
from runtime.control.latch import ControlRefused, StaleLatch
from runtime.control.loop import ControlLoop

from .conftest import ScriptedInference, build_loop, received_goals, wait_for

CHUNK = 100


def ramp(state: np.ndarray, target: np.ndarray, steps: int = 20, n: int = CHUNK) -> np.ndarray:
    t = np.minimum(1.0, np.arange(1, n + 1) / steps)[:, None]
    return (state[None, :] + (target - state)[None, :] * t).astype(np.float32)


def offset(**by_joint: float) -> np.ndarray:
    names = ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
    return np.array([by_joint.get(n, 0.0) for n in names], dtype=np.float32)


def start(loop) -> None:
    loop.check("start")
    loop.request("start", "test")
    wait_for(lambda: loop.snapshot().mode == "running", what="running")


def test_chunks_drive_the_servos_and_the_queue_refills_before_it_empties(run, sim_arm, calibration):
    target = offset(shoulder_pan=12, elbow_flex=-8, gripper=10)
    # Inference takes four ticks at 50 Hz: the queue only stays fed if the next chunk is asked for early.
    inference = ScriptedInference(lambda n, s: ramp(s, s + target if n == 1 else s), delay_s=0.08)
    loop = run(inference, n_action_steps=40)
    start0 = sim_arm.simulator.servo(1).position
    start(loop)
    wait_for(lambda: loop.snapshot().counters["chunks"] >= 4, timeout=8, what="four chunks")
    pan = calibration.joints["shoulder_pan"]
    moved = pan.to_user(round(sim_arm.simulator.servo(1).position)) - pan.to_user(round(start0))
    assert moved == pytest.approx(12, abs=1.0)
    # The next chunk is asked for at half the 40 steps: the queue never ran dry after the first chunk.
    assert loop.snapshot().counters["starved"] == 0
    assert loop.snapshot().dropped_actions >= 1  # actions for ticks that passed during inference were dropped
    assert inference.calls >= 4


def test_soft_limits_hold_whatever_the_policy_asks(run, sim_arm, calibration):
    inference = ScriptedInference(lambda n, s: ramp(s, s + offset(shoulder_pan=25), steps=5))
    loop = run(inference, soft_limits={"shoulder_pan": (-10.0, 10.0)})
    t0 = time.monotonic()
    start(loop)
    wait_for(lambda: loop.snapshot().safety["limit"] > 5, what="limit clamps")
    time.sleep(0.3)
    times, goals = received_goals(sim_arm, calibration)
    pan = goals[times > t0, 0]
    assert pan.max() <= 10.0 + 0.1  # one tick of rounding
    assert pan.max() >= 9.5  # it did go as far as allowed
    assert any("shoulder_pan limit" in e.text() for e in loop.events.drain())


def test_velocity_and_acceleration_bounds_shape_a_jump(run, sim_arm, calibration):
    def chunk(n, s):
        c = np.repeat(s[None, :], CHUNK, axis=0)
        c[3:, 2] += 25.0  # elbow_flex jumps 25 degrees at step 3
        return c if n == 1 else None

    loop = run(chunk_inference := ScriptedInference(chunk), max_step_deg=3.0, max_step_change_deg=1.0)
    assert chunk_inference is not None
    t0 = time.monotonic()
    start(loop)
    wait_for(lambda: loop.snapshot().counters["chunks"] >= 1, what="the chunk")
    time.sleep(1.2)
    times, goals = received_goals(sim_arm, calibration)
    elbow = goals[times > t0, 2]
    steps = np.diff(elbow)
    res = 360 / 4095
    assert np.abs(steps).max() <= 3.0 + res
    assert np.abs(np.diff(steps)).max() <= 1.0 + 2 * res
    assert elbow[-1] - elbow[0] == pytest.approx(25, abs=0.3)  # it still got there


def test_a_chunk_with_nan_anywhere_is_refused_whole(run, sim_arm, calibration):
    def chunk(n, s):
        if n == 1:
            return ramp(s, s + offset(shoulder_pan=10), steps=5, n=CHUNK)
        if n == 2:
            c = ramp(s, s - offset(shoulder_pan=20), steps=5)
            c[60, 3] = np.nan  # one bad value far down the chunk
            return c
        return None

    loop = run(ScriptedInference(chunk), n_action_steps=20)
    t0 = time.monotonic()
    start(loop)
    wait_for(lambda: loop.snapshot().safety["refused_chunks"] >= 1, what="the refusal")
    time.sleep(0.5)
    times, goals = received_goals(sim_arm, calibration)
    pan = goals[times > t0, 0]
    start_pan = goals[times <= t0][-1, 0] if (times <= t0).any() else pan[0]
    assert pan.max() >= start_pan + 9.5  # chunk 1 was executed
    assert pan.min() >= start_pan - 0.1  # nothing of chunk 2 (heading 20 degrees down) reached a servo
    assert any("non-finite" in e.text() for e in loop.events.drain())


def test_a_chunk_starting_far_from_the_arm_is_refused(run, sim_arm, calibration):
    inference = ScriptedInference(lambda n, s: np.repeat((s + offset(elbow_flex=60))[None, :], CHUNK, axis=0))
    loop = run(inference, max_first_step_deg=30.0)
    before = sim_arm.simulator.servo(3).goal
    t0 = time.monotonic()
    start(loop)
    wait_for(lambda: loop.snapshot().safety["refused_chunks"] >= 2, what="refusals")
    times, goals = received_goals(sim_arm, calibration)
    elbow = goals[times > t0, 2]
    assert np.all(np.abs(elbow - calibration.joints["elbow_flex"].to_user(before)) < 0.1)


def test_starvation_holds_the_last_goal_then_rests_slowly(run, sim_arm, calibration):
    inference = ScriptedInference(lambda n, s: ramp(s, s + offset(shoulder_pan=15), steps=10) if n == 1 else None)
    loop = run(
        inference, n_action_steps=20, stall_timeout_s=0.5, rest_pose={"shoulder_pan": 0.0}, rest_speed_deg_s=20.0
    )
    start(loop)
    wait_for(lambda: loop.snapshot().counters["starved"] > 0, what="starvation")
    t_starved = time.monotonic()
    wait_for(lambda: loop.snapshot().mode == "holding", timeout=5, what="rest pose reached")
    times, goals = received_goals(sim_arm, calibration)
    after = times > t_starved
    pan, t = goals[after, 0], times[after]
    held = t < t_starved + 0.4
    assert np.ptp(pan[held]) < 0.1  # held still while stalled
    moving = np.diff(pan[~held])
    assert pan[-1] == pytest.approx(0.0, abs=0.1)  # went to the rest pose
    assert np.abs(moving).max() <= 20.0 / 50 + 0.1  # at the rest speed, per tick
    assert loop.snapshot().counters["stall_actions"] == 1
    assert loop.dump_requests and "stall rest" in loop.dump_requests[-1]


RES = 360 / 4096  # one raw tick of the simulated servos, in degrees


@pytest.mark.parametrize("path", ["stall", "shutdown"])
def test_rest_goals_pass_the_envelope_however_fast_the_rest_speed(path, sim_arm, calibration, manifest, camera):
    """rest_speed_deg_s is how fast resting may go, not a licence to exceed max_step_deg."""
    max_step = 3.0
    inference = ScriptedInference(lambda n, s: ramp(s, s + offset(shoulder_pan=15), steps=10) if n == 1 else None)
    loop, streams = build_loop(
        sim_arm,
        calibration,
        manifest,
        inference,
        camera,
        n_action_steps=20,
        stall_timeout_s=0.3 if path == "stall" else 30.0,
        max_step_deg=max_step,
        rest_pose={"shoulder_pan": -30.0},
        rest_speed_deg_s=600.0,  # 12 degrees per tick at 50 Hz
        shutdown_action="rest",
    )
    loop.start()
    try:
        wait_for(lambda: not streams.stale(time.monotonic()), what="camera frames")
        start(loop)
        wait_for(lambda: loop.snapshot().counters["starved"] > 0, what="the chunk executed")
        t_rest = time.monotonic()
        if path == "stall":
            wait_for(lambda: loop.snapshot().counters["stall_actions"] == 1, what="the stall action")
            wait_for(lambda: loop.snapshot().mode == "holding", what="the rest pose reached")
        assert loop.shutdown()
    finally:
        streams.stop()
    times, goals = received_goals(sim_arm, calibration)
    pan = goals[times > t_rest, 0]
    assert pan[-1] == pytest.approx(-30.0, abs=0.1)  # it rested
    # The simulated servo follows a 3-degree step within a tick, so each goal's lead on the
    # present position is its step from the goal before.
    assert np.abs(np.diff(pan)).max() <= max_step + 2 * RES


def test_a_blocked_joint_rests_no_further_than_max_step_from_where_it_is(run, sim_arm, calibration):
    max_step = 3.0
    inference = ScriptedInference(lambda n, s: ramp(s, s + offset(shoulder_pan=15), steps=10) if n == 1 else None)
    loop = run(
        inference,
        n_action_steps=20,
        stall_timeout_s=0.3,
        max_step_deg=max_step,
        rest_pose={"shoulder_pan": -30.0, "elbow_flex": 10.0},
        rest_speed_deg_s=60.0,
    )
    start(loop)
    wait_for(lambda: loop.snapshot().counters["starved"] > 0, what="the chunk executed")
    pan_servo = sim_arm.simulator.servo(calibration.joints["shoulder_pan"].id)
    pan_servo.speed = 0.0  # something holds the joint: its present position stays
    blocked_at = calibration.joints["shoulder_pan"].to_user(round(pan_servo.position))
    t_blocked = time.monotonic()
    wait_for(lambda: loop.snapshot().mode == "resting", what="the stall action")
    elbow = calibration.joints["elbow_flex"]
    wait_for(lambda: abs(loop.status()["arm"]["positions"]["elbow_flex"] - 10.0) < 0.2, what="the elbow at rest")
    time.sleep(0.3)
    times, goals = received_goals(sim_arm, calibration)
    pan = goals[times > t_blocked, 0]
    assert loop.snapshot().mode == "resting"  # the pan never gets there
    assert np.abs(pan - blocked_at).max() <= max_step + 2 * RES
    assert pan.min() < blocked_at - 1.0  # it does push toward the rest pose, within the bound
    assert elbow.to_user(sim_arm.simulator.servo(elbow.id).goal) == pytest.approx(10.0, abs=0.1)


def test_estop_is_effective_within_one_tick_and_latched(run, sim_arm, calibration):
    rate = 50.0
    inference = ScriptedInference(lambda n, s: ramp(s, s + offset(shoulder_lift=30, wrist_roll=-30), steps=80))
    loop = run(inference, rate_hz=rate, max_step_deg=10.0)
    start(loop)
    wait_for(lambda: loop.snapshot().counters["chunks"] >= 1 and loop.snapshot().counters["writes"] > 10, what="motion")
    t_req = time.monotonic()
    latch = loop.request_estop("test e-stop").id
    wait_for(lambda: loop.snapshot().mode == "estopped", what="e-stop")
    time.sleep(0.3)
    times, _goals = received_goals(sim_arm, calibration)
    after = times > t_req
    assert after.any()
    first = times[after][0]
    assert first - t_req <= 1 / rate + 0.010  # one tick, with 10 ms for a loaded machine
    # Exactly one goal (the hold) after the request; nothing moves the arm afterwards.
    assert after.sum() == 1
    with pytest.raises(ControlRefused, match="e-stop is latched"):
        loop.check("start")
    loop.request("release", "test", latch)
    wait_for(lambda: loop.snapshot().mode == "holding", what="release")
    assert loop.estop_reason is None


def test_an_estop_after_a_queued_release_wins(run):
    """The operator who pressed e-stop again was answered latched: the release queued for the
    earlier latch must not clear the new one at the next tick."""
    loop = run(ScriptedInference(lambda n, s: None), rate_hz=5.0)  # 200 ms between ticks
    start(loop)
    first = loop.request_estop("first press").id
    wait_for(lambda: loop.snapshot().mode == "estopped", what="e-stop")
    assert loop.status()["estop"] == {"latched": True, "reason": "first press", "latch": first}
    ticks = loop.snapshot().counters["ticks"]
    wait_for(lambda: loop.snapshot().counters["ticks"] > ticks, what="a tick")  # the next one is 200 ms away
    loop.check("release", first)
    loop.request("release", "operator", first)
    second = loop.request_estop("second press").id
    assert second != first
    assert loop.status()["estop"] == {"latched": True, "reason": "second press", "latch": second}
    ticks = loop.snapshot().counters["ticks"]
    wait_for(lambda: loop.snapshot().counters["ticks"] >= ticks + 2, what="two ticks")
    assert loop.snapshot().mode == "estopped"
    assert loop.status()["estop"] == {"latched": True, "reason": "second press", "latch": second}
    texts = [e.text() for e in loop.events.drain()]
    refusal = f"names e-stop latch {first}, but the latch now is {second} (second press)"
    assert any("release (asked by operator) refused" in t and refusal in t for t in texts)
    with pytest.raises(StaleLatch, match=re.escape(refusal)) as stale:
        loop.check("release", first)
    assert (stale.value.named, stale.value.current.id) == (first, second)
    with pytest.raises(ControlRefused, match="e-stop is latched"):
        loop.check("start")
    loop.check("release", second)
    loop.request("release", "operator", second)
    wait_for(lambda: loop.snapshot().mode == "holding", what="release")
    assert loop.status()["estop"] == {"latched": False, "reason": "", "latch": 0}
    with pytest.raises(ControlRefused, match="no e-stop is latched"):
        loop.check("release", second)


def test_a_servo_fault_latches_the_estop_naming_the_joint(run, sim_arm, calibration):
    inference = ScriptedInference(lambda n, s: ramp(s, s + offset(shoulder_pan=20), steps=100))
    loop = run(inference)
    start(loop)
    wait_for(lambda: loop.snapshot().counters["writes"] > 5, what="motion")
    sim_arm.simulator.faults(3).error_bits = FEETECH_OVERLOAD
    wait_for(lambda: loop.snapshot().mode == "estopped", what="the fault latch")
    assert "elbow_flex" in (loop.estop_reason or "")
    t_latched = time.monotonic()
    time.sleep(0.3)
    times, _ = received_goals(sim_arm, calibration)
    assert not (times > t_latched).any()
    status = loop.status()
    assert status["estop"]["latched"] and not status["arm"]["healthy"]
    sim_arm.simulator.faults(3).error_bits = 0  # so the fixture can turn torque off


def test_a_stale_camera_stops_new_chunks_and_holds_naming_the_stream(run, sim_arm, calibration, camera):
    inference = ScriptedInference(lambda n, s: ramp(s, s + offset(wrist_flex=10), steps=50))
    loop = run(inference, max_age_ms=150, stall_timeout_s=5.0)
    start(loop)
    wait_for(lambda: loop.snapshot().counters["chunks"] >= 1, what="a chunk")
    camera.pause()
    wait_for(lambda: loop.status()["stale_streams"] == ["observation.images.front"], what="stale")
    calls = inference.calls
    t_stale = time.monotonic()
    time.sleep(0.5)
    assert inference.calls == calls  # no new chunk asked for on an old frame
    times, goals = received_goals(sim_arm, calibration)
    assert np.ptp(goals[times > t_stale + 0.05], axis=0).max() < 0.1  # holding
    assert any("observation.images.front" in e.text() and "stale" in e.text() for e in loop.events.drain())
    camera.resume()
    wait_for(lambda: inference.calls > calls, what="chunks again once frames are fresh")


def test_inference_failure_holds_and_is_counted(run):
    inference = ScriptedInference(lambda n, s: ramp(s, s, steps=1))
    inference.error = "inference failed (OpenVINO: boom)"
    loop = run(inference)
    start(loop)
    wait_for(lambda: loop.snapshot().counters["inference_failures"] >= 2, what="failures")
    assert any("OpenVINO: boom" in e.text() for e in loop.events.drain() if e.level >= logging.ERROR)
    assert loop.snapshot().counters["chunks"] == 0


def test_shutdown_stops_motion_holds_then_turns_torque_off(sim_arm, calibration, manifest, camera):
    inference = ScriptedInference(lambda n, s: ramp(s, s + offset(shoulder_lift=20), steps=100))
    loop, streams = build_loop(sim_arm, calibration, manifest, inference, camera, shutdown_action="torque_off")
    loop.start()
    try:
        wait_for(lambda: not streams.stale(time.monotonic()), what="frames")
        start(loop)
        wait_for(lambda: loop.snapshot().counters["writes"] > 10, what="motion")
        t_stop = time.monotonic()
        assert loop.shutdown()
    finally:
        streams.stop()
    times, _goals = received_goals(sim_arm, calibration)
    after = times > t_stop
    assert after.sum() == 1  # one hold goal, then nothing moves
    hold_t = times[after][0]
    for joint in calibration.joints.values():
        torque = [(t, v) for t, v in sim_arm.simulator.servo(joint.id).torque_log if t > t_stop]
        assert torque and torque[-1][1] == 0 and torque[0][0] >= hold_t  # torque off after the hold


def test_the_loop_thread_runs_on_the_control_cpu(sim_arm, calibration, manifest, camera):
    import os

    cpus = sorted(os.sched_getaffinity(0))
    inference = ScriptedInference(lambda n, s: None)
    loop, streams = build_loop(sim_arm, calibration, manifest, inference, camera)
    loop.cpu = cpus[-1]
    loop.start()
    try:
        wait_for(lambda: loop.snapshot().counters["ticks"] > 20, what="ticks")
    finally:
        loop.shutdown()
        streams.stop()
    assert set(loop.snapshot().cpu_seen) == {cpus[-1]}


def test_status_can_be_read_while_the_loop_ticks_on_a_new_cpu(run, monkeypatch):
    """status() runs on the server's I/O thread while the loop counts the CPU of every tick."""
    import runtime.control.loop as loop_module

    ticking: list[ControlLoop] = []
    first = threading.Event()

    class Cpu(int):
        def __str__(self) -> str:
            # status() formats the CPUs it reports: the first time, let the loop tick twice meanwhile
            if ticking and not first.is_set():
                first.set()
                ticks = ticking[0].snapshot().counters["ticks"]
                wait_for(lambda: ticking[0].snapshot().counters["ticks"] >= ticks + 2, what="two more ticks")
            return int.__str__(self)

    cpus = itertools.count(1000)
    monkeypatch.setattr(loop_module, "current_cpu", lambda: Cpu(next(cpus)))  # every tick on a new CPU
    loop = run(ScriptedInference(lambda n, s: None))
    wait_for(lambda: loop.snapshot().counters["ticks"] >= 3, what="ticks")
    ticking.append(loop)
    seen = loop.status()["cpus_seen"]
    assert first.is_set()
    assert seen and all(n == 1 for n in seen.values()) and all(int(c) >= 1000 for c in seen)
    assert len(loop.status()["cpus_seen"]) > len(seen)  # the loop went on ticking, on new CPUs


def test_each_run_starts_a_new_observation_history(run):
    """The first observation after each start asks the server to start the policy's history from it."""
    inference = ScriptedInference(lambda n, s: np.repeat(s[None, :], CHUNK, axis=0))
    loop = run(inference, n_action_steps=10)
    start(loop)
    wait_for(lambda: inference.calls >= 3, what="three requests")
    loop.request("stop", "test")
    wait_for(lambda: loop.snapshot().mode == "holding", what="holding")
    first_of_second_run = inference.calls + 1
    start(loop)
    wait_for(lambda: inference.calls >= first_of_second_run + 2, what="requests of the second run")
    assert inference.resets[:2] == [1, first_of_second_run]
    assert len(inference.resets) == 2
    assert inference.observed == []  # the demo policy looks at one observation: nothing between asks


def test_a_policy_with_history_sees_every_running_tick(run, manifest):
    """With observation_history 2 every running tick hands its observation over: an ask, or a frame
    for the history in between (LeRobot's select_action queues one per step)."""
    import dataclasses

    from runtime.bundle.manifest import HISTORY_ROLES

    two = tuple(dataclasses.replace(s, shape=(2, *s.shape)) if s.role in HISTORY_ROLES else s for s in manifest.inputs)
    history_manifest = dataclasses.replace(manifest, inputs=two, observation_history=2)
    inference = ScriptedInference(lambda n, s: np.repeat(s[None, :], CHUNK, axis=0))
    loop = run(inference, n_action_steps=10, manifest=history_manifest)
    start(loop)
    wait_for(lambda: inference.calls >= 3, what="three requests")
    loop.request("stop", "test")
    wait_for(lambda: loop.snapshot().mode == "holding", what="holding")
    between = [calls for calls, _ in inference.observed]
    assert between.count(1) >= 3 and between.count(2) >= 3  # frames between the asks, every tick
    assert inference.resets == [1]  # the run's first observation (an ask) started the history
    assert not any(reset for _, reset in inference.observed)
    assert loop.snapshot().counters["observations"] == len(inference.observed)
