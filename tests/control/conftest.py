"""Fixtures for the control loop: simulated servos on a pty, a real camera stream over ZeroMQ, and
an inference source scripted per test (the seam the daemon fills with the server's worker)."""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from drivers.calibration import Calibration, load_calibration
from drivers.sim.arm import SimArm
from runtime.arm_control.feed import StreamFeed
from runtime.arm_control.streams import ObservationStreams
from runtime.bundle.bundle import Bundle
from runtime.bundle.interface import PolicyInterface
from runtime.bundle.manifest import Manifest
from runtime.control.config import ControlConfig, SafetyConfig, StreamConfig
from runtime.control.feed import Prefix
from runtime.control.loop import ControlLoop
from runtime.producers.camera import CameraPublisher, SyntheticSource

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = ROOT / "configs" / "calibration" / "so101_sim.toml"
IMAGE = "observation.images.front"


@pytest.fixture(scope="session")
def calibration() -> Calibration:
    return load_calibration(CALIBRATION)


@pytest.fixture(scope="session")
def manifest(demo_bundle: Path) -> Manifest:
    return Bundle.open(demo_bundle).manifest


@pytest.fixture
def sim_arm(calibration: Calibration) -> Iterator[SimArm]:
    arm = SimArm.start(calibration)
    yield arm
    arm.close()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="lrt-c-") as d:
        yield Path(d)


class Camera:
    """The synthetic camera publishing on a real PUB socket, in a thread; ``pause()`` starves the loop."""

    def __init__(self, endpoint: str, fps: float = 60.0) -> None:
        self.publisher = CameraPublisher(SyntheticSource(128, 96), IMAGE, endpoint, fps)
        self.endpoint = self.publisher.endpoint
        self._paused = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        src = self.publisher.source
        while not self._stop.wait(self.publisher.period):
            if not self._paused.is_set():
                self.publisher.publish(src.read(), time.monotonic())

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.publisher.close()


@pytest.fixture
def camera(short_dir: Path) -> Iterator[Camera]:
    cam = Camera(f"ipc://{short_dir}/cam.sock")
    yield cam
    cam.close()


class ScriptedInference:
    """Answers each observation after ``delay_s`` on its own thread, like the inference worker.

    ``chunk(n, state)`` gives the n-th chunk (n from 1) from the observation's joint state, or None
    for a request that is never answered.
    """

    def __init__(self, chunk: Callable[[int, np.ndarray], np.ndarray | None], delay_s: float = 0.01) -> None:
        self.chunk = chunk
        self.delay_s = delay_s
        self.calls = 0
        self.failure_reason: str | None = None
        self.error: str | None = None
        self.resets: list[int] = []  # the calls that started a new observation history
        self.observed: list[tuple[int, bool]] = []  # (calls so far, reset) per observation without a call
        self.prefixes: list[Prefix | None] = []  # what each call carried (real-time chunking)

    def submit(
        self,
        inputs: list[np.ndarray],
        on_done: Callable[[Any, str | None], None],
        *,
        reset: bool = False,
        prefix: Prefix | None = None,
    ) -> bool:
        self.calls += 1
        self.prefixes.append(prefix)
        if reset:
            self.resets.append(self.calls)
        n = self.calls
        state = next(a for a in inputs if a.dtype == np.float32 and a.ndim == 1).copy()

        def answer() -> None:
            if self.error is not None:
                on_done(None, self.error)
                return
            chunk = self.chunk(n, state)
            if chunk is not None:
                on_done(chunk, None)

        t = threading.Timer(self.delay_s, answer)
        t.daemon = True
        t.start()
        return True

    def observe(self, inputs: list[np.ndarray], *, reset: bool = False) -> None:
        self.observed.append((self.calls, reset))

    def failure(self) -> str | None:
        return self.failure_reason

    def pending(self) -> str | None:
        return None

    def unreachable(self) -> str | None:
        return None


def build_loop(
    arm: SimArm,
    calibration: Calibration,
    manifest: Manifest,
    inference: Any,
    camera: Camera,
    *,
    rate_hz: float = 50.0,
    n_action_steps: int = 0,
    max_age_ms: float = 300.0,
    **safety: Any,
) -> tuple[ControlLoop, ObservationStreams]:
    defaults: dict[str, Any] = {"stall_timeout_s": 0.6}
    safety_cfg = SafetyConfig(**{**defaults, **safety})
    config = ControlConfig(
        rate_hz=rate_hz,
        n_action_steps=n_action_steps,
        rt_priority=0,
        streams=(StreamConfig(IMAGE, camera.endpoint, max_age_ms),),
        safety=safety_cfg,
    )
    streams = ObservationStreams(config.streams, manifest.observation_inputs)
    streams.start()
    policy = PolicyInterface.of_manifest(manifest)
    loop = ControlLoop(arm.bus, calibration, policy, config, StreamFeed(inference, policy, streams))
    return loop, streams


@pytest.fixture
def run(sim_arm: SimArm, calibration: Calibration, manifest: Manifest, camera: Camera) -> Iterator[Any]:
    """``run(inference, **config)``: a started loop on the simulated arm with the camera stream fresh."""
    made: list[tuple[ControlLoop, ObservationStreams]] = []

    def make(inference: Any, manifest: Manifest = manifest, **kw: Any) -> ControlLoop:
        loop, streams = build_loop(sim_arm, calibration, manifest, inference, camera, **kw)
        made.append((loop, streams))
        loop.start()
        wait_for(lambda: not streams.stale(time.monotonic()), what="camera frames")
        return loop

    yield make
    for loop, streams in made:
        loop.shutdown()
        streams.stop()


@contextmanager
def running_daemon(config: Any) -> Iterator[Any]:
    """The daemon in this process: started, fed camera frames, its main loop on a thread; shut down after."""
    from runtime.daemon import Daemon
    from runtime.sdnotify import SystemdNotifier

    d = Daemon(config, notifier=SystemdNotifier(None))
    d.startup()
    assert d.streams is not None
    wait_for(lambda: not d.streams.stale(time.monotonic()), what="camera frames at the daemon")
    # READY comes after the parity gate's first replays; a control start waits for the rest
    wait_for(lambda: d.server is not None and d.server.gate_pending is None, what="the whole parity gate")
    thread = threading.Thread(target=d.main_loop, daemon=True)
    thread.start()
    try:
        yield d
    finally:
        d.should_exit = True
        thread.join(5)
        d.shutdown()


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")


def received_goals(arm: SimArm, calibration: Calibration) -> tuple[np.ndarray, np.ndarray]:
    """Every sync write the servos heard: (times [n], goals in degrees/percent [n, joints])."""
    names = list(calibration.joints)
    logs = [list(arm.simulator.servo(calibration.joints[n].id).goal_log) for n in names]
    n = min(len(entry) for entry in logs)
    times = np.array([logs[0][i][0] for i in range(n)])
    goals = np.array(
        [[calibration.joints[name].to_user(logs[j][i][1]) for j, name in enumerate(names)] for i in range(n)]
    )
    return times, goals


def with_overrides(config: ControlConfig, **kw: Any) -> ControlConfig:
    return dataclasses.replace(config, **kw)
