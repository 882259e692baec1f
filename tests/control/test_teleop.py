"""Field teleop end to end: the real daemon (demo policy on OpenVINO, follower servos simulated on a
pty, camera over ZeroMQ), a station driving it over a real socket from a simulated leader on its own
pty, and the episode it records read back from disk.

Hand-over, deadman and e-stop are asserted from what the follower's servos received (``goal_log``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from drivers.calibration import Calibration
from drivers.config import ArmConfig
from runtime.client import PolicyClient
from runtime.config import DaemonConfig, DaemonSettings
from runtime.control.config import ControlConfig, SafetyConfig, StreamConfig
from runtime.daemon import Daemon
from runtime.engine.config import EngineConfig
from runtime.protocol.errors import ControlRefusedError, NoSessionError, SessionHeldError
from runtime.recording.config import RecordingConfig
from runtime.sdnotify import SystemdNotifier
from runtime.server.config import ServerConfig
from runtime.teleop.config import TeleopConfig
from runtime.teleop.leader import SimLeader
from runtime.teleop.station import Station

from .conftest import CALIBRATION, IMAGE, Camera, received_goals, running_daemon, wait_for

RATE_HZ = 30.0
HANDOVER_DEG_S = 30.0
DEADMAN_MS = 150.0
QUANTUM = 360 / 4096 + 1e-6  # one servo tick, in degrees


@pytest.fixture
def daemon(demo_bundle: Path, short_dir: Path, camera: Camera) -> Iterator[Daemon]:
    config = DaemonConfig(
        engine=EngineConfig(bundle=str(demo_bundle)),
        server=ServerConfig(endpoints=(f"ipc://{short_dir}/policy.sock",)),
        arm=ArmConfig(kind="sim", calibration=str(CALIBRATION)),
        control=ControlConfig(
            rate_hz=RATE_HZ,
            n_action_steps=30,
            rt_priority=0,
            streams=(StreamConfig(IMAGE, camera.endpoint, 500.0),),
            safety=SafetyConfig(shutdown_action="torque_off", stall_timeout_s=0.8, stall_action="hold"),
        ),
        teleop=TeleopConfig(
            handover="move", handover_speed_deg_s=HANDOVER_DEG_S, deadman_ms=DEADMAN_MS, session_timeout_ms=1500.0
        ),
        recording=RecordingConfig(dataset_dir=str(short_dir / "data")),
        daemon=DaemonSettings(tick_s=0.05, state_dir=str(short_dir / "state")),
    )
    with running_daemon(config) as d:
        yield d


@pytest.fixture
def leader(calibration: Calibration) -> Iterator[SimLeader]:
    sim = SimLeader.start(calibration)
    yield sim
    sim.close()


class SerialClient(PolicyClient):
    """The station's target stream (its own thread) and the test's keys share one client: a ZeroMQ
    socket is not thread-safe, so one call at a time, as one station thread would make them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._one_call = threading.Lock()

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        with self._one_call:
            return super()._call(*args, **kwargs)


@pytest.fixture
def client(short_dir: Path) -> Iterator[PolicyClient]:
    with SerialClient(f"ipc://{short_dir}/policy.sock", timeout_s=5) as c:
        yield c


class Streaming:
    """The station's target stream on its own thread at the control rate; ``pause()`` plays a dead link."""

    def __init__(self, station: Station) -> None:
        self.station = station
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1 / RATE_HZ):
            if not self.paused.is_set():
                self.station.step()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)


def follower(daemon: Daemon) -> tuple[np.ndarray, np.ndarray]:
    assert daemon.arm is not None and daemon.arm.sim is not None
    return received_goals(daemon.arm.sim, daemon.arm.sim.bus.calibration)


def present(daemon: Daemon) -> np.ndarray:
    assert daemon.loop is not None and daemon.loop.snapshot().present is not None
    return daemon.loop.snapshot().present.copy()


def names(daemon: Daemon) -> tuple[str, ...]:
    assert daemon.loop is not None
    return daemon.loop.names


def test_take_over_from_a_running_policy_drive_hand_back_and_the_episode_loads_back(
    daemon: Daemon, leader: SimLeader, client: PolicyClient, short_dir: Path
) -> None:
    loop = daemon.loop
    assert loop is not None
    client.control("start", who="test")
    wait_for(lambda: loop.snapshot().counters["chunks"] >= 2, timeout=20, what="the policy driving")
    joints = names(daemon)
    # The operator's leader is far from the follower: a jump would be 25 degrees at once.
    far = present(daemon) + np.array([25.0, -20.0, 15.0, 0.0, 0.0, 0.0])
    leader.move_to(dict(zip(joints, far, strict=True)))
    station = Station(client, leader, who="alice", task="pick the cube")
    station.open()
    stream = Streaming(station)
    try:
        station.key("r")
        wait_for(lambda: loop.episodes is not None and loop.episodes.active, what="episode started")
        time.sleep(0.3)  # policy frames in the episode
        n_before = len(follower(daemon)[0])
        station.key("t")
        wait_for(lambda: loop.snapshot().mode == "teleop", what="teleop")
        wait_for(lambda: loop.snapshot().teleop_phase == "tracking", timeout=20, what="hand-over done")
        time.sleep(0.2)
        _, goals = follower(daemon)
        handover = goals[n_before:]
        steps = np.abs(np.diff(handover, axis=0)).max(axis=0)
        # at most handover_speed_deg_s per tick on every joint (plus a servo tick of rounding): no jump
        assert steps.max() <= HANDOVER_DEG_S / RATE_HZ + QUANTUM, steps
        np.testing.assert_allclose(goals[-1], far, atol=2 * QUANTUM)
        assert loop.snapshot().counters["takeovers"] == 1

        # drive: the follower tracks the leader
        target = far + np.array([-5.0, 5.0, 0.0, 3.0, 0.0, 0.0])
        leader.move_to(dict(zip(joints, target, strict=True)))
        wait_for(lambda: np.abs(follower(daemon)[1][-1] - target).max() < 2 * QUANTUM, timeout=15, what="tracking")

        # hand back: the policy's first chunk comes from the present pose, no jump either
        n_back = len(follower(daemon)[0])
        station.key("h")
        wait_for(lambda: loop.snapshot().mode == "running", what="policy again")
        wait_for(lambda: loop.snapshot().counters["chunks"] >= 4, timeout=20, what="a chunk after hand-back")
        time.sleep(0.3)
        after = follower(daemon)[1][n_back - 1 :]
        assert np.abs(np.diff(after, axis=0)).max() <= loop.config.safety.max_step_deg + QUANTUM
        station.key("s")
        wait_for(lambda: loop.episodes is not None and not loop.episodes.active, what="episode stopped")
    finally:
        stream.stop()
        station.close()
    assert daemon.recorder is not None and daemon.recorder.flush(30)
    status = daemon.recorder.status()
    assert status.episodes_written == 1 and status.overruns == 0, status

    from runtime.recording.reader import DatasetReader

    reader = DatasetReader(short_dir / "data")
    ep = reader.episode(0)
    assert ep.tasks == ["pick the cube"]
    sources = ep.columns["control.source"]
    # the episode runs policy -> teleop -> policy, in that order
    runs = [s for i, s in enumerate(sources) if i == 0 or (s != sources[i - 1] and s != "hold")]
    assert [r for r in runs if r != "hold"][:3] == ["policy", "teleop", "policy"], runs
    teleop = np.array([s == "teleop" for s in sources])
    assert ep.columns["control.intervention"][teleop].all()
    assert not ep.columns["control.intervention"][~teleop].any()
    # timestamps: one frame per tick of the loop's own clock
    dt = np.diff(ep.columns["control.time_s"])
    assert (dt > 0).all() and np.median(dt) == pytest.approx(1 / RATE_HZ, rel=0.1)
    np.testing.assert_allclose(ep.columns["timestamp"], np.arange(ep.length) / RATE_HZ, atol=1e-5)
    # actions are what the servos were sent (after the envelope), within one servo tick
    _, sent = follower(daemon)
    actions = ep.columns["action"][teleop]
    nearest = np.abs(actions[:, None, :] - sent[None, :, :]).max(axis=2).min(axis=1)
    assert nearest.max() <= QUANTUM, nearest.max()
    # while tracking, the request is the leader's pose
    assert np.abs(ep.columns["request.action"][teleop][-1] - target).max() <= 2 * QUANTUM
    frames = ep.images["observation.images.front"]
    assert frames.shape == (ep.length, 96, 128, 3)


def test_a_second_station_is_refused_and_may_only_watch(
    daemon: Daemon, leader: SimLeader, client: PolicyClient, short_dir: Path
) -> None:
    station = Station(client, leader, who="alice")
    station.open()
    with PolicyClient(f"ipc://{short_dir}/policy.sock", timeout_s=5) as other:
        with pytest.raises(SessionHeldError, match="alice"):
            other.teleop("open", who="bob")
        with pytest.raises(ControlRefusedError, match="alice"):
            other.control("start", who="bob")
        with pytest.raises(NoSessionError):
            other.teleop("take_over", session="0123456789abcdef")
        status = other.control("status")  # watching is allowed
        assert status["teleop"]["session"]["holder"].startswith("alice")
        assert status["teleop"]["session"]["refused"] == 1
    station.close()
    with PolicyClient(f"ipc://{short_dir}/policy.sock", timeout_s=5) as other:
        body, _ = other.teleop("open", who="bob")  # free again once closed
        assert body["session"]


def test_deadman_holds_then_the_stall_policy_and_a_lost_session_returns_to_hold(
    daemon: Daemon, leader: SimLeader, client: PolicyClient
) -> None:
    loop = daemon.loop
    assert loop is not None
    station = Station(client, leader, who="alice")
    station.open()
    base = leader.read()  # before the stream starts: one reader of the leader's bus at a time
    stream = Streaming(station)
    try:
        station.key("t")
        wait_for(lambda: loop.snapshot().teleop_phase == "tracking", timeout=15, what="tracking")
        joints = names(daemon)
        deadman0 = loop.snapshot().counters["deadman_ticks"]
        stream.paused.set()  # the link dies while the operator keeps moving the leader
        stopped_at = time.monotonic()
        leader.move_to(dict(zip(joints, base + 10.0, strict=True)))
        wait_for(lambda: loop.snapshot().counters["deadman_ticks"] > deadman0, what="the deadman")
        held_at = len(follower(daemon)[0])
        time.sleep(0.4)
        times, goals = follower(daemon)
        held = goals[held_at:]
        assert len(held) >= 5 and np.ptp(held, axis=0).max() == 0  # one goal, held
        assert np.abs(held[-1] - base).max() <= 2 * QUANTUM  # where the last target put it
        assert times[held_at] - stopped_at < (DEADMAN_MS / 1e3) + 3 / RATE_HZ + 0.2
        wait_for(lambda: loop.snapshot().counters["stall_actions"] == 1, timeout=3, what="the stall policy")
        assert loop.snapshot().mode == "teleop"  # stall_action = hold: still held, the session still open
        # the session itself is lost after session_timeout_ms of silence: the arm goes to hold
        wait_for(lambda: loop.snapshot().mode == "holding", timeout=5, what="hold after the session was lost")
        with pytest.raises(NoSessionError):
            client.teleop("take_over", session=station.session)
    finally:
        stream.stop()


def test_estop_from_the_station_latches(daemon: Daemon, leader: SimLeader, client: PolicyClient) -> None:
    loop = daemon.loop
    assert loop is not None
    station = Station(client, leader, who="alice")
    station.open()
    moved = leader.read() + 8.0  # before the stream starts: one reader of the leader's bus at a time
    stream = Streaming(station)
    try:
        station.key("t")
        wait_for(lambda: loop.snapshot().mode == "teleop", what="teleop")
        station.key("e")
        wait_for(lambda: loop.snapshot().mode == "estopped", what="e-stop")
        n = len(follower(daemon)[0])
        joints = names(daemon)
        leader.move_to(dict(zip(joints, moved, strict=True)))
        time.sleep(0.4)
        assert len(follower(daemon)[0]) == n  # targets keep coming; nothing reaches the servos
        assert station.status.estop.startswith("e-stop from the teleop station")
        assert "refused" in station.key("t") and loop.snapshot().mode == "estopped"  # latched
        with pytest.raises(ControlRefusedError, match="e-stop is latched"):
            client.teleop("hand_back", session=station.session)
    finally:
        stream.stop()
        station.close()


def test_closing_right_after_a_hand_back_leaves_the_policy_running(
    daemon: Daemon, leader: SimLeader, client: PolicyClient
) -> None:
    """A station that hands back and closes at once (``h`` then ``q``): the close must not stop the
    policy it just handed the arm to, though the mode still read teleop when the close came."""
    loop = daemon.loop
    assert loop is not None
    client.control("start")
    wait_for(lambda: loop.snapshot().mode == "running", what="policy running")
    body, _ = client.teleop("open", who="quick")
    session = body["session"]
    client.teleop("take_over", session=session)
    wait_for(lambda: loop.snapshot().mode == "teleop", what="teleop")
    client.teleop("hand_back", session=session)
    client.teleop("close", session=session)
    wait_for(lambda: loop.snapshot().mode == "running", what="the policy again")
    time.sleep(0.3)  # a stop queued behind the hand-back would have been carried out by now
    assert loop.snapshot().mode == "running"


def test_a_leader_on_the_robots_own_computer(
    demo_bundle: Path, short_dir: Path, camera: Camera, calibration: Calibration
) -> None:
    """``[teleop] leader_port``: the daemon reads the leader itself; stations are refused naming it."""
    from drivers.sim.arm import SimArm

    arm = SimArm.start(calibration, connect=False)  # the leader's servos on their own pty, read by the daemon
    hand = SimLeader(arm, calibration)
    config = DaemonConfig(
        engine=EngineConfig(bundle=str(demo_bundle)),
        server=ServerConfig(endpoints=(f"ipc://{short_dir}/policy.sock",)),
        arm=ArmConfig(kind="sim", calibration=str(CALIBRATION)),
        control=ControlConfig(rate_hz=RATE_HZ, rt_priority=0, streams=(StreamConfig(IMAGE, camera.endpoint, 500.0),)),
        teleop=TeleopConfig(leader_port=arm.simulator.port, leader_calibration=str(CALIBRATION)),
        daemon=DaemonSettings(tick_s=0.05, state_dir=str(short_dir / "state")),
    )
    d = Daemon(config, notifier=SystemdNotifier(None))
    d.startup()
    try:
        assert d.loop is not None and d.local_leader is not None
        wait_for(lambda: d.local_leader is not None and d.local_leader.reads > 5, what="leader reads")
        assert arm.simulator.servo(1).torque is False  # the operator moves it by hand
        with PolicyClient(f"ipc://{short_dir}/policy.sock", timeout_s=5) as client:
            with pytest.raises(SessionHeldError, match="daemon's own leader"):
                client.teleop("open", who="bob")
            client.control("teleop", who="operator")
            wait_for(lambda: d.loop is not None and d.loop.snapshot().teleop_phase == "tracking")
            target = present(d) + np.array([6.0, 0.0, -6.0, 0.0, 0.0, 0.0])
            hand.move_to(dict(zip(names(d), target, strict=True)))
            wait_for(
                lambda: np.abs(follower(d)[1][-1] - target).max() < 2 * QUANTUM,
                timeout=15,
                what="the follower following",
            )
    finally:
        d.shutdown()
        arm.simulator.stop()
