"""A SmolVLA bundle driven by the control loop: the task comes from ``control start --task`` (or the
config) and goes with every request the loop makes; a start without one is refused by name."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drivers.config import ArmConfig
from runtime.client import PolicyClient
from runtime.config import DaemonConfig, DaemonSettings
from runtime.control.config import ControlConfig, SafetyConfig, StreamConfig
from runtime.engine.config import EngineConfig
from runtime.protocol.errors import ControlRefusedError, NoControlError
from runtime.sdnotify import SystemdNotifier
from runtime.server import ServerConfig
from tests.control.conftest import CALIBRATION, IMAGE, Camera, wait_for


@pytest.fixture
def short() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="lrt-v-") as d:
        yield Path(d)


def _status(client: PolicyClient) -> dict | None:  # type: ignore[type-arg]
    try:
        return client.control("status")
    except NoControlError:
        return None


def test_the_loop_drives_smolvla_with_the_task_control_start_gives(smolvla_bundle: Path, short: Path) -> None:
    from runtime.daemon import Daemon

    camera = Camera(f"ipc://{short}/cam.sock")
    config = DaemonConfig(
        engine=EngineConfig(bundle=str(smolvla_bundle)),
        server=ServerConfig(endpoints=(f"ipc://{short}/policy.sock",)),
        arm=ArmConfig(kind="sim", calibration=str(CALIBRATION)),
        control=ControlConfig(
            rate_hz=30.0,
            rt_priority=0,
            streams=(StreamConfig(IMAGE, camera.endpoint, 500.0),),
            # random weights: actions anywhere, so the first-step refusal is opened (the envelope bounds every goal)
            safety=SafetyConfig(max_first_step_deg=360.0, stall_timeout_s=30.0),
        ),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0, state_dir=str(short / "state")),
    )
    d = Daemon(config, notifier=SystemdNotifier(None))
    d.startup()
    try:
        with PolicyClient(f"ipc://{short}/policy.sock", timeout_s=30) as client:
            assert client.hello().takes_task  # the policy says it takes a task
            # frames from the camera and the whole parity gate passed (READY comes after its first replays)
            wait_for(lambda: (s := _status(client)) is not None and not s["blocked"], 30, "frames and the gate")
            with pytest.raises(ControlRefusedError, match="follows an instruction") as refused:
                client.control("start")
            assert refused.value.field == "body.task"
            client.control("start", task="pick up the red cube")
            wait_for(lambda: client.control("status")["counters"].get("chunks", 0) >= 2, 60, "two chunks")
            status = client.control("status")
            assert status["task"] == "pick up the red cube"
            assert status["counters"].get("inference_failures", 0) == 0  # no request went without it
            assert status["counters"]["writes"] > 0
            time.sleep(0.1)
    finally:
        d.shutdown()
        camera.close()
