"""When either process dies: the daemon side (SIGKILL, a native crash in inference, a hang) while the
arm moves, and the arm process while the daemon runs. Asserted on what the simulated servos received."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from drivers.calibration import Calibration, load_calibration
from drivers.sim.arm import simulator_for
from drivers.sim.simulator import ServoSimulator
from runtime.client import PolicyClient
from runtime.protocol.errors import NoControlError
from tests.control.conftest import CALIBRATION, IMAGE, Camera, wait_for

ROOT = Path(__file__).resolve().parents[2]
RATE_HZ = 30.0
STALL_S = 0.6


@pytest.fixture
def servos() -> Iterator[tuple[ServoSimulator, Calibration]]:
    """The servos outside every process of the daemon, as hardware is: they outlive what drives them."""
    calibration = load_calibration(CALIBRATION)
    sim = simulator_for(calibration).start()
    yield sim, calibration
    sim.stop()


def _config(short_dir: Path, demo_bundle: Path, port: str, camera: Camera, **control: str) -> Path:
    extra = "".join(f"{k} = {v}\n" for k, v in control.items())
    path = short_dir / "daemon.toml"
    path.write_text(
        f"""
[engine]
bundle = "{demo_bundle}"
[server]
endpoints = ["ipc://{short_dir}/policy.sock"]
[arm]
kind = "feetech"
port = "{port}"
calibration = "{CALIBRATION}"
[control]
rate_hz = {RATE_HZ}
rt_priority = 0
{extra}[control.safety]
stall_timeout_s = {STALL_S}
stall_action = "rest"
rest_speed_deg_s = 60.0
max_first_step_deg = 360.0
[control.safety.rest_pose]
shoulder_pan = 0.0
shoulder_lift = 0.0
elbow_flex = 0.0
wrist_flex = 0.0
wrist_roll = 0.0
gripper = 50.0
[[control.streams]]
input = "{IMAGE}"
endpoint = "{camera.endpoint}"
max_age_ms = 500.0
[daemon]
state_dir = "{short_dir / "state"}"
"""
    )
    return path


def _daemon(sim: ServoSimulator, demo_bundle: Path, short_dir: Path, camera: Camera) -> tuple[Any, Any]:
    """The daemon in this process (started; the caller shuts it down), its arm process on ``sim``."""
    from runtime.config import load_config
    from runtime.daemon import Daemon
    from tests.server.test_daemon_lifecycle import RecordingNotifier

    notifier = RecordingNotifier()
    d = Daemon(load_config(_config(short_dir, demo_bundle, sim.port, camera)), notifier=notifier)
    d.startup()
    return d, notifier


def _goals(sim: ServoSimulator, calibration: Calibration) -> tuple[np.ndarray, np.ndarray]:
    names = list(calibration.joints)
    logs = [list(sim.servo(calibration.joints[n].id).goal_log) for n in names]
    n = min(len(entry) for entry in logs)
    times = np.array([logs[0][i][0] for i in range(n)])
    goals = np.array([[calibration.joints[m].to_user(logs[j][i][1]) for j, m in enumerate(names)] for i in range(n)])
    return times, goals


def _torque_offs(sim: ServoSimulator, calibration: Calibration) -> list[float]:
    first = sim.servo(next(iter(calibration.joints.values())).id)
    return [t for t, on in first.torque_log if not on]


def _fresh(client: PolicyClient) -> bool:
    try:
        status = client.control("status")
        # frames from every camera, and the whole parity gate passed (READY comes after its first replays)
        return not status["stale_streams"] and not status["blocked"]
    except NoControlError:  # the arm process is still starting
        return False


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _moving(client: PolicyClient) -> bool:
    status = client.control("status")
    return status["mode"] == "running" and status["counters"].get("chunks", 0) >= 1


@pytest.mark.parametrize("fault", ["sigkill", "native crash", "hang"])
def test_the_daemon_side_dies_while_the_arm_moves_the_arm_holds_then_rests(
    fault: str, servos, demo_bundle: Path, short_dir: Path, camera: Camera
) -> None:
    sim, calibration = servos
    config = _config(short_dir, demo_bundle, sim.port, camera, link_timeout_s="0.3")
    trigger = short_dir / "crash-now"
    command = (
        [sys.executable, "-m", "tests.arm.crash_daemon", str(config), str(trigger)]
        if fault == "native crash"
        else [sys.executable, "-m", "runtime", "serve", "--config", str(config)]
    )
    log = (short_dir / "daemon.log").open("w")
    daemon = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    arm_pid = 0
    try:
        with PolicyClient(f"ipc://{short_dir}/policy.sock", timeout_s=60) as client:
            wait_for(lambda: _fresh(client), timeout=60, what="camera frames")
            arm_pid = client.control("status")["processes"]["control"]
            assert arm_pid != daemon.pid
            client.control("start")
            wait_for(lambda: _moving(client), timeout=30, what="the policy moving the arm")
            time.sleep(0.5)
        if fault == "native crash":
            trigger.touch()  # the loop's next request crashes the daemon's process
            daemon.wait(10)
            assert daemon.returncode == -signal.SIGSEGV
        elif fault == "sigkill":
            daemon.kill()
            daemon.wait(10)
        else:
            daemon.send_signal(signal.SIGSTOP)  # alive, answering nothing
        gone_at = time.monotonic()
        # holds, rests (the stall action), then shuts down by itself (a zombie while its parent is stopped)
        wait_for(lambda: _ended(arm_pid), timeout=15, what="the arm process to shut down by itself")
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGCONT)
            daemon.kill()
            daemon.wait(10)
        if arm_pid and psutil.pid_exists(arm_pid):
            os.kill(arm_pid, signal.SIGKILL)
    times, goals = _goals(sim, calibration)
    before = int(np.searchsorted(times, gone_at, side="right"))
    assert len(times) > before, (short_dir / "daemon.log").read_text()[-3000:]
    # the last goal written while the daemon side answered, and what came after
    last_policy = goals[before - 1]
    after_t, after = times[before:], goals[before:]
    # The arm process holds at the tick after it sees the death: at end-of-file on the link, or for a
    # hang after link_timeout_s of silence. Until then its queued chunk goes on, and a SIGKILL or a
    # crash is at times seen only at the silence bound (not yet explained: see docs/control.md), so
    # every fault is held to the hang's bound; the first hold is where the writes stop changing.
    timeline = "; ".join(
        f"{t - gone_at:+.3f} s: {np.abs(g - goals[before - 1]).max():.2f} deg"
        for t, g in zip(times[before - 3 : before + 12], goals[before - 3 : before + 12], strict=False)
    )
    held = np.flatnonzero(np.all(np.abs(np.diff(after, axis=0)) < 1e-6, axis=1))
    assert len(held), f"the arm never held: {timeline}"
    start = int(held[0])
    assert after_t[start] - gone_at < 0.3 + 3 / RATE_HZ + 0.2, timeline
    if fault != "hang" and start == 0:  # seen at once: the very goal last written
        np.testing.assert_allclose(after[0], last_policy, atol=0.2, err_msg=timeline)
    hold, rest = after[start], np.array([0.0, 0.0, 0.0, 0.0, 0.0, 50.0])
    # then holding for stall_timeout_s, then the rest action: every later goal on the way from the held
    # pose to the rest pose, never further from it than the goal before (nothing else is written)
    distance = np.abs(after[start:] - rest).max(axis=1)
    assert np.all(np.diff(distance) <= 1e-6), "a goal after the hold moved away from the rest pose"
    holding = after_t[start:][np.abs(after[start:] - hold).max(axis=1) < 1e-6]
    assert holding[-1] - holding[0] >= STALL_S - 2 / RATE_HZ  # held for the stall time before resting
    assert distance[-1] < 1.0, f"the arm did not reach its rest pose ({after[-1]})"
    assert _torque_offs(sim, calibration), "torque was never turned off at the end"


def test_the_arm_process_dies_the_daemon_says_so_withholds_the_watchdog_and_restarts_nothing(
    servos, demo_bundle: Path, short_dir: Path, camera: Camera
) -> None:
    d, notifier = _daemon(servos[0], demo_bundle, short_dir, camera)
    try:
        assert d.loop is not None
        link = d.loop
        wait_for(lambda: not link.status()["stale_streams"], timeout=30, what="camera frames")
        assert d._alive(time.monotonic())
        os.kill(link.pid, signal.SIGKILL)
        wait_for(lambda: not link.alive, timeout=2, what="the daemon seeing the arm process die")
        d.on_tick(time.monotonic())
        status = link.status()
        assert status["process"]["alive"] is False
        assert "killed by SIGKILL" in status["process"]["death"]
        assert status["arm"]["healthy"] is False
        assert not d._alive(time.monotonic())  # no watchdog ping from now on
        assert any("ARM PROCESS DIED" in x for fields, _, _ in notifier.sent for x in fields)
        with pytest.raises(Exception, match="unattended"):
            link.check("start")
        time.sleep(0.3)
        assert not any(p.cmdline()[-2:-1] == ["--fd"] for p in psutil.Process().children(recursive=True))
    finally:
        d.shutdown()


def test_an_estop_signal_to_the_unit_reaches_the_arm_process_and_latches_once(
    servos, demo_bundle: Path, short_dir: Path, camera: Camera
) -> None:
    """``systemctl kill -s USR1`` signals every process of the unit: the arm process latches by itself
    (so it works while the daemon hangs), and the daemon's copy of the same signal adds no second latch."""
    d, _ = _daemon(servos[0], demo_bundle, short_dir, camera)
    try:
        assert d.loop is not None
        link = d.loop
        os.kill(link.pid, signal.SIGUSR1)
        d.handle_estop(signal.SIGUSR1, None)
        wait_for(lambda: link.snapshot().mode == "estopped", timeout=2, what="the e-stop")
        time.sleep(0.3)  # a second latch, if any, would be taken by now
        snap = link.snapshot()
        assert snap.latch is not None and snap.latch.reason == "signal SIGUSR1"
        assert snap.latch.id == 1 and snap.latches_taken == 1  # one latch for the one signal
        assert link.estop is not None and link.estop.id == snap.latch.id
    finally:
        d.shutdown()


def test_the_arm_process_holds_no_network_inference_or_video_code_and_runs_two_threads(
    servos, demo_bundle: Path, short_dir: Path, camera: Camera
) -> None:
    """What the arm process is, seen from outside while it drives the arm: its memory maps hold no
    OpenVINO, no ZeroMQ and no video codec library, and it runs its loop thread and its main thread."""
    d, _ = _daemon(servos[0], demo_bundle, short_dir, camera)
    try:
        assert d.loop is not None
        link = d.loop
        wait_for(lambda: not link.status()["stale_streams"], timeout=30, what="camera frames")
        link.request("start", "test")
        wait_for(lambda: link.snapshot().counters["chunks"] >= 1, timeout=30, what="a chunk executed")
        maps = Path(f"/proc/{link.pid}/maps").read_text()
        daemon_maps = Path(f"/proc/{os.getpid()}/maps").read_text()
        for library in ("libopenvino", "libzmq", "libavcodec"):
            assert library not in maps, f"the arm process maps {library}"
        assert "libopenvino" in daemon_maps and "libzmq" in daemon_maps  # the check looks where they would be
        threads = os.listdir(f"/proc/{link.pid}/task")
        assert len(threads) == 2, f"the arm process runs {len(threads)} threads"
        assert link.snapshot().native_id in {int(t) for t in threads}
        # nothing collects garbage on its own in there: the loop's thread does, after its writes
        wait_for(lambda: link.status().get("gc", {}).get("collections", 0) >= 1, timeout=10, what="a collection")
        assert link.status()["gc"]["automatic"] is False
    finally:
        d.shutdown()


@pytest.mark.parametrize("after_s", [0.0, 0.3])
def test_a_stop_while_the_arm_process_starts_ends_the_wait_whenever_the_signal_lands(
    short_dir: Path, demo_bundle: Path, after_s: float
) -> None:
    """systemd's stop can come before the arm process has set up its SIGTERM handler (still importing):
    it then dies of the signal itself. Either way the daemon reads a stop, not a crashed arm process."""
    from drivers.config import ArmConfig
    from runtime.arm_control.link import ArmLink
    from runtime.bundle.interface import PolicyInterface
    from runtime.bundle.manifest import read_manifest
    from runtime.control.config import ControlConfig
    from runtime.teleop.config import TeleopConfig

    waits: list[str] = []
    asked = time.monotonic() + after_s
    link = ArmLink(
        arm=ArmConfig(kind="feetech", port=str(short_dir / "ttyACM9"), calibration=str(CALIBRATION)),
        control=ControlConfig(rt_priority=0),
        teleop=TeleopConfig(),
        policy=PolicyInterface.of_manifest(read_manifest(demo_bundle)),
        feed=None,  # type: ignore[arg-type]  # never asked: the arm never comes
        cpu=None,
    )
    started = time.monotonic()
    with pytest.raises(InterruptedError, match="stopped while waiting for the arm"):
        link.start(60.0, should_stop=lambda: time.monotonic() >= asked, on_wait=waits.append)
    assert time.monotonic() - started < 30  # nowhere near the 60 s wait
    assert waits and "ttyACM9" in waits[0]  # systemd heard what it waits for at once
    assert link.pid is not None and not psutil.pid_exists(link.pid)  # waited for, nothing left behind
