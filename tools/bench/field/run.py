"""One run of ``bench field``, step by step, and what each step saw.

:func:`run_field_bench` runs the workload for a :class:`Settings`: a :class:`Workload` starts the
processes (the servo simulators, the daemon on its generated config, the cameras), then
:func:`measure` starts the station, the back-to-back infers and the floor writer and watches the
measured seconds (a :class:`Window`), :func:`end_episode` has the station stop its episode and waits
for it to be written (an :class:`Episode`), :func:`hand_back` and :func:`kill_daemon` are the
``--kill`` cases (a :class:`Kill`), and :func:`finish` ends what is left and collects the logs (the
:class:`Ends`). :func:`tools.bench.field.report.build_report` turns those into the report.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from tools.bench.field.config import (
    AFTER_KILL_S,
    CAMERA_FPS,
    RATE_HZ,
    READY_STEP_TIMEOUT_S,
    daemon_config,
    field_bundle,
)
from tools.bench.field.machine import PtyWorkerBoost, StealSampler, loadavg
from tools.bench.field.processes import PIPES, STOP_TIMEOUT_S, Processes, signals_raise
from tools.bench.field.report import build_report, recorder_of
from tools.bench.field.servos import ServoLog, ServoProcess, floor_command
from tools.bench.field.station import Station

KillCase = Literal["station", "policy"]
FLOOR_START_S = 1.0
EPISODE_WRITE_TIMEOUT_S = 180.0
DUMP_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Settings:
    """What a run is asked for, checked: ``seconds`` measured, ``floor_s`` of the simulator's floor
    beside them, the recording's ``codec``, ``kill``: then SIGKILL the daemon while the station or the
    policy drives, ``encoder_delay_ms``: every
    encoder sleeps this long per frame (``[recording] encoder_delay_ms``: one that cannot keep up)."""

    seconds: float = 60.0
    floor_s: float = 10.0
    codec: str = "auto"
    kill: KillCase | None = None
    encoder_delay_ms: float = 0.0

    def __post_init__(self) -> None:
        if not 1 <= self.seconds <= 3600:
            raise ValueError(f"bench field --seconds: expected 1 <= seconds <= 3600, got {self.seconds:g}")
        if self.floor_s < 0:
            raise ValueError(f"bench field --floor-seconds: expected >= 0, got {self.floor_s:g}")
        if not 0 <= self.encoder_delay_ms <= 1000:
            raise ValueError(f"bench field --encoder-delay-ms: expected 0..1000 ms, got {self.encoder_delay_ms:g}")


class Workload:
    """The processes of one run, each started through :attr:`procs` (stopped by the caller however the
    run ends): the servo simulators, the daemon and the cameras (:meth:`start`), then the station, the
    infer load and the floor writer as the measured seconds begin (:func:`measure`)."""

    def __init__(self, workdir: Path, bundle: Path, settings: Settings) -> None:
        from runtime.engine.affinity import allowed_cpus

        self.workdir, self.bundle, self.settings = workdir, bundle, settings
        self.procs = Processes()
        cpus = allowed_cpus()
        self.cpus = list(cpus)
        self.control_cpu, self.floor_cpu = cpus[0], cpus[-1]  # the floor writer keeps off the loop's CPU
        self.capacity = round((settings.seconds + 600) * RATE_HZ * 2)  # goal log entries each simulated servo keeps
        self.ipc = f"ipc://{workdir}/policy.sock"
        self.daemon_log = workdir / "daemon.log"
        self.writer: subprocess.Popen[bytes] | None = None  # the floor writer, once started

    def _servos(self, name: str, log_name: str) -> ServoProcess:
        path = self.workdir / log_name
        proc = self.procs.start(name, ServoProcess.command(path, self.capacity), **PIPES)
        return ServoProcess(proc, path)

    def start(self) -> None:
        """The servo simulators, the daemon on its generated config, the cameras; until the daemon is ready."""
        from runtime.bench.soak import _cameras, _free_tcp_port, _wait_ready

        s = self.settings
        self.cameras = _cameras(self.workdir, str(self.bundle))
        self.servos = self._servos("servo simulator", "servos.json")
        self.floor_servos = self._servos("floor simulator", "floor-servos.json") if s.floor_s else None
        self.tcp_port = _free_tcp_port()
        config = daemon_config(
            self.workdir,
            self.bundle,
            self.servos.port,
            self.tcp_port,
            self.cameras,
            s.seconds,
            s.codec,
            s.encoder_delay_ms,
        )
        runtime_cmd = [sys.executable, "-m", "runtime", "--log-level"]
        with self.daemon_log.open("wb") as out:
            serve = [*runtime_cmd, "INFO", "serve", "--config", str(config)]
            self.daemon = self.procs.start("daemon", serve, daemon=True, stdout=out, stderr=out)
        for c in self.cameras:
            self.procs.start(f"camera {c.input}", c.command(CAMERA_FPS), stdout=subprocess.DEVNULL)
        _wait_ready(self.ipc, self.daemon, self.daemon_log)
        self.procs.watch()

    def start_station(self) -> Station:
        """The teleop station on the daemon's ipc endpoint."""
        self.station = Station(self.procs, self.ipc)
        return self.station

    def start_load(self, seconds: float) -> None:
        """A client process sending ``infer`` back to back over tcp for ``seconds``."""
        client = ["runtime.bench.soak", "client", f"tcp://127.0.0.1:{self.tcp_port}", str(seconds)]
        self.load = self.procs.start("infer client", [sys.executable, "-m", *client], stdout=subprocess.PIPE)

    def start_floor_writer(self) -> None:
        """The minimal pinned writer to the floor simulator, for ``floor_s``."""
        assert self.floor_servos is not None
        floor = floor_command(self.floor_servos.port, self.settings.floor_s, self.floor_cpu)
        self.writer = self.procs.start("floor writer", floor, stdout=subprocess.PIPE)

    def alive(self) -> None:
        from runtime.bench.soak import _tail

        if self.daemon.poll() is not None:
            raise RuntimeError(f"the daemon exited with status {self.daemon.returncode}: {_tail(self.daemon_log)}")

    def wait_for(self, what: str, timeout_s: float, check: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            self.alive()
            if value := check():
                return value
            if time.monotonic() > deadline:
                raise RuntimeError(f"bench field: {what} did not happen within {timeout_s:g} s")
            time.sleep(0.2)


# --- what each step saw ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """The measured seconds: the daemon's hello, the station's ``tracking`` event, when the seconds began
    and ended, the daemon's ``control status`` and ``stats`` at either end, the machine around them."""

    info: Any
    tracking: dict[str, Any]
    t_start: float
    t_end: float
    status0: dict[str, Any]
    stats0: Any
    status1: dict[str, Any]
    stats1: Any
    loadavg: tuple[float | None, float | None]
    daemon_scheduling: list[dict[str, Any]]
    steal: StealSampler


@dataclass(frozen=True)
class Episode:
    """The recorded episode: the station's ``episode_stop`` event, ``control status`` once it was
    written, and the flight recording ``control dump`` wrote then (None if none appeared)."""

    stop: dict[str, Any]
    written: dict[str, Any]
    flight: Path | None


@dataclass(frozen=True)
class Kill:
    """The daemon's SIGKILL: when, and what was seen before and after it."""

    t_kill: float
    seen: dict[str, Any]


@dataclass(frozen=True)
class Ends:
    """What the run left: the station's last event, the infer client's report and how the daemon stopped
    (unless killed), the floor writer's stamps, the servo logs, the daemon log's tail."""

    done: dict[str, Any]
    load: dict[str, Any] | None
    daemon_exit_status: int | None
    children_left_behind: list[str] | None
    floor_writer: dict[str, Any] | None
    servo_log: ServoLog
    floor_log: ServoLog | None
    daemon_tail: str


# --- the steps ---------------------------------------------------------------------------------------


def measure(work: Workload, control: Any) -> Window:
    """Fresh camera frames, the station tracking and recording, then the load and ``seconds`` of
    run, the floor measured beside it."""
    from runtime.protocol.errors import ServerError

    def streams_fresh() -> bool:
        try:
            return not control.control("status")["stale_streams"]
        except ServerError:  # no_control: the loop starts once the arm answered
            return False

    s = work.settings
    info = control.hello()
    work.wait_for("fresh frames from every camera", READY_STEP_TIMEOUT_S, streams_fresh)
    tracking = work.start_station().event("tracking", READY_STEP_TIMEOUT_S)
    # with a kill the load goes on through it (stopped at the end): the kill comes under it too
    work.start_load(s.seconds if s.kill is None else s.seconds + 3600)
    steal = StealSampler().start()
    t_start = time.monotonic()
    loadavg_start = loadavg()
    status0, stats0 = control.control("status"), control.stats()
    daemon_scheduling = work.procs.scheduling()
    next_watch = t_start
    end = t_start + s.seconds
    while (now := time.monotonic()) < end:
        work.alive()
        if (status := work.station.exited()) is not None:
            raise RuntimeError(f"the teleop station exited with status {status}")
        if work.floor_servos is not None and work.writer is None and now >= t_start + FLOOR_START_S:
            work.start_floor_writer()
        if now >= next_watch:
            work.procs.watch()
            next_watch = now + 5.0
        time.sleep(min(0.1, max(0.0, end - now)))
    t_end = time.monotonic()
    time.sleep(0.05)  # one more steal sample past the window
    steal.stop()
    status1, stats1 = control.control("status"), control.stats()
    return Window(
        info=info,
        tracking=tracking,
        t_start=t_start,
        t_end=t_end,
        status0=status0,
        stats0=stats0,
        status1=status1,
        stats1=stats1,
        loadavg=(loadavg_start, loadavg()),
        daemon_scheduling=daemon_scheduling,
        steal=steal,
    )


def end_episode(work: Workload, control: Any) -> Episode:
    """The station stops the episode; wait until it is written, then fetch the flight recording."""
    stop = work.station.tell("episode_stop")

    def written() -> dict[str, Any] | None:
        status: dict[str, Any] = control.control("status")
        rec = recorder_of(status)
        return status if rec.get("episodes_written", 0) + rec.get("episodes_failed", 0) > 0 else None

    status = work.wait_for("the episode's write", EPISODE_WRITE_TIMEOUT_S, written)
    flight = dump(control, work.workdir / "state")
    work.procs.watch()
    return Episode(stop=stop, written=status, flight=flight)


def hand_back(work: Workload, control: Any, window: Window) -> None:
    """The station hands the arm back and leaves; wait until the policy's chunk is executed."""
    work.station.hand_back()
    chunks = int(window.status1["counters"].get("chunks", 0))

    def policy_drives() -> bool:
        status = control.control("status")
        return bool(status["mode"] == "running" and status["counters"].get("chunks", 0) > chunks)

    work.wait_for("the policy's first chunk after the hand-back", READY_STEP_TIMEOUT_S, policy_drives)
    time.sleep(1.0)


def kill_daemon(work: Workload, control: Any) -> Kill:
    """SIGKILL the daemon's main process, then watch the servos for AFTER_KILL_S."""
    before = control.control("status")
    work.procs.watch()
    t_kill = time.monotonic()
    os.kill(work.daemon.pid, signal.SIGKILL)
    work.daemon.wait()
    time.sleep(AFTER_KILL_S)
    seen = {
        "mode_before": before["mode"],
        "moving_before": before["mode"] in ("running", "teleop", "resting"),
        "estop_before": before["estop"],
        "scheduling_before": before.get("scheduling"),
        "watched_s": round(AFTER_KILL_S, 1),
        "daemon_children_alive_after": work.procs.children_alive(),
    }
    return Kill(t_kill=t_kill, seen=seen)


def finish(work: Workload) -> Ends:
    """The station's end (end of its stdin), the load's report, the daemon stopped as systemd stops
    it (unless killed), and the servo logs."""
    from runtime.bench.soak import _tail

    done = work.station.end()
    load = None
    exit_status = None
    left_behind = None
    if work.settings.kill is None:
        out, _ = work.load.communicate(timeout=60)
        with contextlib.suppress(json.JSONDecodeError, IndexError):
            load = json.loads(out.decode().strip().splitlines()[-1])
        work.daemon.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            exit_status = work.daemon.wait(STOP_TIMEOUT_S)
        time.sleep(1.0)  # its children's own way out
        left_behind = work.procs.children_alive()
    floor_writer: dict[str, Any] | None = None
    if work.writer is not None:
        out, _ = work.writer.communicate(timeout=work.settings.floor_s + 30)
        with contextlib.suppress(json.JSONDecodeError, IndexError):
            floor_writer = json.loads(out.decode().strip().splitlines()[-1])
    return Ends(
        done=done,
        load=load,
        daemon_exit_status=exit_status,
        children_left_behind=left_behind,
        floor_writer=floor_writer,
        servo_log=work.servos.close(),
        floor_log=work.floor_servos.close() if work.floor_servos is not None else None,
        daemon_tail=_tail(work.daemon_log, 4000),
    )


def dump(client: Any, state_dir: Path) -> Path | None:
    """``control dump``, and the flight recording it writes (None if none appears)."""

    def written() -> set[Path]:  # not the recorder's .tmp.npz, renamed into place once complete
        return (
            {p for p in state_dir.glob("flight-*.npz") if not p.name.endswith(".tmp.npz")}
            if state_dir.exists()
            else set()
        )

    before = written()
    client.control("dump", who="bench field")
    deadline = time.monotonic() + DUMP_TIMEOUT_S
    while time.monotonic() < deadline:
        new = written() - before
        if new:
            return max(new, key=lambda p: p.stat().st_mtime)
        time.sleep(0.1)
    return None


# --- the whole run ---------------------------------------------------------------------------------------


def run_field_bench(
    *,
    seconds: float = 60.0,
    bundle: str | None = None,
    demo: bool = False,
    kill: KillCase | None = None,
    floor_s: float = 10.0,
    codec: str = "auto",
    keep: str | None = None,
    encoder_delay_ms: float = 0.0,
    pty_boost: bool = True,
) -> dict[str, Any]:
    """Run the field workload for ``seconds`` and return the report (see :mod:`tools.bench.field`).

    ``bundle``: serve this bundle (default: :func:`~tools.bench.field.config.field_bundle`; ``demo``:
    the small demo bundle); ``kill``, ``floor_s``, ``codec`` and ``encoder_delay_ms``: as
    :class:`Settings` says (a bad value raises ValueError before anything starts); ``keep``: copy the
    run's files there at the end (config, daemon log, servo logs, flight recording, dataset);
    ``pty_boost``: the kernel's pty workers at SCHED_FIFO 1 for the run
    (:class:`~tools.bench.field.machine.PtyWorkerBoost`)."""
    from runtime.client import PolicyClient
    from runtime.export.demo import ensure_bundle

    settings = Settings(
        seconds=seconds,
        floor_s=floor_s,
        codec=codec,
        kill=kill,
        encoder_delay_ms=encoder_delay_ms,
    )
    path = Path(bundle) if bundle else ensure_bundle("demo") if demo else field_bundle()
    settings = replace(settings, floor_s=min(floor_s, max(0.0, seconds - FLOOR_START_S)))
    with tempfile.TemporaryDirectory(prefix="lrt-bench-field-") as tmp, signals_raise():
        work = Workload(Path(tmp), path, settings)
        boost = PtyWorkerBoost().start() if pty_boost else None
        killed = None
        try:
            work.start()
            with PolicyClient(work.ipc, timeout_s=10.0) as control:
                window = measure(work, control)
                episode = end_episode(work, control)
                if kill == "policy":
                    hand_back(work, control, window)
                if kill is not None:
                    killed = kill_daemon(work, control)
            ends = finish(work)
        finally:
            work.procs.stop_all()
            if boost is not None:
                boost.stop()
            if keep:
                shutil.copytree(work.workdir, keep, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sock"))
        report = build_report(work, window, episode, killed, ends)
        report["pty_workers"] = boost.describe() if boost is not None else "SCHED_OTHER (--no-pty-boost)"
        return report
