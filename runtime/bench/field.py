"""``lerobot-runtime bench field``: the daemon under the whole field workload at once, judged at the servos.

Everything is driven from outside, as a user would: the daemon is ``lerobot-runtime serve`` with a
generated TOML config, its arm a Feetech STS3215 chain simulated on a pseudo-terminal by a process of
its own at real-time priority that stamps each write as its bytes arrive
(:mod:`runtime.bench.field_servos`); two synthetic cameras are ``lerobot-runtime camera`` processes;
a teleop station (a process, its simulated leader on its own pty) takes over the arm, streams leader
targets at the control rate, moves the leader now and then and records an episode from both cameras;
a client process sends ``infer`` back to back the whole time. Everything else goes over ZeroMQ
(``control status``, ``control dump``, ``stats``).

Reported side by side from one run: the goal-write period error at the servos (p50/p99/max, periods
more than 5 ms off, periods with no write), the daemon's own ``write_period_error_ms`` and
``jitter_ms`` and how the two agree at p99, the simulator's floor measured beside it (a minimal
pinned writer to a second simulator), teleop latency (target sent -> the first servo write that
carries it, and leader move -> write), frames dropped per camera, the dataset check, the CPU flags.

``--kill`` then SIGKILLs the daemon's main process while the station (or, ``--kill policy``, the
policy) drives, and reports what the servos received after it. Every process the bench started, and
every child of the daemon, is stopped at the end however the bench ends.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import numpy as np

from runtime.bench.field_servos import (
    LineReader,
    ServoLog,
    ServoProcess,
    after_kill,
    calibration_path,
    floor_command,
    period_errors_ms,
    raw_goals,
    teleop_latency,
    to_user,
    worst_writes,
    write_periods,
)
from runtime.bench.machine import PtyWorkerBoost, StealSampler, cpu_summary
from runtime.bench.stats import pcts

log = logging.getLogger(__name__)

RATE_HZ = 30.0
CAMERA_FPS = 30.0
JOINT = "shoulder_pan"  # the joint the station's leader moves
MOVE_DEG = 1.0
# where the stall action's rest goes: away from where the arm is driven, so rest goals are told apart
REST_POSE = {"elbow_flex": 20.0}
STALL_TIMEOUT_S = 2.0
REST_SPEED_DEG_S = 15.0
# after a kill: long enough for the stall timeout and the rest move to be seen
AFTER_KILL_S = STALL_TIMEOUT_S + max(abs(v) for v in REST_POSE.values()) / REST_SPEED_DEG_S + 2.5
FLOOR_START_S = 1.0
STATION_TIMEOUT_S = 1.0
READY_STEP_TIMEOUT_S = 60.0
EPISODE_WRITE_TIMEOUT_S = 180.0
DUMP_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 30.0
FIELD_BUNDLE = "field-act-2cam"
FIELD_POLICY = "lerobot_act_2cam_480x640"
KillCase = Literal["station", "policy"]


# --- processes ------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the bench dies, even by SIGKILL."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


POLICIES = {os.SCHED_OTHER: "SCHED_OTHER", os.SCHED_FIFO: "SCHED_FIFO", os.SCHED_RR: "SCHED_RR"}
RESET_ON_FORK = getattr(os, "SCHED_RESET_ON_FORK", 0)  # a flag in the policy a thread reports
if hasattr(os, "SCHED_BATCH"):
    POLICIES[os.SCHED_BATCH] = "SCHED_BATCH"
if hasattr(os, "SCHED_IDLE"):
    POLICIES[os.SCHED_IDLE] = "SCHED_IDLE"


class Processes:
    """Every process the bench starts, and the daemon's children (seen while it runs), stopped at the
    end however the bench ends: politely first, then SIGKILL, then the daemon's process group."""

    def __init__(self) -> None:
        self.started: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.daemon: subprocess.Popen[bytes] | None = None
        self._children: dict[int, Any] = {}  # pid -> psutil.Process, the daemon's descendants

    def start(self, name: str, args: list[str], *, daemon: bool = False, **kwargs: Any) -> subprocess.Popen[bytes]:
        # the daemon leads a process group of its own: its children (encoders, an arm process) are in it
        proc = subprocess.Popen(args, preexec_fn=_die_with_parent, start_new_session=daemon, **kwargs)
        self.started.append((name, proc))
        if daemon:
            self.daemon = proc
        return proc

    def watch(self) -> None:
        """Note the daemon's descendants now (after a kill they are orphans, no longer found by walking)."""
        import psutil

        if self.daemon is None or self.daemon.poll() is not None:
            return
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.daemon.pid).children(recursive=True):
                self._children.setdefault(child.pid, child)

    def scheduling(self) -> list[dict[str, Any]]:
        """How every thread of the daemon and its descendants is scheduled, per process: what the
        kernel says (``sched_getscheduler``), not what the code asked for."""
        import psutil

        if self.daemon is None or self.daemon.poll() is not None:
            return []
        out = []
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.daemon.pid)
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error, OSError):
                    policies: Counter[str] = Counter()
                    for t in p.threads():
                        with contextlib.suppress(OSError):
                            policy = os.sched_getscheduler(t.id) & ~RESET_ON_FORK
                            name = POLICIES.get(policy, str(policy))
                            if policy in (os.SCHED_FIFO, os.SCHED_RR):
                                name += f" {os.sched_getparam(t.id).sched_priority}"
                            policies[name] += 1
                    main = POLICIES.get(os.sched_getscheduler(p.pid) & ~RESET_ON_FORK, "?")
                    if main in ("SCHED_FIFO", "SCHED_RR"):
                        main += f" {os.sched_getparam(p.pid).sched_priority}"
                    what = " ".join(p.cmdline()[1:])[:80] or p.name()
                    out.append({"pid": p.pid, "process": what, "main_thread": main, "threads": dict(policies)})
        return out

    def children_alive(self) -> list[str]:
        """The daemon's descendants seen so far that still run, as ``name (pid)``."""
        import psutil

        alive = []
        for pid, p in sorted(self._children.items()):
            with contextlib.suppress(psutil.Error):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{' '.join(p.cmdline()[1:4]) or p.name()} ({pid})")
        return alive

    def stop_all(self) -> None:
        import psutil

        for name, proc in reversed(self.started):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the daemon's shutdown makes the arm safe
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("bench field: %s (PID %d) did not stop; killing it", name, proc.pid)
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self.daemon is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.daemon.pid, signal.SIGKILL)
        left = []
        for p in self._children.values():
            with contextlib.suppress(psutil.Error):
                if p.is_running():
                    p.kill()
                    left.append(p)
        psutil.wait_procs(left, timeout=5)


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP end the bench as Ctrl-C does, so its cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(sig: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(sig).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# --- the bundle and the config -----------------------------------------------------------------------


def field_bundle() -> Path:
    """The two-camera 480x640 ACT-size bundle for the SO-101: a LeRobot ACT checkpoint with LeRobot's
    default sizes and random weights, exported with ``export --lerobot`` once into the bundle store
    and reused while it is current (same lerobot-runtime and OpenVINO versions)."""
    from drivers.calibration import SO101_JOINTS
    from runtime.bundle.demo import ensure_checkpoint_bundle

    return ensure_checkpoint_bundle(
        FIELD_BUNDLE,
        FIELD_POLICY,
        ("runtime.policies.lerobot_checkpoints", "act", "default", "front,wrist"),
        export_args=("--action-names", ",".join(SO101_JOINTS)),
        fits=lambda m: m.action_names == SO101_JOINTS,
    )


def _q(text: str | Path) -> str:
    return json.dumps(str(text))  # a TOML basic string


def _config(
    workdir: Path,
    bundle: Path,
    port: str,
    tcp_port: int,
    cameras: list[Any],
    seconds: float,
    codec: str,
    control_process: str | None,
    encoder_delay_ms: float = 0.0,
) -> Path:
    streams = "".join(f"[[control.streams]]\ninput = {_q(c.input)}\nendpoint = {_q(c.endpoint)}\n\n" for c in cameras)
    rest = ", ".join(f"{k} = {v}" for k, v in REST_POSE.items())
    text = f"""# bench field: the daemon on a simulated STS3215 chain (its own process, on a pty), two cameras,
# a teleop station, recording and back-to-back infers; built-in defaults where not set here
[engine]
bundle = {_q(bundle.resolve())}
engine = "openvino"
parity_runs = 4                    # the gate still runs; start-up is not what is measured

[server]
endpoints = [{_q(f"ipc://{workdir}/policy.sock")}, {_q(f"tcp://127.0.0.1:{tcp_port}")}]

[arm]
kind = "feetech"
port = {_q(port)}
calibration = {_q(calibration_path())}

[control]
rate_hz = {RATE_HZ}
recorder_s = {seconds + 120:g}     # the flight recorder holds the whole run (control dump)
{f"process = {_q(control_process)}" if control_process else ""}

{streams}[control.safety]
max_first_step_deg = 360.0         # random weights act anywhere; the envelope still bounds every goal
stall_timeout_s = {STALL_TIMEOUT_S}
stall_action = "rest"
rest_pose = {{ {rest} }}
rest_speed_deg_s = {REST_SPEED_DEG_S}

[recording]
dataset_dir = {_q(workdir / "dataset")}
codec = {_q(codec)}
encoder_delay_ms = {encoder_delay_ms:g}        # > 0: an encoder deliberately too slow

[daemon]
state_dir = {_q(workdir / "state")}
arm_wait_s = 30.0
"""
    path = workdir / "config.toml"
    path.write_text(text)
    return path


# --- the station process ------------------------------------------------------------------------------


class _StampedLeader:
    """A leader whose every read is noted (time, the moved joint's value): the station sends the target
    right after the read, so that is when the target leaves."""

    def __init__(self, inner: Any, joint: str) -> None:
        self.inner = inner
        self.joint = joint
        self.joints: tuple[str, ...] = inner.joints
        self.sends: list[tuple[float, float]] = []

    def order(self, names: list[str]) -> None:
        self.inner.order(names)
        self.joints = self.inner.joints

    def read(self) -> np.ndarray:
        positions: np.ndarray = self.inner.read()
        self.sends.append((time.monotonic(), float(positions[self.joints.index(self.joint)])))
        return positions

    def close(self) -> None:
        self.inner.close()


def _emit(event: str, **body: Any) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), **body}), flush=True)


def _station(endpoint: str, calibration: str) -> int:
    """The station: take over, start an episode, stream and move the leader; ``episode_stop`` and
    ``hand_back`` come on stdin, its end is the end of stdin. Events go to stdout as JSON lines."""
    import queue

    from runtime.client import PolicyClient
    from runtime.teleop.leader import SimLeader
    from runtime.teleop.station import Station

    commands: queue.Queue[str] = queue.Queue()

    def read_commands() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("quit")

    threading.Thread(target=read_commands, daemon=True).start()
    leader = _StampedLeader(SimLeader.start(calibration), JOINT)
    moves: list[tuple[float, float]] = []
    rtts: list[float] = []
    stop_moving = threading.Event()
    try:
        with PolicyClient(endpoint, timeout_s=STATION_TIMEOUT_S) as client:
            station = Station(client, leader, who="bench field", task="field workload")
            station.open()
            station.step()
            station.key("t")
            deadline = time.monotonic() + READY_STEP_TIMEOUT_S
            while station.status.phase != "tracking":
                if time.monotonic() > deadline:
                    _emit("failed", why=f"no tracking within {READY_STEP_TIMEOUT_S:g} s: {station.status.line()}")
                    return 1
                time.sleep(max(0.0, station.next_send_at(time.monotonic()) - time.monotonic()))
                station.step()
            started = station.key("r")
            base = float(leader.read()[leader.joints.index(JOINT)])
            _emit("tracking", episode=started, message=station.status.message)

            def mover() -> None:
                rng = random.Random(7)
                value = base
                while not stop_moving.wait(0.15 + rng.random() / station.rate_hz):
                    value = base + MOVE_DEG if value == base else base
                    leader.inner.move_to({JOINT: value})
                    moves.append((time.monotonic(), value))

            threading.Thread(target=mover, daemon=True).start()
            streaming = True
            while streaming:
                time.sleep(max(0.0, station.next_send_at(time.monotonic()) - time.monotonic()))
                while not commands.empty():
                    command = commands.get()
                    if command == "episode_stop":
                        _emit("episode_stop", reply=station.key("s"))
                    elif command == "hand_back":
                        stop_moving.set()
                        reply = station.key("h")
                        # a close while the loop still tracks would stop the arm: wait until it took the hand-back
                        deadline = time.monotonic() + 5.0
                        while station.status.mode == "teleop" and time.monotonic() < deadline:
                            time.sleep(max(0.0, station.next_send_at(time.monotonic()) - time.monotonic()))
                            station.step()
                        _emit("hand_back", reply=reply, mode=station.status.mode)
                        streaming = False
                    elif command == "quit":
                        streaming = False
                if streaming:
                    station.step()
                    rtts.append(station.status.rtt_ms)
            stop_moving.set()
            station.close()
            status = station.status
    finally:
        stop_moving.set()
        leader.close()
    _emit(
        "done",
        moves=moves,
        sends=leader.sends,
        rtt_ms=rtts,
        sent=status.sent,
        timeouts=status.timeouts,
        clamps=status.clamps,
    )
    return 0


def _event(reader: LineReader, name: str, timeout_s: float, who: str) -> dict[str, Any]:
    """The next event ``name`` from a child's JSON lines (others are skipped)."""
    deadline = time.monotonic() + timeout_s
    while True:
        line = reader.line(max(0.0, deadline - time.monotonic()))
        if line is None:
            raise RuntimeError(f"bench field: no {name!r} from the {who} within {timeout_s:g} s")
        try:
            event: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("event") == "failed":
            raise RuntimeError(f"bench field: the {who} failed: {event.get('why')}")
        if event.get("event") == name:
            return event


# --- the run ---------------------------------------------------------------------------------------------


def _recorder(status: dict[str, Any]) -> dict[str, Any]:
    recording = status.get("recording") or {}
    recorder: dict[str, Any] = recording.get("recorder") or {}
    return recorder


class _Run:
    """One run of the field workload: the processes it started (:attr:`procs`, stopped by the caller
    however the run ends) and what it saw, step by step."""

    def __init__(
        self,
        workdir: Path,
        bundle: Path,
        *,
        seconds: float,
        floor_s: float,
        codec: str,
        kill: KillCase | None,
        control_process: str | None,
        encoder_delay_ms: float = 0.0,
    ) -> None:
        from runtime.engine.affinity import allowed_cpus

        self.workdir, self.bundle, self.kill = workdir, bundle, kill
        self.seconds, self.floor_s, self.codec = seconds, floor_s, codec
        self.control_process = control_process
        self.encoder_delay_ms = encoder_delay_ms
        self.procs = Processes()
        cpus = allowed_cpus()
        self.cpus = list(cpus)
        self.control_cpu, self.floor_cpu = cpus[0], cpus[-1]  # the floor writer keeps off the loop's CPU
        self.capacity = round((seconds + 600) * RATE_HZ * 2)  # goal log entries each simulated servo keeps
        self.ipc = f"ipc://{workdir}/policy.sock"
        self.daemon_log = workdir / "daemon.log"
        self.seen: dict[str, Any] = {}  # what the steps saw, for the report

    # --- start-up ---

    def _servos(self, name: str, log_name: str) -> ServoProcess:
        path = self.workdir / log_name
        proc = self.procs.start(name, ServoProcess.command(path, self.capacity), **PIPES)
        return ServoProcess(proc, path)

    def start(self) -> None:
        from runtime.bench.soak import _cameras, _free_tcp_port, _wait_ready

        self.cameras = _cameras(self.workdir, str(self.bundle))
        self.servos = self._servos("servo simulator", "servos.json")
        self.floor_servos = self._servos("floor simulator", "floor-servos.json") if self.floor_s else None
        self.tcp_port = _free_tcp_port()
        config = _config(
            self.workdir,
            self.bundle,
            self.servos.port,
            self.tcp_port,
            self.cameras,
            self.seconds,
            self.codec,
            self.control_process,
            self.encoder_delay_ms,
        )
        runtime_cmd = [sys.executable, "-m", "runtime", "--log-level"]
        with self.daemon_log.open("wb") as out:
            serve = [*runtime_cmd, "INFO", "serve", "--config", str(config)]
            self.daemon = self.procs.start("daemon", serve, daemon=True, stdout=out, stderr=out)
        for c in self.cameras:
            size = ["--height", str(c.height), "--width", str(c.width), "--fps", str(CAMERA_FPS)]
            camera = [
                *runtime_cmd,
                "WARNING",
                "camera",
                "--synthetic",
                "--input",
                c.input,
                *size,
                "--endpoint",
                c.endpoint,
            ]
            self.procs.start(f"camera {c.input}", camera, stdout=subprocess.DEVNULL)
        _wait_ready(self.ipc, self.daemon, self.daemon_log)
        self.procs.watch()

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

    # --- the measured seconds ---

    def measure(self, control: Any) -> None:
        """Fresh camera frames, the station tracking and recording, then the load and ``seconds`` of
        run, the floor measured beside it."""
        from runtime.protocol.errors import ServerError

        def streams_fresh() -> bool:
            try:
                return not control.control("status")["stale_streams"]
            except ServerError:  # no_control: the loop starts once the arm answered
                return False

        self.info = control.hello()
        self.wait_for("fresh frames from every camera", READY_STEP_TIMEOUT_S, streams_fresh)
        station = [sys.executable, "-m", "runtime.bench.field", "station", self.ipc, str(calibration_path())]
        self.station = self.procs.start("teleop station", station, **PIPES)
        self.station_out = LineReader(self.station.stdout)
        self.seen["tracking"] = _event(self.station_out, "tracking", READY_STEP_TIMEOUT_S, "station")
        # with a kill the load goes on through it (stopped at the end): the kill comes under it too
        load_s = self.seconds if self.kill is None else self.seconds + 3600
        client = ["runtime.bench.soak", "client", f"tcp://127.0.0.1:{self.tcp_port}", str(load_s)]
        self.load = self.procs.start("infer client", [sys.executable, "-m", *client], stdout=subprocess.PIPE)
        self.steal = StealSampler().start()
        self.t_start = time.monotonic()
        self.seen["loadavg_start"] = _loadavg()
        self.status0, self.stats0 = control.control("status"), control.stats()
        self.seen["daemon_scheduling"] = self.procs.scheduling()
        self.writer: subprocess.Popen[bytes] | None = None
        next_watch = self.t_start
        end = self.t_start + self.seconds
        while (now := time.monotonic()) < end:
            self.alive()
            if self.station.poll() is not None:
                raise RuntimeError(f"the teleop station exited with status {self.station.returncode}")
            if self.floor_servos is not None and self.writer is None and now >= self.t_start + FLOOR_START_S:
                floor = floor_command(self.floor_servos.port, self.floor_s, self.floor_cpu)
                self.writer = self.procs.start("floor writer", floor, stdout=subprocess.PIPE)
            if now >= next_watch:
                self.procs.watch()
                next_watch = now + 5.0
            time.sleep(min(0.1, max(0.0, end - now)))
        self.t_end = time.monotonic()
        time.sleep(0.05)  # one more steal sample past the window
        self.steal.stop()
        self.status1, self.stats1 = control.control("status"), control.stats()
        self.seen["loadavg_end"] = _loadavg()

    def _tell_station(self, command: str) -> dict[str, Any]:
        assert self.station.stdin is not None
        self.station.stdin.write(command.encode() + b"\n")
        return _event(self.station_out, command, 10.0, "station")

    def end_episode(self, control: Any) -> None:
        """The station stops the episode; wait until it is written, then fetch the flight recording."""
        self.seen["episode_stop"] = self._tell_station("episode_stop")

        def written() -> dict[str, Any] | None:
            status: dict[str, Any] = control.control("status")
            rec = _recorder(status)
            return status if rec.get("episodes_written", 0) + rec.get("episodes_failed", 0) > 0 else None

        self.seen["written"] = self.wait_for("the episode's write", EPISODE_WRITE_TIMEOUT_S, written)
        self.flight = _dump(control, self.workdir / "state")
        self.procs.watch()

    # --- the ends ---

    def hand_back(self, control: Any) -> None:
        """The station hands the arm back and leaves; wait until the policy's chunk is executed."""
        self._tell_station("hand_back")
        self.seen["done"] = _event(self.station_out, "done", 20.0, "station")
        chunks = int(self.status1["counters"].get("chunks", 0))

        def policy_drives() -> bool:
            status = control.control("status")
            return bool(status["mode"] == "running" and status["counters"].get("chunks", 0) > chunks)

        self.wait_for("the policy's first chunk after the hand-back", READY_STEP_TIMEOUT_S, policy_drives)
        time.sleep(1.0)

    def kill_daemon(self, control: Any) -> None:
        """SIGKILL the daemon's main process, then watch the servos for AFTER_KILL_S."""
        before = control.control("status")
        self.procs.watch()
        self.t_kill = time.monotonic()
        os.kill(self.daemon.pid, signal.SIGKILL)
        self.daemon.wait()
        time.sleep(AFTER_KILL_S)
        self.seen["kill"] = {
            "mode_before": before["mode"],
            "moving_before": before["mode"] in ("running", "teleop", "resting"),
            "estop_before": before["estop"],
            "scheduling_before": before.get("scheduling"),
            "watched_s": round(AFTER_KILL_S, 1),
            "daemon_children_alive_after": self.procs.children_alive(),
        }

    def finish(self) -> None:
        """The station's end (end of its stdin), the load's report, the daemon stopped as systemd stops
        it (unless killed), and the servo logs."""
        from runtime.bench.soak import _tail

        if "done" not in self.seen:
            assert self.station.stdin is not None
            self.station.stdin.close()
            self.seen["done"] = _event(self.station_out, "done", 30.0, "station")
        self.seen["load"] = None
        if self.kill is None:
            out, _ = self.load.communicate(timeout=60)
            with contextlib.suppress(json.JSONDecodeError, IndexError):
                self.seen["load"] = json.loads(out.decode().strip().splitlines()[-1])
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.seen["daemon_exit_status"] = self.daemon.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.seen["daemon_exit_status"] = None
            time.sleep(1.0)  # its children's own way out
            self.seen["daemon_children_left_behind"] = self.procs.children_alive()
        self.floor_writer: dict[str, Any] | None = None
        if self.writer is not None:
            out, _ = self.writer.communicate(timeout=self.floor_s + 30)
            with contextlib.suppress(json.JSONDecodeError, IndexError):
                self.floor_writer = json.loads(out.decode().strip().splitlines()[-1])
        self.servo_log = self.servos.close()
        self.floor_log = self.floor_servos.close() if self.floor_servos is not None else None
        self.daemon_tail = _tail(self.daemon_log, 4000)

    def report(self) -> dict[str, Any]:
        period = 1.0 / RATE_HZ
        seen, cal = self.seen, _calibration()
        r: dict[str, Any] = {
            "seconds": self.seconds,
            "rate_hz": RATE_HZ,
            "kill_case": self.kill,
            "encoder_delay_ms": self.encoder_delay_ms,
        }
        for key in ("daemon_exit_status", "daemon_children_left_behind"):
            if key in seen:
                r[key] = seen[key]
        r.update(cpu_summary())
        r.update(
            {
                "bundle": str(self.bundle),
                "policy": self.info.policy_name,
                "engine": {k: self.info.engine.get(k) for k in ("engine", "device", "precision", "threads", "cpus")},
                "cameras": [
                    {"input": c.input, "height": c.height, "width": c.width, "fps": CAMERA_FPS} for c in self.cameras
                ],
                "scheduling": {
                    "control_loop": self.status1.get("scheduling"),
                    "servo_simulator": self.servo_log.scheduling,
                    "floor_writer": self.floor_writer["scheduling"] if self.floor_writer else None,
                },
                "control_cpu": self.control_cpu,
                "control_process": self.control_process or "the daemon's default",
                # other work on the machine (1-minute load average), at the start and the end of the window
                "loadavg": [seen["loadavg_start"], seen["loadavg_end"]],
                "daemon_scheduling": seen["daemon_scheduling"],
                "daemon_realtime_threads": _realtime_threads(seen["daemon_scheduling"]),
                "mode_at_end": self.status1["mode"],
                "estop_at_end": self.status1["estop"],
                "load": _load(seen["load"], self.stats0, self.stats1, self.t_end - self.t_start),
            }
        )
        flight = _flight_rows(self.flight) if self.flight is not None else None
        window = (self.t_start, self.t_end)
        r["servos"], r["daemon"], r["agreement"] = _writes(
            self.servo_log, self.status0, self.status1, flight, window, period
        )
        servo_times, _ = self.servo_log.writes()
        control_cpu = self.control_cpu
        r["worst_writes"] = worst_writes(
            servo_times, period, window, flight, lambda a, b: self.steal.ms(control_cpu, a, b)
        )
        r["steal"] = self.steal.report(sorted(set(self.cpus)), *window)
        r["floor"] = _floor(self.floor_log, self.floor_writer, period)
        r["teleop"] = _teleop(self.servo_log, seen, cal, window, self.status0, self.status1, period)
        r["recording"] = _recording(
            self.status0,
            self.status1,
            seen,
            _dataset_check(self.workdir / "dataset"),
            self.cameras,
            self.t_end - self.t_start,
        )
        if "kill" in seen:
            r["kill"] = {**seen["kill"], **after_kill(self.servo_log, self.t_kill, period, raw_goals(cal, REST_POSE))}
        r["daemon_log_tail"] = self.daemon_tail if r.get("daemon_exit_status") not in (0, None) or self.kill else ""
        return r


PIPES: dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "bufsize": 0}


def _dump(client: Any, state_dir: Path) -> Path | None:
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


def run_field_bench(
    *,
    seconds: float = 60.0,
    bundle: str | None = None,
    demo: bool = False,
    kill: KillCase | None = None,
    floor_s: float = 10.0,
    codec: str = "auto",
    control_process: str | None = None,
    keep: str | None = None,
    encoder_delay_ms: float = 0.0,
    pty_boost: bool = True,
) -> dict[str, Any]:
    """Run the field workload for ``seconds`` and return the report (see the module docstring).

    ``bundle``: serve this bundle (default: :func:`field_bundle`; ``demo``: the small demo bundle);
    ``kill``: then SIGKILL the daemon while the station or the policy drives; ``floor_s``: seconds of
    the simulator's floor beside the run; ``control_process``: the daemon's ``control.process``
    (unset: its default); ``keep``: copy the run's files there at the end (config,
    daemon log, servo logs, flight recording, dataset); ``encoder_delay_ms``: every encoder sleeps this
    long per frame (``[recording] encoder_delay_ms``: one that cannot keep up); ``pty_boost``: the
    kernel's pty workers at SCHED_FIFO 1 for the run (:class:`~runtime.bench.machine.PtyWorkerBoost`)."""
    from runtime.bundle.demo import ensure_bundle
    from runtime.client import PolicyClient

    if not 1 <= seconds <= 3600:
        raise ValueError(f"bench field --seconds: expected 1 <= seconds <= 3600, got {seconds:g}")
    if floor_s < 0:
        raise ValueError(f"bench field --floor-seconds: expected >= 0, got {floor_s:g}")
    if not 0 <= encoder_delay_ms <= 1000:
        raise ValueError(f"bench field --encoder-delay-ms: expected 0..1000 ms, got {encoder_delay_ms:g}")
    path = Path(bundle) if bundle else ensure_bundle("demo") if demo else field_bundle()
    floor_s = min(floor_s, max(0.0, seconds - FLOOR_START_S))
    with tempfile.TemporaryDirectory(prefix="lrt-bench-field-") as tmp, _signals_raise():
        run = _Run(
            Path(tmp),
            path,
            seconds=seconds,
            floor_s=floor_s,
            codec=codec,
            kill=kill,
            control_process=control_process,
            encoder_delay_ms=encoder_delay_ms,
        )
        boost = PtyWorkerBoost().start() if pty_boost else None
        try:
            run.start()
            with PolicyClient(run.ipc, timeout_s=10.0) as control:
                run.measure(control)
                run.end_episode(control)
                if kill == "policy":
                    run.hand_back(control)
                if kill is not None:
                    run.kill_daemon(control)
            run.finish()
        finally:
            run.procs.stop_all()
            if boost is not None:
                boost.stop()
            if keep:
                shutil.copytree(run.workdir, keep, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sock"))
        report = run.report()
        report["pty_workers"] = boost.describe() if boost is not None else "SCHED_OTHER (--no-pty-boost)"
        return report


# --- the report's parts -------------------------------------------------------------------------------


def _calibration() -> Any:
    from drivers.calibration import load_calibration

    return load_calibration(calibration_path())


def _realtime_threads(tree: list[dict[str, Any]]) -> list[str]:
    """The daemon's threads at a real-time priority, as ``process: N x SCHED_FIFO P`` (the control loop
    asks for one; anything else there competes with it)."""
    out = []
    for p in tree:
        rt = [f"{n} x {policy}" for policy, n in p["threads"].items() if policy.startswith(("SCHED_FIFO", "SCHED_RR"))]
        if rt:
            out.append(f"{p['process']} ({p['pid']}): {', '.join(rt)}")
    return out


def _loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _load(client: dict[str, Any] | None, stats0: Any, stats1: Any, window_s: float) -> dict[str, Any]:
    """The back-to-back infers, as the server counted them over the window (and the client, when it
    ended by itself)."""
    infers = stats1.requests.get("infer", 0) - stats0.requests.get("infer", 0)
    errors = {k: v - stats0.errors.get(k, 0) for k, v in stats1.errors.items() if v > stats0.errors.get(k, 0)}
    infer = stats1.latency_ms.get("infer")
    return {
        "infer_client": client,
        "infers_in_window": infers,
        "infers_per_s": round(infers / window_s, 2),
        "server_errors_in_window": errors,
        "server_infer_ms": {"p50": infer.p50, "p99": infer.p99} if infer is not None else None,
    }


def _dataset_check(root: Path) -> dict[str, Any]:
    from runtime.recording.check import check_dataset

    report = check_dataset(root)
    return {
        "ok": report.ok,
        "episodes": report.episodes,
        "frames": report.frames,
        "cameras": list(report.cameras),
        "problems": report.problems[:10],
    }


def _flight_rows(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in ("t", "late_ms", "write_ms", "write_err_ms") if k in f.files}


def _window(times: np.ndarray, t0: float, t1: float) -> np.ndarray:
    return times[(times >= t0) & (times <= t1)]


def _writes(
    servo: ServoLog,
    status0: dict[str, Any],
    status1: dict[str, Any],
    flight: dict[str, np.ndarray] | None,
    window: tuple[float, float],
    period: float,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The write periods at the servos, the daemon's own figures, and how the two agree."""
    t0, t1 = window
    times, _ = servo.writes()
    at_servos = write_periods(_window(times, t0, t1), period)
    w1, w0 = status1["write_period_error_ms"], status0["write_period_error_ms"]
    c1, c0 = status1["counters"], status0["counters"]
    daemon: dict[str, Any] = {
        # control status: p50/p99/max over its last 10 s, periods and off_5ms counted since its start
        "status_write_period_error_ms": {k: w1.get(k) for k in ("p50", "p99", "max")},
        "status_periods_in_window": w1["periods"] - w0["periods"],
        "status_off_5ms_in_window": w1["off_5ms"] - w0["off_5ms"],
        "status_jitter_ms": status1["jitter_ms"],
        "ticks": c1.get("ticks", 0) - c0.get("ticks", 0),
        "writes": c1.get("writes", 0) - c0.get("writes", 0),
        "overruns": c1.get("overruns", 0) - c0.get("overruns", 0),
    }
    # the same 10 s at the servos, for a like-for-like p99
    last10 = write_periods(_window(times, t1 - 10.0, t1), period)
    agreement: dict[str, Any] = {
        "servo_p99_last_10s_ms": last10["period_error_ms"]["p99"],
        "status_p99_last_10s_ms": w1.get("p99"),
    }
    if last10["period_error_ms"]["p99"] is not None and w1.get("p99") is not None:
        agreement["p99_difference_last_10s_ms"] = round(abs(last10["period_error_ms"]["p99"] - w1["p99"]), 3)
    if flight is not None and "write_ms" in flight:
        sel = (flight["t"] >= t0) & (flight["t"] <= t1)
        err = flight["write_err_ms"][sel]
        daemon["flight_write_period_error_ms"] = pcts(err, absolute=True)
        finite = err[np.isfinite(err)]
        daemon["flight_periods"] = len(finite)
        daemon["flight_off_5ms"] = int((np.abs(finite) > 5.0).sum())
        daemon["flight_jitter_ms"] = pcts(flight["late_ms"][sel], absolute=True)
        daemon["flight_ticks_without_write"] = int((sel & ~np.isfinite(flight["write_ms"])).sum())
        wrote = sel & np.isfinite(flight["write_ms"])
        # the loop's own stamp of each write: its tick's deadline (when it woke, less how late) plus write_ms
        stamps = flight["t"][wrote] + (flight["write_ms"][wrote] - flight["late_ms"][wrote]) / 1e3
        d99, s99 = daemon["flight_write_period_error_ms"]["p99"], at_servos["period_error_ms"]["p99"]
        if d99 is not None and s99 is not None:
            agreement["p99_difference_ms"] = round(abs(s99 - d99), 3)
        if len(stamps) and len(times):
            i = np.clip(np.searchsorted(times, stamps), 1, len(times) - 1)
            nearest = np.where(np.abs(times[i] - stamps) < np.abs(times[i - 1] - stamps), times[i], times[i - 1])
            offset = (nearest - stamps) * 1e3
            offset = offset[np.abs(offset) < period * 1e3 / 2]
            agreement["matched_writes"] = len(offset)
            # servo arrival minus the loop's stamp, and how much it changes write to write (the
            # difference of the two period errors)
            agreement["arrival_minus_loop_stamp_ms"] = pcts(offset)
            agreement["period_error_difference_ms"] = pcts(np.diff(offset), absolute=True)
    return at_servos, daemon, agreement


def _floor(servo: ServoLog | None, writer: dict[str, Any] | None, period: float) -> dict[str, Any] | None:
    if servo is None or writer is None or not writer["stamps"]:
        return None
    stamps = np.asarray(writer["stamps"])
    times, _ = servo.writes()
    at_servos = write_periods(_window(times, stamps[0] - period / 2, stamps[-1] + period / 2), period)
    return {
        "seconds": round(float(stamps[-1] - stamps[0]), 1),
        "writer_cpu": writer["cpu"],
        "writer_scheduling": writer["scheduling"],
        "at_servos": at_servos,
        "writer_own_period_error_ms": pcts(period_errors_ms(stamps, period), absolute=True),
    }


def _teleop(
    servo: ServoLog,
    seen: dict[str, Any],
    cal: Any,
    window: tuple[float, float],
    status0: dict[str, Any],
    status1: dict[str, Any],
    period: float,
) -> dict[str, Any]:
    t0, t1 = window
    done, tracking = seen["done"], seen["tracking"]
    joint = cal.joints[JOINT]
    log_ = servo.goals[joint.id]
    values = to_user(cal, JOINT)(log_[:, 1])
    moves = [(t, v) for t, v in done["moves"] if t0 <= t <= t1 - 0.2]
    sends = [(t, v) for t, v in done["sends"] if t >= t0]
    tick_deg = 360 / joint.resolution
    latency = teleop_latency(log_[:, 0], values, moves, sends, 0.6 * tick_deg)
    tick_ms = period * 1e3
    p99 = latency["send_to_write_ms"]["p99"]
    c0, c1 = status0["counters"], status1["counters"]
    return {
        **latency,
        "tick_ms": round(tick_ms, 3),
        "target_p99_ms": round(tick_ms + 2.0, 3),
        "target_met": p99 is not None and p99 <= tick_ms + 2.0,
        "station_rtt_ms": pcts(done["rtt_ms"]),
        "targets_sent": done["sent"],
        "station_timeouts": done["timeouts"],
        "episode_start": tracking.get("episode"),
        "deadman_ticks": c1.get("deadman_ticks", 0) - c0.get("deadman_ticks", 0),
        "mode": status1["mode"],
    }


def _recording(
    status0: dict[str, Any],
    status1: dict[str, Any],
    seen: dict[str, Any],
    dataset: dict[str, Any],
    cameras: list[Any],
    window_s: float,
) -> dict[str, Any]:
    written, stopped = seen["written"], seen["episode_stop"]
    recorder = _recorder(written)
    streams0, streams1 = status0.get("streams") or {}, status1.get("streams") or {}
    per_camera = {}
    for c in cameras:
        received = streams1.get(c.input, {}).get("received", 0) - streams0.get(c.input, {}).get("received", 0)
        per_camera[c.input] = {
            "encoder_drops": (recorder.get("encoder_drops_by_camera") or {}).get(c.input, 0),
            "stream_frames_received": received,
            "stream_frames_expected": round(window_s * CAMERA_FPS),
            "encode_ms_per_frame": (recorder.get("encode_ms_per_frame") or {}).get(c.input),
        }
    return {
        "codec": recorder.get("codec"),
        "episode_stop": stopped.get("reply"),
        "episodes_written": recorder.get("episodes_written", 0),
        "episodes_failed": recorder.get("episodes_failed", 0),
        "frames_written": recorder.get("frames_written", 0),
        "frames_dropped": recorder.get("frames_dropped", 0),
        "overruns": recorder.get("overruns", 0),
        "episode_drop_rate": recorder.get("episode_drop_rate"),
        "episodes_over_drop_rate": recorder.get("episodes_over_drop_rate", 0),
        "last_error": recorder.get("last_error"),
        "episodes_cut": (written.get("recording") or {}).get("episodes_cut", 0),
        "per_camera": per_camera,
        "dataset_check": dataset,
    }


# --- output ---------------------------------------------------------------------------------------------


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}"


def format_table(r: dict[str, Any]) -> str:
    e = r["engine"]
    s, d, a, t = r["servos"], r["daemon"], r["agreement"], r["teleop"]
    sp, dw = s["period_error_ms"], d.get("flight_write_period_error_ms") or {}
    fl = r["floor"]
    lines = [
        f"bench field: {r['seconds']:g} s at {r['rate_hz']:g} Hz; {r['policy']} on {e.get('engine')} "
        f"{e.get('device')}/{e.get('precision')} {e.get('threads')} thread(s) on CPUs {e.get('cpus')}; "
        f"{len(r['cameras'])} camera(s) {r['cameras'][0]['width']}x{r['cameras'][0]['height']} at "
        f"{r['cameras'][0]['fps']:g} fps",
        f"CPU: {r['cpu']}, {r['cpus']} CPUs; flags: {' '.join(r['cpu_flags']) or 'none of avx2/avx512'}",
        f"scheduling: loop {r['scheduling']['control_loop']} (control.process: {r['control_process']}); "
        f"servo simulator {r['scheduling']['servo_simulator']}, pty workers {r.get('pty_workers', '-')}; "
        f"machine load average {r['loadavg'][0]} -> "
        f"{r['loadavg'][1]}",
        f"load: {r['load']['infers_per_s']:g} infers/s back to back (server infer p50 "
        f"{_ms((r['load']['server_infer_ms'] or {}).get('p50'))} ms); teleop station tracking; recording",
        "",
        f"{'goal-write period error (ms)':<36} {'p50':>7} {'p99':>7} {'max':>7} {'>5ms':>6} {'missing':>8}",
        f"{'at the servos (arrival stamps)':<36} {_ms(sp['p50']):>7} {_ms(sp['p99']):>7} {_ms(sp['max']):>7} "
        f"{s['off_5ms']:>6} {s['missing_periods']:>8}",
    ]
    if dw:
        lines.append(
            f"{'daemon, its own stamps (flight rec.)':<36} {_ms(dw['p50']):>7} {_ms(dw['p99']):>7} "
            f"{_ms(dw['max']):>7} {d['flight_off_5ms']:>6} {d['flight_ticks_without_write']:>8}"
        )
    sw = d["status_write_period_error_ms"]
    lines.append(
        f"{'daemon, control status (last 10 s)':<36} {_ms(sw['p50']):>7} {_ms(sw['p99']):>7} {_ms(sw['max']):>7} "
        f"{d['status_off_5ms_in_window']:>6} {'-':>8}"
    )
    if fl is not None:
        fs = fl["at_servos"]["period_error_ms"]
        lines.append(
            f"{'floor: pinned writer, at the servos':<36} {_ms(fs['p50']):>7} {_ms(fs['p99']):>7} "
            f"{_ms(fs['max']):>7} {fl['at_servos']['off_5ms']:>6} {fl['at_servos']['missing_periods']:>8}"
        )
        fw = fl["writer_own_period_error_ms"]
        lines.append(
            f"{'floor: the writer, its own stamps':<36} {_ms(fw['p50']):>7} {_ms(fw['p99']):>7} {_ms(fw['max']):>7}"
        )
    lines.append(
        "(>5ms: periods more than 5 ms off over the run; missing: periods without a goal write (the daemon: "
        "its ticks that wrote nothing); the floor ran "
        f"{fl['seconds'] if fl else 0:g} s beside the daemon)"
    )
    j = d["status_jitter_ms"]
    lines += [
        f"jitter (tick wake lateness, status last 10 s): p50 {_ms(j['p50'])} p99 {_ms(j['p99'])} "
        f"max {_ms(j['max'])} ms; "
        f"overruns {d['overruns']}; {s['writes']} writes at the servos for {d['ticks']} ticks",
        f"agreement at p99: |servos - daemon| {_ms(a.get('p99_difference_ms'))} ms over the run, "
        f"{_ms(a.get('p99_difference_last_10s_ms'))} ms over status' last 10 s; arrival - loop stamp "
        f"p50 {_ms((a.get('arrival_minus_loop_stamp_ms') or {}).get('p50'))} ms",
        f"teleop: target sent -> servo write p50 {_ms(t['send_to_write_ms']['p50'])} p99 "
        f"{_ms(t['send_to_write_ms']['p99'])} ms (target <= {t['target_p99_ms']:g}: "
        f"{'met' if t['target_met'] else 'NOT met'}); leader move -> write p50 {_ms(t['move_to_write_ms']['p50'])} "
        f"p99 {_ms(t['move_to_write_ms']['p99'])} ms; {t['measured']} of {t['moves']} moves seen",
    ]
    worst = r.get("worst_writes") or []
    if worst:
        steal = r.get("steal") or {}
        lines.append(
            "worst periods at the servos (s into the run: error ms; the loop woke late / wrote after its "
            "deadline / the bytes reached the servos after that, ms; hypervisor steal on the control CPU "
            "around it, ms): "
            + "; ".join(
                f"{w['at_s']:.1f}: {w['period_error_ms']:+.2f} ({_ms(w.get('loop_woke_late_ms'))} / "
                f"{_ms(w.get('loop_write_after_deadline_ms'))} / {_ms(w.get('arrived_after_loop_stamp_ms'))}; "
                f"steal {_ms(w.get('steal_ms_around'))})"
                for w in worst
            )
            + f"; steal over the run per CPU: {steal.get('per_cpu_ms')} ms"
        )
    for line in r["daemon_realtime_threads"]:
        lines.append(f"real-time threads of the daemon: {line}")
    estop = r["estop_at_end"]
    lines.append(
        f"mode at the end: {r['mode_at_end']}"
        + (f"; E-STOP latched: {estop['reason']}" if estop.get("latched") else "")
    )
    rec = r["recording"]
    cams = ", ".join(
        f"{name.rsplit('.', 1)[-1]} {c['encoder_drops']} dropped, {c['stream_frames_received']}/"
        f"{c['stream_frames_expected']} frames received"
        for name, c in rec["per_camera"].items()
    )
    check = rec["dataset_check"]
    lines.append(
        f"recording ({rec['codec']}"
        + (f", every encoder slowed by {r['encoder_delay_ms']:g} ms a frame" if r.get("encoder_delay_ms") else "")
        + f"): {rec['frames_written']} frames written; {cams}; episode drop rate "
        f"{100 * (rec['episode_drop_rate'] or 0):.1f} %, {rec['episodes_over_drop_rate']} episode(s) over "
        "recording.max_drop_rate; dataset check: "
        + ("OK" if check["ok"] else f"{len(check['problems'])} problems")
        + f" ({check['episodes']} episode(s), {check['frames']} frames)"
    )
    k = r.get("kill")
    if k is not None:
        first = k.get("first")
        text = f"kill ({r['kill_case']} driving, mode {k['mode_before']}): {k['verdict']}"
        if not k["moving_before"]:
            text = f"kill (the arm was NOT moving: mode {k['mode_before']}): {k['verdict']}"
        if first:
            text += (
                f"; first write {first['after_kill_ms']:g} ms after the kill, "
                f"{'the hold goal' if first['is_hold'] else 'not the last goal'}"
                f"{', at the next tick' if first['at_next_tick'] else ', not at the next tick'}"
            )
        lines.append(text)
        if k["daemon_children_alive_after"]:
            lines.append(f"  still running {k['watched_s']:g} s after: {', '.join(k['daemon_children_alive_after'])}")
    return "\n".join(lines)


# --- the command ----------------------------------------------------------------------------------------


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    b = bench.add_parser(
        "field",
        help="the daemon under the whole field workload (2 cameras, teleop, recording, infers), judged at the servos",
    )
    b.add_argument("--seconds", type=float, default=60.0, help="measured seconds (default 60)")
    b.add_argument(
        "--bundle",
        metavar="DIR",
        help=f"bundle to serve (default: a two-camera 480x640 LeRobot ACT, exported once into the bundle store "
        f"as {FIELD_BUNDLE})",
    )
    b.add_argument("--demo", action="store_true", help="serve the small demo bundle (one 96x128 camera)")
    b.add_argument(
        "--kill",
        nargs="?",
        const="station",
        choices=["station", "policy"],
        help="then SIGKILL the daemon while the station (default) or the policy drives; report what the servos got",
    )
    b.add_argument(
        "--floor-seconds",
        type=float,
        default=10.0,
        metavar="S",
        help="how long the simulator's floor is measured beside the daemon (default 10; 0: not)",
    )
    b.add_argument("--codec", default="auto", help="[recording] codec (default auto)")
    b.add_argument(
        "--encoder-delay-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="make every encoder sleep this long per frame: one too slow to keep up (default 0)",
    )
    b.add_argument(
        "--control-process",
        choices=["own", "thread"],
        help="the daemon's control.process: the loop in the arm's own process or a thread of the daemon "
        "(default: the daemon's default)",
    )
    b.add_argument(
        "--no-pty-boost",
        dest="pty_boost",
        action="store_false",
        help="leave the kernel's pty workers at SCHED_OTHER (by default they run at SCHED_FIFO 1 for the "
        "run, as no worker stands between a USB serial write and the wire)",
    )
    b.add_argument("--keep", metavar="DIR", help="copy the run's files here (config, logs, servo logs, dataset)")
    b.add_argument("--json", action="store_true", help="print the report as JSON")
    b.set_defaults(func=_bench_field)


def _bench_field(args: argparse.Namespace) -> int:
    result = run_field_bench(
        seconds=args.seconds,
        bundle=args.bundle,
        demo=args.demo,
        kill=args.kill,
        floor_s=args.floor_seconds,
        codec=args.codec,
        control_process=args.control_process,
        keep=args.keep,
        encoder_delay_ms=args.encoder_delay_ms,
        pty_boost=args.pty_boost,
    )
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "station":
        sys.exit(_station(sys.argv[2], sys.argv[3]))
    print("usage: python -m runtime.bench.field station ENDPOINT CALIBRATION", file=sys.stderr)
    sys.exit(2)
