"""Request counters and latency percentiles, shared by the I/O and worker threads.

Every request is counted by kind and every error reply by code, whoever sent it; the ones of the
daemon's own control loop (``PolicyServer.submit_local``) are also counted apart, ``local=True``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from typing import Any

from runtime.protocol.messages import Percentiles, StatsSnapshot

WINDOW = 2048  # recent infers the percentiles are computed over


def _percentiles(samples: deque[float]) -> Percentiles:
    if not samples:
        return Percentiles()
    ordered = sorted(samples)
    n = len(ordered)

    def at(q: float) -> float:
        return round(ordered[min(n - 1, int(q * n))], 3)

    return Percentiles(n, at(0.5), at(0.9), at(0.99), round(ordered[-1], 3))


class StatsCollector:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._requests: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._local_requests: Counter[str] = Counter()  # the part of _requests from the control loop
        self._local_errors: Counter[str] = Counter()  # the part of _errors from the control loop
        self._ok = 0
        self._lat: dict[str, deque[float]] = {k: deque(maxlen=WINDOW) for k in ("queue", "infer", "total")}

    def request(self, kind: str, *, local: bool = False) -> None:
        """Count a request; ``local``: the daemon's own control loop sent it."""
        with self._lock:
            self._requests[kind] += 1
            if local:
                self._local_requests[kind] += 1

    def error(self, code: str, *, local: bool = False) -> None:
        """Count an error reply; ``local``: one to the daemon's own control loop."""
        with self._lock:
            self._errors[code] += 1
            if local:
                self._local_errors[code] += 1

    def ok(self) -> None:
        with self._lock:
            self._ok += 1

    def infer_done(self, queue_ms: float, infer_ms: float, total_ms: float) -> None:
        with self._lock:
            self._ok += 1
            self._lat["queue"].append(queue_ms)
            self._lat["infer"].append(infer_ms)
            self._lat["total"].append(total_ms)

    def snapshot(
        self, queue_depth: int, queue_depth_max: int, capacity: int, in_flight: int
    ) -> StatsSnapshot:
        with self._lock:
            requests = dict(self._requests)
            errors = dict(self._errors)
            local_requests = dict(self._local_requests)
            local_errors = dict(self._local_errors)
            ok = self._ok
            lat = {k: deque(v) for k, v in self._lat.items()}
        return StatsSnapshot(
            uptime_s=round(time.monotonic() - self.started, 3),
            requests=requests,
            errors=errors,
            replies_ok=ok,
            queue_depth=queue_depth,
            queue_depth_max=queue_depth_max,
            queue_capacity=capacity,
            in_flight=in_flight,
            latency_ms={k: _percentiles(v) for k, v in lat.items()},
            local_requests=local_requests,
            local_errors=local_errors,
        )


def counts_text(counts: Mapping[str, int], local: Mapping[str, int] | None = None) -> str:
    """``hello=3 infer=9 (7 from the control loop)``: counts by name, with the control loop's part
    where it has one; ``none`` when there are none."""
    local = local or {}

    def one(name: str, n: int) -> str:
        mine = local.get(name, 0)
        return f"{name}={n}" + (f" ({mine} from the control loop)" if mine else "")

    return " ".join(one(k, v) for k, v in sorted(counts.items())) or "none"


def stats_line(s: StatsSnapshot) -> str:
    """One log line: counts by kind and error, queue depth, infer and total latency percentiles."""
    reqs = counts_text(s.requests, s.local_requests)
    errs = counts_text(s.errors, s.local_errors)
    inf = s.latency_ms.get("infer", Percentiles())
    tot = s.latency_ms.get("total", Percentiles())
    return (
        f"requests: {reqs}; errors: {errs}; queue {s.queue_depth}/{s.queue_capacity} "
        f"(max {s.queue_depth_max}); infer ms p50 {inf.p50} p99 {inf.p99}; "
        f"total ms p50 {tot.p50} p99 {tot.p99} (last {tot.count})" + verification_line(s.verification)
    )


def verification_line(v: Mapping[str, Any]) -> str:
    """The canary's part of the stats line (empty when it is off), and a staged parity gate's while
    it runs or once it failed."""
    gate = v.get("gate") or {}
    said = ""
    if gate.get("failure"):
        said = f"; PARITY GATE FAILED: {gate['failure']}"
    elif gate and not gate.get("done"):
        said = f"; parity gate {gate.get('passed')} of {gate.get('runs')} replays passed, nothing served until all"
    v = {k: x for k, x in v.items() if k != "gate"}
    if not v:
        return said
    return said + _canary_line(v)


def _canary_line(v: Mapping[str, Any]) -> str:
    if v.get("failed"):
        return f"; VERIFICATION FAILED: {v.get('failure')}"
    err = v.get("last_max_abs_err")
    units = v.get("units")
    in_units = f" {units}" if units and units != "absolute" else ""
    last = "none yet" if err is None else f"last error {err:.3g}{in_units}"
    return f"; canary ok ({v.get('checks', 0)} checks, {last})"
