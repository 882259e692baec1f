"""``lerobot-runtime bench loop``: the real control loop on simulated servos while inference is saturated.

Per case (control rate x ``n_action_steps``) it runs the daemon's pieces as they run in production: the
engine on its pinned inference worker behind a :class:`PolicyServer`, the simulated SO-101 on a
pseudo-terminal (in a process of its own, as hardware answers outside ours) driven by the real
Feetech driver, a synthetic camera publishing the policy's image
over ZeroMQ from its own process, and the :class:`ControlLoop` on the control CPU. A second process sends infer requests
back to back the whole time, so the inference CPU never idles and the loop's own requests wait
behind one. Reported: how late ticks woke (p50/p99/max), the write period error beside it (time between
consecutive completed sync writes minus the period: what the servos see; p50/p99/max and periods more
than 5 ms off), overruns, starved ticks (no action due after the first chunk), inference latency in
ticks and dropped actions.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from drivers.calibration import load_calibration
from drivers.feetech.bus import FeetechBus
from runtime.arm_control.feed import StreamFeed
from runtime.arm_control.handler import ServerInference
from runtime.arm_control.streams import ObservationStreams
from runtime.bench.machine import cpu_line
from runtime.bundle.interface import PolicyInterface
from runtime.control.config import ControlConfig, SafetyConfig, StreamConfig
from runtime.control.loop import ControlLoop
from runtime.control.writetime import summarize_errors
from runtime.engine.affinity import allowed_cpus, inference_cpus, process_on
from runtime.engine.base import Engine
from runtime.engine.config import EngineConfig
from runtime.paths import data_root
from runtime.server.config import ServerConfig
from runtime.server.server import PolicyServer

WARMUP_S = 1.0
CALIBRATION = ("configs", "calibration", "so101_sim.toml")


class _ServoProcess:
    """The simulated SO-101 in a process of its own, as real servos are: they answer on the wire
    whatever this process's threads and interpreter lock are doing."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.bench.loop", "serve-servos"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = self.proc.stdout.readline().strip()
        if not self.port:
            raise RuntimeError("the servo simulator process did not start")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # its cue to stop
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _serve_servos() -> int:
    from drivers.sim.arm import simulator_for

    sim = simulator_for(load_calibration(data_root().joinpath(*CALIBRATION))).start()
    print(sim.port, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    sim.stop()
    return 0


def _image_spec(engine: Engine) -> tuple[str, tuple[int, ...]]:
    image = next(s for s in engine.manifest.observation_inputs if s.role == "image" or s.dtype == "uint8")
    return image.name, tuple(image.shape)


def _run_case(
    server: PolicyServer, engine: Engine, rate: float, steps: int, seconds: float, workdir: Path, control_cpu: int
) -> dict[str, Any]:
    image, shape = _image_spec(engine)
    cal = load_calibration(data_root().joinpath(*CALIBRATION))
    cam_ep = f"ipc://{workdir}/cam-{rate:g}-{steps}.sock"
    # The camera is its own process too (`lerobot-runtime camera`), as on the robot.
    camera = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runtime",
            "--log-level",
            "WARNING",
            "camera",
            "--synthetic",
            "--input",
            image,
            "--endpoint",
            cam_ep,
            "--width",
            str(shape[1]),
            "--height",
            str(shape[0]),
            "--fps",
            str(min(rate, 30.0)),
        ],
        stdout=subprocess.DEVNULL,
    )
    # The ACT-size model has random weights: its actions are anywhere, so the first-step refusal is
    # opened up (the envelope still bounds every goal); what is measured here is timing.
    config = ControlConfig(
        rate_hz=rate,
        n_action_steps=steps,
        streams=(StreamConfig(image, cam_ep, 500.0),),
        # and a slow model's first chunk (behind a saturating client) may take seconds on a small CPU
        safety=SafetyConfig(max_first_step_deg=360.0, stall_timeout_s=30.0),
    )
    streams = ObservationStreams(config.streams, engine.manifest.observation_inputs, cpus={control_cpu})
    streams.start()
    servos = _ServoProcess()
    bus = FeetechBus(servos.port, cal)
    bus.connect()
    interface = PolicyInterface.of_manifest(engine.manifest)
    loop = ControlLoop(
        bus,
        cal,
        interface,
        config,
        StreamFeed(ServerInference(server), interface, streams),
        cpu=control_cpu,
    )
    try:
        loop.start()
        deadline = time.monotonic() + 10
        while streams.stale(time.monotonic()) and time.monotonic() < deadline:
            time.sleep(0.01)
        loop.check("start")
        loop.request("start", "bench")
        deadline = time.monotonic() + 60
        while loop.snapshot().counters["chunks"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        if loop.snapshot().counters["chunks"] < 1:
            raise RuntimeError(f"no chunk reached the loop within 60 s ({dict(loop.snapshot().counters)})")
        time.sleep(WARMUP_S)
        first = loop.snapshot()
        time.sleep(seconds)
        last = loop.snapshot()
        rows = loop.recorder.snapshot()
        sel = (rows["tick"] > first.tick) & (rows["tick"] <= last.tick)
        late = np.abs(rows["late_ms"][sel])
        lats = loop.latencies(first.latencies_measured)
        lat_n = len(lats)
        before, after = first.counters, last.counters
        result = {
            "rate_hz": rate,
            "n_action_steps": steps,
            "ticks": int(last.tick - first.tick),
            "jitter_ms": {
                "p50": round(float(np.percentile(late, 50)), 4),
                "p99": round(float(np.percentile(late, 99)), 4),
                "max": round(float(late.max()), 4),
            },
            "write_period_error_ms": {
                k: round(v, 4) if isinstance(v, float) else v
                for k, v in summarize_errors(rows["write_err_ms"][sel]).items()
            },
            "overruns": last.overruns - first.overruns,
            "starved_ticks": after["starved"] - before["starved"],
            "chunks": after["chunks"] - before["chunks"],
            "inference_latency_ticks": {
                "p50": float(np.percentile(lats, 50)) if lat_n else None,
                "max": float(lats.max()) if lat_n else None,
            },
            "dropped_actions": last.dropped_actions - first.dropped_actions,
            "safety_interventions": dict(last.safety),
            "scheduling": last.scheduling,
            "loop_cpus_seen": sorted(last.cpu_seen),
        }
    finally:
        loop.shutdown()
        streams.stop()
        bus.disconnect()
        servos.close()
        camera.terminate()
        camera.wait(5)
    return result


def run_loop_bench(
    *, bundle: str | None, demo: bool, seconds: float, rates: list[float], steps: list[int]
) -> dict[str, Any]:
    from runtime.export.demo import ensure_bundle

    path = bundle or str(ensure_bundle("demo" if demo else "act"))
    cpus = allowed_cpus()
    control_cpu = cpus[0]
    cases: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lrt-bench-loop-") as tmp:
        workdir = Path(tmp)

        def factory() -> Engine:
            from runtime.engine.loader import load_engine

            return load_engine(EngineConfig(bundle=path, devices=("CPU",), control_cpu=control_cpu))

        server = PolicyServer(factory, ServerConfig(endpoints=(f"ipc://{workdir}/policy.sock",), queue_depth=4))
        with process_on(inference_cpus((), control_cpu)):
            server.start()
        engine = server.engine
        specs = json.dumps([[s.name, s.dtype, list(s.shape)] for s in engine.manifest.observation_inputs])
        load = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runtime.bench.serve_client",
                f"ipc://{workdir}/policy.sock",
                "served",
                specs,
                "1000000",
                "0",
                str(control_cpu),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for rate in rates:
                for n in steps:
                    cases.append(_run_case(server, engine, rate, n, seconds, workdir, control_cpu))
        finally:
            load.kill()
            load.wait()
            server.stop(30.0)  # let the inference in flight finish: OpenVINO must not be torn down mid-run
    return {
        "bundle": path,
        "policy": engine.manifest.policy_name,
        "chunk_length": engine.manifest.chunk_length,
        "engine": engine.info.to_json(),
        "cpu": cpu_line(),
        "cpus": cpus,
        "control_cpu": control_cpu,
        "load": "a second process sends infer requests back to back (the inference CPU is always busy)",
        "cases": cases,
    }


def format_table(result: dict[str, Any]) -> str:
    e = result["engine"]
    lines = [
        f"bench loop: {result['policy']} (chunk {result['chunk_length']}), engine {e['engine']} {e['device']}/"
        f"{e['precision']} {e['threads']} thread(s) on CPUs {e['cpus']}; control CPU {result['control_cpu']}",
        f"CPU: {result['cpu']}",
        f"load: {result['load']}",
        "",
        f"{'rate':>6} {'steps':>5} {'ticks':>6} {'jitter p50':>10} {'p99':>7} {'max':>7} {'write p50':>9} "
        f"{'p99':>7} {'max':>7} {'>5ms':>5} {'overruns':>8} {'starved':>7} {'lat p50':>7} {'lat max':>7} "
        f"{'dropped':>7}  scheduling",
    ]
    for c in result["cases"]:
        j, w, lat = c["jitter_ms"], c["write_period_error_ms"], c["inference_latency_ticks"]
        lines.append(
            f"{c['rate_hz']:>6g} {c['n_action_steps']:>5} {c['ticks']:>6} {j['p50']:>10.3f} {j['p99']:>7.3f} "
            f"{j['max']:>7.3f} {_ms(w['p50']):>9} {_ms(w['p99']):>7} {_ms(w['max']):>7} {w['off_5ms']:>5} "
            f"{c['overruns']:>8} {c['starved_ticks']:>7} {_num(lat['p50']):>7} "
            f"{_num(lat['max']):>7} {c['dropped_actions']:>7}  {c['scheduling']}"
        )
    lines.append(
        "jitter: ms a tick woke after its deadline; write: ms between consecutive completed sync writes "
        "minus the period (what the servos see); latency: ticks from observation to chunk merged"
    )
    return "\n".join(lines)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


if __name__ == "__main__" and sys.argv[1:] == ["serve-servos"]:
    sys.exit(_serve_servos())
