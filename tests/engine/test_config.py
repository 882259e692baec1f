"""The [engine] table's defaults and every refusal at its bound, word for word."""

from __future__ import annotations

import pytest

from runtime.engine.config import EngineConfig
from runtime.errors import ConfigError


def test_the_defaults() -> None:
    c = EngineConfig()
    assert (c.bundle, c.engine, c.devices, c.precision) == ("", "auto", ("NPU", "GPU", "CPU"), "auto")
    assert (c.cpus, c.control_cpu, c.threads, c.cache_dir) == ((), 0, 0, "")
    assert (c.warmup_runs, c.parity_runs, c.ready_runs) == (1, 16, 2)
    assert c.allow_parity_failure is False and c.accept_lower_arithmetic is False


def test_the_bounds_that_are_taken() -> None:
    c = EngineConfig(devices=("CPU",), threads=0, warmup_runs=0, parity_runs=1, cpus=(0,))
    assert (c.devices, c.threads, c.warmup_runs, c.parity_runs, c.cpus) == (("CPU",), 0, 0, 1, (0,))
    c = EngineConfig(devices=("GPU", "NPU"), threads=1, cpus=(3, 1))
    assert (c.devices, c.threads, c.cpus) == (("GPU", "NPU"), 1, (3, 1))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"devices": ("CPU", "TPU")}, "engine.devices: expected CPU, GPU or NPU, got 'TPU'"),
        ({"devices": ("cpu",)}, "engine.devices: expected CPU, GPU or NPU, got 'cpu'"),
        ({"devices": ("GPU.1",)}, "engine.devices: expected CPU, GPU or NPU, got 'GPU.1'"),
        ({"devices": ()}, "engine.devices: expected at least one of CPU, GPU, NPU, got an empty list"),
        ({"threads": -1}, "engine.threads: expected 0 (auto) or a positive count, got -1"),
        ({"warmup_runs": -1}, "engine.warmup_runs: expected >= 0, got -1"),
        ({"parity_runs": 0}, "engine.parity_runs: expected >= 1 replays of the test case, got 0"),
        (
            {"ready_runs": 0},
            "engine.ready_runs: expected >= 1 replays of the test case before the daemon is ready, got 0",
        ),
        ({"cpus": (0, -1)}, "engine.cpus: expected distinct CPU numbers >= 0, got [0, -1]"),
        ({"cpus": (1, 2, 1)}, "engine.cpus: expected distinct CPU numbers >= 0, got [1, 2, 1]"),
    ],
)
def test_each_refusal(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        EngineConfig(**kw)  # type: ignore[arg-type]
    assert str(info.value) == message
