"""A SmolVLA bundle with real-time chunking driven by the daemon's control loop (the arm process): every
request after the first carries the plan's leftover, which reaches the program as the rest of the
chunk the loop is executing, weighted for the measured delay."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from drivers.config import ArmConfig
from runtime.bundle.rtc import prefix_weights
from runtime.client import PolicyClient
from runtime.config import DaemonConfig, DaemonSettings
from runtime.control.config import ControlConfig, SafetyConfig, StreamConfig
from runtime.engine.config import EngineConfig
from runtime.protocol.errors import NoControlError
from runtime.sdnotify import SystemdNotifier
from runtime.server import ServerConfig
from tests.control.conftest import CALIBRATION, IMAGE, Camera, wait_for
from tests.engine.conftest import SMOLVLA_RTC

pytestmark = pytest.mark.timeout(900)  # the bundle's export, when this module runs first


@pytest.fixture
def short() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="lrt-r-") as d:
        yield Path(d)


def _status(client: PolicyClient) -> dict[str, Any] | None:
    try:
        return client.control("status")
    except NoControlError:
        return None


def test_the_loops_leftover_reaches_the_program_as_the_rest_of_its_plan(smolvla_rtc_bundle: Path, short: Path) -> None:
    from runtime.daemon import Daemon

    camera = Camera(f"ipc://{short}/cam.sock")
    config = DaemonConfig(
        engine=EngineConfig(bundle=str(smolvla_rtc_bundle), engine="openvino"),
        server=ServerConfig(endpoints=(f"ipc://{short}/policy.sock",), canary_interval_s=0),
        arm=ArmConfig(kind="sim", calibration=str(CALIBRATION)),
        control=ControlConfig(
            rate_hz=30.0,
            rt_priority=0,
            task="pick up the red cube",
            streams=(StreamConfig(IMAGE, camera.endpoint, 500.0),),
            # random weights: actions anywhere, so the envelope's first-step refusal is opened
            safety=SafetyConfig(max_first_step_deg=360.0, stall_timeout_s=30.0),
        ),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0, state_dir=str(short / "state")),
    )
    d = Daemon(config, notifier=SystemdNotifier(None))
    d.startup()
    runs: list[tuple[list[np.ndarray], np.ndarray]] = []
    try:
        engine = d.server.engine
        names = [s.name for s in engine.manifest.inputs]
        run = engine.run_validated

        def recording(arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
            out = run(arrays)
            runs.append(([a.copy() for a in arrays], out["action"].copy()))
            return out

        engine.run_validated = recording  # type: ignore[method-assign]  # the worker's calls, seen
        with PolicyClient(f"ipc://{short}/policy.sock", timeout_s=30) as client:
            assert client.hello().takes_prefix
            # frames from the camera and the whole parity gate passed (READY comes after its first replays)
            wait_for(lambda: (s := _status(client)) is not None and not s["blocked"], 30, "frames and the gate")
            client.control("start")
            wait_for(lambda: client.control("status")["counters"].get("prefix_requests", 0) >= 4, 90, "leftovers")
            client.control("stop")
            status = client.control("status")
            assert status["counters"].get("inference_failures", 0) == 0
    finally:
        d.shutdown()
        camera.close()
    prefix_at, weights_at = names.index("rtc.prefix"), names.index("rtc.prefix_weights")
    guided = 0
    for (inputs, _), (_, previous) in zip(runs[1:], runs[:-1], strict=True):
        weights, leftover = inputs[weights_at], inputs[prefix_at]
        if not weights.any():
            continue  # a request without a plan (the first of a run)
        guided += 1
        steps = int(np.flatnonzero(leftover.any(axis=1)).max()) + 1  # the rows after it are padding
        assert not leftover[steps:].any()
        # the leftover is the rest of the chunk being executed, from the step of the ask's tick on, exactly
        offset = len(previous) - steps
        assert offset >= 1, (offset, steps)
        np.testing.assert_array_equal(leftover[:steps], previous[offset:])
        # weighted for a delay the chunk can still serve (LeRobot's weights for that many steps)
        horizon, size = SMOLVLA_RTC["execution_horizon"], len(weights)
        delays = [n for n in range(1, len(previous)) if np.array_equal(
            weights, prefix_weights(n, horizon, size, "LINEAR", steps)
        )]
        assert delays, weights
    assert guided >= 3
