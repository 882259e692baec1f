"""The Prometheus endpoint: ``[metrics]``'s refusals, what each scrape exposes (names, help, labels and
values, on figures made in the test), and the HTTP server's start, refusal and stop."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from runtime.metrics import control_metrics


def exposition(families: Any) -> list[str]:
    """The sample lines of ``families`` as a scrape shows them (no HELP and TYPE lines)."""

    class Collector:
        def collect(self) -> Any:
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())  # type: ignore[arg-type]
    return [line for line in generate_latest(registry).decode().splitlines() if not line.startswith("#")]


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
