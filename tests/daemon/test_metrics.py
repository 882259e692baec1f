"""The Prometheus endpoint: ``[metrics]``'s refusals, what each scrape exposes (names, help, labels and
values, on figures made in the test), and the HTTP server's start, refusal and stop."""

from __future__ import annotations

import logging
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from runtime.errors import ConfigError, MissingDependencyError
from runtime.metrics import MetricsConfig, MetricsServer, RuntimeCollector, control_metrics, is_loopback
from tests.daemon.test_status_report import info, stats


def scrape(collector: Any) -> list[str]:
    """Every line a scrape of ``collector`` shows."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode().splitlines()


class Families:
    def __init__(self, families: Any) -> None:
        self.families = list(families)

    def collect(self) -> Any:
        return self.families


def exposition(families: Any) -> list[str]:
    """The sample lines of ``families`` as a scrape shows them (no HELP and TYPE lines)."""
    return [line for line in scrape(Families(families)) if not line.startswith("#")]


def control(alive: bool | None) -> Mapping[str, Any]:
    status: dict[str, Any] = {
        "jitter_ms": {"p50": 0.1, "p99": 0.9, "max": 2.0},
        "write_period_error_ms": {"p50": 0.2, "p99": 0.8, "max": 1.5, "periods": 100, "off_5ms": 2},
        "counters": {"overruns": 4},
    }
    if alive is not None:
        status["process"] = {"alive": alive}
    return status


def test_the_arm_process_is_one_sample_alive_or_not() -> None:
    alive = [s for s in exposition(control_metrics(control(True))) if s.startswith("lerobot_runtime_arm_process")]
    assert alive == ["lerobot_runtime_arm_process_alive 1.0"]
    dead = [s for s in exposition(control_metrics(control(False))) if s.startswith("lerobot_runtime_arm_process")]
    assert dead == ["lerobot_runtime_arm_process_alive 0.0"]
    inside = [s for s in exposition(control_metrics(control(None))) if s.startswith("lerobot_runtime_arm_process")]
    assert inside == []  # the loop in the daemon's own process: no such figure


def test_metrics_are_off_and_on_loopback_by_default() -> None:
    assert MetricsConfig() == MetricsConfig(port=0, host="127.0.0.1")
    assert MetricsConfig(port=65535).port == 65535


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"port": -1}, "metrics.port: expected 0 (off) or a TCP port 1..65535, got -1"),
        ({"port": 65536}, "metrics.port: expected 0 (off) or a TCP port 1..65535, got 65536"),
        ({"host": ""}, "metrics.host: expected an address to bind, got an empty string"),
    ],
)
def test_each_metrics_refusal(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        MetricsConfig(**kwargs)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("192.168.1.20", False),
        ("::", False),
        ("metrics.example.com", False),
        ("LOCALHOST.example", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


FULL = """\
# HELP lerobot_runtime_policy_info What is being served
# TYPE lerobot_runtime_policy_info gauge
lerobot_runtime_policy_info{bundle="/b/pick",device="CPU",engine="openvino",policy="act",precision="f32",program="model.xml",threads="3"} 1.0
# HELP lerobot_runtime_uptime_seconds Seconds since the server started
# TYPE lerobot_runtime_uptime_seconds gauge
lerobot_runtime_uptime_seconds 3600.4
# HELP lerobot_runtime_requests_total Requests received, by kind
# TYPE lerobot_runtime_requests_total counter
lerobot_runtime_requests_total{kind="infer"} 10.0
lerobot_runtime_requests_total{kind="ping"} 2.0
# HELP lerobot_runtime_errors_total Error replies, by error code
# TYPE lerobot_runtime_errors_total counter
lerobot_runtime_errors_total{code="bad_input"} 2.0
lerobot_runtime_errors_total{code="queue_full"} 1.0
# HELP lerobot_runtime_control_loop_requests_total Requests from the daemon's own control loop, by kind (also counted in requests)
# TYPE lerobot_runtime_control_loop_requests_total counter
lerobot_runtime_control_loop_requests_total{kind="infer"} 7.0
# HELP lerobot_runtime_control_loop_errors_total Error replies to the daemon's own control loop, by error code (also counted in errors)
# TYPE lerobot_runtime_control_loop_errors_total counter
lerobot_runtime_control_loop_errors_total{code="bad_input"} 1.0
# HELP lerobot_runtime_replies_ok_total Successful replies
# TYPE lerobot_runtime_replies_ok_total counter
lerobot_runtime_replies_ok_total 11.0
# HELP lerobot_runtime_queue_depth Infer requests waiting for the engine
# TYPE lerobot_runtime_queue_depth gauge
lerobot_runtime_queue_depth 1.0
# HELP lerobot_runtime_queue_capacity Queue bound (server.queue_depth)
# TYPE lerobot_runtime_queue_capacity gauge
lerobot_runtime_queue_capacity 4.0
# HELP lerobot_runtime_in_flight Inferences running now (0 or 1)
# TYPE lerobot_runtime_in_flight gauge
lerobot_runtime_in_flight 1.0
# HELP lerobot_runtime_clients Clients heard from in the last minute
# TYPE lerobot_runtime_clients gauge
lerobot_runtime_clients 2.0
# HELP lerobot_runtime_latency_milliseconds Latency percentiles over the last 2048 infers, server clock: queue, infer, total
# TYPE lerobot_runtime_latency_milliseconds gauge
lerobot_runtime_latency_milliseconds{quantile="0.5",stage="queue"} 0.1
lerobot_runtime_latency_milliseconds{quantile="0.9",stage="queue"} 0.2
lerobot_runtime_latency_milliseconds{quantile="0.99",stage="queue"} 0.3
lerobot_runtime_latency_milliseconds{quantile="1",stage="queue"} 0.4
lerobot_runtime_latency_milliseconds{quantile="0.5",stage="total"} 5.0
lerobot_runtime_latency_milliseconds{quantile="0.9",stage="total"} 6.5
lerobot_runtime_latency_milliseconds{quantile="0.99",stage="total"} 7.25
lerobot_runtime_latency_milliseconds{quantile="1",stage="total"} 8.0
# HELP lerobot_runtime_inference_threads Inference threads the engine runs
# TYPE lerobot_runtime_inference_threads gauge
lerobot_runtime_inference_threads 3.0
# HELP lerobot_runtime_inference_cpu_total Inferences that ended on each CPU (where inference really runs)
# TYPE lerobot_runtime_inference_cpu_total counter
lerobot_runtime_inference_cpu_total{cpu="1"} 6.0
lerobot_runtime_inference_cpu_total{cpu="3"} 4.0
# HELP lerobot_runtime_stalled 1 while a worker misses its liveness deadline
# TYPE lerobot_runtime_stalled gauge
lerobot_runtime_stalled{worker="control loop"} 1.0
lerobot_runtime_stalled{worker="inference worker"} 1.0
# HELP lerobot_runtime_recording_frames_dropped_total Ticks left out because a camera's encoder was behind
# TYPE lerobot_runtime_recording_frames_dropped_total counter
lerobot_runtime_recording_frames_dropped_total{camera="observation.images.front"} 5.0
lerobot_runtime_recording_frames_dropped_total{camera="observation.images.wrist"} 2.0
# HELP lerobot_runtime_recording_episodes_over_drop_rate_total Episodes that dropped more than recording.max_drop_rate of their ticks
# TYPE lerobot_runtime_recording_episodes_over_drop_rate_total counter
lerobot_runtime_recording_episodes_over_drop_rate_total 1.0
# HELP lerobot_runtime_recording_encoder_deaths_total Encoder processes that died unasked
# TYPE lerobot_runtime_recording_encoder_deaths_total counter
lerobot_runtime_recording_encoder_deaths_total 6.0
# HELP lerobot_runtime_recording_episodes_written_total Episodes written to the dataset
# TYPE lerobot_runtime_recording_episodes_written_total counter
lerobot_runtime_recording_episodes_written_total 3.0
# HELP lerobot_runtime_canary_checks_total Canary checks run
# TYPE lerobot_runtime_canary_checks_total counter
lerobot_runtime_canary_checks_total 7.0
# HELP lerobot_runtime_canary_failed 1 once a canary check failed (no chunk served)
# TYPE lerobot_runtime_canary_failed gauge
lerobot_runtime_canary_failed 1.0
# HELP lerobot_runtime_canary_error Max error of the last canary check, in the test case's units (as the load gate)
# TYPE lerobot_runtime_canary_error gauge
lerobot_runtime_canary_error 0.25
# HELP lerobot_runtime_canary_check_milliseconds Last canary check's duration
# TYPE lerobot_runtime_canary_check_milliseconds gauge
lerobot_runtime_canary_check_milliseconds 12.5
# HELP lerobot_runtime_arm_healthy 1 when the last arm read worked
# TYPE lerobot_runtime_arm_healthy gauge
lerobot_runtime_arm_healthy 1.0
# HELP lerobot_runtime_arm_estop 1 while the e-stop is engaged
# TYPE lerobot_runtime_arm_estop gauge
lerobot_runtime_arm_estop 0.0
# HELP lerobot_runtime_arm_read_failures_total Failed arm reads
# TYPE lerobot_runtime_arm_read_failures_total counter
lerobot_runtime_arm_read_failures_total 3.0
# HELP lerobot_runtime_arm_temperature_celsius Servo temperature at the last read
# TYPE lerobot_runtime_arm_temperature_celsius gauge
lerobot_runtime_arm_temperature_celsius{joint="elbow"} 35.0
lerobot_runtime_arm_temperature_celsius{joint="wrist"} 40.0
# HELP lerobot_runtime_control_tick_lateness_milliseconds How late control ticks woke after their deadline, over the last 10 s
# TYPE lerobot_runtime_control_tick_lateness_milliseconds gauge
lerobot_runtime_control_tick_lateness_milliseconds{quantile="0.5"} 0.1
lerobot_runtime_control_tick_lateness_milliseconds{quantile="0.99"} 0.9
lerobot_runtime_control_tick_lateness_milliseconds{quantile="1"} 2.0
# HELP lerobot_runtime_control_write_period_error_milliseconds Time between consecutive completed sync writes minus the control period (absolute), over the last 10 s
# TYPE lerobot_runtime_control_write_period_error_milliseconds gauge
lerobot_runtime_control_write_period_error_milliseconds{quantile="0.5"} 0.2
lerobot_runtime_control_write_period_error_milliseconds{quantile="0.99"} 0.8
lerobot_runtime_control_write_period_error_milliseconds{quantile="1"} 1.5
# HELP lerobot_runtime_control_write_periods_total Write periods measured (writes on consecutive ticks)
# TYPE lerobot_runtime_control_write_periods_total counter
lerobot_runtime_control_write_periods_total 100.0
# HELP lerobot_runtime_control_write_periods_off_total Write periods more than 5 ms off the control period
# TYPE lerobot_runtime_control_write_periods_off_total counter
lerobot_runtime_control_write_periods_off_total 2.0
# HELP lerobot_runtime_arm_process_alive 1 while the arm process (the loop, the serial port) runs
# TYPE lerobot_runtime_arm_process_alive gauge
lerobot_runtime_arm_process_alive 1.0
# HELP lerobot_runtime_control_overruns_total Control ticks skipped (woke a whole period late)
# TYPE lerobot_runtime_control_overruns_total counter
lerobot_runtime_control_overruns_total 4.0"""  # noqa: E501 (a scrape, line by line)

CANARY = {"checks": 7, "failed": True, "last_max_abs_err": 0.25, "last_check_ms": 12.5}
ARM = {"kind": "sim", "healthy": True, "estop": False, "failures": 3, "temperature_c": {"wrist": 40, "elbow": 35}}
RECORDING = SimpleNamespace(
    encoder_drops_by_camera={"observation.images.wrist": 2, "observation.images.front": 5},
    episodes_over_drop_rate=1,
    encoder_deaths=6,
    episodes_written=3,
)


def test_a_scrape_shows_every_figure_by_name_with_its_help_and_labels() -> None:
    collector = RuntimeCollector(
        lambda: stats(
            errors={"queue_full": 1, "bad_input": 2},
            local_requests={"infer": 7},
            local_errors={"bad_input": 1},
            verification=CANARY,
            arm=ARM,
        ),
        info,
        stalled=lambda: ["control loop", "inference worker"],
        control=lambda: control(True),
        recording=lambda: RECORDING,
    )
    assert scrape(collector) == FULL.splitlines()


def samples(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith("#")]


def test_without_arm_loop_recording_or_canary_only_the_servers_figures() -> None:
    lines = samples(scrape(RuntimeCollector(lambda: stats(arm=None, latency_ms={}), info)))
    assert lines == [
        'lerobot_runtime_policy_info{bundle="/b/pick",device="CPU",engine="openvino",policy="act",'
        'precision="f32",program="model.xml",threads="3"} 1.0',
        "lerobot_runtime_uptime_seconds 3600.4",
        'lerobot_runtime_requests_total{kind="infer"} 10.0',
        'lerobot_runtime_requests_total{kind="ping"} 2.0',
        'lerobot_runtime_errors_total{code="queue_full"} 1.0',
        "lerobot_runtime_replies_ok_total 11.0",
        "lerobot_runtime_queue_depth 1.0",
        "lerobot_runtime_queue_capacity 4.0",
        "lerobot_runtime_in_flight 1.0",
        "lerobot_runtime_clients 2.0",
        "lerobot_runtime_inference_threads 3.0",
        'lerobot_runtime_inference_cpu_total{cpu="1"} 6.0',
        'lerobot_runtime_inference_cpu_total{cpu="3"} 4.0',
    ]


def test_the_serving_engine_wins_over_the_hellos_and_its_cpus_are_no_label() -> None:
    engine = {"engine": "executorch", "device": "CPU", "cpus": [2], "threads": 1}
    lines = samples(scrape(RuntimeCollector(lambda: stats(engine=engine, arm=None), info)))
    assert lines[0] == ('lerobot_runtime_policy_info{device="CPU",engine="executorch",policy="act",threads="1"} 1.0')
    assert "lerobot_runtime_inference_threads 1.0" in lines
    no_threads = samples(scrape(RuntimeCollector(lambda: stats(arm=None), lambda: info(engine={}))))
    assert no_threads[0] == 'lerobot_runtime_policy_info{policy="act"} 1.0'
    assert "lerobot_runtime_inference_threads 0.0" in no_threads


def test_a_canary_not_yet_measured_and_a_failing_arm() -> None:
    canary = {"checks": 0, "failed": False, "last_max_abs_err": None, "last_check_ms": None}
    arm = {"kind": "sim", "healthy": False, "estop": True}
    lines = samples(scrape(RuntimeCollector(lambda: stats(verification=canary, arm=arm, latency_ms={}), info)))
    # no error or duration before the first check, no temperatures before the first read
    assert lines[-5:] == [
        "lerobot_runtime_canary_checks_total 0.0",
        "lerobot_runtime_canary_failed 0.0",
        "lerobot_runtime_arm_healthy 0.0",
        "lerobot_runtime_arm_estop 1.0",
        "lerobot_runtime_arm_read_failures_total 0.0",
    ]
    assert not any("canary_error" in line or "canary_check_milliseconds" in line for line in lines)


def test_a_remote_policy_shows_its_link_and_round_trips() -> None:
    status = {
        **control(True),
        "policy": {
            "where": "remote",
            "endpoint": "tcp://10.0.0.2:5555",
            "link": "up",
            "round_trip": {"count": 40, "p50_ms": 41.5, "p99_ms": 53.1},
            "chunk_round_trip": {"count": 0},
            "counters": {"link_lost": 2},
        },
    }
    remote = [s for s in exposition(control_metrics(status)) if s.startswith("lerobot_runtime_remote_policy")]
    assert remote == [
        'lerobot_runtime_remote_policy_link_up{endpoint="tcp://10.0.0.2:5555"} 1.0',
        'lerobot_runtime_remote_policy_round_trip_milliseconds{quantile="0.5"} 41.5',
        'lerobot_runtime_remote_policy_round_trip_milliseconds{quantile="0.99"} 53.1',
        "lerobot_runtime_remote_policy_link_losses_total 2.0",
    ]
    fallback = {**status, "policy": {**status["policy"], "fallback": {"name": "small"}, "driving": "local fallback"}}
    driving = [s for s in exposition(control_metrics(fallback)) if "fallback" in s]
    assert driving == ["lerobot_runtime_remote_policy_fallback_driving 1.0"]
    local = {**control(True), "policy": {"where": "local", "policy": "act", "engine": {}}}
    assert not [s for s in exposition(control_metrics(local)) if "remote_policy" in s]


def test_loop_figures_not_yet_measured_are_left_out() -> None:
    status = {
        "jitter_ms": {"p50": None, "p99": None, "max": None},
        "write_period_error_ms": {"p50": None, "p99": None, "max": None, "periods": 0, "off_5ms": 0},
        "counters": {"overruns": 0},
    }
    assert exposition(control_metrics(status)) == [
        "lerobot_runtime_control_write_periods_total 0.0",
        "lerobot_runtime_control_write_periods_off_total 0.0",
        "lerobot_runtime_control_overruns_total 0.0",
    ]


def test_the_server_serves_scrapes_until_closed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="runtime.metrics")
    collector = RuntimeCollector(lambda: stats(arm=None), info)
    server = MetricsServer(MetricsConfig(port=0), collector)
    try:
        assert server.address.startswith("http://127.0.0.1:") and server.address.endswith("/metrics")
        body = urllib.request.urlopen(server.address, timeout=10).read().decode()
        assert "lerobot_runtime_queue_capacity 4.0" in body.splitlines()
        assert "reachable from other machines" not in caplog.text
    finally:
        server.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.address, timeout=10)


def test_only_the_configured_address_listens() -> None:
    server = MetricsServer(MetricsConfig(port=0, host="127.0.0.2"), RuntimeCollector(lambda: stats(), info))
    try:
        port = int(server.address.rsplit(":", 1)[1].split("/")[0])
        assert server.address == f"http://127.0.0.2:{port}/metrics"
        assert "lerobot_runtime_clients 2.0" in urllib.request.urlopen(server.address, timeout=10).read().decode()
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
    finally:
        server.close()


def test_nothing_is_read_until_a_scrape() -> None:
    reads: list[str] = []

    def snapshot() -> Any:
        reads.append("stats")
        return stats()

    def hello() -> Any:
        reads.append("info")
        return info()

    server = MetricsServer(MetricsConfig(port=0), RuntimeCollector(snapshot, hello))
    try:
        assert reads == []
        urllib.request.urlopen(server.address, timeout=10).read()
        assert reads == ["stats", "info"]
    finally:
        server.close()


def test_a_port_in_use_is_refused_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as err:
            MetricsServer(MetricsConfig(port=port), RuntimeCollector(lambda: stats(), info))
    assert str(err.value) == f"metrics: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_a_non_loopback_address_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    server = MetricsServer(MetricsConfig(port=0, host="0.0.0.0"), RuntimeCollector(lambda: stats(), info))
    server.close()
    assert "metrics on 0.0.0.0:0 are reachable from other machines, without authentication" in caplog.text


def test_without_prometheus_client_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MissingDependencyError) as err:
        MetricsServer(MetricsConfig(port=9100), RuntimeCollector(lambda: stats(), info))
    text = str(err.value)
    assert text.startswith("[metrics] is configured but prometheus-client is missing (")
    assert text.endswith("); pip install prometheus-client")
