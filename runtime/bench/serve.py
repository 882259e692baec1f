"""``lerobot-runtime bench serve``: what serving costs on top of inference, measured in one run.

For each transport (ipc, tcp loopback) it measures, with an ACT-size observation (one 480x640x3 uint8
image + 6 float32 state, reply 100x6 float32): the client round trip through the server, the
in-process inference time of the same engine, and the floor: the same bytes over a plain ZeroMQ
DEALER/ROUTER pair with zero-copy multipart frames and an echo thread. Serving overhead is the round
trip minus inference, reported next to the floor as a ratio.

Placement is the deployment's: the client is its own process on the control-loop CPU (as a robot
control loop is), inference runs on the server's worker thread pinned to the inference CPUs, and the
server's I/O thread (like the floor's echo thread) stays off them.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from runtime.bench.stats import summarize as _summary
from runtime.engine.base import Engine

log = logging.getLogger(__name__)

TARGET_OVERHEAD_RATIO = 1.5
TARGET_OVERHEAD_P99_MS = 2.0


def observation_for(engine: Engine, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    obs: dict[str, np.ndarray] = {}
    for spec in engine.manifest.observation_inputs:
        if np.dtype(spec.dtype).kind in "ui":
            obs[spec.name] = rng.integers(0, 256, size=spec.shape).astype(spec.dtype)
        else:
            obs[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
    return obs


def _client(endpoint: str, mode: str, engine: Engine, n: int, warmup: int, cpu: int) -> list[list[float]]:
    """Run the bench client in its own process (a control loop is one) and collect its samples."""
    specs = json.dumps([[s.name, s.dtype, list(s.shape)] for s in engine.manifest.observation_inputs])
    cmd = [sys.executable, "-m", "runtime.bench.serve_client", endpoint, mode, specs, str(n), str(warmup), str(cpu)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"bench client ({mode} on {endpoint}) failed: {out.stderr.strip()[-2000:]}")
    samples: list[list[float]] = json.loads(out.stdout.strip().splitlines()[-1])
    return samples


def _floor(
    endpoint: str, reply: list[bytes], engine: Engine, n: int, warmup: int, cpu: int, echo_cpus: set[int]
) -> list[float]:
    """Round trips of the same request bytes over a bare ROUTER that echoes a reply of the real size.

    The echo (and its ZeroMQ I/O thread) runs on ``echo_cpus``.
    """
    ctx = zmq.Context()
    for c in sorted(echo_cpus):
        ctx.set(zmq.THREAD_AFFINITY_CPU_ADD, c)
    router = ctx.socket(zmq.ROUTER)
    router.linger = 0
    if endpoint.startswith("tcp://"):
        port = router.bind_to_random_port(endpoint)
        endpoint = f"{endpoint}:{port}"
    else:
        router.bind(endpoint)
    done = threading.Event()

    def echo() -> None:
        if echo_cpus:
            os.sched_setaffinity(0, echo_cpus)
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        while not done.is_set():
            if poller.poll(100):
                msg = router.recv_multipart(copy=False)
                router.send_multipart([msg[0], *reply], copy=False)

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    try:
        return [rt for rt, _ in _client(endpoint, "floor", engine, n, warmup, cpu)]
    finally:
        done.set()
        thread.join(2)
        router.close(0)
        ctx.term()


def _io_cpus(engine: Engine) -> set[int]:
    return set(os.sched_getaffinity(0)) - set(engine.info.cpus)


def run_bench(
    make_engine: Callable[[], Engine], *, n: int = 300, warmup: int = 30, control_cpu: int = 0
) -> dict[str, Any]:
    """Serve ``make_engine()`` and measure, for ipc and tcp: the served round trip from a client
    process on the control CPU, the in-process inference time on the same pinned worker thread, and
    the floor (the same bytes echoed by a bare ZeroMQ ROUTER). Overhead per request is its round trip
    minus its own server-side inference time.
    """
    from runtime.engine.affinity import inference_cpus, pin_current_thread
    from runtime.protocol.codec import encode_actions_reply
    from runtime.protocol.messages import Timing
    from runtime.server import PolicyServer, ServerConfig

    cpus = inference_cpus((), control_cpu)
    local: list[float] = []

    def factory() -> Engine:
        # runs on the server's worker thread, the one that runs inference: pin it, then load
        pin_current_thread(cpus)
        engine = make_engine()
        obs = observation_for(engine)
        for _ in range(warmup):
            engine.infer(obs)
        for _ in range(n):
            t0 = time.perf_counter()
            engine.infer(obs)
            local.append((time.perf_counter() - t0) * 1e3)
        return engine

    with tempfile.TemporaryDirectory(prefix="lrt-bench-") as tmp:
        config = ServerConfig(endpoints=("ipc://bench.sock", "tcp://127.0.0.1:*"), queue_depth=2)
        server = PolicyServer(factory, config, runtime_directory=Path(tmp))
        server.start()
        engine = server.engine
        local_s = _summary(local)
        reply = [
            bytes(f)
            for f in encode_actions_reply(
                1, np.zeros(engine.manifest.action_spec.shape, engine.manifest.action_spec.dtype), Timing(0.1, 0.1, 0.1)
            )
        ]
        result: dict[str, Any] = {
            "policy": engine.manifest.policy_name,
            "engine": engine.info.to_json(),
            "observation": {s.name: [s.dtype, list(s.shape)] for s in engine.manifest.observation_inputs},
            "reply": [engine.manifest.action_spec.dtype, list(engine.manifest.action_spec.shape)],
            "requests": n,
            "client_cpu": control_cpu,
            "inference_cpus": list(engine.info.cpus),
            "inprocess_infer_ms": local_s,
            "transports": {},
        }
        try:
            for name, endpoint in zip(("ipc", "tcp"), server.bound_endpoints, strict=True):
                samples = _client(endpoint, "served", engine, n, warmup, control_cpu)
                rtt = [rt for rt, _ in samples]
                per_request = [rt - infer for rt, infer in samples]
                floor_ep = f"ipc://{tmp}/floor.sock" if name == "ipc" else "tcp://127.0.0.1"
                # the floor's echo runs where the server's I/O thread runs; the cross-CPU floor puts it on
                # the inference CPUs, so its round trip crosses CPUs the way a served request does
                floor = _summary(_floor(floor_ep, reply, engine, n, warmup, control_cpu, _io_cpus(engine)))
                cross = _summary(_floor(floor_ep, reply, engine, n, warmup, control_cpu, set(engine.info.cpus)))
                rt = _summary(rtt)
                per_req = _summary(per_request)
                ratio = per_req["median"] / floor["median"] if floor["median"] > 0 else float("inf")
                result["transports"][name] = {
                    "round_trip_ms": rt,
                    "floor_round_trip_ms": floor,
                    "floor_cross_cpu_round_trip_ms": cross,
                    "overhead_to_cross_cpu_floor_ratio": round(per_req["median"] / cross["median"], 3),
                    # difference of medians: meaningful for fast models, swamped by jitter for slow ones
                    "overhead_ms": {
                        "median": round(rt["median"] - local_s["median"], 4),
                        "p99": round(rt["p99"] - local_s["p99"], 4),
                    },
                    "overhead_per_request_ms": per_req,
                    "overhead_to_floor_ratio": round(ratio, 3),
                    "targets": {
                        f"overhead_median<={TARGET_OVERHEAD_RATIO}x_floor": ratio <= TARGET_OVERHEAD_RATIO,
                        f"overhead_p99<={TARGET_OVERHEAD_P99_MS}ms": per_req["p99"] <= TARGET_OVERHEAD_P99_MS,
                    },
                }
        finally:
            server.stop(1.0)
            engine.close()
    return result


def format_table(result: dict[str, Any]) -> str:
    local = result["inprocess_infer_ms"]
    lines = [
        f"policy {result['policy']} on {result['engine']['device']}/{result['engine']['precision']}, "
        f"{result['requests']} requests per transport; client process on CPU {result['client_cpu']}, "
        f"inference on CPUs {result['inference_cpus']}",
        f"in-process inference: median {local['median']:.3f} ms, p99 {local['p99']:.3f} ms",
        f"{'transport':<10}{'round trip med/p99':>20}{'floor med/p99':>17}{'x-CPU floor':>16}"
        f"{'overhead med/p99':>19}{'ovh/floor':>11}{'ovh/x-CPU':>11}",
    ]
    for name, t in result["transports"].items():
        rt, fl, ov = t["round_trip_ms"], t["floor_round_trip_ms"], t["overhead_per_request_ms"]
        cross = t["floor_cross_cpu_round_trip_ms"]
        lines.append(
            f"{name:<10}{rt['median']:>10.3f}/{rt['p99']:<9.3f}{fl['median']:>7.3f}/{fl['p99']:<9.3f}"
            f"{cross['median']:>6.3f}/{cross['p99']:<9.3f}{ov['median']:>9.3f}/{ov['p99']:<9.3f}"
            f"{t['overhead_to_floor_ratio']:>8.2f}x{t['overhead_to_cross_cpu_floor_ratio']:>10.2f}x"
        )
    lines.append(
        f"targets: overhead median <= {TARGET_OVERHEAD_RATIO}x floor, overhead p99 <= {TARGET_OVERHEAD_P99_MS} ms"
    )
    return "\n".join(lines)
