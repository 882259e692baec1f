"""``lerobot-runtime bench canary``: what the serving canary costs, measured side by side in one run.

Two numbers, both on the server's own pinned worker thread:

- cost per check: a canary check (input refresh, one inference of the test case, comparison) next
  to a plain inference of the same case, interleaved call by call;
- added delay on real requests: the same engine served twice, canary off and canary on at a period
  of a few checks, to a client that sends each request after a random pause (so requests land
  during checks). A request that arrives during a check waits in the queue for it: the server's own
  ``queue_ms`` of every reply is compared between the two runs, and the worst one with the canary on
  against the bound, one check.
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.bench.stats import summarize
from runtime.engine.base import Engine

log = logging.getLogger(__name__)


def _cost_per_check(engine: Engine, n: int) -> dict[str, Any]:
    """Plain inference of the test case vs a canary check, interleaved (run on the engine's thread)."""
    from runtime.engine.canary import Canary

    assert engine.test_case is not None
    case = engine.test_case
    canary = Canary(case, 3600.0)
    infer: list[float] = []
    check: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        engine.infer(case.inputs)
        t1 = time.perf_counter()
        if not canary.check(engine):
            raise RuntimeError(f"the engine fails its own test case: {canary.failure}")
        t2 = time.perf_counter()
        infer.append((t1 - t0) * 1e3)
        check.append((t2 - t1) * 1e3)
    return {"infer_ms": summarize(infer), "check_ms": summarize(check)}


def _serve_and_measure(
    make_engine: Callable[[], Engine],
    interval_s: float,
    requests: int,
    max_pause_s: Callable[[], float],
    cpus: list[int],
    tmp: Path,
    on_loaded: Callable[[Engine], None] | None = None,
) -> dict[str, Any]:
    from runtime.bench.serve import observation_for
    from runtime.client import PolicyClient
    from runtime.engine.affinity import pin_current_thread
    from runtime.server import PolicyServer, ServerConfig

    def factory() -> Engine:
        pin_current_thread(cpus)  # the worker thread, which runs inference and the checks
        engine = make_engine()
        if on_loaded is not None:
            on_loaded(engine)
        return engine

    name = "on" if interval_s else "off"
    config = ServerConfig(endpoints=(f"ipc://canary-{name}.sock",), canary_interval_s=interval_s)
    server = PolicyServer(factory, config, runtime_directory=tmp)
    server.start()
    queue_ms: list[float] = []
    rtt_ms: list[float] = []
    rng = random.Random(1)
    try:
        obs = observation_for(server.engine)
        pause_s = max_pause_s()
        with PolicyClient(server.bound_endpoints[0], timeout_s=30.0) as client:
            for _ in range(5):
                client.infer(obs)
            for _ in range(requests):
                time.sleep(rng.uniform(0.0, pause_s))
                chunk = client.infer(obs)
                queue_ms.append(chunk.timing.queue_ms)
                rtt_ms.append(chunk.round_trip_ms)
        verification = dict(server.snapshot().verification)
    finally:
        server.stop(1.0)
        server.engine.close()
    return {
        "queue_ms": summarize(queue_ms),
        "queue_max_ms": round(max(queue_ms), 4),
        "round_trip_ms": summarize(rtt_ms),
        "checks": verification.get("checks", 0),
        "max_check_ms": verification.get("max_check_ms"),
        "failed": verification.get("failed", False),
    }


def run_bench(
    make_engine: Callable[[], Engine], *, requests: int = 300, checks: int = 100, control_cpu: int = 0
) -> dict[str, Any]:
    from runtime.engine.affinity import inference_cpus

    cpus = inference_cpus((), control_cpu)
    cost: dict[str, Any] = {}

    def measure_cost(engine: Engine) -> None:
        cost.update(_cost_per_check(engine, checks))

    def max_pause_s() -> float:
        # pauses of up to two checks, so that many requests land on one
        return max(0.002, 2 * float(cost["check_ms"]["median"]) / 1e3)

    with tempfile.TemporaryDirectory(prefix="lrt-canary-") as d:
        tmp = Path(d)
        # the cost is measured on the first run's worker thread, before it serves
        off = _serve_and_measure(make_engine, 0.0, requests, max_pause_s, cpus, tmp, measure_cost)
        interval_s = max(0.01, 3 * cost["check_ms"]["median"] / 1e3)  # a check every few check-lengths
        on = _serve_and_measure(make_engine, interval_s, requests, max_pause_s, cpus, tmp)
    bound_ms = (on["max_check_ms"] or 0.0) + off["queue_max_ms"]
    return {
        "requests": requests,
        "inference_cpus": cpus,
        "cost": cost,
        "check_overhead_ratio": round(cost["check_ms"]["median"] / cost["infer_ms"]["median"], 3),
        "canary_interval_s": round(interval_s, 4),
        "max_pause_s": round(max_pause_s(), 4),
        "canary_off": off,
        "canary_on": on,
        "worst_added_delay_ms": round(on["queue_max_ms"] - off["queue_ms"]["median"], 4),
        # a request waits for at most one check (plus what it waits with the canary off)
        "within_one_check": on["queue_max_ms"] <= bound_ms,
    }


def format_table(r: dict[str, Any]) -> str:
    c = r["cost"]
    off, on = r["canary_off"], r["canary_on"]
    return "\n".join(
        [
            f"inference on CPUs {r['inference_cpus']}; {r['requests']} requests per run, each after a random "
            f"pause of up to {r['max_pause_s'] * 1e3:.1f} ms; canary period {r['canary_interval_s'] * 1e3:.1f} ms",
            f"cost per check: median {c['check_ms']['median']:.3f} ms, p99 {c['check_ms']['p99']:.3f} ms "
            f"(plain inference of the test case: median {c['infer_ms']['median']:.3f} ms; "
            f"check/inference {r['check_overhead_ratio']:.2f}x)",
            f"{'canary':<8}{'checks':>8}{'queue med':>11}{'queue p99':>11}{'queue max':>11}{'round trip med/p99':>22}",
            *(
                f"{name:<8}{m['checks']:>8}{m['queue_ms']['median']:>11.3f}{m['queue_ms']['p99']:>11.3f}"
                f"{m['queue_max_ms']:>11.3f}{m['round_trip_ms']['median']:>13.3f}/{m['round_trip_ms']['p99']:.3f}"
                for name, m in (("off", off), ("on", on))
            ),
            f"worst added delay: {r['worst_added_delay_ms']:.3f} ms (longest check {on['max_check_ms']} ms); "
            f"within one check: {r['within_one_check']}",
        ]
    )
