"""The daemon's tick work around a control loop, in-process: what systemd's STATUS= says when the
loop's mode or e-stop changes, when the watchdog ping is withheld for a stalled loop, how flight
recordings are spaced, and what shutdown does with the loop first.

The loop here is a stand-in with the attributes the daemon reads (the real loop is exercised with a
simulated arm in tests/control/test_daemon_control.py); the daemon, its server and its notifier are real.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import types
from collections import Counter, deque
from pathlib import Path
from typing import Any

import pytest

from drivers.config import ArmConfig
from runtime.arm_control.feed import StreamFeed
from runtime.config import DaemonConfig, DaemonSettings
from runtime.control.events import EventLog
from runtime.control.mode import Mode
from runtime.control.snapshot import Snapshot
from runtime.daemon import AUTO_DUMP_SPACING_S, Daemon
from runtime.engine.base import Engine
from runtime.server import ServerConfig
from tests.server.test_daemon_lifecycle import FakeArm, RecordingNotifier


class FakeRecorder:
    def __init__(self, fail: bool = False) -> None:
        self.dumps: list[tuple[Path, str, dict[str, Any]]] = []
        self.fail = fail

    def dump(self, directory: Path, reason: str, extra: dict[str, Any] | None = None) -> Path:
        if self.fail:
            raise OSError(28, "No space left on device")
        self.dumps.append((directory, reason, dict(extra or {})))
        return directory / f"flight-{len(self.dumps)}.npz"


class FakeLoop:
    """The parts of ControlLoop the daemon reads on its ticks and at shutdown."""

    def __init__(self) -> None:
        self.events = EventLog()
        self.dump_requests: deque[str] = deque()
        self.recorder = FakeRecorder()
        self.mode = Mode.IDLE
        self.estop_reason: str | None = None
        self.alive = True
        self.death: str | None = None  # an arm process gone (never, for a loop in the daemon)
        self.stalled_s = 0.0
        self.rate_hz = 30.0
        self.shutdown_ok = True
        self.shutdowns = 0

    def snapshot(self) -> Snapshot:
        return Snapshot(
            mode=self.mode,
            counters=Counter({"chunks": 12, "starved": 4}),
            overruns=7,
            safety={"limit": 2, "step": 3, "accel": 0, "nonfinite": 0, "refused_chunks": 1},
        )

    def stalled_for(self, now: float) -> float:
        assert isinstance(now, float), now  # the loop measures against the tick's clock
        return self.stalled_s

    def status(self) -> dict[str, Any]:
        return {"mode": self.mode}

    def shutdown(self) -> bool:
        self.shutdowns += 1
        return self.shutdown_ok


class EstopArm(FakeArm):
    def __init__(self) -> None:
        super().__init__()
        self.estops: list[tuple[bool, str]] = []

    def set_estop(self, engaged: bool, reason: str = "") -> None:
        self.estops.append((engaged, reason))


@pytest.fixture
def daemon(engine: Engine, short_tmp: Path) -> Any:
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        arm=ArmConfig(kind="none"),
        # the inference worker's own heartbeat must not stall on the simulated clock below
        daemon=DaemonSettings(
            tick_s=0.05, stats_log_interval_s=0, state_dir=str(short_tmp / "state"), inference_stall_s=60.0
        ),
    )
    notifier = RecordingNotifier(watchdog_usec=1_000_000)
    d = Daemon(config, engine_factory=lambda: engine, notifier=notifier)
    notifier.daemon = d
    d.startup()
    d.loop = FakeLoop()  # type: ignore[assignment]
    d.arm = EstopArm()  # type: ignore[assignment]
    notifier.sent.clear()
    try:
        yield d
    finally:
        d.arm = None
        d.loop = None
        d.shutdown()


def statuses(d: Daemon) -> list[str]:
    return [x for f, _, _ in d.notifier.sent for x in f if x.startswith("STATUS=")]  # type: ignore[attr-defined]


def test_mode_and_estop_changes_reach_status_once_each(daemon: Daemon) -> None:
    loop: FakeLoop = daemon.loop  # type: ignore[assignment]
    arm: EstopArm = daemon.arm  # type: ignore[assignment]
    daemon.on_tick(0.01)  # idle without an e-stop is where the daemon starts: nothing new to say
    daemon.on_tick(0.02)
    loop.mode, loop.estop_reason = Mode.ESTOPPED, "signal SIGUSR1"
    daemon.on_tick(0.03)
    daemon.on_tick(0.04)
    loop.mode, loop.estop_reason = Mode.IDLE, None
    daemon.on_tick(0.05)
    assert statuses(daemon) == [
        "STATUS=control estopped, E-STOP (signal SIGUSR1), chunks 12, starved ticks 4, overruns 7, safety 6",
        "STATUS=control idle, no e-stop, chunks 12, starved ticks 4, overruns 7, safety 6",
    ]
    assert arm.estops == [(True, "signal SIGUSR1"), (False, "")]


def test_a_stalled_loop_withholds_the_watchdog_and_says_so_once(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    loop: FakeLoop = daemon.loop  # type: ignore[assignment]
    daemon._last_watchdog = 0.0
    with caplog.at_level(logging.ERROR, logger="runtime.daemon"):
        daemon.on_tick(1.0)  # healthy: pinged
        loop.stalled_s = 0.4
        daemon.on_tick(2.0)
        daemon.on_tick(3.0)
        loop.stalled_s = 0.0
        daemon.on_tick(4.0)  # recovered: pinged again
        loop.alive = False  # the loop thread died: no ping either, whatever stalled_for says
        daemon.on_tick(5.0)
    pings = [i for i, (f, _, _) in enumerate(daemon.notifier.sent) if f == ("WATCHDOG=1",)]  # type: ignore[attr-defined]
    assert len(pings) == 2
    stalls = [r.getMessage() for r in caplog.records if "control loop stalled" in r.getMessage()]
    assert stalls == [
        "control loop stalled for 0.4 s (mode idle, alive True); withholding the watchdog ping",
        "control loop stalled for 1.0 s (mode idle, alive False); withholding the watchdog ping",
    ]


def test_a_loop_that_ended_at_shutdown_does_not_count_as_stalled(daemon: Daemon) -> None:
    loop: FakeLoop = daemon.loop  # type: ignore[assignment]
    loop.alive = False
    daemon.should_exit = True
    daemon._last_watchdog = 0.0
    daemon.on_tick(1.0)
    assert ("WATCHDOG=1",) in [f for f, _, _ in daemon.notifier.sent]  # type: ignore[attr-defined]


def test_flight_recordings_are_spaced_unless_requested(
    daemon: Daemon, short_tmp: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop: FakeLoop = daemon.loop  # type: ignore[assignment]
    clock = [1000.0]
    # the daemon's clock only: patching time.monotonic itself would move every thread's clock
    monkeypatch.setattr("runtime.daemon.time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    with caplog.at_level(logging.INFO, logger="runtime.daemon"):
        loop.dump_requests.extend(["estop: signal", "bus failure"])
        daemon.on_tick(clock[0])
        clock[0] += 2.0
        loop.dump_requests.append("requested by ana")  # written, and it does not restart the spacing
        daemon.on_tick(clock[0])
        clock[0] += AUTO_DUMP_SPACING_S - 2.1
        loop.dump_requests.append("stall")
        daemon.on_tick(clock[0])
        clock[0] += 0.1
        loop.dump_requests.append("stall again")
        daemon.on_tick(clock[0])
    assert [(d, r) for d, r, _ in loop.recorder.dumps] == [
        (short_tmp / "state", "estop: signal"),
        (short_tmp / "state", "requested by ana"),
        (short_tmp / "state", "stall again"),
    ]
    assert loop.recorder.dumps[0][2] == {"status": {"mode": "idle"}}
    assert "flight recorder: not written for bus failure (one was written 0.0 s ago)" in caplog.text
    assert "flight recorder: not written for stall (one was written 4.9 s ago)" in caplog.text
    assert not loop.dump_requests


def test_a_flight_recording_that_cannot_be_written_is_logged(daemon: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    loop: FakeLoop = daemon.loop  # type: ignore[assignment]
    loop.recorder = FakeRecorder(fail=True)
    loop.dump_requests.append("requested")
    with caplog.at_level(logging.ERROR, logger="runtime.daemon"):
        daemon.on_tick(1.0)
    assert "flight recorder: could not write (requested): [Errno 28] No space left on device" in caplog.text


def test_shutdown_stops_the_loop_first_and_flushes_what_it_left(
    engine: Engine, short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        arm=ArmConfig(kind="none"),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0, state_dir=str(short_tmp / "state")),
    )
    notifier = RecordingNotifier()
    d = Daemon(config, engine_factory=lambda: engine, notifier=notifier)
    notifier.daemon = d
    d.startup()
    loop = FakeLoop()
    loop.shutdown_ok = False
    loop.events.emit(logging.WARNING, "safety: chunk refused: %s", "too far")
    loop.dump_requests.append("requested at shutdown")
    d.loop = loop  # type: ignore[assignment]
    notifier.sent.clear()
    with caplog.at_level(logging.INFO):
        d.shutdown()
    assert loop.shutdowns == 1 and d.loop is None and d.failed
    assert "safety: chunk refused: too far" in caplog.text
    assert [r for _, r, _ in loop.recorder.dumps] == ["requested at shutdown"]
    assert "the arm could not be brought to a safe state at shutdown" in caplog.text
    # the loop stopped while the server still answered: STOPPING=1 first, the server stopped after
    fields, _, serving = notifier.sent[0]
    assert fields == ("STOPPING=1", "STATUS=shutting down") and serving


class EstopLoop(FakeLoop):
    def __init__(self) -> None:
        super().__init__()
        self.estop_requests: list[str] = []

    def request_estop(self, reason: str) -> None:
        self.estop_requests.append(reason)


def test_sigusr1_latches_the_estop_through_the_loop(daemon: Daemon) -> None:
    import signal

    loop = EstopLoop()
    daemon.loop = loop  # type: ignore[assignment]
    daemon.handle_estop(signal.SIGUSR1, None)
    assert loop.estop_requests == ["signal SIGUSR1"]
    daemon.loop = None
    daemon.handle_estop(signal.SIGUSR1, None)  # no loop (yet): nothing to latch, no error


def test_an_arm_change_reaches_status_at_once(daemon: Daemon) -> None:
    arm: EstopArm = daemon.arm  # type: ignore[assignment]
    arm.healthy, arm.last_error = False, "servo 3 did not answer"
    daemon._arm_changed(arm)  # type: ignore[arg-type]
    assert daemon.server is not None
    where = ", ".join(daemon.server.bound_endpoints)
    info = daemon.server.info
    assert statuses(daemon) == [
        f"STATUS=arm FAILING: servo 3 did not answer; serving {info.policy_name} on {info.device}/{info.precision} "
        f"at {where}"
    ]


def _config_text(short_tmp: Path, tick_s: float, stall_s: float) -> str:
    return f"""
[server]
endpoints = ["ipc://{short_tmp}/policy.sock"]
[arm]
kind = "none"
[daemon]
tick_s = {tick_s}
stats_log_interval_s = 0
inference_stall_s = {stall_s}
"""


def test_sighup_applies_daemon_keys_and_survives_a_broken_file(
    engine: Engine, short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import threading

    from runtime.config import load_config

    path = short_tmp / "c.toml"
    path.write_text(_config_text(short_tmp, 0.05, 5))
    d = Daemon(load_config(path), engine_factory=lambda: engine, notifier=RecordingNotifier(), config_path=path)
    d.startup()
    try:
        path.write_text(_config_text(short_tmp, 0.07, 9))
        d.reload_requested = True
        with caplog.at_level(logging.INFO, logger="runtime.daemon"):
            d.on_tick(1.0)  # the flag set by SIGHUP is acted on at the next tick
        assert not d.reload_requested
        assert d.config.daemon.tick_s == 0.07 and d._heartbeat is not None and d._heartbeat.deadline_s == 9
        assert d._reloading is None  # same policy: nothing to load
        assert f"reload (SIGHUP) from {path}: " in caplog.text
        path.write_text("[daemon]\ntick_s = 99\n")
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="runtime.daemon"):
            d.reload()
        assert "reload (SIGHUP) refused, still running the previous config: " in caplog.text
        assert d.config.daemon.tick_s == 0.07
        busy = threading.Event()
        d._reloading = threading.Thread(target=busy.wait, daemon=True)
        d._reloading.start()
        path.write_text(_config_text(short_tmp, 0.09, 9))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="runtime.daemon"):
            d.reload()
        busy.set()
        assert "reload (SIGHUP) ignored: the previous reload is still loading the policy" in caplog.text
        assert d.config.daemon.tick_s == 0.07
    finally:
        d.shutdown()


def test_a_stuck_worker_withholds_the_watchdog_and_says_where_once(daemon: Daemon) -> None:
    beat = daemon.liveness.register("test worker", 2.0)
    beat.beat("running inference 7")
    other = daemon.liveness.register("camera", 3.0)
    other.beat("reading a frame")
    t0 = time.monotonic()
    daemon._last_watchdog = t0 - 10
    daemon.on_tick(t0 + 5)
    daemon.on_tick(t0 + 6)
    assert statuses(daemon) == [
        "STATUS=STALLED: test worker stuck 5 s while running inference 7; camera stuck 5 s while reading a frame"
    ]
    assert daemon._stalled_names() == ["test worker", "camera"]
    assert ("WATCHDOG=1",) not in [f for f, _, _ in daemon.notifier.sent]  # type: ignore[attr-defined]
    beat.beat("idle")
    other.beat("idle")
    daemon.on_tick(time.monotonic())
    assert daemon._stalled_names() == []
    assert ("WATCHDOG=1",) in [f for f, _, _ in daemon.notifier.sent]  # type: ignore[attr-defined]


def test_tick_work_for_teleop_events_and_the_stats_line(daemon: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    loop: FakeLoop = daemon.loop  # type: ignore[assignment]

    class Teleop:
        def __init__(self) -> None:
            self.expired: list[float] = []

        def expire(self, now: float) -> None:
            self.expired.append(now)

    teleop = Teleop()
    daemon.teleop = teleop  # type: ignore[assignment]
    daemon.config = dataclasses.replace(
        daemon.config, daemon=dataclasses.replace(daemon.config.daemon, stats_log_interval_s=1.0)
    )
    daemon._last_stats = 0.0
    loop.events.emit(logging.WARNING, "safety: shoulder_pan limit: %s", "requested 90.00")
    with caplog.at_level(logging.INFO):
        daemon.on_tick(0.5)
        daemon.on_tick(1.0)
    assert teleop.expired == [0.5, 1.0]
    assert "safety: shoulder_pan limit: requested 90.00" in caplog.text
    stats = statuses(daemon)
    assert len(stats) == 1 and stats[0].startswith("STATUS=requests: ")
    assert stats[0].endswith("; arm ok; control idle, no e-stop, chunks 12, starved ticks 4, overruns 7, safety 6")


def test_startup_paces_from_ready_and_names_what_it_serves(engine: Engine, short_tmp: Path) -> None:
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock", f"ipc://{short_tmp}/second.sock")),
        arm=ArmConfig(kind="none"),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=30.0, arm_poll_s=0.5),
    )
    notifier = RecordingNotifier(watchdog_usec=2_000_000)
    d = Daemon(config, engine_factory=lambda: engine, notifier=notifier)
    before = time.monotonic()
    d.startup()
    try:
        after = time.monotonic()
        info = d.server.info  # type: ignore[union-attr]
        assert [f for f, _, _ in notifier.sent] == [
            ("STATUS=loading the policy",),
            (
                "READY=1",
                f"STATUS=serving {info.policy_name} on {info.device}/{info.precision} "
                f"at ipc://{short_tmp}/policy.sock, ipc://{short_tmp}/second.sock; no arm",
            ),
        ]
        # the watchdog, stats and arm-poll clocks start at READY, not at zero
        for last in (d._last_watchdog, d._last_stats, d._last_arm_poll):
            assert before <= last <= after
        notifier.sent.clear()
        d.on_tick(after + 0.5)  # half of the 1 s ping interval: nothing yet
        assert notifier.sent == []
    finally:
        d.shutdown()


def test_shutdown_releases_the_side_parts_and_a_failed_recording_fails_the_exit(
    engine: Engine, short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from runtime.errors import LerobotRuntimeError

    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        arm=ArmConfig(kind="none"),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0),
    )
    d = Daemon(config, engine_factory=lambda: engine, notifier=RecordingNotifier())
    d.startup()
    stopped: list[str] = []

    class Part:
        def __init__(self, name: str, fail: bool = False) -> None:
            self.name, self.fail = name, fail

        def stop(self) -> None:
            stopped.append(self.name)

        def close(self) -> None:
            stopped.append(self.name)
            if self.fail:
                raise LerobotRuntimeError("episode 3: could not write the video")

    d.local_leader = Part("leader")  # type: ignore[assignment]
    d.recorder = Part("recorder", fail=True)  # type: ignore[assignment]
    d.metrics = Part("metrics")  # type: ignore[assignment]
    d.streams = Part("streams")  # type: ignore[assignment]
    with caplog.at_level(logging.ERROR, logger="runtime.daemon"):
        d.shutdown()
    assert stopped == ["leader", "recorder", "metrics", "streams"]
    assert (d.local_leader, d.recorder, d.metrics, d.streams) == (None, None, None, None)
    assert d.failed and "recording: episode 3: could not write the video" in caplog.text
    d.shutdown()  # a second shutdown finds every part already released
    assert stopped == ["leader", "recorder", "metrics", "streams"]


def test_a_start_interrupted_while_waiting_for_the_arm_exits_cleanly(engine: Engine, short_tmp: Path) -> None:
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)), arm=ArmConfig(kind="none")
    )
    notifier = RecordingNotifier()
    d = Daemon(config, engine_factory=lambda: engine, notifier=notifier)

    def interrupted() -> None:
        raise InterruptedError("stopped while waiting for the arm")

    d.startup = interrupted  # type: ignore[method-assign]
    assert d.run() == 0
    assert notifier.fields() == ["STOPPING"]


def test_with_an_arm_the_control_loop_starts_wired_and_pinned(engine: Engine, short_tmp: Path) -> None:
    import os

    from runtime.arm_control.handler import LoopControl
    from runtime.engine.config import EngineConfig

    so101 = Path(__file__).resolve().parents[2] / "configs" / "calibration" / "so101_sim.toml"
    control_cpu = max(os.sched_getaffinity(0))
    config = DaemonConfig(
        engine=EngineConfig(control_cpu=control_cpu),
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        arm=ArmConfig(kind="sim", calibration=str(so101)),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0, arm_wait_s=1.0, state_dir=str(short_tmp)),
    )
    notifier = RecordingNotifier()
    d = Daemon(config, engine_factory=lambda: engine, notifier=notifier)
    reasons: list[str] = []
    original = notifier.notify

    def notify(*fields: str) -> bool:
        if fields == ("STATUS=connecting the arm",) and d.server is not None:
            reasons.append(d.server.no_control_reason)
        return original(*fields)

    notifier.notify = notify  # type: ignore[method-assign]
    notifier.daemon = d
    d.startup()
    try:
        loop = d.loop
        assert loop is not None and d.arm is not None and d.server is not None
        assert reasons == ["the daemon is starting: its control loop runs once the arm answers"]
        assert loop.cpu == control_cpu and d.arm.source is loop and d.streams is not None
        assert isinstance(d.server.control, LoopControl) and d.server.control.loop is loop
        assert d.teleop is d.server.control.teleop and d.server.control.state_dir == short_tmp
        assert d.server.control.inference_thread == d.server.worker_thread_id != 0
        # the camera threads keep off the inference CPUs when there is a CPU left for them
        allowed = set(os.sched_getaffinity(0))
        engine_cpus = set(d.server.engine.info.cpus)
        assert d.streams._cpus == ((allowed - engine_cpus) or allowed)
        ready = next(f for f, _, _ in notifier.sent if f[0] == "READY=1")
        assert ready[1].endswith(f"; arm sim, control loop at {loop.rate_hz:g} Hz (idle until control start)")
        assert d.server.arm_status() == d.arm.status()
    finally:
        d.shutdown()


class FakeEngine:
    """A loaded policy as the reload path sees it: its info, manifest and close()."""

    def __init__(self, like: Engine, bundle: str) -> None:
        self.info = dataclasses.replace(like.info, bundle=bundle)
        self.manifest = like.manifest
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_a_policy_reload_swaps_on_success_and_keeps_serving_on_failure(
    daemon: Daemon, engine: Engine, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.engine.config import EngineConfig
    from runtime.errors import ConfigError

    server = daemon.server
    assert server is not None
    old_bundle = engine.info.bundle
    new_config = dataclasses.replace(daemon.config, engine=EngineConfig(bundle="/srv/policies/next"))
    # the factory fails: nothing changes, and systemd hears why
    daemon.engine_factory = lambda: (_ for _ in ()).throw(RuntimeError("parity gate failed"))  # type: ignore[assignment]
    with caplog.at_level(logging.INFO, logger="runtime.daemon"):
        daemon._reload_engine(new_config, "id-next")
    assert statuses(daemon)[-1] == f"STATUS=reload failed, still serving {old_bundle}: parity gate failed"
    assert daemon.config.engine.bundle != "/srv/policies/next"
    # the server refuses it: the new engine is closed, the old one kept
    refused = FakeEngine(engine, "/srv/policies/next")
    daemon.engine_factory = lambda: refused  # type: ignore[assignment,return-value]

    def refuse(new: Any) -> None:
        raise ConfigError("its inputs or outputs differ")

    monkeypatch.setattr(server, "replace_engine", refuse)
    daemon._reload_engine(new_config, "id-next")
    assert refused.closed == 1 and daemon._bundle_id != "id-next"
    assert f"reload: its inputs or outputs differ; still serving {old_bundle}" in caplog.text
    # accepted: the config and the bundle identity follow, systemd hears it
    accepted = FakeEngine(engine, "/srv/policies/next")
    daemon.engine_factory = lambda: accepted  # type: ignore[assignment,return-value]
    swapped: list[Any] = []
    monkeypatch.setattr(server, "replace_engine", swapped.append)
    daemon._reload_engine(new_config, "id-next")
    assert swapped == [accepted] and accepted.closed == 0
    assert daemon.config.engine.bundle == "/srv/policies/next" and daemon._bundle_id == "id-next"
    assert statuses(daemon)[-1] == f"STATUS=serving {engine.manifest.policy_name} from /srv/policies/next (reloaded)"


def test_sighup_only_sets_the_reload_flag(daemon: Daemon) -> None:
    import signal

    daemon.handle_exit(signal.SIGHUP, None)
    assert daemon.reload_requested is True and daemon.should_exit is False


def test_sighup_with_a_new_bundle_loads_it_on_its_own_thread(
    engine: Engine, short_tmp: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runtime.config import load_config
    from runtime.reload import bundle_identity

    bundle = short_tmp / "next"
    bundle.mkdir()
    (bundle / "manifest.json").write_text('{"policy": "next"}')
    path = short_tmp / "c.toml"
    path.write_text(_config_text(short_tmp, 0.05, 5))
    notifier = RecordingNotifier()
    d = Daemon(load_config(path), engine_factory=lambda: engine, notifier=notifier, config_path=path)
    notifier.daemon = d
    d.startup()
    try:
        assert d.server is not None and d._heartbeat is not None
        assert "inference worker" in d.liveness.names  # the worker's heartbeat is the server's
        swapped: list[Any] = []
        monkeypatch.setattr(d.server, "replace_engine", swapped.append)
        loaded = FakeEngine(engine, str(bundle))
        d.engine_factory = lambda: loaded  # type: ignore[assignment,return-value]
        path.write_text(f'[engine]\nbundle = "{bundle}"\n' + _config_text(short_tmp, 0.05, 5))
        notifier.sent.clear()
        d.reload()
        thread = d._reloading
        assert thread is not None and thread.name == "lerobot-runtime-reload" and thread.daemon
        thread.join(10)
        assert statuses(d)[0] == f"STATUS=reloading the policy from {bundle}"
        assert swapped == [loaded] and d._bundle_id == bundle_identity(str(bundle))
        # back to the built-in policy
        path.write_text(_config_text(short_tmp, 0.05, 5))
        notifier.sent.clear()
        d.engine_factory = lambda: FakeEngine(engine, "")  # type: ignore[assignment,return-value]
        d.reload()
        assert d._reloading is not None
        d._reloading.join(10)
        assert statuses(d)[0] == "STATUS=reloading the policy from the built-in bundle"
        assert d._bundle_id == ""
    finally:
        d.shutdown()


def test_sighup_without_a_config_file_reads_the_defaults(daemon: Daemon, caplog: pytest.LogCaptureFixture) -> None:
    assert daemon.config_path is None
    with caplog.at_level(logging.INFO, logger="runtime.daemon"):
        daemon.reload()
    assert "reload (SIGHUP) from the built-in defaults: " in caplog.text


def test_the_metrics_endpoint_reads_the_running_daemon(engine: Engine, short_tmp: Path) -> None:
    import socket
    import urllib.request

    from runtime.metrics import MetricsConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        arm=ArmConfig(kind="none"),
        metrics=MetricsConfig(port=port),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0),
    )
    d = Daemon(config, engine_factory=lambda: engine, notifier=RecordingNotifier())
    d.startup()
    try:
        assert d.metrics is not None
        beat = d.liveness.register("test worker", 0.01)
        beat.beat("waiting")
        d.on_tick(time.monotonic() + 1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        assert 'lerobot_runtime_stalled{worker="test worker"} 1.0' in text
        assert f'policy="{engine.manifest.policy_name}"' in text
        assert "lerobot_runtime_uptime_seconds " in text
    finally:
        d.shutdown()


def test_the_worker_heartbeat_is_the_servers_and_no_arm_means_no_control_reason(daemon: Daemon) -> None:
    assert daemon._heartbeat is not None and daemon.server is not None
    deadline = time.monotonic() + 10
    while daemon._heartbeat._last[1] == "starting":  # the worker beats it once it runs
        assert time.monotonic() < deadline, "the inference worker never beat its heartbeat"
        time.sleep(0.01)
    assert daemon.server.no_control_reason != "the daemon is starting: its control loop runs once the arm answers"


def test_sigterm_while_waiting_for_the_arm_stops_the_wait(engine: Engine, short_tmp: Path) -> None:
    import threading

    so101 = Path(__file__).resolve().parents[2] / "configs" / "calibration" / "so101_sim.toml"
    config = DaemonConfig(
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        arm=ArmConfig(kind="feetech", port=str(short_tmp / "ttyACM9"), calibration=str(so101)),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0, arm_wait_s=60.0),
    )
    notifier = RecordingNotifier()
    d = Daemon(config, engine_factory=lambda: engine, notifier=notifier)
    import signal

    timer = threading.Timer(0.5, lambda: d.handle_exit(signal.SIGTERM, None))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(InterruptedError):
            d.startup()
        assert time.monotonic() - started < 30  # nowhere near the 60 s wait
        waits = [f[0] for f, _, _ in notifier.sent if "ttyACM9" in f[0]]
        assert waits, "the wait for the arm was not reported to systemd"
    finally:
        timer.cancel()
        d.shutdown()


class _Streams:
    """The part of ObservationStreams the recording set-up reads: the names of the stream inputs."""

    names = ("observation.images.front", "observation.state")  # a camera and one that is not one


def test_recording_is_set_up_from_the_loop_rate_its_joints_and_the_camera_streams(daemon: Any, tmp_path: Path) -> None:
    from runtime.arm_control.episodes import EpisodeTap
    from runtime.recording import EpisodeRecorder, RecordingConfig

    joints = ("a", "b", "c", "d", "e", "f")
    loop = FakeLoop()
    loop.names = joints  # type: ignore[attr-defined]
    daemon.config = dataclasses.replace(daemon.config, recording=RecordingConfig(dataset_dir=str(tmp_path / "ds")))
    daemon.streams = _Streams()
    daemon._start_recording(loop, daemon.server)
    try:
        recorder = daemon.recorder
        assert isinstance(recorder, EpisodeRecorder)
        tap = loop.episodes  # type: ignore[attr-defined]
        assert isinstance(tap, EpisodeTap)
        assert tap.recorder is recorder and tap.streams is daemon.streams and tap.events is loop.events
        info = json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())
        assert info["fps"] == 30
        assert info["features"]["observation.state"]["names"] == list(joints)
        cameras = {k: v["shape"] for k, v in info["features"].items() if v["dtype"] == "video"}
        assert cameras == {"observation.images.front": [96, 128, 3]}
    finally:
        daemon.recorder.close()
        daemon.recorder = None
        daemon.streams = None


def test_recording_refuses_a_control_rate_that_is_not_whole_hertz(daemon: Any, tmp_path: Path) -> None:
    from runtime.errors import ConfigError
    from runtime.recording import RecordingConfig

    loop = FakeLoop()
    loop.names = ("a",)  # type: ignore[attr-defined]
    loop.rate_hz = 29.5
    daemon.config = dataclasses.replace(daemon.config, recording=RecordingConfig(dataset_dir=str(tmp_path / "ds")))
    with pytest.raises(ConfigError) as err:
        daemon._start_recording(loop, daemon.server)
    assert str(err.value) == (
        "recording: the control rate must be a whole number of Hz to record (LeRobot stores fps as an integer), "
        "got control.rate_hz 29.5"
    )
    assert daemon.recorder is None and not (tmp_path / "ds").exists()
    loop.rate_hz = 30.0 + 1e-9  # a float's rounding is a whole rate
    daemon._start_recording(loop, daemon.server)
    assert json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())["fps"] == 30
    daemon.recorder.close()
    daemon.recorder = None


class _TeleopPuts:
    def __init__(self) -> None:
        self.puts: list[tuple[int, Any, float]] = []

    def put(self, seq: int, positions: Any, t: float) -> None:
        self.puts.append((seq, positions, t))


def test_a_local_leader_is_read_on_its_port_in_the_follower_order(daemon: Any) -> None:
    from drivers.calibration import load_calibration
    from drivers.sim.arm import simulator_for
    from runtime.teleop.config import TeleopConfig

    path = Path(__file__).resolve().parents[2] / "configs" / "calibration" / "so101_sim.toml"
    cal = load_calibration(path)
    sim = simulator_for(cal, "feetech").start()
    try:
        teleop_cfg = TeleopConfig(leader_port=sim.port, leader_calibration=str(path), leader_who="bench leader")
        daemon.config = dataclasses.replace(daemon.config, teleop=teleop_cfg)
        follower_order = tuple(reversed(tuple(cal.joints)))
        loop = types.SimpleNamespace(names=follower_order, period=0.01, teleop=_TeleopPuts())
        teleop = types.SimpleNamespace(local=None)
        daemon._start_local_leader(loop, teleop)
        leader = daemon.local_leader
        try:
            assert leader.who == "bench leader" and leader.loop is loop
            assert teleop.local == f"bench leader on {sim.port}"
            deadline = time.monotonic() + 10
            while len(loop.teleop.puts) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            seqs = [p[0] for p in loop.teleop.puts[:3]]
            assert seqs == [1, 2, 3]
            # read in the follower's joint order: the simulator's positions, last joint first
            positions = loop.teleop.puts[0][1]
            assert len(positions) == len(follower_order)
            assert leader.leader.joints == follower_order
        finally:
            leader.stop()
    finally:
        sim.stop()


def test_the_control_loop_starts_with_recording_a_local_leader_and_an_unavailable_control_cpu(
    engine: Engine, short_tmp: Path
) -> None:
    from drivers.calibration import load_calibration
    from drivers.sim.arm import simulator_for
    from runtime.arm_control.episodes import EpisodeTap
    from runtime.arm_control.handler import ServerInference
    from runtime.arm_control.link import ArmLink
    from runtime.control.config import ControlConfig
    from runtime.engine.config import EngineConfig
    from runtime.recording import RecordingConfig
    from runtime.teleop.config import TeleopConfig

    so101 = Path(__file__).resolve().parents[2] / "configs" / "calibration" / "so101_sim.toml"
    leader_sim = simulator_for(load_calibration(so101), "feetech").start()
    teleop = TeleopConfig(leader_port=leader_sim.port, leader_calibration=str(so101), deadman_ms=700)
    config = DaemonConfig(
        # a CPU this process may not run on: the loop is left unpinned rather than refused
        engine=EngineConfig(control_cpu=4095),
        server=ServerConfig(endpoints=(f"ipc://{short_tmp}/policy.sock",)),
        arm=ArmConfig(kind="sim", calibration=str(so101)),
        control=ControlConfig(),
        daemon=DaemonSettings(tick_s=0.05, stats_log_interval_s=0, arm_wait_s=1.0, state_dir=str(short_tmp)),
        recording=RecordingConfig(dataset_dir=str(short_tmp / "ds")),
        teleop=teleop,
    )
    d = Daemon(config, engine_factory=lambda: engine, notifier=RecordingNotifier())
    try:
        d.startup()
        loop = d.loop
        assert isinstance(loop, ArmLink) and d.server is not None and d.streams is not None
        assert loop.cpu is None
        feed = loop.feed
        assert isinstance(feed, StreamFeed) and isinstance(feed.inference, ServerInference)
        assert feed.inference.server is d.server
        assert loop.teleop.config == teleop
        assert isinstance(loop.episodes, EpisodeTap) and loop.episodes.recorder is d.recorder
        assert d.streams._thread is not None and d.streams._thread.is_alive()
        assert d.local_leader is not None and d.local_leader.loop is loop
        assert d.teleop is not None and d.teleop.local == f"local leader on {leader_sim.port}"
        deadline = time.monotonic() + 10
        while d.local_leader.reads < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert d.local_leader.reads >= 3
        # the arm's health and e-stop changes reach systemd's STATUS= at once, not at the next stats line
        d.notifier.sent.clear()  # type: ignore[attr-defined]
        d.arm.set_estop(True, "pressed on the teach pendant")  # type: ignore[union-attr]
        assert statuses(d) == [f"STATUS={d.arm.describe()}; {d._serving_status()}"]  # type: ignore[union-attr]
        assert statuses(d)[0].startswith("STATUS=arm E-STOP: pressed on the teach pendant; serving ")
    finally:
        d.shutdown()
        leader_sim.stop()


class StopRecorder:
    """The server's stop() and snapshot() as _stop_server uses them, with a graceful default of its own."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls: list[tuple[float, Any]] = []

    def stop(self, timeout: float = 123.0, force: Any = None) -> None:
        self.calls.append((timeout, force))

    def snapshot(self) -> Any:
        return self.real.snapshot()


def test_the_server_is_given_the_graceful_timeout_or_none_when_forced(daemon: Daemon) -> None:
    daemon.config = dataclasses.replace(
        daemon.config, daemon=dataclasses.replace(daemon.config.daemon, graceful_timeout_s=7.5)
    )
    fake = StopRecorder(daemon.server)
    daemon._stop_server(fake)  # type: ignore[arg-type]
    ((timeout, force),) = fake.calls
    assert timeout == 7.5 and callable(force) and force() is False
    daemon.force_exit = True  # a second Ctrl-C while it waits: the server is told at once
    assert force() is True
    fake.calls.clear()
    daemon._stop_server(fake)  # type: ignore[arg-type]
    ((timeout, force),) = fake.calls
    assert timeout == 0.0 and force() is True
    daemon.force_exit = False


def test_encoders_share_the_control_cpu_only_with_a_real_time_loop(
    daemon: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 2 CPUs the policy's CPU is busy with inference: encoders confined there starve and drop
    frames, so they may use the control CPU as well when the loop's SCHED_FIFO preempts them."""
    from runtime.control.config import ControlConfig
    from runtime.engine.config import EngineConfig
    from runtime.errors import ConfigError
    from runtime.recording import RecordingConfig

    monkeypatch.setattr("runtime.daemon.os.sched_getaffinity", lambda pid: {0, 1, 2})

    def config(rt: int, cpus: tuple[int, ...] = ()) -> DaemonConfig:
        return dataclasses.replace(
            daemon.config,
            engine=EngineConfig(control_cpu=1),
            control=ControlConfig(rt_priority=rt),
            recording=RecordingConfig(encoder_cpus=cpus),
        )

    daemon.config = config(50)
    cpus, why = daemon._encoder_cpus()
    assert cpus == {0, 1, 2} and "real-time priority" in why
    daemon.config = config(0)
    cpus, why = daemon._encoder_cpus()
    assert cpus == {0, 2} and "control.rt_priority is 0" in why
    daemon.config = config(50, (2,))
    assert daemon._encoder_cpus() == ({2}, "recording.encoder_cpus")
    daemon.config = config(50, (2, 7))
    with pytest.raises(ConfigError) as err:
        daemon._encoder_cpus()
    assert str(err.value) == "recording.encoder_cpus: expected CPUs this process may use ([0, 1, 2]), got [2, 7]"
    monkeypatch.setattr("runtime.daemon.os.sched_getaffinity", lambda pid: {1})
    daemon.config = config(0)
    assert daemon._encoder_cpus() == ({1}, "no CPU but the control loop's")


@pytest.mark.parametrize("cpus", [(-1,), (1, 1), (True,)])
def test_recording_encoder_cpus_refuses_what_is_not_a_set_of_cpu_numbers(cpus: tuple[int, ...]) -> None:
    from runtime.errors import ConfigError
    from runtime.recording import RecordingConfig

    with pytest.raises(ConfigError) as err:
        RecordingConfig(encoder_cpus=cpus)
    assert str(err.value) == f"recording.encoder_cpus: expected distinct CPU numbers >= 0, got {list(cpus)}"
