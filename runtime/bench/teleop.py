"""``lerobot-runtime bench teleop``: leader move -> follower goal write over TCP loopback, with the
station's lead fixed and measured, side by side in one run.

The daemon runs here as in production (demo policy on OpenVINO, the simulated follower on a pty
through the real Feetech driver, a synthetic camera over ZeroMQ, ``teleop.*`` on a TCP socket on
127.0.0.1). The station runs in a second process (``python -m runtime.bench.teleop station``) with
its simulated leader on its own pty: it takes over, streams targets at the control rate, and every
quarter second (plus a random part, so the moves fall anywhere in the ticks) moves the leader's
``shoulder_pan`` by one degree, noting the time on ``CLOCK_MONOTONIC``, which both processes share.
The latency of one move is from that time to the first goal the follower's servo received with the
new position (the simulator's own log, same clock). Stations take turns on the same daemon, one with
the fixed lead (:data:`~runtime.teleop.config.LEAD_MS`), one leading by its measured trips
(:mod:`runtime.teleop.lead`), :data:`ROUNDS` times each, so the two share the machine's changing load.

The move waits for the station's next leader read (up to one tick: it reads once a tick), then the
lead, then the loop's write; so its p99 is about one tick plus the lead. Goal: p99 <= one tick + the
trip's p99 + 2 ms, the trip being what the station measures of each target on its own clock: its
leader read and the way to the daemon, half the round trip (the reply's way back is not on the
move's path). Each lead is held to the goal with its own run's trips.
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
from runtime.teleop.lead import MIN_SAMPLES

CALIBRATION = "configs/calibration/so101_sim.toml"
MOVE_DEG = 1.0
JOINT = "shoulder_pan"


#: the leads the bench compares, in the order they run in each round
LEADS = ("fixed", "measured")
#: rounds of one station per lead, each streaming a share of the seconds: the load of a shared machine
#: changes by the minute, and taking turns spreads it over both leads alike
ROUNDS = 3


def run_teleop_bench(*, seconds: float, rate_hz: float) -> dict[str, Any]:
    """Both leads, each streaming ``seconds`` at ``rate_hz`` in :data:`ROUNDS` turns, on one daemon."""
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
    reports: dict[str, dict[str, Any]] = {}
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
            # The moves are found in the servo's goal log afterwards: it must hold both runs.
            servo = daemon.arm.sim.simulator.servo(daemon.arm.sim.bus.calibration.joints[JOINT].id)
            servo.goal_log = deque(maxlen=max(LOG_LENGTH, round((len(LEADS) * (seconds + 20 * ROUNDS)) * rate_hz)))
            share = seconds / ROUNDS
            for _ in range(ROUNDS):
                for lead in LEADS:
                    command = [sys.executable, "-m", "runtime.bench.teleop", "station", endpoint, str(share)]
                    station = subprocess.run(
                        [*command, calibration, lead],
                        capture_output=True,
                        text=True,
                        timeout=share + 60,
                    )
                    if station.returncode != 0:
                        raise RuntimeError(f"the {lead} lead's station process failed: {station.stderr[-2000:]}")
                    merge(reports.setdefault(lead, {}), json.loads(station.stdout.strip().splitlines()[-1]))
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
    tick_ms = 1e3 / rate_hz
    leads = {lead: lead_summary(report, times, goals, tick_ms) for lead, report in reports.items()}
    fixed, measured = leads["fixed"]["move_to_write_ms"]["p99"], leads["measured"]["move_to_write_ms"]["p99"]
    return {
        "rate_hz": rate_hz,
        "transport": "tcp 127.0.0.1, station in its own process",
        "tick_ms": tick_ms,
        "leads": leads,
        # the measured lead's p99 over the fixed one's, both from this run
        "p99_measured_over_fixed": (
            round(measured / fixed, 3) if measured is not None and fixed is not None and fixed > 0 else None
        ),
        "loop_overruns": overruns,
        "deadman_ticks": counters.get("deadman_ticks", 0),
        "cpu": cpu_line(),
    }


def merge(into: dict[str, Any], report: dict[str, Any]) -> None:
    """Add one station's report to its lead's: the lists joined, the misses added."""
    for key, value in report.items():
        if isinstance(value, list):
            into.setdefault(key, []).extend(value)
        elif isinstance(value, int):
            into[key] = into.get(key, 0) + value
        else:
            into[key] = value


def lead_summary(report: dict[str, Any], times: np.ndarray, goals: np.ndarray, tick_ms: float) -> dict[str, Any]:
    """One station's figures: its moves against the servo's goal log (``times`` on the shared clock,
    ``goals`` in degrees), its trips and leads, and the goal held to its own trips."""
    tolerance = 0.6 * 360 / 4096  # within a servo step of the new position
    reads = np.asarray(report["reads"], dtype=np.float64)
    latencies: list[float] = []
    from_read: list[float] = []
    missed = 0
    for t_move, value in report["moves"]:
        after = np.nonzero((times >= t_move) & (np.abs(goals - value) <= tolerance))[0]
        if len(after) == 0:
            missed += 1
            continue
        written = times[after[0]]
        latencies.append((written - t_move) * 1e3)
        read = reads[(reads >= t_move) & (reads <= written)]
        if len(read):
            from_read.append((written - read[0]) * 1e3)
    lat = pcts(latencies)
    read_ms = np.asarray(report["read_ms"], dtype=np.float64)
    rtt_ms = np.asarray(report["rtt_ms"], dtype=np.float64)
    trip = pcts(read_ms + rtt_ms / 2)  # each target's leader read and its way to the daemon
    goal = tick_ms + trip["p99"] + 2.0 if trip["p99"] is not None else None
    return {
        "lead": report["lead"],
        "samples": len(latencies),
        "missed": missed,
        "move_to_write_ms": lat,
        # the part after the station read the leader: the lead and the loop's write
        "read_to_write_ms": pcts(from_read),
        "leader_read_ms": pcts(read_ms),
        "station_rtt_ms": pcts(rtt_ms),
        "trip_ms": trip,
        # the lead each read was placed by, and how late the station woke for it (what the margin covers)
        "lead_ms": pcts(report["lead_ms"]),
        "station_woke_late_ms": pcts(report["woke_late_ms"]),
        # targets that reached the loop after the tick they were placed before, as the station counted them
        "misses": report["misses"],
        "goal_p99_ms": goal,
        "goal_met": bool(goal is not None and lat["p99"] is not None and lat["p99"] <= goal),
    }


def lines(result: dict[str, Any]) -> list[str]:
    """The result for a person: one line for the run, one per lead, the ratio."""
    out = [
        f"teleop at {result['rate_hz']:g} Hz over {result['transport']}; one tick {result['tick_ms']:.2f} ms; "
        f"CPU {result['cpu']}"
    ]
    for name, r in result["leads"].items():
        lat, trip, lead = r["move_to_write_ms"], r["trip_ms"], r["lead_ms"]
        if lat["p99"] is None or trip["p99"] is None or lead["p50"] is None:
            out.append(f"{name} lead: nothing measured ({r['samples']} moves, {r['missed']} not found)")
            continue
        goal = r["goal_p99_ms"]
        out.append(
            f"{name} lead {lead['p50']:.2f} ms (max {lead['max']:.2f}): leader move -> follower goal write "
            f"p50 {lat['p50']:.2f}, p99 {lat['p99']:.2f}, max {lat['max']:.2f} ms; trip p99 {trip['p99']:.2f} ms "
            f"(leader read {r['leader_read_ms']['p99']:.2f}, round trip {r['station_rtt_ms']['p99']:.2f}); "
            f"goal p99 <= one tick + trip p99 + 2 ms = {goal:.2f} ms: {'met' if r['goal_met'] else 'NOT met'}; "
            f"{r['samples']} moves, {r['misses']} targets missed their tick"
        )
    ratio = result["p99_measured_over_fixed"]
    if ratio is not None:
        out.append(f"p99 measured / fixed lead: {ratio:.3f}")
    return out


def _station(endpoint: str, seconds: float, calibration: str, lead: str) -> None:
    """The station process: take over, stream, move the leader, print what it measured as JSON."""
    from runtime.client import PolicyClient
    from runtime.teleop.leader import SimLeader
    from runtime.teleop.station import Station

    leader = SimLeader.start(calibration)
    rtts: list[float] = []
    read_ms: list[float] = []
    leads: list[float] = []
    woke_late: list[float] = []
    reads: list[float] = []
    moves: list[tuple[float, float]] = []
    try:
        with PolicyClient(endpoint, timeout_s=2.0) as client:
            station = Station(client, leader, who=f"bench ({lead} lead)", fixed_lead=lead == "fixed")
            station.open()
            station.step()
            station.key("t")
            end = time.monotonic() + 10
            # tracking, and the trips measured that the lead is made of (the fixed lead's station streams
            # as long, so both measure the same steady state, not the measured lead's start)
            while (station.status.phase != "tracking" or station.lead.samples < MIN_SAMPLES) and time.monotonic() < end:
                at = station.next_send_at(time.monotonic())
                time.sleep(max(0.0, at - time.monotonic()))
                station.step(at)
            base = float(leader.read()[leader.joints.index(JOINT)])
            stop = threading.Event()
            misses_before = station.status.misses

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
                lead_s = station.lead_s
                at = station.next_send_at(time.monotonic())
                time.sleep(max(0.0, at - time.monotonic()))
                woke = time.monotonic()
                reads.append(woke)
                sent = station.status.sent
                station.step(at)
                if station.status.sent > sent:  # a reply came: the trip was measured
                    rtts.append(station.status.rtt_ms)
                    read_ms.append(station.status.read_ms)  # waking late for it included
                    leads.append(lead_s * 1e3)
                    woke_late.append((woke - at) * 1e3)
            thread.join()
            misses = station.status.misses - misses_before
            station.close()
    finally:
        leader.close()
    print(
        json.dumps(
            {
                "lead": "fixed" if lead == "fixed" else "measured",
                "moves": moves,
                "reads": reads,
                "rtt_ms": rtts,
                "read_ms": read_ms,
                "lead_ms": leads,
                "woke_late_ms": woke_late,
                "misses": misses,
            }
        )
    )


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "station" and sys.argv[5] in LEADS:
        _station(sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        print(
            f"usage: python -m runtime.bench.teleop station ENDPOINT SECONDS CALIBRATION {{{','.join(LEADS)}}}",
            file=sys.stderr,
        )
        sys.exit(2)
