"""The daemon drives the simulated arm: real demo bundle, real OpenVINO, camera frames over ZeroMQ,
``control.*`` over a real socket, and inference seen running off the control CPU."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from drivers.config import ArmConfig
from runtime.client import PolicyClient
from runtime.config import DaemonConfig, DaemonSettings
from runtime.control.config import ControlConfig, SafetyConfig, StreamConfig
from runtime.daemon import Daemon
from runtime.engine.affinity import thread_cpu, thread_cpu_time
from runtime.engine.config import EngineConfig
from runtime.protocol.errors import ControlRefusedError, NoControlError
from runtime.sdnotify import SystemdNotifier
from runtime.server.config import ServerConfig

from .conftest import CALIBRATION, IMAGE, Camera, wait_for


@pytest.fixture
def daemon(demo_bundle: Path, short_dir: Path, camera: Camera):
    cpus = sorted(os.sched_getaffinity(0))
    config = DaemonConfig(
        engine=EngineConfig(bundle=str(demo_bundle), control_cpu=cpus[0]),
        server=ServerConfig(endpoints=(f"ipc://{short_dir}/policy.sock",)),
        arm=ArmConfig(kind="sim", calibration=str(CALIBRATION)),
        control=ControlConfig(
            n_action_steps=30,
            rt_priority=0,
            streams=(StreamConfig(IMAGE, camera.endpoint, 300.0),),
            safety=SafetyConfig(shutdown_action="torque_off"),
        ),
        daemon=DaemonSettings(tick_s=0.05, state_dir=str(short_dir / "state")),
    )
    d = Daemon(config, notifier=SystemdNotifier(None))
    d.startup()
    assert d.streams is not None
    wait_for(lambda: not d.streams.stale(time.monotonic()), what="camera frames at the daemon")
    thread = threading.Thread(target=d.main_loop, daemon=True)
    thread.start()
    yield d
    d.should_exit = True
    thread.join(5)
    d.shutdown()


def test_control_start_moves_the_arm_estop_latches_release_and_shutdown(daemon: Daemon, short_dir: Path):
    assert daemon.arm is not None and daemon.arm.sim is not None and daemon.loop is not None
    sim = daemon.arm.sim.simulator
    before = np.array([s.position for s in sim.servos.values()])
    with PolicyClient(f"ipc://{short_dir}/policy.sock", timeout_s=5) as client:
        assert "control.start" in client.hello().kinds
        assert client.control("start", who="test")["accepted"]
        wait_for(lambda: client.control("status")["counters"].get("chunks", 0) >= 3, timeout=20, what="chunks")
        status = client.control("status")
        assert status["mode"] == "running"
        assert status["counters"].get("starved", 0) == 0  # the queue refilled before it emptied
        assert status["inference_latency_ticks"]["max"] is not None
        moved = np.abs(np.array([s.position for s in sim.servos.values()]) - before)
        assert moved.max() > 20  # the demo policy drives the simulated joints (ticks)

        client.control("estop", reason="operator test")
        wait_for(lambda: daemon.loop.mode == "estopped", what="e-stop")
        with pytest.raises(ControlRefusedError, match="e-stop is latched"):
            client.control("start")
        assert client.control("status")["estop"] == {"latched": True, "reason": "operator test"}
        client.control("release", who="test")
        wait_for(lambda: daemon.loop.mode == "holding", what="release")
        client.control("dump")
    wait_for(lambda: any((short_dir / "state").glob("flight-*requested*.npz")), what="the requested recording")
    assert any((short_dir / "state").glob("flight-*estop*.npz"))


def test_control_kinds_without_an_arm_get_no_control(demo_bundle: Path, short_dir: Path):
    config = DaemonConfig(
        engine=EngineConfig(bundle=str(demo_bundle)),
        server=ServerConfig(endpoints=(f"ipc://{short_dir}/p.sock",)),
        arm=ArmConfig(kind="none"),
    )
    d = Daemon(config, notifier=SystemdNotifier(None))
    d.startup()
    try:
        with PolicyClient(f"ipc://{short_dir}/p.sock", timeout_s=5) as client:
            with pytest.raises(NoControlError, match="does not drive an arm"):
                client.control("start")
            assert client.ping().uptime_s >= 0  # the connection is still served
    finally:
        d.shutdown()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs: one for control, one for inference")
def test_inference_runs_off_the_control_cpu_while_the_daemon_serves(daemon: Daemon, short_dir: Path):
    """Where threads really ran (``/proc/self/task/*/stat`` field 39), sampled while inference is busy."""
    assert daemon.server is not None and daemon.loop is not None
    control_cpu = daemon.config.engine.control_cpu
    engine_cpus = set(daemon.server.engine.info.cpus)
    assert control_cpu not in engine_cpus
    stop = threading.Event()
    obs = {
        IMAGE: np.zeros((96, 128, 3), np.uint8),
        "observation.state": np.zeros(6, np.float32),
    }

    def hammer() -> None:
        with PolicyClient(f"ipc://{short_dir}/policy.sock", timeout_s=5) as client:
            while not stop.is_set():
                client.infer(obs)

    with PolicyClient(f"ipc://{short_dir}/policy.sock", timeout_s=5) as client:
        client.control("start")
    load = threading.Thread(target=hammer, daemon=True)
    load.start()
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
        cpu_time = {t: thread_cpu_time(t) or 0 for t in tids}
        seen: dict[int, list[int]] = {t: [] for t in tids}
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            for t in tids:
                cpu = thread_cpu(t)
                if cpu is not None:
                    seen[t].append(cpu)
            time.sleep(0.002)
        busy = {t: (thread_cpu_time(t) or 0) - cpu_time[t] for t in tids}
    finally:
        stop.set()
        load.join(5)
    busiest = max(busy, key=lambda t: busy[t])
    assert busiest == daemon.server.worker_thread_id  # inference is what keeps a CPU busy
    assert set(seen[busiest]) <= engine_cpus, f"inference ran on {sorted(set(seen[busiest]))}"
    assert set(seen[daemon.loop.native_id]) == {control_cpu}
