"""``python -m tools.bench.remote``: a robot whose policy runs in another daemon, over a bad link, judged
at the servos.

Two ``lerobot-runtime serve`` processes on this machine: the *remote* serves the bundle (CURVE on a
loopback TCP port, its inference pinned to the last CPU, no arm); the *robot* has no bundle
(``[policy] endpoint``), its arm the simulated STS3215 chain in a process of its own at real-time
priority that stamps each write as its bytes arrive (``tools.bench.field.servos``), its loop on the
first CPU, one synthetic camera per image input. Between them :class:`~tools.bench.lossy_link.LossyLink`
adds the round trip, the jitter, the stalls, and cuts the connection.

Runs, each a fresh robot daemon (the remote keeps running): first the baseline, the same robot
serving the bundle itself (no link, inference on the last CPU); then at each round trip (default 20 ms, 40 +-
15 ms, 60 ms) with ``[control.rtc]`` on and off: the goal-write period error at the servos, and the
goals' step change where one chunk takes over from the next (as ``tools.bench.rtc`` measures it, from
the servos' log and the robot's flight recording). Then the faults, on a robot with RTC at the middle
round trip: the link silenced (the hold once the silence bound says the link is lost, the stall action
``stall_timeout_s`` after, nothing written after torque off, the link back: still idle until
``control start``), then the remote SIGKILLed (the hold at once: the connection closed), restarted,
and the arm moving again only after ``control start``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from runtime.bench.machine import cpu_summary
from tools.bench.field.measures import to_user, write_periods
from tools.bench.field.processes import Processes
from tools.bench.field.servos import ServoLog, ServoProcess
from tools.bench.lossy_link import LossyLink

log = logging.getLogger(__name__)

RATE_HZ: Final = 30.0
TIMEOUT_S: Final = 0.3  # the robot's silence bound (policy.timeout_s)
PING_S: Final = 0.05
STALL_TIMEOUT_S: Final = 1.5
PIPES: Final[dict[str, Any]] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
RESTART_MARK: Final = "--- bench remote: the remote restarted ---"


def _q(text: str | Path) -> str:
    return json.dumps(str(text))


def remote_config(workdir: Path, bundle: Path, port: int, keys: dict[str, Path], cpu: int, control_cpu: int) -> Path:
    path = workdir / "remote.toml"
    path.write_text(
        f"""# bench remote: the policy side, no arm
[engine]
bundle = {_q(bundle.resolve())}
engine = "openvino"
cpus = [{cpu}]
control_cpu = {control_cpu}
parity_runs = 4
[server]
endpoints = [{_q(f"tcp://127.0.0.1:{port}")}]
canary_interval_s = 0
noise_seed = 7
[server.curve]
server_secret_key = {_q(keys["server_secret"])}
authorized_keys_dir = {_q(keys["allowed"])}
[arm]
kind = "none"
[daemon]
stats_log_interval_s = 0
"""
    )
    return path


def robot_config(
    workdir: Path,
    name: str,
    link: str,
    keys: dict[str, Path],
    servo_port: str,
    cameras: list[Any],
    *,
    rtc: bool,
    task: str,
    control_cpu: int,
    seconds: float,
    local: Path | None = None,
) -> Path:
    """The robot's config; with ``local``, the same robot serving that bundle itself (the baseline)."""
    from tools.bench.field.config import calibration_path

    streams = "".join(
        f"[[control.streams]]\ninput = {_q(c.input)}\nendpoint = {_q(c.endpoint)}\nmax_age_ms = 500.0\n\n"
        for c in cameras
    )
    path = workdir / f"robot-{name}.toml"
    policy = (
        f'bundle = {_q(local.resolve())}\nengine = "openvino"\nparity_runs = 4'
        if local is not None
        else ""
    )
    remote = (
        f"""[policy]
endpoint = {_q(link)}
server_public_key = {_q(keys["server_public"])}
client_secret_key = {_q(keys["robot_secret"])}
timeout_s = {TIMEOUT_S}
ping_s = {PING_S}
"""
        if local is None
        else ""
    )
    path.write_text(
        f"""# bench remote: the robot side, its policy on the remote through the lossy link (or its own)
{remote}[engine]
{policy}
control_cpu = {control_cpu}
[server]
endpoints = [{_q(f"ipc://{workdir}/robot.sock")}]
[arm]
kind = "feetech"
port = {_q(servo_port)}
calibration = {_q(calibration_path())}
[control]
rate_hz = {RATE_HZ}
task = {_q(task)}
recorder_s = {seconds + 60:g}
[control.rtc]
enabled = {"true" if rtc else "false"}
{streams}[control.safety]
max_step_deg = 60.0
max_step_change_deg = 60.0
gripper_max_step_pct = 100.0
gripper_max_step_change_pct = 100.0
max_first_step_deg = 360.0
stall_timeout_s = {STALL_TIMEOUT_S}
stall_action = "torque_off"
[daemon]
state_dir = {_q(workdir / f"state-{name}")}
arm_wait_s = 30.0
stats_log_interval_s = 0
"""
    )
    return path


def make_keys(workdir: Path) -> dict[str, Path]:
    import zmq.auth

    allowed = workdir / "authorized"
    allowed.mkdir()
    server_pub, server_sec = zmq.auth.create_certificates(workdir, "server")
    robot_pub, robot_sec = zmq.auth.create_certificates(workdir, "robot")
    Path(robot_pub).rename(allowed / "robot.key")
    return {
        "server_public": Path(server_pub),
        "server_secret": Path(server_sec),
        "robot_secret": Path(robot_sec),
        "allowed": allowed,
    }


# --- what the servos' log says ------------------------------------------------------------------------


def goals_deg(servo_log: ServoLog) -> tuple[np.ndarray, np.ndarray]:
    """(times, goals in degrees/percent [n, joints] in the calibration's joint order) of every write
    that reached every servo."""
    from drivers.calibration import load_calibration
    from tools.bench.field.config import calibration_path

    cal = load_calibration(calibration_path())
    names = list(cal.joints)
    ids = sorted(servo_log.goals)
    times, raw = servo_log.writes()
    full = (raw >= 0).all(axis=1)
    times, raw = times[full], raw[full]
    cols = [ids.index(cal.joints[n].id) for n in names]
    goals = np.stack([to_user(cal, n)(raw[:, c]) for n, c in zip(names, cols, strict=True)], axis=1)
    return times, goals


def hold_after(
    times: np.ndarray,
    goals: np.ndarray,
    torque_off: list[float],
    t: float,
    period: float,
    end: float = np.inf,
    tol: float = 0.05,
) -> dict[str, Any]:
    """From ``t`` to ``end`` (the next ``control start``): when the goals stopped changing (the hold),
    how many writes moved before it, when torque went off, and how many goal writes came after that."""
    keep = times < end
    times, goals = times[keep], goals[keep]
    after = np.nonzero(times >= t)[0]
    first_hold = None
    for k in after:
        if k >= 1 and np.abs(goals[k] - goals[k - 1]).max() <= tol:
            first_hold = k
            break
    off = min((x for x in torque_off if x >= t), default=None)
    moving = int(((times >= t) & (times < times[first_hold])).sum()) if first_hold is not None else len(after)
    held = goals[first_hold:] if first_hold is not None else goals[:0]
    held_until = off if off is not None else np.inf
    in_hold = held[times[first_hold:] < held_until] if first_hold is not None else held
    return {
        "hold_after_ms": round((times[first_hold] - t) * 1e3, 1) if first_hold is not None else None,
        "moving_writes_before_hold": moving,
        "hold_writes": len(in_hold),
        "hold_kept_deg": round(float(np.abs(in_hold - in_hold[0]).max()), 3) if len(in_hold) else None,
        "torque_off_after_ms": round((off - t) * 1e3, 1) if off is not None else None,
        "goal_writes_after_torque_off": int((times > off).sum()) if off is not None else None,
        "period_ms": round(period * 1e3, 2),
    }


def torque_offs(servo_log: ServoLog) -> list[float]:
    return sorted({float(t) for table in servo_log.torque.values() for t, v in table if v == 0})


# --- one robot run -------------------------------------------------------------------------------------


class Bench:
    def __init__(self, workdir: Path, bundle: Path, seconds: float) -> None:
        from runtime.bench.machine import cpu_summary
        from runtime.bench.soak import _cameras, _free_tcp_port
        from runtime.bundle.bundle import Bundle
        from runtime.engine.affinity import allowed_cpus
        from runtime.policies.smolvla_sine import TASK

        self.workdir, self.bundle = workdir, bundle
        self.procs = Processes()
        cpus = allowed_cpus()
        self.control_cpu, self.policy_cpu = cpus[0], cpus[-1]
        self.keys = make_keys(workdir)
        self.cameras = _cameras(workdir, str(bundle))
        self.task = TASK if Bundle.open(bundle).manifest.language is not None else ""
        self.remote_port = _free_tcp_port()
        self.remote_log = workdir / "remote.log"
        self.capacity = round((seconds * 8 + 600) * RATE_HZ)
        self.machine = cpu_summary()
        self.remote: subprocess.Popen[bytes] | None = None
        self.link = LossyLink(self.remote_port, seed=7)
        self.servos = self._servos()
        self._start_cameras()

    def _servos(self) -> ServoProcess:
        path = self.workdir / "servos.json"
        return ServoProcess(self.procs.start("servos", ServoProcess.command(path, self.capacity), **PIPES), path)

    def _start_cameras(self) -> None:
        for c in self.cameras:
            self.procs.start(f"camera {c.input}", c.command(30.0), stdout=subprocess.DEVNULL)

    def start_remote(self) -> None:
        config = remote_config(
            self.workdir, self.bundle, self.remote_port, self.keys, self.policy_cpu, self.control_cpu
        )
        with self.remote_log.open("ab") as out:
            self.remote = self.procs.start(
                "remote",
                [sys.executable, "-m", "runtime", "--log-level", "INFO", "serve", "--config", str(config)],
                stdout=out,
                stderr=out,
            )
        self._wait_remote()

    def _wait_remote(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.remote is not None
            if self.remote.poll() is not None:
                raise RuntimeError(f"the remote daemon exited: {self.remote_log.read_text()[-2000:]}")
            if "ready: " in self.remote_log.read_text(errors="replace").split(RESTART_MARK)[-1]:
                return
            time.sleep(0.2)
        raise RuntimeError("the remote daemon was not ready within 120 s")

    def kill_remote(self) -> float:
        assert self.remote is not None
        self.remote.send_signal(signal.SIGKILL)
        at = time.monotonic()
        self.remote.wait(10)
        with self.remote_log.open("a") as out:
            out.write(f"\n{RESTART_MARK}\n")  # what _wait_remote reads from on the next start
        return at

    def robot(
        self, name: str, *, rtc: bool, seconds: float, local: bool = False
    ) -> tuple[subprocess.Popen[bytes], Any, Path]:
        from runtime.bench.soak import _wait_ready
        from runtime.client import PolicyClient

        config = robot_config(
            self.workdir,
            name,
            self.link.endpoint,
            self.keys,
            self.servos.port,
            self.cameras,
            rtc=rtc,
            task=self.task,
            control_cpu=self.control_cpu,
            seconds=seconds,
            local=self.bundle if local else None,
        )
        out = self.workdir / f"robot-{name}.log"
        with out.open("wb") as f:
            proc = self.procs.start(
                f"robot {name}",
                [sys.executable, "-m", "runtime", "--log-level", "INFO", "serve", "--config", str(config)],
                daemon=True,
                stdout=f,
                stderr=f,
            )
        ipc = f"ipc://{self.workdir}/robot.sock"
        _wait_ready(ipc, proc, out)
        client = PolicyClient(ipc, timeout_s=10)
        wait(lambda: _streams_fresh(client), 30, "fresh camera frames at the robot")
        return proc, client, self.workdir / f"state-{name}"

    def stop_robot(self, proc: subprocess.Popen[bytes], client: Any) -> None:
        client.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> ServoLog:
        self.link.close()
        servo_log = self.servos.close()
        self.procs.stop_all()
        return servo_log


def _streams_fresh(client: Any) -> bool:
    from runtime.protocol.errors import ServerError

    try:
        return not client.control("status")["stale_streams"]
    except ServerError:
        return False


def wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if value := predicate():
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench remote: {what} did not happen within {timeout:g} s")
        time.sleep(0.05)


def steady_run(
    bench: Bench, rtt_ms: float, jitter_ms: float, rtc: bool, seconds: float, local: bool = False
) -> dict[str, Any]:
    """One robot daemon driving for ``seconds`` at the round trip (``local``: serving the bundle itself,
    no link): its window, flight recording, status."""
    from tools.bench.field.run import dump

    name = f"local-{'rtc' if rtc else 'fresh'}" if local else f"{rtt_ms:g}ms-{'rtc' if rtc else 'fresh'}"
    bench.link.set(rtt_ms, jitter_ms)
    proc, client, state = bench.robot(name, rtc=rtc, seconds=seconds, local=local)
    try:
        client.control("start", who="bench remote")
        wait(lambda: client.control("status")["counters"].get("chunks", 0) >= 3, 60, "the first chunks")
        t0 = time.monotonic()
        time.sleep(seconds)
        t1 = time.monotonic()
        status = client.control("status")
        flight = dump(client, state)
        client.control("stop", who="bench remote")
    finally:
        bench.stop_robot(proc, client)
    return {
        "name": name,
        "rtt_ms": rtt_ms,
        "jitter_ms": jitter_ms,
        "rtc": rtc,
        "t0": t0,
        "t1": t1,
        "status": status,
        "flight": flight,
    }


def fault_run(bench: Bench, rtt_ms: float, jitter_ms: float) -> dict[str, Any]:
    """Silence the link mid-motion, lift it; start again; SIGKILL the remote mid-motion, restart it."""
    bench.link.set(rtt_ms, jitter_ms)
    proc, client, _ = bench.robot("faults", rtc=True, seconds=60)
    out: dict[str, Any] = {}
    try:
        client.control("start", who="bench remote")
        wait(lambda: client.control("status")["counters"].get("chunks", 0) >= 5, 60, "chunks")
        time.sleep(2.0)
        out["silenced_at"] = time.monotonic()
        bench.link.silence(True)
        wait(lambda: client.control("status")["mode"] == "idle", STALL_TIMEOUT_S + 10, "the stall action")
        time.sleep(0.5)
        bench.link.silence(False)
        wait(lambda: client.control("status")["policy"]["link"] == "up", 10, "the link back")
        time.sleep(1.0)
        s = client.control("status")
        out["after_silence"] = {"mode": s["mode"], "chunks": s["counters"].get("chunks", 0)}
        out["after_silence"]["still_idle_1s_later"] = s["mode"] == "idle"
        out["started_again_at"] = time.monotonic()
        client.control("start", who="bench remote")
        chunks = s["counters"].get("chunks", 0)
        wait(lambda: client.control("status")["counters"].get("chunks", 0) >= chunks + 3, 60, "chunks again")
        time.sleep(2.0)
        out["killed_at"] = bench.kill_remote()
        wait(lambda: client.control("status")["mode"] == "idle", STALL_TIMEOUT_S + 10, "the stall action")
        bench.start_remote()
        wait(lambda: client.control("status")["policy"]["link"] == "up", 30, "the link to the restarted remote")
        time.sleep(1.0)
        s = client.control("status")
        out["after_restart"] = {"mode": s["mode"], "still_idle_1s_later": s["mode"] == "idle"}
        chunks = s["counters"].get("chunks", 0)
        out["started_after_restart_at"] = time.monotonic()
        client.control("start", who="bench remote")
        wait(lambda: client.control("status")["counters"].get("chunks", 0) >= chunks + 3, 60, "chunks after restart")
        out["moving_again_after_start"] = True
        out["status"] = client.control("status")
        client.control("stop", who="bench remote")
    finally:
        bench.stop_robot(proc, client)
    return out


# --- the whole bench -------------------------------------------------------------------------------------


def run_remote_bench(
    bundle: Path,
    *,
    seconds: float = 60.0,
    short_seconds: float = 15.0,
    rtts: Sequence[tuple[float, float]] = (),
) -> dict[str, Any]:
    rtts = list(rtts) or [(40.0, 15.0), (20.0, 0.0), (60.0, 0.0)]
    with tempfile.TemporaryDirectory(prefix="lrt-bench-remote-") as d:
        workdir = Path(d)
        bench = Bench(workdir, bundle, seconds)
        runs: list[dict[str, Any]] = []
        faults: dict[str, Any] = {}
        try:
            bench.start_remote()
            # the baseline: the same robot with the policy in its own daemon (inference on the other CPU)
            runs.append(steady_run(bench, 0.0, 0.0, True, seconds, local=True))
            for i, (rtt, jitter) in enumerate(rtts):
                length = seconds if i == 0 else short_seconds
                for rtc in (True, False):
                    runs.append(steady_run(bench, rtt, jitter, rtc, length))
            faults = fault_run(bench, *rtts[0])
        finally:
            servo_log = bench.close()
        return analyse_runs(bundle, servo_log, runs, faults)


def analyse_runs(
    bundle: Path, servo_log: ServoLog, runs: list[dict[str, Any]], faults: dict[str, Any]
) -> dict[str, Any]:
    """Each run's window of the servos' log and its flight recording, and the faults, as the report."""
    from runtime.control.recorder import load_flight
    from tools.bench.rtc import analyse

    times, goals = goals_deg(servo_log)
    offs = torque_offs(servo_log)
    period = 1.0 / RATE_HZ
    results = []
    for r in runs:
        window = (times >= r["t0"]) & (times <= r["t1"])
        timing = write_periods(times[window], period)
        boundary: dict[str, Any] = {}
        if r["flight"] is not None:
            meta, rows = load_flight(r["flight"])
            boundary = analyse(rows, meta, times, goals, r["t0"], r["t1"])
        policy = r["status"].get("policy", {})
        results.append(
            {
                "name": r["name"],
                "rtt_ms": r["rtt_ms"],
                "jitter_ms": r["jitter_ms"],
                "rtc": r["rtc"],
                "seconds": round(r["t1"] - r["t0"], 1),
                "writes": timing,
                "boundary": boundary,
                "round_trip": policy.get("round_trip"),
                "counters": r["status"].get("counters"),
                "latency_ticks": r["status"].get("inference_latency_ticks"),
            }
        )
    fault_report: dict[str, Any] = {}
    if "silenced_at" in faults:
        visible = faults["silenced_at"] + TIMEOUT_S
        fault_report["silence"] = {
            **hold_after(times, goals, offs, faults["silenced_at"], period, faults.get("started_again_at", np.inf)),
            "loss_visible_after_ms": round(TIMEOUT_S * 1e3),
            "hold_after_visible_ms": None,
            **faults.get("after_silence", {}),
        }
        h = fault_report["silence"]["hold_after_ms"]
        if h is not None:
            fault_report["silence"]["hold_after_visible_ms"] = round(h - (visible - faults["silenced_at"]) * 1e3, 1)
    if "killed_at" in faults:
        fault_report["kill"] = {
            **hold_after(
                times, goals, offs, faults["killed_at"], period, faults.get("started_after_restart_at", np.inf)
            ),
            **faults.get("after_restart", {}),
            "moving_again_after_start": faults.get("moving_again_after_start", False),
        }
    return {
        "bundle": str(bundle),
        "rate_hz": RATE_HZ,
        "timeout_s": TIMEOUT_S,
        "stall_timeout_s": STALL_TIMEOUT_S,
        "machine": cpu_summary(),
        "runs": results,
        "faults": fault_report,
    }


def _g(d: Any, *path: str) -> float:
    for key in path:
        d = d.get(key) if isinstance(d, dict) else None
    return float(d) if isinstance(d, (int, float)) else float("nan")


def format_report(r: dict[str, Any]) -> str:
    lines = [f"bench remote: {r['bundle']} at {r['rate_hz']:g} Hz; {r['machine']}"]
    lines.append(
        "run              writes  period err p99 / max ms  >5ms  missing  rtt p50 / p99 ms  "
        "boundary step max / p50 deg  within-chunk p99  delay ticks p50-max"
    )
    by_rtt: dict[float, dict[bool, dict[str, Any]]] = {}
    for x in r["runs"]:
        w, b, t = x["writes"], x["boundary"], x["round_trip"] or {}
        lines.append(
            f"{x['name']:<16} {w['writes']:>6}  {_g(w, 'period_error_ms', 'p99'):>9.2f} / "
            f"{_g(w, 'period_error_ms', 'max'):<9.2f}  {w['off_5ms']:>4}  {w['missing_periods']:>7}  "
            f"{_g(t, 'p50_ms'):>7.1f} / {_g(t, 'p99_ms'):<7.1f}  "
            f"{_g(b, 'boundary_step_change_deg', 'max'):>10.3f} / {_g(b, 'boundary_step_change_deg', 'p50'):<10.3f}"
            f"  {_g(b, 'within_chunk_step_change_deg', 'p99'):>16.3f}  "
            f"{_g(b, 'delay_ticks', 'p50'):g}-{_g(b, 'delay_ticks', 'max'):g}"
        )
        by_rtt.setdefault(x["rtt_ms"], {})[x["rtc"]] = b
    for rtt, pair in by_rtt.items():
        if True in pair and False in pair:
            on = _g(pair[True], "boundary_step_change_deg", "max")
            off = _g(pair[False], "boundary_step_change_deg", "max")
            lines.append(f"boundary step max with RTC / without at {rtt:g} ms: {on / off:.2f}")
    for name, f in r["faults"].items():
        lines.append(f"{name}: " + ", ".join(f"{k} {v}" for k, v in f.items()))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.bench.remote", description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", help="the bundle the remote serves (default: bench rtc's SmolVLA, built once)")
    p.add_argument("--seconds", type=float, default=60.0, help="the first round trip's runs (default 60)")
    p.add_argument("--short-seconds", type=float, default=15.0, help="the other round trips' runs (default 15)")
    p.add_argument(
        "--rtt",
        action="append",
        default=[],
        metavar="MS[+-JITTER]",
        help="a round trip to run at (repeatable; default 40+-15, 20, 60)",
    )
    p.add_argument("--json", action="store_true")
    return p


def _rtt(text: str) -> tuple[float, float]:
    rtt, _, jitter = text.partition("+-")
    return float(rtt), float(jitter or 0)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from tools.bench.rtc import rtc_bundle

    bundle = Path(args.bundle) if args.bundle else rtc_bundle()
    report = run_remote_bench(
        bundle, seconds=args.seconds, short_seconds=args.short_seconds, rtts=[_rtt(t) for t in args.rtt]
    )
    with contextlib.suppress(Exception):
        for x in report["runs"]:
            x.pop("counters", None)
    print(json.dumps(report, indent=1, default=str) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
