"""A robot's daemon whose loop asks a policy on another lerobot-runtime: the demo bundle through
OpenVINO behind a CURVE server on a loopback TCP port, the simulated SO-101 on a pseudo-terminal, a
camera over ZeroMQ. It moves the arm, holds when the remote goes away, takes its stall action after
``stall_timeout_s``, and moves again only on ``control start`` once the remote is back."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from drivers.calibration import load_calibration
from drivers.config import ArmConfig
from runtime.arm_control.report import format_control_status
from runtime.bundle.bundle import Bundle
from runtime.client import PolicyClient
from runtime.config import DaemonConfig, DaemonSettings
from runtime.control.config import ControlConfig, SafetyConfig, StreamConfig
from runtime.errors import ConfigError
from runtime.metrics import control_metrics
from runtime.protocol.errors import NoPolicyError
from runtime.remote.config import RemotePolicyConfig
from runtime.server.config import ServerConfig
from tests.control.conftest import CALIBRATION, IMAGE, Camera, received_goals, running_daemon, wait_for

from .conftest import Remote

STALL_S = 1.0


def _samples(families: Any) -> dict[str, float]:
    """Each sample of the metric families as Prometheus prints it, and its value."""
    from prometheus_client import CollectorRegistry, generate_latest

    class Families:
        def collect(self) -> Any:
            return list(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())
    lines = [line for line in generate_latest(registry).decode().splitlines() if not line.startswith("#")]
    return {name: float(value) for name, _, value in (line.rpartition(" ") for line in lines)}


def _config(remote: Remote, keys: dict[str, Path], short_dir: Path, camera: Camera) -> DaemonConfig:
    return DaemonConfig(
        policy=RemotePolicyConfig(
            remote.endpoint, str(keys["server_public"]), str(keys["robot_secret"]), timeout_s=0.3, ping_s=0.05
        ),
        server=ServerConfig(endpoints=(f"ipc://{short_dir}/robot.sock",)),
        arm=ArmConfig(kind="sim", calibration=str(CALIBRATION)),
        control=ControlConfig(
            n_action_steps=30,
            rt_priority=0,
            streams=(StreamConfig(IMAGE, camera.endpoint, 300.0),),
            safety=SafetyConfig(stall_timeout_s=STALL_S, stall_action="torque_off", shutdown_action="torque_off"),
        ),
        daemon=DaemonSettings(tick_s=0.05, state_dir=str(short_dir / "state")),
    )


def test_the_robot_moves_holds_when_the_remote_goes_and_starts_again_only_when_asked(
    demo_engine: Any,
    demo_bundle: Path,
    remote: Callable[[Any], Remote],
    keys: dict[str, Path],
    short_dir: Path,
    camera: Camera,
) -> None:
    server = remote(demo_engine)
    with running_daemon(_config(server, keys, short_dir, camera)) as daemon:
        assert daemon.arm is not None and daemon.arm.sim is not None
        sim = daemon.arm.sim
        with PolicyClient(f"ipc://{short_dir}/robot.sock", timeout_s=5) as client:
            hello = client.hello()
            assert "infer" not in hello.kinds and "control.start" in hello.kinds
            assert hello.engine["where"] == "remote" and hello.engine["endpoint"] == server.endpoint
            assert hello.policy_name == Bundle.open(demo_bundle).manifest.policy_name
            case = Bundle.open(demo_bundle).test_case()
            with pytest.raises(NoPolicyError, match=f"its loop asks {server.endpoint}; send observations there"):
                client.infer(case.inputs)

            assert client.control("start", who="test")["accepted"]
            wait_for(lambda: client.control("status")["counters"].get("chunks", 0) >= 3, timeout=20, what="chunks")
            status = client.control("status")
            assert status["mode"] == "running" and status["counters"].get("starved", 0) == 0
            policy = status["policy"]
            assert policy["where"] == "remote" and policy["endpoint"] == server.endpoint and policy["link"] == "up"
            assert policy["round_trip"]["count"] >= 3 and policy["counters"]["chunks"] >= 3
            scraped = _samples(control_metrics(status))
            assert scraped[f'lerobot_runtime_remote_policy_link_up{{endpoint="{server.endpoint}"}}'] == 1.0
            assert scraped['lerobot_runtime_remote_policy_round_trip_milliseconds{quantile="0.99"}'] > 0
            report = format_control_status(status).splitlines()
            line = next(line for line in report if line.startswith("policy "))
            assert line.startswith(f"policy     {hello.policy_name} at {server.endpoint} (remote, link up, round trip ")

            # the remote goes away mid-motion: the loop holds, then turns torque off after stall_timeout_s
            server.stop()
            gone = time.monotonic()
            wait_for(lambda: bool(client.control("status")["blocked"]), timeout=2.0, what="the hold")
            held_at = time.monotonic()
            status = client.control("status")
            assert status["policy"]["link"] == "lost"
            assert status["blocked"].startswith(f"policy unreachable: the policy at {server.endpoint}: ")
            wait_for(lambda: daemon.loop.snapshot().mode == "idle", timeout=STALL_S + 3, what="the stall action")  # type: ignore[union-attr]
            off_at = time.monotonic()
            assert STALL_S <= off_at - gone < STALL_S + 2.0
            assert held_at - gone < 0.5  # the closed connection is seen at once, not after the silence bound
            wait_for(
                lambda: client.control("status")["counters"].get("torque_offs", 0) >= 1, timeout=2, what="torque off"
            )
            assert client.control("status")["counters"]["stall_actions"] == 1

            # what the servos received after the loss: one goal, held, until torque went off
            times, goals = received_goals(sim, load_calibration(CALIBRATION))
            after = goals[(times > held_at) & (times < off_at - 0.05)]
            assert len(after) >= 10 and np.abs(after - after[0]).max() < 0.5

            # the remote comes back: the link is up again, the arm stays still until an operator starts it
            server.start()
            wait_for(lambda: client.control("status")["policy"]["link"] == "up", timeout=5, what="the link back")
            chunks = client.control("status")["counters"]["chunks"]
            time.sleep(0.5)
            status = client.control("status")
            assert status["mode"] == "idle" and status["counters"]["chunks"] == chunks
            assert client.control("start", who="test")["accepted"]
            wait_for(
                lambda: client.control("status")["counters"]["chunks"] >= chunks + 2, timeout=20, what="chunks again"
            )


def test_the_local_fallback_drives_after_the_hold_and_the_remote_again_from_the_next_start(
    demo_engine: Any,
    demo_bundle: Path,
    remote: Callable[[Any], Remote],
    keys: dict[str, Path],
    short_dir: Path,
    camera: Camera,
) -> None:
    from dataclasses import replace

    from runtime.engine.config import EngineConfig

    server = remote(demo_engine)
    base = _config(server, keys, short_dir, camera)
    config = replace(
        base,
        policy=replace(base.policy, fallback=True, fallback_after_s=0.3),
        engine=EngineConfig(bundle=str(demo_bundle), parity_runs=4),
    )
    with running_daemon(config) as daemon, PolicyClient(f"ipc://{short_dir}/robot.sock", timeout_s=5) as client:
        assert daemon.remote is not None
        assert client.control("start", who="test")["accepted"]
        wait_for(lambda: client.control("status")["counters"].get("chunks", 0) >= 3, timeout=20, what="chunks")
        assert client.control("status")["policy"]["driving"] == "remote"

        server.stop()
        wait_for(lambda: client.control("status")["policy"]["driving"] == "local fallback", timeout=3, what="fallback")
        chunks = client.control("status")["counters"]["chunks"]
        wait_for(lambda: client.control("status")["counters"]["chunks"] >= chunks + 3, timeout=10, what="local chunks")
        status = client.control("status")
        assert status["mode"] == "running" and status["policy"]["link"] == "lost"
        assert status["counters"].get("stall_actions", 0) == 0  # held 0.3 s, not the stall timeout
        line = next(x for x in format_control_status(status).splitlines() if x.startswith("policy "))
        assert line.startswith("policy     the local fallback demo_act_residual (") and " drives, not " in line

        server.start()
        wait_for(lambda: client.control("status")["policy"]["link"] == "up", timeout=5, what="the link back")
        time.sleep(0.3)
        assert client.control("status")["policy"]["driving"] == "local fallback"  # until the next run
        client.control("stop", who="test")
        assert client.control("start", who="test")["accepted"]
        wait_for(lambda: client.control("status")["policy"]["driving"] == "remote", timeout=5, what="the remote")


def test_a_remote_that_never_answers_stops_start_up_with_its_endpoint(short_dir: Path, camera: Camera) -> None:
    from runtime.daemon import Daemon
    from runtime.sdnotify import SystemdNotifier

    config = DaemonConfig(
        policy=RemotePolicyConfig("tcp://127.0.0.1:9", connect_wait_s=0.5, timeout_s=0.1, ping_s=0.05),
        server=ServerConfig(endpoints=(f"ipc://{short_dir}/robot.sock",)),
        arm=ArmConfig(kind="sim", calibration=str(CALIBRATION)),
    )
    daemon = Daemon(config, notifier=SystemdNotifier(None))
    with pytest.raises(ConfigError, match=r"^policy.endpoint: no answer from tcp://127.0.0.1:9 within"):
        daemon.startup()
    daemon.shutdown()
