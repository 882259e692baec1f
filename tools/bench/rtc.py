"""``python -m tools.bench.rtc``: how much the goals jump where one chunk takes over from the next, with
real-time chunking and without, measured at the servos.

The policy is a tiny SmolVLA taught to follow a sine whose direction its observation cannot tell
(runtime.policies.smolvla_sine), exported with ``export --lerobot`` (RTC enabled in its config) once
into the bundle store. The daemon serves it as on the robot (openvino engine, the arm process, the
simulated SO-101 on a pseudo-terminal, a synthetic camera). The tiny model answers in a few
milliseconds where a robot's SmolVLA takes hundreds, so each inference is held to a floor (``--infer-ms``,
a delay in the inference worker after the engine ran) and a chunk takes several ticks to arrive, as
the loop measures it. Two runs with the same noise seed: ``[control.rtc]`` on (each request
carries the plan's leftover and the delay) and off (``enabled = false``: every chunk sampled afresh).

From each run: the simulated servos' log of every goal write (as the bytes arrived), and the flight
recording, which says at which tick a chunk was merged (the queue's depth rises). A boundary is the
first write from a new chunk; its *goal step change* is, per joint, |(g[b] - g[b-1]) - (g[b-1] -
g[b-2])| in degrees (each step per tick: a tick the loop skipped under load spans two periods): how
much the commanded velocity changes there. Within a chunk the trained
policy's own steps change little; where a fresh chunk turns the other way, much. The envelope's
velocity and acceleration bounds are opened so that what the policy commands reaches the servos.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from runtime.bench.machine import cpu_summary
from runtime.engine.base import Engine

log = logging.getLogger(__name__)

BUNDLE: Final = "bench-rtc-smolvla"
POLICY: Final = "bench_rtc_smolvla"
TRAIN_STEPS: Final = 3000
NOISE_SEED: Final = 7


def rtc_bundle(train_steps: int = TRAIN_STEPS) -> Path:
    """The benchmark's SmolVLA bundle, built once into the bundle store (a few minutes: training and
    export, each in a process of its own) and reused while it is current."""
    from drivers.calibration import SO101_JOINTS
    from runtime.export.demo import ensure_checkpoint_bundle

    return ensure_checkpoint_bundle(
        BUNDLE,
        POLICY,
        ("runtime.policies.smolvla_sine", str(train_steps)),
        export_args=("--action-names", ",".join(SO101_JOINTS)),
        fits=lambda m: m.rtc is not None,
    )


def _config(workdir: Path, bundle: Path, camera: str, rate_hz: float, rtc: bool, task: str, seconds: float) -> Path:
    path = workdir / f"daemon-{'rtc' if rtc else 'fresh'}.toml"
    path.write_text(
        f"""
[engine]
bundle = {json.dumps(str(bundle))}
engine = "openvino"
[server]
endpoints = [{json.dumps(f"ipc://{workdir}/policy.sock")}]
noise_seed = {NOISE_SEED}
canary_interval_s = 0
[arm]
kind = "sim"
[control]
rate_hz = {rate_hz}
task = {json.dumps(task)}
rt_priority = 0
recorder_s = {seconds + 30.0}
[control.rtc]
enabled = {"true" if rtc else "false"}
[control.safety]
max_step_deg = 60.0
max_step_change_deg = 60.0
gripper_max_step_pct = 100.0
gripper_max_step_change_pct = 100.0
max_first_step_deg = 360.0
stall_timeout_s = 5.0
[[control.streams]]
input = "observation.images.front"
endpoint = {json.dumps(camera)}
max_age_ms = 1000.0
[daemon]
state_dir = {json.dumps(str(workdir / "state"))}
stats_log_interval_s = 0
"""
    )
    return path


class _Camera:
    """The synthetic camera, on a thread, publishing as ``lerobot-runtime camera --synthetic`` does."""

    def __init__(self, endpoint: str, width: int, height: int, fps: float = 30.0) -> None:
        from runtime.producers.camera import CameraPublisher, SyntheticSource

        self.publisher = CameraPublisher(SyntheticSource(width, height), "observation.images.front", endpoint, fps)
        self.endpoint = self.publisher.endpoint
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-rtc-camera", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        src = self.publisher.source
        while not self._stop.wait(self.publisher.period):
            self.publisher.publish(src.read(), time.monotonic())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.publisher.close()


class _Slowed(Engine):
    """The loaded engine, each inference held to at least ``floor_s`` (it runs on the inference worker)."""

    def __init__(self, inner: Engine, floor_s: float) -> None:
        super().__init__(inner.manifest, inner.info)
        self.test_case = inner.test_case
        self.inner = inner
        self.floor_s = floor_s

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        started = time.monotonic()
        out = self.inner.run_validated(arrays)
        rest = self.floor_s - (time.monotonic() - started)
        if rest > 0:
            time.sleep(rest)
        return out

    def close(self) -> None:
        self.inner.close()


def run_once(
    bundle: Path, *, rtc: bool, seconds: float, rate_hz: float, infer_ms: float, workdir: Path
) -> dict[str, Any]:
    """One run of the daemon on the bundle; the servos' goal log and the flight recording, analysed."""
    from drivers.calibration import load_calibration
    from runtime.bundle.manifest import read_manifest
    from runtime.client import PolicyClient
    from runtime.config import load_config
    from runtime.control.recorder import load_flight
    from runtime.daemon import Daemon
    from runtime.engine.loader import load_engine
    from runtime.policies.smolvla_sine import TASK
    from runtime.protocol.errors import NoControlError
    from runtime.sdnotify import SystemdNotifier

    image = next(s for s in read_manifest(bundle).observation_inputs if s.role == "image")
    height, width = image.shape[:2]
    camera = _Camera(f"ipc://{workdir}/cam.sock", width, height)
    config = load_config(_config(workdir, bundle, camera.endpoint, rate_hz, rtc, TASK, seconds))
    d = Daemon(
        config,
        engine_factory=lambda: _Slowed(load_engine(config.engine), infer_ms / 1e3),
        notifier=SystemdNotifier(None),
    )
    main = threading.Thread(target=d.main_loop, name="bench-rtc-daemon", daemon=True)
    try:
        d.startup()
        main.start()
        with PolicyClient(f"ipc://{workdir}/policy.sock", timeout_s=30) as client:

            def fresh() -> bool:
                with contextlib.suppress(NoControlError):
                    return not client.control("status")["stale_streams"]
                return False

            _wait(fresh, 30, "camera frames at the daemon")
            client.control("start", who="bench rtc")
            _wait(lambda: client.control("status")["counters"].get("chunks", 0) >= 2, 60, "the first chunks")
            t0 = time.monotonic()
            time.sleep(seconds)
            dumped = Path(client.control("dump")["directory"])
            t1 = time.monotonic()
            client.control("stop", who="bench rtc")
            status = client.control("status")
            _wait(lambda: _flights(dumped), 15, "the flight recording")
        assert d.arm is not None and d.arm.sim is not None
        sim = d.arm.sim.simulator
        calibration = load_calibration(config.arm.calibration)
        names = list(calibration.joints)
        logs = [list(sim.servo(calibration.joints[n].id).goal_log) for n in names]
        flight = _newest_flight(dumped)
    finally:
        d.should_exit = True
        if main.is_alive():
            main.join(5)
        with contextlib.suppress(Exception):
            d.shutdown()
        camera.close()
    meta, rows = load_flight(flight)
    n = min(len(entry) for entry in logs)
    times = np.array([logs[0][i][0] for i in range(n)])
    goals = np.array([[calibration.joints[m].to_user(logs[j][i][1]) for j, m in enumerate(names)] for i in range(n)])
    result = analyse(rows, meta, times, goals, t0, t1)
    counters = status["counters"]
    result.update(
        rtc=rtc,
        chunks=int(counters.get("chunks", 0)),
        prefix_requests=int(counters.get("prefix_requests", 0)),
        starved=int(counters.get("starved", 0)),
        inference_failures=int(counters.get("inference_failures", 0)),
    )
    return result


def _flights(directory: Path) -> list[Path]:
    return [p for p in directory.glob("flight-*.npz") if not p.name.endswith(".tmp.npz")]


def _newest_flight(directory: Path) -> Path:
    found = _flights(directory)
    if not found:
        raise RuntimeError(f"bench rtc: no flight recording in {directory}")
    return max(found, key=lambda p: p.stat().st_mtime)


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench rtc: timed out waiting for {what}")
        time.sleep(0.05)


def analyse(
    rows: dict[str, np.ndarray], meta: dict[str, Any], times: np.ndarray, goals: np.ndarray, t0: float, t1: float
) -> dict[str, Any]:
    """Goal step changes at the servos, at the chunk boundaries the flight recording shows and elsewhere."""
    running = rows["mode"] == meta["modes"].index("running")
    depth = rows["queue_depth"]
    requested = ~np.isnan(rows["requested"]).any(axis=1)
    # when each tick's write completed: its deadline (wake time less lateness) plus the write's delay
    written = rows["t"] - rows["late_ms"] / 1e3 + rows["write_ms"] / 1e3
    period = 1.0 / float(meta["rate_hz"])
    boundary_rows = [
        i
        for i in range(2, len(depth))
        if running[i] and requested[i - 2 : i + 1].all() and depth[i] > depth[i - 1] and t0 <= rows["t"][i] <= t1
    ]
    window = (times >= t0) & (times <= t1)
    # per tick: a tick the loop skipped on a loaded machine (an overrun; its action is never taken) shows
    # as one write two periods after the last, whose step is divided by the periods it spans
    ticks = np.maximum(1, np.round(np.diff(times) / period))[:, None]
    velocity = np.full(goals.shape, np.nan)
    velocity[1:] = (goals[1:] - goals[:-1]) / ticks
    change = np.full(len(times), np.nan)
    change[2:] = np.abs(velocity[2:] - velocity[1:-1]).max(axis=1)
    jump = np.full(len(times), np.nan)
    jump[1:] = np.abs(velocity[1:]).max(axis=1)
    at: list[int] = []
    for i in boundary_rows:
        j = int(np.argmin(np.abs(times - written[i])))
        if abs(times[j] - written[i]) < period / 2 and j >= 2:
            at.append(j)
    boundary = np.zeros(len(times), bool)
    boundary[at] = True
    inside = window & ~boundary & ~np.isnan(change)
    inside[1:] &= ~boundary[:-1]  # the write after a boundary changes back: not the policy's own either
    latency = rows["latency_ticks"][boundary_rows] if boundary_rows else np.array([np.nan])
    return {
        "boundaries": len(at),
        "delay_ticks": {"p50": _q(latency, 0.5), "max": _q(latency, 1.0)},
        "boundary_step_change_deg": {"max": _q(change[at], 1.0), "p50": _q(change[at], 0.5)},
        "boundary_jump_deg": {"max": _q(jump[at], 1.0), "p50": _q(jump[at], 0.5)},
        "within_chunk_step_change_deg": {"p99": _q(change[inside], 0.99), "max": _q(change[inside], 1.0)},
        "writes": int(window.sum()),
    }


def _q(values: np.ndarray, q: float) -> float:
    values = values[~np.isnan(values)]
    return float(np.quantile(values, q)) if len(values) else float("nan")


def run_rtc_bench(
    *, seconds: float = 15.0, rate_hz: float = 100.0, infer_ms: float = 60.0, train_steps: int = TRAIN_STEPS
) -> dict[str, Any]:
    from drivers.sim.servo import LOG_LENGTH
    from runtime.bundle.manifest import read_manifest
    from runtime.policies.smolvla_sine import FLOW_STEPS, PERIOD

    # the simulated servos keep their last LOG_LENGTH goal writes: the measured run must fit in them
    most = LOG_LENGTH / rate_hz - 3.0
    if seconds > most:
        log.warning("bench rtc: %g s at %g Hz is more than the servos' goal log holds; %.0f s", seconds, rate_hz, most)
        seconds = most
    bundle = rtc_bundle(train_steps)
    m = read_manifest(bundle)
    runs = []
    for rtc in (True, False):
        with tempfile.TemporaryDirectory(prefix="lrt-rtc-") as tmp:
            run = run_once(bundle, rtc=rtc, seconds=seconds, rate_hz=rate_hz, infer_ms=infer_ms, workdir=Path(tmp))
            runs.append(run)
    with_rtc, without = runs
    ratio = with_rtc["boundary_step_change_deg"]["max"] / without["boundary_step_change_deg"]["max"]
    return {
        "bundle": str(bundle),
        "policy": {
            "chunk_size": m.rtc.chunk_size if m.rtc else None,
            "served_steps": m.chunk_length,
            "execution_horizon": m.rtc.execution_horizon if m.rtc else None,
            "flow_steps": FLOW_STEPS,
            "trained": f"a sine of {PERIOD} steps either way (smolvla_sine; built with {train_steps} steps)",
        },
        "rate_hz": rate_hz,
        "infer_floor_ms": infer_ms,
        "seconds": seconds,
        "machine": {**cpu_summary(), "load_average": os.getloadavg()[0]},
        "with_rtc": with_rtc,
        "without_rtc": without,
        "ratio": ratio,
        "done": bool(ratio <= 0.5 and with_rtc["delay_ticks"]["p50"] >= 5),
    }


def format_table(r: dict[str, Any]) -> str:
    a, b = r["with_rtc"], r["without_rtc"]

    def both(key: str, x: str, y: str) -> tuple[str, str]:
        return _pair(a[key], x, y), _pair(b[key], x, y)

    def counts(x: str, y: str) -> tuple[str, str]:
        return f"{a[x]} / {a[y]}", f"{b[x]} / {b[y]}"

    rows = [
        ("chunk boundaries measured", str(a["boundaries"]), str(b["boundaries"])),
        ("inference delay, ticks p50 / max", *both("delay_ticks", "p50", "max")),
        ("goal step change at boundaries, deg max / p50", *both("boundary_step_change_deg", "max", "p50")),
        ("goal jump at boundaries, deg max / p50", *both("boundary_jump_deg", "max", "p50")),
        ("step change within chunks, deg p99 / max", *both("within_chunk_step_change_deg", "p99", "max")),
        ("requests with a leftover / chunks", *counts("prefix_requests", "chunks")),
        ("starved ticks / inference failures", *counts("starved", "inference_failures")),
    ]
    m = r["machine"]
    width = max(len(row[0]) for row in rows)
    flags = " ".join(m["cpu_flags"]) or "none of avx2/avx512/amx"
    out = [
        f"bench rtc: {r['bundle']} at {r['rate_hz']:g} Hz, inference held to {r['infer_floor_ms']:g} ms, "
        f"{r['seconds']:g} s per run (the servos' own log)",
        f"CPU: {m['cpu']}, {m['cpus']} CPUs; flags: {flags}; load average {m['load_average']:.1f}",
        f"{'':{width}}  {'with RTC':>14}  {'without':>14}",
    ]
    out += [f"{name:{width}}  {x:>14}  {y:>14}" for name, x, y in rows]
    verdict = "done" if r["done"] else "not done"
    out.append(
        f"boundary step change, with / without: {r['ratio']:.2f} ({verdict}: at most 0.5, at a delay of 5+ ticks)"
    )
    return "\n".join(out)


def _pair(d: dict[str, float], a: str, b: str) -> str:
    return f"{d[a]:.2f} / {d[b]:.2f}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench.rtc",
        description="goal step change at chunk boundaries on simulated servos, with real-time chunking and without",
    )
    p.add_argument("--seconds", type=float, default=15.0, help="measured seconds per run (default 15)")
    p.add_argument("--rate-hz", type=float, default=100.0, help="control rate (default 100)")
    p.add_argument(
        "--infer-ms",
        type=float,
        default=60.0,
        help="hold each inference to at least this long (default 60: a delay of several ticks, as a robot's "
        "SmolVLA has; the tiny one takes a few ms)",
    )
    p.add_argument(
        "--train-steps",
        type=int,
        default=TRAIN_STEPS,
        help="training steps of the tiny SmolVLA when the bundle is built (once, then reused; default 3000)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from runtime.log import setup_logging

    args = build_parser().parse_args(argv)
    setup_logging("INFO")
    result = run_rtc_bench(
        seconds=args.seconds, rate_hz=args.rate_hz, infer_ms=args.infer_ms, train_steps=args.train_steps
    )
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
