"""``lerobot-runtime bench teleop``: leader move -> follower goal write, over TCP loopback.

The daemon runs here as in production (demo policy on OpenVINO, the simulated follower on a pty
through the real Feetech driver, a synthetic camera over ZeroMQ, ``teleop.*`` on a TCP socket on
127.0.0.1). The station runs in a second process (``python -m runtime.bench.teleop station``) with
its simulated leader on its own pty: it takes over, streams targets at the control rate, and every
quarter second (plus a random part, so the moves fall anywhere in the ticks) moves the leader's
``shoulder_pan`` by one degree, noting the time on ``CLOCK_MONOTONIC``, which both processes share.
The latency of one move is from that time to the first goal the follower's servo received with the
new position (the simulator's own log, same clock). Target: p99 <= one control tick + 2 ms.

The move waits for the station's next leader read (up to one tick), the round trip, then the loop's
next tick (up to one tick); the two rates are not phase-locked, so the sum runs up to two ticks.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from drivers.sim.servo import LOG_LENGTH
from runtime.bench.machine import cpu_line
from runtime.bench.stats import pcts
from runtime.paths import data_root

CALIBRATION = "configs/calibration/so101_sim.toml"
MOVE_DEG = 1.0
JOINT = "shoulder_pan"


def run_teleop_bench(*, seconds: float, rate_hz: float) -> dict[str, Any]:
    from drivers.config import ArmConfig
    from runtime.config import DaemonConfig, DaemonSettings
    from runtime.control.config import ControlConfig, SafetyConfig, StreamConfig
    from runtime.daemon import Daemon
    from runtime.engine.config import EngineConfig
    from runtime.export.demo import ensure_bundle
    from runtime.producers.camera import CameraPublisher, SyntheticSource
    from runtime.sdnotify import SystemdNotifier
    from runtime.server.config import ServerConfig

    bundle = ensure_bundle("demo")
    calibration = str(data_root() / CALIBRATION)
    with tempfile.TemporaryDirectory(prefix="lrt-bench-teleop-") as tmp:
        cam_ep = f"ipc://{tmp}/cam.sock"
        camera = CameraPublisher(SyntheticSource(128, 96), "observation.images.front", cam_ep, 30.0)
        cam_thread = threading.Thread(target=camera.run, daemon=True)
        cam_thread.start()
        config = DaemonConfig(
            engine=EngineConfig(bundle=str(bundle)),
            server=ServerConfig(endpoints=("tcp://127.0.0.1:*",)),
            arm=ArmConfig(kind="sim", calibration=calibration),
            control=ControlConfig(
                rate_hz=rate_hz,
                rt_priority=0,
                streams=(StreamConfig("observation.images.front", cam_ep, 500.0),),
                safety=SafetyConfig(shutdown_action="torque_off"),
            ),
            daemon=DaemonSettings(state_dir=str(Path(tmp) / "state"), stats_log_interval_s=0),
        )
        daemon = Daemon(config, notifier=SystemdNotifier(None))
        daemon.startup()
        main = threading.Thread(target=daemon.main_loop, daemon=True)
        main.start()
        try:
            assert daemon.server is not None and daemon.arm is not None and daemon.arm.sim is not None
            endpoint = daemon.server.bound_endpoints[0]
            # The moves are found in the servo's goal log afterwards: it must hold the whole run.
            servo = daemon.arm.sim.simulator.servo(daemon.arm.sim.bus.calibration.joints[JOINT].id)
            servo.goal_log = deque(maxlen=max(LOG_LENGTH, round((seconds + 60) * rate_hz)))
            station = subprocess.run(
                [sys.executable, "-m", "runtime.bench.teleop", "station", endpoint, str(seconds), calibration],
                capture_output=True,
                text=True,
                timeout=seconds + 60,
            )
            if station.returncode != 0:
                raise RuntimeError(f"the station process failed: {station.stderr[-2000:]}")
            report = json.loads(station.stdout.strip().splitlines()[-1])
            sim = daemon.arm.sim
            joint = sim.bus.calibration.joints[JOINT]
            log = list(sim.simulator.servo(joint.id).goal_log)
            loop = daemon.loop
            assert loop is not None
            snap = loop.snapshot()
            counters = dict(snap.counters)
            overruns = snap.overruns
        finally:
            daemon.should_exit = True
            main.join(5)
            daemon.shutdown()
            camera.stop()
            cam_thread.join(2)
            camera.close()
    times = np.array([t for t, _ in log])
    goals = np.array([joint.to_user(g) for _, g in log])
    tick_deg = 360 / 4096
    reads = np.array(report["reads"])
    latencies: list[float] = []
    from_read: list[float] = []
    missed = 0
    for t_move, value in report["moves"]:
        after = np.nonzero((times >= t_move) & (np.abs(goals - value) <= 0.6 * tick_deg))[0]
        if len(after) == 0:
            missed += 1
            continue
        written = times[after[0]]
        latencies.append((written - t_move) * 1e3)
        read = reads[(reads >= t_move) & (reads <= written)]
        if len(read):
            from_read.append((written - read[0]) * 1e3)
    lat = np.array(latencies)
    tick_ms = 1e3 / rate_hz
    rtt = np.array(report["rtt_ms"])
    p99 = float(np.percentile(lat, 99)) if len(lat) else float("nan")
    return {
        "rate_hz": rate_hz,
        "transport": "tcp 127.0.0.1, station in its own process",
        "samples": len(lat),
        "missed": missed,
        "move_to_write_ms": pcts(lat),
        # the part after the station read the leader: the trip and the wait for the loop's tick
        "read_to_write_ms": pcts(np.array(from_read)),
        "station_rtt_ms": pcts(rtt),
        "tick_ms": tick_ms,
        "target_p99_ms": tick_ms + 2.0,
        "target_met": bool(p99 <= tick_ms + 2.0),
        "loop_overruns": overruns,
        "deadman_ticks": counters.get("deadman_ticks", 0),
        "cpu": cpu_line(),
    }


def _station(endpoint: str, seconds: float, calibration: str) -> None:
    """The station process: take over, stream, move the leader, print the move times as JSON."""
    from runtime.client import PolicyClient
    from runtime.teleop.leader import SimLeader
    from runtime.teleop.station import Station

    leader = SimLeader.start(calibration)
    rtts: list[float] = []
    reads: list[float] = []
    moves: list[tuple[float, float]] = []
    try:
        with PolicyClient(endpoint, timeout_s=2.0) as client:
            station = Station(client, leader, who="bench")
            station.open()
            station.step()
            station.key("t")
            end = time.monotonic() + 10
            while station.status.phase != "tracking" and time.monotonic() < end:
                time.sleep(1 / station.rate_hz)
                station.step()
            base = float(leader.read()[leader.joints.index(JOINT)])
            stop = threading.Event()

            def mover() -> None:
                rng = random.Random(7)
                value = base
                time.sleep(0.5)
                finish = time.monotonic() + seconds
                while time.monotonic() < finish:
                    value = base + MOVE_DEG if value == base else base
                    leader.move_to({JOINT: value})
                    moves.append((time.monotonic(), value))
                    time.sleep(0.15 + rng.random() / station.rate_hz)
                time.sleep(0.3)
                stop.set()

            thread = threading.Thread(target=mover, daemon=True)
            thread.start()
            while not stop.is_set():
                time.sleep(max(0.0, station.next_send_at(time.monotonic()) - time.monotonic()))
                reads.append(time.monotonic())
                station.step()
                rtts.append(station.status.rtt_ms)
            thread.join()
            station.close()
    finally:
        leader.close()
    print(json.dumps({"moves": moves, "rtt_ms": rtts, "reads": reads}))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "station":
        _station(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    else:
        print("usage: python -m runtime.bench.teleop station ENDPOINT SECONDS CALIBRATION", file=sys.stderr)
        sys.exit(2)
