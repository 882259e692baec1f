"""The daemon drives the simulated arm: real demo bundle, real OpenVINO, camera frames over ZeroMQ,
``control.*`` over a real socket, and inference seen running off the control CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from drivers.config import ArmConfig
from runtime.cli import main
from runtime.client import PolicyClient
from runtime.config import DaemonConfig, DaemonSettings
from runtime.control.config import ControlConfig, SafetyConfig, StreamConfig
from runtime.daemon import Daemon
from runtime.engine.affinity import thread_cpu, thread_cpu_time, thread_cpus_allowed
from runtime.engine.config import EngineConfig
from runtime.protocol.errors import ControlRefusedError, NoControlError
from runtime.sdnotify import SystemdNotifier
from runtime.server.config import ServerConfig
from runtime.status import format_status, gather

from .conftest import CALIBRATION, IMAGE, ROOT, Camera, running_daemon, wait_for


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
    with running_daemon(config) as d:
        yield d


def test_control_start_moves_the_arm_estop_latches_release_and_shutdown(daemon: Daemon, short_dir: Path, capsys):
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
        # the loop's own inferences show in `status` as a socket client's do: requests, CPUs, the loop named
        info, stats = client.hello(), client.stats()
        asked = stats.local_requests["infer"]
        assert asked >= 3 and stats.requests["infer"] == asked and sum(stats.inference_cpus.values()) >= 3
        report = format_status(gather(info, stats)).splitlines()
        assert "no CPU yet" not in report[1]
        requests = next(line for line in report if line.startswith("requests"))
        assert f" infer={asked} ({asked} from the control loop) stats=1; errors none" in requests
        assert "gate       passed, all 16 parity replays" in report  # the daemon's start is staged
        moved = np.abs(np.array([s.position for s in sim.servos.values()]) - before)
        assert moved.max() > 20  # the demo policy drives the simulated joints (ticks)

        latch = client.control("estop", reason="operator test")["estop"]["latch"]
        wait_for(lambda: daemon.loop.snapshot().mode == "estopped", what="e-stop")
        with pytest.raises(ControlRefusedError, match="e-stop is latched"):
            client.control("start")
        assert client.control("status")["estop"] == {"latched": True, "reason": "operator test", "latch": latch}
        again = client.control("estop", reason="pressed again")["estop"]
        assert again == {"latched": True, "reason": "pressed again", "latch": again["latch"]}
        assert again["latch"] != latch
        with pytest.raises(ControlRefusedError) as stale:
            client.control("release", who="test", latch=latch)  # the latch this operator saw first
        assert stale.value.field == "body.latch"
        assert (stale.value.expected, stale.value.received) == (str(again["latch"]), str(latch))
        assert f"names e-stop latch {latch}, but the latch now is {again['latch']} (pressed again)" in str(stale.value)
        wait_for(lambda: getattr(daemon.loop.snapshot().latch, "id", 0) == again["latch"], what="latch 2")
        assert daemon.loop.snapshot().mode == "estopped"
        # the CLI releases the latch that status shows, in one command
        assert main(["control", "release", "--who", "test", "--connect", f"ipc://{short_dir}/policy.sock"]) == 0
        assert f"releasing e-stop latch {again['latch']} (pressed again)" in capsys.readouterr().out
        wait_for(lambda: daemon.loop.snapshot().mode == "holding", what="release")
        assert client.control("status")["estop"] == {"latched": False, "reason": "", "latch": 0}
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
def test_inference_runs_off_the_control_cpu_while_the_daemon_serves(demo_bundle: Path, short_dir: Path, camera: Camera):
    """``lerobot-runtime serve`` in its own process, moving the arm while another process keeps inference
    busy: where its threads really ran (``/proc/PID/task/*/stat`` field 39) and what the kernel allowed."""
    cpus = sorted(os.sched_getaffinity(0))
    control_cpu, engine_cpus = cpus[0], set(cpus[1:])
    endpoint = f"ipc://{short_dir}/policy.sock"
    config = short_dir / "c.toml"
    config.write_text(
        f"""
[engine]
bundle = "{demo_bundle}"
control_cpu = {control_cpu}
[server]
endpoints = ["{endpoint}"]
[arm]
kind = "sim"
calibration = "{CALIBRATION}"
[control]
rt_priority = 0
[[control.streams]]
input = "{IMAGE}"
endpoint = "{camera.endpoint}"
max_age_ms = 500.0
[daemon]
state_dir = "{short_dir / "state"}"
"""
    )
    daemon = subprocess.Popen(
        [sys.executable, "-m", "runtime", "serve", "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    load = None
    try:
        with PolicyClient(endpoint, timeout_s=60) as client:
            info = client.hello()
            assert set(info.engine["cpus"]) == engine_cpus
            wait_for(lambda: _control_ready(client), timeout=60, what="the control loop with camera frames")
            client.control("start")
            status = client.control("status")
            threads, processes = status["threads"], status["processes"]
        # the loop runs in the arm process, inference in the daemon's
        assert processes["inference"] == daemon.pid and processes["control"] != daemon.pid
        specs = json.dumps([[i.name, i.dtype, list(i.shape)] for i in info.inputs])
        # Requests back to back from another process, as a busy robot's clients would send them.
        load = subprocess.Popen(
            [sys.executable, "-m", "runtime.bench.serve_client", endpoint, "served", specs, "100000", "0", "-1"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        time.sleep(0.5)
        where = {"control": processes["control"], "inference": processes["inference"]}
        tasks = [(pid, int(t)) for pid in set(where.values()) for t in os.listdir(f"/proc/{pid}/task")]
        cpu_time = {(pid, t): thread_cpu_time(t, pid) or 0 for pid, t in tasks}
        seen: dict[tuple[int, int], set[int]] = {task: set() for task in tasks}
        masks: set[int] = set()
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            for pid, t in tasks:
                cpu = thread_cpu(t, pid)
                if cpu is not None:
                    seen[(pid, t)].add(cpu)
            masks |= thread_cpus_allowed(threads["inference"], where["inference"]) or set()
            time.sleep(0.002)
        busy = {task: (thread_cpu_time(task[1], task[0]) or 0) - cpu_time[task] for task in tasks}
    finally:
        if load is not None:
            load.kill()
            load.wait()
        daemon.terminate()
        daemon.wait(30)
    busiest = max(busy, key=lambda t: busy[t])
    assert busiest == (where["inference"], threads["inference"])  # inference is what keeps a CPU busy
    assert seen[busiest] <= engine_cpus, f"inference ran on {sorted(seen[busiest])}"
    # Not only where it happened to run: the kernel was never allowed to put inference on the control CPU.
    assert masks == engine_cpus, f"the inference thread's affinity reached {sorted(masks)}"
    # the loop's thread, in the arm process, ran on the control CPU and nowhere else
    assert seen[(where["control"], threads["control"])] == {control_cpu}


def _control_ready(client: PolicyClient) -> bool:
    try:
        return not client.control("status")["stale_streams"]
    except NoControlError as e:
        assert "starting" in e.message  # not "does not drive an arm": it will once the arm answers
        return False
