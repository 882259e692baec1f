"""Prometheus metrics: the figures of ``lerobot-runtime status``, scraped over HTTP.

Off unless ``[metrics] port`` is set; bound to loopback unless ``host`` says otherwise (a scraper on
another machine is better served through a tunnel or a local agent). Nothing is counted twice:
a custom collector reads the server's own counters and the arm's status at scrape time, so serving
pays nothing for metrics between scrapes. The names are listed in docs/operations.md.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from runtime.errors import ConfigError, MissingDependencyError
from runtime.protocol.messages import PolicyInfo, StatsSnapshot

log = logging.getLogger(__name__)

PREFIX = "lerobot_runtime"


@dataclass(frozen=True)
class MetricsConfig:
    """``[metrics]``: ``port`` 0 means no metrics endpoint; ``host`` is the address it binds."""

    port: int = 0
    host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"metrics.port: expected 0 (off) or a TCP port 1..65535, got {self.port}")
        if not self.host:
            raise ConfigError("metrics.host: expected an address to bind, got an empty string")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RuntimeCollector:
    """Yields the daemon's figures at each scrape (a prometheus_client custom collector)."""

    def __init__(
        self,
        snapshot: Callable[[], StatsSnapshot],
        info: Callable[[], PolicyInfo],
        stalled: Callable[[], list[str]] = list,
        control: Callable[[], Mapping[str, Any] | None] = lambda: None,
        recording: Callable[[], Any] = lambda: None,
    ) -> None:
        """``control``: the control loop's ``control status`` map, None without a loop."""
        self._snapshot = snapshot
        self._info = info
        self._stalled = stalled
        self._control = control
        self._recording = recording  # the recorder's RecorderStatus, None while recording is off

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        s = self._snapshot()
        info = self._info()
        engine = {k: str(v) for k, v in (s.engine or info.engine).items() if k not in ("cpus",)}
        yield InfoMetricFamily(
            f"{PREFIX}_policy", "What is being served", value={"policy": info.policy_name, **engine}
        )
        yield GaugeMetricFamily(f"{PREFIX}_uptime_seconds", "Seconds since the server started", value=s.uptime_s)
        requests = CounterMetricFamily(f"{PREFIX}_requests", "Requests received, by kind", labels=["kind"])
        for kind, n in sorted(s.requests.items()):
            requests.add_metric([kind], n)
        yield requests
        errors = CounterMetricFamily(f"{PREFIX}_errors", "Error replies, by error code", labels=["code"])
        for code, n in sorted(s.errors.items()):
            errors.add_metric([code], n)
        yield errors
        # the control loop's part of the two above: their names and labels stay those of every client
        local = CounterMetricFamily(
            f"{PREFIX}_control_loop_requests",
            "Requests from the daemon's own control loop, by kind (also counted in requests)",
            labels=["kind"],
        )
        for kind, n in sorted(s.local_requests.items()):
            local.add_metric([kind], n)
        yield local
        local = CounterMetricFamily(
            f"{PREFIX}_control_loop_errors",
            "Error replies to the daemon's own control loop, by error code (also counted in errors)",
            labels=["code"],
        )
        for code, n in sorted(s.local_errors.items()):
            local.add_metric([code], n)
        yield local
        yield CounterMetricFamily(f"{PREFIX}_replies_ok", "Successful replies", value=s.replies_ok)
        yield GaugeMetricFamily(f"{PREFIX}_queue_depth", "Infer requests waiting for the engine", value=s.queue_depth)
        yield GaugeMetricFamily(f"{PREFIX}_queue_capacity", "Queue bound (server.queue_depth)", value=s.queue_capacity)
        yield GaugeMetricFamily(f"{PREFIX}_in_flight", "Inferences running now (0 or 1)", value=s.in_flight)
        yield GaugeMetricFamily(f"{PREFIX}_clients", "Clients heard from in the last minute", value=s.clients)
        latency = GaugeMetricFamily(
            f"{PREFIX}_latency_milliseconds",
            "Latency percentiles over the last 2048 infers, server clock: queue, infer, total",
            labels=["stage", "quantile"],
        )
        for stage, p in sorted(s.latency_ms.items()):
            for q, v in (("0.5", p.p50), ("0.9", p.p90), ("0.99", p.p99), ("1", p.max)):
                latency.add_metric([stage, q], v)
        yield latency
        threads = (s.engine or info.engine).get("threads", 0)
        yield GaugeMetricFamily(f"{PREFIX}_inference_threads", "Inference threads the engine runs", value=threads)
        cpus = CounterMetricFamily(
            f"{PREFIX}_inference_cpu", "Inferences that ended on each CPU (where inference really runs)", labels=["cpu"]
        )
        for cpu, n in sorted(s.inference_cpus.items()):
            cpus.add_metric([str(cpu)], n)
        yield cpus
        stalled = GaugeMetricFamily(
            f"{PREFIX}_stalled", "1 while a worker misses its liveness deadline", labels=["worker"]
        )
        for name in self._stalled():
            stalled.add_metric([name], 1)
        yield stalled
        yield from self.recording_metrics()
        canary = s.verification
        if canary:  # the serving canary (docs/engine.md); absent when it is off
            yield CounterMetricFamily(f"{PREFIX}_canary_checks", "Canary checks run", value=canary["checks"])
            yield GaugeMetricFamily(
                f"{PREFIX}_canary_failed", "1 once a canary check failed (no chunk served)", value=int(canary["failed"])
            )
            if canary.get("last_max_abs_err") is not None:
                yield GaugeMetricFamily(
                    f"{PREFIX}_canary_error",
                    "Max error of the last canary check, in the test case's units (as the load gate)",
                    value=canary["last_max_abs_err"],
                )
            if canary.get("last_check_ms") is not None:
                yield GaugeMetricFamily(
                    f"{PREFIX}_canary_check_milliseconds", "Last canary check's duration", value=canary["last_check_ms"]
                )
        arm = s.arm
        if arm is not None:
            healthy, estop = int(bool(arm["healthy"])), int(bool(arm["estop"]))
            yield GaugeMetricFamily(f"{PREFIX}_arm_healthy", "1 when the last arm read worked", value=healthy)
            yield GaugeMetricFamily(f"{PREFIX}_arm_estop", "1 while the e-stop is engaged", value=estop)
            failures = arm.get("failures", 0)
            yield CounterMetricFamily(f"{PREFIX}_arm_read_failures", "Failed arm reads", value=failures)
            temps = GaugeMetricFamily(
                f"{PREFIX}_arm_temperature_celsius", "Servo temperature at the last read", labels=["joint"]
            )
            for joint, t in sorted((arm.get("temperature_c") or {}).items()):
                temps.add_metric([joint], t)
            yield temps
        control = self._control()
        if control is not None:
            yield from control_metrics(control)


    def recording_metrics(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        rec = self._recording()
        if rec is None:
            return
        dropped = CounterMetricFamily(
            f"{PREFIX}_recording_frames_dropped",
            "Ticks left out because a camera's encoder was behind",
            labels=["camera"],
        )
        for camera, n in sorted(rec.encoder_drops_by_camera.items()):
            dropped.add_metric([camera], n)
        yield dropped
        yield CounterMetricFamily(
            f"{PREFIX}_recording_episodes_over_drop_rate",
            "Episodes that dropped more than recording.max_drop_rate of their ticks",
            value=rec.episodes_over_drop_rate,
        )
        yield CounterMetricFamily(
            f"{PREFIX}_recording_encoder_deaths", "Encoder processes that died unasked", value=rec.encoder_deaths
        )
        yield CounterMetricFamily(
            f"{PREFIX}_recording_episodes_written", "Episodes written to the dataset", value=rec.episodes_written
        )

def control_metrics(status: Mapping[str, Any]) -> Iterator[Any]:
    """The loop's timing: when ticks woke, and when the servos got their goals."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    quantiles = (("0.5", "p50"), ("0.99", "p99"), ("1", "max"))
    wake = GaugeMetricFamily(
        f"{PREFIX}_control_tick_lateness_milliseconds",
        "How late control ticks woke after their deadline, over the last 10 s",
        labels=["quantile"],
    )
    for q, key in quantiles:
        if status["jitter_ms"].get(key) is not None:
            wake.add_metric([q], status["jitter_ms"][key])
    yield wake
    writes = status["write_period_error_ms"]
    error = GaugeMetricFamily(
        f"{PREFIX}_control_write_period_error_milliseconds",
        "Time between consecutive completed sync writes minus the control period (absolute), over the last 10 s",
        labels=["quantile"],
    )
    for q, key in quantiles:
        if writes.get(key) is not None:
            error.add_metric([q], writes[key])
    yield error
    measured = "Write periods measured (writes on consecutive ticks)"
    yield CounterMetricFamily(f"{PREFIX}_control_write_periods", measured, value=writes["periods"])
    off = "Write periods more than 5 ms off the control period"
    yield CounterMetricFamily(f"{PREFIX}_control_write_periods_off", off, value=writes["off_5ms"])
    process = status.get("process")
    if process is not None:  # the loop in an arm process of its own: is it there?
        yield GaugeMetricFamily(
            f"{PREFIX}_arm_process_alive",
            "1 while the arm process (the loop, the serial port) runs",
            value=1.0 if process["alive"] else 0.0,
        )
    skipped = "Control ticks skipped (woke a whole period late)"
    yield CounterMetricFamily(f"{PREFIX}_control_overruns", skipped, value=status["counters"]["overruns"])
    policy = status.get("policy")
    if isinstance(policy, Mapping) and policy.get("where") == "remote":
        yield from remote_policy_metrics(policy)


def remote_policy_metrics(policy: Mapping[str, Any]) -> Iterator[Any]:
    """The loop's policy on another machine (``[policy] endpoint``): where, the link, its round trips."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    endpoint = str(policy.get("endpoint", ""))
    up = GaugeMetricFamily(
        f"{PREFIX}_remote_policy_link_up", "1 while the remote policy's link answers", labels=["endpoint"]
    )
    up.add_metric([endpoint], 1.0 if policy.get("link") == "up" else 0.0)
    yield up
    for key, name, what in (
        ("round_trip", "remote_policy_round_trip_milliseconds", "Round trip of the link's pings"),
        ("chunk_round_trip", "remote_policy_chunk_round_trip_milliseconds", "Request to chunk, inference included"),
    ):
        trips = policy.get(key) or {}
        family = GaugeMetricFamily(f"{PREFIX}_{name}", f"{what}, over the recent ones", labels=["quantile"])
        for q, k in (("0.5", "p50_ms"), ("0.99", "p99_ms")):
            if trips.get(k) is not None:
                family.add_metric([q], trips[k])
        yield family
    if policy.get("fallback") is not None:
        yield GaugeMetricFamily(
            f"{PREFIX}_remote_policy_fallback_driving",
            "1 while the local fallback policy drives instead of the remote one",
            value=1.0 if policy.get("driving") == "local fallback" else 0.0,
        )
    counters = policy.get("counters") or {}
    lost = CounterMetricFamily(f"{PREFIX}_remote_policy_link_losses", "Times the remote policy's link was lost")
    lost.add_metric([], counters.get("link_lost", 0))
    yield lost

class MetricsServer:
    """The HTTP endpoint; ``close()`` stops it."""

    def __init__(self, config: MetricsConfig, collector: RuntimeCollector) -> None:
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError as e:
            raise MissingDependencyError(
                f"[metrics] is configured but prometheus-client is missing ({e}); pip install prometheus-client"
            ) from e
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        if not is_loopback(config.host):
            log.warning(
                "metrics on %s:%d are reachable from other machines, without authentication", config.host, config.port
            )
        try:
            self._server, self._thread = start_http_server(config.port, addr=config.host, registry=registry)
        except OSError as e:
            raise ConfigError(f"metrics: cannot listen on {config.host}:{config.port}: {e.strerror or e}") from e
        self.address = f"http://{config.host}:{self._server.server_port}/metrics"
        log.info("metrics at %s", self.address)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
