"""The server's counters and latency percentiles, and the stats line the daemon logs."""

from __future__ import annotations

import random
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from runtime.protocol.messages import Percentiles, StatsSnapshot
from runtime.server import stats as stats_module
from runtime.server.stats import WINDOW, StatsCollector, stats_line, verification_line


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def monotonic(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock(100.0)
    monkeypatch.setattr(stats_module, "time", SimpleNamespace(monotonic=c.monotonic))
    return c


def snap(s: StatsCollector, depth: int = 0, depth_max: int = 0, capacity: int = 8, in_flight: int = 0) -> StatsSnapshot:
    return s.snapshot(depth, depth_max, capacity, in_flight)


def test_a_fresh_collector_counts_nothing_and_its_percentiles_are_empty(clock: Clock) -> None:
    s = StatsCollector()
    clock.t = 102.34567
    out = snap(s, 1, 3, 16, 1)
    assert out == StatsSnapshot(
        uptime_s=2.346,
        requests={},
        errors={},
        replies_ok=0,
        queue_depth=1,
        queue_depth_max=3,
        queue_capacity=16,
        in_flight=1,
        latency_ms={"queue": Percentiles(), "infer": Percentiles(), "total": Percentiles()},
    )


def test_requests_errors_and_replies_are_counted_by_kind_and_code(clock: Clock) -> None:
    s = StatsCollector()
    for kind in ("infer", "infer", "ping", "infer"):
        s.request(kind)
    s.error("queue_full")
    s.error("bad_input")
    s.error("queue_full")
    s.ok()
    s.ok()
    s.infer_done(1.0, 2.0, 3.0)
    out = snap(s)
    assert out.requests == {"infer": 3, "ping": 1}
    assert out.errors == {"queue_full": 2, "bad_input": 1}
    assert out.replies_ok == 3  # two other replies and an infer's
    assert [out.latency_ms[k].count for k in ("queue", "infer", "total")] == [1, 1, 1]
    assert [out.latency_ms[k].max for k in ("queue", "infer", "total")] == [1.0, 2.0, 3.0]


def test_the_control_loops_requests_and_errors_count_in_the_totals_and_apart(clock: Clock) -> None:
    s = StatsCollector()
    s.request("infer")
    s.request("infer", local=True)
    s.request("infer", local=True)
    s.error("busy")
    s.error("inference_failed", local=True)
    out = snap(s)
    assert (out.requests, out.errors) == ({"infer": 3}, {"busy": 1, "inference_failed": 1})
    assert (out.local_requests, out.local_errors) == ({"infer": 2}, {"inference_failed": 1})
    assert (snap(StatsCollector()).local_requests, snap(StatsCollector()).local_errors) == ({}, {})


def test_a_snapshot_is_a_copy_that_later_counts_do_not_change(clock: Clock) -> None:
    s = StatsCollector()
    s.request("infer")
    s.error("internal")
    s.infer_done(1.0, 1.0, 1.0)
    first = snap(s)
    s.request("infer")
    s.error("internal")
    s.infer_done(9.0, 9.0, 9.0)
    assert first.requests == {"infer": 1} and first.errors == {"internal": 1} and first.replies_ok == 1
    assert first.latency_ms["total"] == Percentiles(1, 1.0, 1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ([4.0], Percentiles(1, 4.0, 4.0, 4.0, 4.0)),
        # n = 10: the samples at index 5 and 9 (int(q * n), at most n - 1)
        ([float(v) for v in range(10, 0, -1)], Percentiles(10, 6.0, 10.0, 10.0, 10.0)),
        # n = 100, shuffled: index 50, 90, 99
        (random.Random(3).sample([float(v) for v in range(100)], 100), Percentiles(100, 50.0, 90.0, 99.0, 99.0)),
        # n = 200: index 100, 180, 198 (p99 is not the max)
        ([float(v) for v in range(200)], Percentiles(200, 100.0, 180.0, 198.0, 199.0)),
        ([1.23449, 1.2346, 7.00051], Percentiles(3, 1.235, 7.001, 7.001, 7.001)),  # rounded to 3 places
    ],
)
def test_percentiles_are_taken_from_the_sorted_samples(
    clock: Clock, samples: list[float], expected: Percentiles
) -> None:
    s = StatsCollector()
    for v in samples:
        s.infer_done(v, v, v)
    out = snap(s)
    assert out.latency_ms == {"queue": expected, "infer": expected, "total": expected}


def test_each_latency_has_its_own_samples(clock: Clock) -> None:
    s = StatsCollector()
    s.infer_done(1.0, 20.0, 300.0)
    s.infer_done(2.0, 10.0, 100.0)
    out = snap(s).latency_ms
    assert (out["queue"].p50, out["infer"].p50, out["total"].p50) == (2.0, 20.0, 300.0)
    assert (out["queue"].max, out["infer"].max, out["total"].max) == (2.0, 20.0, 300.0)


def test_the_percentiles_cover_the_last_window_of_infers(clock: Clock) -> None:
    assert WINDOW == 2048
    s = StatsCollector()
    s.infer_done(1e6, 1e6, 1e6)  # the oldest: pushed out by the next WINDOW
    for v in range(WINDOW):
        s.infer_done(float(v), float(v), float(v))
    out = snap(s)
    assert out.latency_ms["total"].count == WINDOW
    assert out.latency_ms["total"].max == WINDOW - 1.0
    assert out.replies_ok == WINDOW + 1  # the count is not windowed


def test_counts_from_several_threads_add_up(clock: Clock) -> None:
    s = StatsCollector()

    def work() -> None:
        for _ in range(2000):
            s.request("infer")
            s.error("e")
            s.ok()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = snap(s)
    assert out.requests == {"infer": 8000} and out.errors == {"e": 8000} and out.replies_ok == 8000


# --- the log line ------------------------------------------------------------------------------


def line_of(**kw: Any) -> StatsSnapshot:
    base: dict[str, Any] = {
        "uptime_s": 1.0,
        "requests": {},
        "errors": {},
        "replies_ok": 0,
        "queue_depth": 0,
        "queue_depth_max": 0,
        "queue_capacity": 4,
        "in_flight": 0,
    }
    return StatsSnapshot(**{**base, **kw})


def test_the_stats_line_names_counts_sorted_the_queue_and_infer_and_total_percentiles() -> None:
    s = line_of(
        requests={"ping": 2, "infer": 10},
        errors={"queue_full": 1, "bad_input": 3},
        queue_depth=2,
        queue_depth_max=3,
        queue_capacity=4,
        latency_ms={
            "queue": Percentiles(10, 99.0, 99.0, 99.0, 99.0),
            "infer": Percentiles(10, 1.5, 2.0, 2.5, 3.0),
            "total": Percentiles(9, 4.5, 5.0, 6.5, 7.0),
        },
    )
    assert stats_line(s) == (
        "requests: infer=10 ping=2; errors: bad_input=3 queue_full=1; queue 2/4 (max 3); "
        "infer ms p50 1.5 p99 2.5; total ms p50 4.5 p99 6.5 (last 9)"
    )


def test_the_stats_line_names_the_control_loops_part() -> None:
    s = line_of(requests={"infer": 4}, errors={"busy": 1}, local_requests={"infer": 3}, local_errors={"busy": 1})
    assert stats_line(s).startswith(
        "requests: infer=4 (3 from the control loop); errors: busy=1 (1 from the control loop); queue"
    )


def test_the_stats_line_before_any_request() -> None:
    assert stats_line(line_of()) == (
        "requests: none; errors: none; queue 0/4 (max 0); infer ms p50 0.0 p99 0.0; total ms p50 0.0 p99 0.0 (last 0)"
    )


def test_the_stats_line_ends_with_the_canary_part() -> None:
    s = line_of(verification={"checks": 3, "last_max_abs_err": 1.23456e-6, "units": "absolute"})
    assert stats_line(s).endswith("(last 0); canary ok (3 checks, last error 1.23e-06)")


@pytest.mark.parametrize(
    ("state", "line"),
    [
        ({}, ""),
        (
            {"failed": True, "failure": "verification failed on canary check 2: x"},
            "; VERIFICATION FAILED: verification failed on canary check 2: x",
        ),
        ({"failed": False, "checks": 0, "last_max_abs_err": None}, "; canary ok (0 checks, none yet)"),
        ({"failed": False}, "; canary ok (0 checks, none yet)"),
        (
            {"checks": 5, "last_max_abs_err": 0.00012345, "units": "normalized"},
            "; canary ok (5 checks, last error 0.000123 normalized)",
        ),
        ({"checks": 1, "last_max_abs_err": 0.0, "units": ""}, "; canary ok (1 checks, last error 0)"),
        ({"checks": 1, "last_max_abs_err": 2.0, "units": None}, "; canary ok (1 checks, last error 2)"),
        (
            {"gate": {"passed": 3, "runs": 16, "done": False, "failure": None}},
            "; parity gate 3 of 16 replays passed, nothing served until all",
        ),
        ({"gate": {"passed": 16, "runs": 16, "done": True, "failure": None}}, ""),
        (
            {"gate": {"passed": 16, "runs": 16, "done": True, "failure": None}, "checks": 2, "last_max_abs_err": 0.0},
            "; canary ok (2 checks, last error 0)",
        ),
        (
            {"gate": {"passed": 4, "runs": 16, "done": True, "failure": "the parity gate failed ...: y"}},
            "; PARITY GATE FAILED: the parity gate failed ...: y",
        ),
    ],
)
def test_the_canary_part_of_the_line(state: dict[str, Any], line: str) -> None:
    assert verification_line(state) == line
