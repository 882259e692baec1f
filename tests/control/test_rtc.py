"""Real-time chunking in the control loop: each request carries the plan's leftover and the delay.

The leftover is the plan from the tick the observation is taken at (that tick's own action first:
the chunk's step 0 is for it), the delay the worst latency measured for the recent chunks; both
reach the policy's side through the feed, in one process and across the arm link. On the simulated
servos, a policy that continues its prefix (what RTC makes a flow policy do) drives goals that run on
across every chunk boundary, while the same policy sampling afresh jumps there.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from drivers.calibration import Calibration, load_calibration
from drivers.config import ArmConfig
from drivers.sim.arm import SimArm, simulator_for
from runtime.arm_control.feed import StreamFeed
from runtime.arm_control.streams import ObservationStreams
from runtime.bundle.interface import PolicyInterface, parse_interface
from runtime.bundle.manifest import Manifest, RtcEntry, TensorSpec, parse_manifest
from runtime.control.actions import ActionQueue
from runtime.control.config import ControlConfig, RtcConfig, SafetyConfig, StreamConfig, rtc_in_effect
from runtime.control.controller import DELAY_WINDOW, ChunkResult, Controller
from runtime.control.feed import Prefix
from runtime.control.loop import ControlLoop
from runtime.control.mailbox import Start
from runtime.errors import ConfigError
from runtime.teleop.config import TeleopConfig

from .conftest import CALIBRATION, IMAGE, Camera, ScriptedInference, received_goals, wait_for
from .small_arm import Runner
from .test_controller import Feed, Torque

RATE_HZ = 50.0
SLOW_S = 0.1  # inference takes five ticks at 50 Hz
STEPS = 20  # steps of each chunk executed; the next is asked for at 10 left
SLOPE = 0.2  # degrees per tick the plan moves shoulder_pan
RES = 360 / 4095  # one servo step, in degrees


def with_rtc(base: Manifest, chunk_size: int | None = None) -> PolicyInterface:
    """The interface of ``base`` exported with real-time chunking: the three prefix inputs and the section."""
    size = chunk_size or base.chunk_length
    joints = len(base.action_names)
    inputs = (
        *base.inputs,
        TensorSpec("rtc.prefix", "float32", (size, joints), "prefix"),
        TensorSpec("rtc.prefix_weights", "float32", (size,), "prefix_weights"),
        TensorSpec("rtc.max_guidance_weight", "float32", (1,), "guidance"),
    )
    entry = RtcEntry("rtc.prefix", "rtc.prefix_weights", "rtc.max_guidance_weight", size, 10, "LINEAR", 10.0)
    made = replace(base, inputs=inputs, rtc=entry)
    assert parse_manifest(made.to_json()).rtc == entry
    policy = PolicyInterface.of_manifest(made)
    assert policy.rtc_chunk_size == size and parse_interface(policy.to_json(), "test") == policy  # the arm's
    return policy


# --- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"execution_horizon": 0}, "control.rtc.execution_horizon: expected >= 1 step, got 0"),
        ({"prefix_attention_schedule": "cosine"}, "control.rtc.prefix_attention_schedule: expected one of ZEROS"),
        ({"max_guidance_weight": 0.0}, "control.rtc.max_guidance_weight: expected a finite number > 0, got 0.0"),
        ({"max_guidance_weight": float("nan")}, "control.rtc.max_guidance_weight: expected a finite number > 0"),
    ],
)
def test_bad_rtc_keys_are_refused_by_name(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RtcConfig(**fields)


def test_rtc_keys_load_from_the_control_table(tmp_path: Path) -> None:
    from runtime.config import load_config

    path = tmp_path / "d.toml"
    path.write_text('[control]\nrtc.execution_horizon = 8\nrtc.prefix_attention_schedule = "exp"\n')
    rtc = load_config(path).control.rtc
    assert (rtc.enabled, rtc.execution_horizon, rtc.prefix_attention_schedule) == (None, 8, "exp")
    path.write_text("[control.rtc]\nhorizon = 8\n")
    with pytest.raises(ConfigError, match=r"control.rtc: unknown key\(s\) horizon; expected some of enabled"):
        load_config(path)


def test_rtc_is_on_for_a_bundle_that_takes_a_prefix_and_refused_by_key_for_one_that_does_not(
    manifest: Manifest,
) -> None:
    rtc, plain = with_rtc(manifest), PolicyInterface.of_manifest(manifest)
    assert rtc_in_effect(ControlConfig(), rtc) and not rtc_in_effect(ControlConfig(), plain)
    assert not rtc_in_effect(ControlConfig(rtc=RtcConfig(enabled=False)), rtc)
    assert not rtc_in_effect(ControlConfig(rtc=RtcConfig(enabled=False)), plain)  # asks for nothing
    for fields, key in (({"enabled": True}, "enabled"), ({"max_guidance_weight": 3.0}, "max_guidance_weight")):
        with pytest.raises(ConfigError, match=rf"control.rtc.{key}: this bundle takes no previous chunk .* --rtc"):
            rtc_in_effect(ControlConfig(rtc=RtcConfig(**fields)), plain)
    with pytest.raises(ConfigError, match=r"control.aggregate: expected 'latest' with real-time chunking"):
        rtc_in_effect(ControlConfig(aggregate="temporal_ensemble"), rtc)
    assert not rtc_in_effect(ControlConfig(aggregate="average", rtc=RtcConfig(enabled=False)), rtc)
    with pytest.raises(ConfigError, match=r"control.rtc.execution_horizon: expected 1..100 .* got 101"):
        rtc_in_effect(ControlConfig(rtc=RtcConfig(execution_horizon=101)), rtc)


# --- the leftover and the delay ----------------------------------------------------------------


def test_the_leftover_starts_at_the_ticks_own_action_and_stops_at_a_gap() -> None:
    q = ActionQueue(2, horizon=16)
    chunk = np.arange(20, dtype=np.float32).reshape(10, 2)
    q.merge(chunk, first_tick=100, now=100)
    assert q.leftover(99, 8) is None  # nothing planned for 99
    q.take(100)
    q.take(101)
    left = q.leftover(101, 4)  # 101 was just executed: it is the leftover's first step
    assert left is not None and left.dtype == np.float32
    np.testing.assert_array_equal(left, chunk[1:5])
    np.testing.assert_array_equal(q.leftover(101, 50), chunk[1:])  # up to the end of the plan
    q.take(103)  # 102 skipped: still queued
    np.testing.assert_array_equal(q.leftover(102, 3), chunk[2:5])
    assert q.leftover(100, 5) is None  # taken before the last take: not the plan any more
    q.clear()
    assert q.leftover(103, 5) is None


def _controller(calibration: Calibration, manifest: Manifest, rtc: RtcConfig) -> tuple[Runner, Feed]:
    feed = Feed()
    # eight steps a chunk, the next asked for as soon as none is in flight
    config = ControlConfig(
        rate_hz=30.0,
        rt_priority=0,
        n_action_steps=8,
        chunk_size_threshold=0.9,
        safety=SafetyConfig(max_first_step_deg=360.0),
        rtc=rtc,
    )
    c = Controller(
        tuple(manifest.action_names),
        calibration,
        with_rtc(manifest, chunk_size=120),
        config,
        teleop=TeleopConfig(),
        period=1 / 30,
    )
    return Runner(c, feed, Torque(), time.monotonic), feed


@pytest.fixture
def controller(calibration: Calibration, manifest: Manifest) -> tuple[Runner, Feed]:
    return _controller(calibration, manifest, RtcConfig())


def test_each_request_carries_the_plan_from_its_tick_and_the_worst_recent_delay(
    controller: tuple[Runner, Feed],
) -> None:
    r, feed = controller
    c = r.c
    n = len(c.names)
    present = np.zeros(n)
    r.mailbox.post(Start("test"))
    r.after_read(r.step(0, 0.0, present), present, 0.0)  # the first request, at tick 0
    assert feed.prefixes == [None]  # nothing planned yet: the first chunk samples afresh
    assert c.inference_delay() == 0
    plan = np.cumsum(np.full((c.n_steps, n), 0.1, np.float32), axis=0)
    ask, latencies = 0, (3, 5, 2)
    for i, latency in enumerate(latencies):  # each chunk arrives `latency` ticks after its request
        k = ask + latency
        for tick in range(ask + 1, k):
            r.after_read(r.step(tick, 0.0, present), present, 0.0)  # a chunk is in flight: no request
        chunk = plan + ask
        r.results.put(ChunkResult(c._plan.gen, ask, chunk, None))
        # merged, this tick's action taken and written: the next request
        r.after_read(r.step(k, 0.0, present), present, 0.0)
        prefix = feed.prefixes[-1]
        assert len(feed.prefixes) == i + 2 and isinstance(prefix, Prefix)
        assert prefix.delay == max(latencies[: i + 1])  # the worst measured so far
        # the plan from tick k on: the step executed at k first, then the queued ones
        np.testing.assert_allclose(prefix.actions, chunk[k - ask :], rtol=0, atol=1e-6)
        ask = k
    assert c.counters["prefix_requests"] == 3


def test_the_delay_is_the_worst_of_the_recent_window_and_at_most_a_chunk(controller: tuple[Runner, Feed]) -> None:
    r, _ = controller
    c = r.c
    for latency in [40] + [2] * DELAY_WINDOW:  # the 40 falls out of the window
        c._recent.append(latency)
        c.latencies_measured += 1
    assert c.inference_delay() == 2
    c._recent.append(10_000)
    c.latencies_measured += 1
    assert c.inference_delay() == 99  # the server's bound: a chunk of 100 steps must have one left


def test_rtc_off_sends_no_prefix(calibration: Calibration, manifest: Manifest) -> None:
    r, feed = _controller(calibration, manifest, RtcConfig(enabled=False))
    c = r.c
    assert not c.rtc
    present = np.zeros(len(c.names))
    r.mailbox.post(Start("test"))
    r.after_read(r.step(0, 0.0, present), present, 0.0)
    r.results.put(ChunkResult(c._plan.gen, 0, np.zeros((c.n_steps, len(c.names)), np.float32), None))
    r.after_read(r.step(1, 0.0, present), present, 0.0)
    assert feed.prefixes == [None, None] and c.counters["prefix_requests"] == 0


# --- on the simulated servos ---------------------------------------------------------------------


class Continuing(ScriptedInference):
    """A policy that moves shoulder_pan at SLOPE per step. Given a prefix it continues it (steps past
    the delay are its own, which for this policy is the same line); without one it samples a plan of
    its own from where the arm is, each one off the last by a degree and a half, as a fresh sample of
    a flow policy is."""

    def __init__(self) -> None:
        super().__init__(self._chunk, delay_s=SLOW_S)

    def _chunk(self, n: int, state: np.ndarray) -> np.ndarray:
        prefix = self.prefixes[n - 1]
        if prefix is not None:
            start = prefix.actions[0].astype(np.float32)
        else:
            start = state.astype(np.float32)
            start[0] += 1.5 if n % 2 else -1.5
        steps = np.arange(100, dtype=np.float32)[:, None] * np.eye(len(state), dtype=np.float32)[0]
        return start + SLOPE * steps


def _run(loop: ControlLoop | Any, chunks: int) -> None:
    """Start (again until the loop runs: an arm process takes a start only once the daemon's gate
    reached it) and wait for ``chunks`` chunks."""

    def running() -> bool:
        if loop.snapshot().mode.value != "running":
            loop.check("start")
            loop.request("start", "test")
            time.sleep(0.1)
        return bool(loop.snapshot().mode.value == "running")

    wait_for(running, timeout=15, what="running")
    wait_for(lambda: loop.snapshot().counters["chunks"] >= chunks, timeout=30, what=f"{chunks} chunks")


def _goal_steps(times: np.ndarray, pan: np.ndarray, t0: float, t1: float) -> np.ndarray:
    """shoulder_pan's goal step per tick between ``t0`` (the first chunk, which starts from rest, is
    behind) and ``t1`` (before the shutdown holds). A tick the loop skipped (an overrun on a loaded
    machine: its action is never taken) shows as one write two periods after the last: per tick, it is
    divided by the periods it spans."""
    keep = (times > t0) & (times < t1)
    times, pan = times[keep], pan[keep]
    ticks = np.maximum(1, np.round(np.diff(times) * RATE_HZ))
    return np.diff(pan) / ticks


def _config(camera: Camera, rtc: RtcConfig) -> ControlConfig:
    return ControlConfig(
        rate_hz=RATE_HZ,
        n_action_steps=STEPS,
        rt_priority=0,
        streams=(StreamConfig(IMAGE, camera.endpoint, 500.0),),
        safety=SafetyConfig(stall_timeout_s=2.0, max_first_step_deg=360.0),
        rtc=rtc,
    )


def _thread_loop(
    sim_arm: SimArm, calibration: Calibration, policy: PolicyInterface, inference: Any, camera: Camera, rtc: RtcConfig
) -> tuple[ControlLoop, ObservationStreams]:
    config = _config(camera, rtc)
    streams = ObservationStreams(config.streams, policy.observation_inputs)
    streams.start()
    loop = ControlLoop(sim_arm.bus, calibration, policy, config, StreamFeed(inference, policy, streams))
    loop.start()
    wait_for(lambda: not streams.stale(time.monotonic()), what="camera frames")
    return loop, streams


@pytest.mark.parametrize("rtc", [True, False], ids=["rtc", "fresh"])
def test_goals_run_on_across_chunk_boundaries_with_rtc_and_jump_without(
    sim_arm: SimArm, calibration: Calibration, manifest: Manifest, camera: Camera, rtc: bool
) -> None:
    inference = Continuing()
    loop, streams = _thread_loop(
        sim_arm, calibration, with_rtc(manifest), inference, camera, RtcConfig(enabled=None if rtc else False)
    )
    try:
        _run(loop, 2)
        t0 = time.monotonic()  # from the second chunk on
        wait_for(lambda: loop.snapshot().counters["chunks"] >= 7, timeout=30, what="seven chunks")
        assert loop.snapshot().counters["starved"] == 0
        t1 = time.monotonic()
    finally:
        loop.shutdown()
        streams.stop()
    times, goals = received_goals(sim_arm, calibration)
    steps = _goal_steps(times, goals[:, 0], t0, t1)
    assert len(steps) > 4 * STEPS // 2
    if rtc:
        # every executed goal continues the plan: the boundaries are as smooth as the plan itself
        assert np.abs(steps - SLOPE).max() <= 1.5 * RES
        prefixes = [p for p in inference.prefixes if p is not None]
        assert len(prefixes) == inference.calls - 1  # every request but the first carried the plan
        assert all(p.delay >= 1 and len(p.actions) >= STEPS // 2 for p in prefixes)
    else:
        assert all(p is None for p in inference.prefixes)
        assert np.abs(steps - SLOPE).max() > 1.0  # each fresh plan jumps where it takes over


def test_the_arm_process_carries_the_prefix_across_the_link(manifest: Manifest, camera: Camera) -> None:
    """``control.process = "own"``: the ask message carries the leftover and the delay, the daemon's side
    hands them to the feed, and the goals at the servos run on across the boundaries as in one process."""
    from runtime.arm_control.link import ArmLink

    calibration = load_calibration(CALIBRATION)
    sim = simulator_for(calibration).start()
    rtc = with_rtc(manifest)
    config = _config(camera, RtcConfig())
    inference = Continuing()
    streams = ObservationStreams(config.streams, rtc.observation_inputs)
    streams.start()
    link = ArmLink(
        arm=ArmConfig(kind="feetech", port=sim.port, calibration=str(CALIBRATION)),
        control=config,
        teleop=TeleopConfig(),
        policy=rtc,
        feed=StreamFeed(inference, rtc, streams),
        cpu=None,
    )
    try:
        wait_for(lambda: not streams.stale(time.monotonic()), what="camera frames")
        link.start(5.0)
        _run(link, 2)
        t0 = time.monotonic()
        wait_for(lambda: link.snapshot().counters["chunks"] >= 6, timeout=30, what="six chunks")
        assert link.snapshot().counters["prefix_requests"] >= 4
        t1 = time.monotonic()
    finally:
        link.shutdown()
        streams.stop()
        sim.stop()
    prefixes = [p for p in inference.prefixes if p is not None]
    assert prefixes and all(isinstance(p.delay, int) and p.actions.dtype == np.float32 for p in prefixes)
    pan_joint = calibration.joints[next(iter(calibration.joints))]
    log = list(sim.servo(pan_joint.id).goal_log)
    times = np.array([t for t, _ in log])
    pan = np.array([pan_joint.to_user(raw) for _, raw in log])
    assert np.abs(_goal_steps(times, pan, t0, t1) - SLOPE).max() <= 1.5 * RES
