"""``lerobot-runtime bench soak``: the daemon's memory and file descriptors under hours-long load, compressed.

It starts what ``make demo`` runs, as separate processes: the daemon (``serve`` with the built-in demo
bundle and the simulated SO-101, on endpoints in a temporary directory), a synthetic camera, and
``control start`` so the control loop executes chunks; then one client sends ``infer`` back to back
over ZeroMQ on tcp 127.0.0.1 for ``minutes``. Every ``interval_s`` it samples the daemon process's RSS,
open file descriptors and threads (psutil) and the loop's ticks and overruns (``control status``).
Reported: RSS over time, the growth after the first minute (start-up and warm-up are done by then;
what grows after it grows for as long as the daemon runs), replies, errors, ticks, overruns.
Everything it starts is stopped when it ends, however it ends.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FIRST_MINUTE_S = 60.0  # growth is counted from here: loading, warm-up and first allocations are over
TARGET_GROWTH_MB = 5.0
MAX_MINUTES = 24 * 60.0
READY_TIMEOUT_S = 300.0  # the first run exports the demo bundle (under a minute) before serving
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
CLIENT_TIMEOUT_S = 5.0
TASK = "Pick up the red cube and place it in the box."  # what a policy that follows an instruction is told


def _free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Camera:
    """One synthetic camera process filling one image input of the policy."""

    input: str
    endpoint: str
    height: int
    width: int

    def command(self, fps: float | None = None) -> list[str]:
        """``lerobot-runtime camera --synthetic`` publishing this camera (at ``fps``; None: its default)."""
        rate = ["--fps", f"{fps:g}"] if fps is not None else []
        size = ["--height", str(self.height), "--width", str(self.width), *rate]
        return [sys.executable, "-m", "runtime", "--log-level", "WARNING", "camera", "--synthetic",
                "--input", self.input, *size, "--endpoint", self.endpoint]  # fmt: skip


def _cameras(workdir: Path, bundle: str) -> list[Camera]:
    """A camera per image input of ``bundle`` (the demo bundle's one front camera when empty)."""
    if not bundle:
        return [Camera("observation.images.front", f"ipc://{workdir}/camera-0.sock", 96, 128)]
    from runtime.bundle.bundle import Bundle

    manifest = Bundle.open(bundle).manifest
    images = [s for s in manifest.observation_inputs if s.dtype == "uint8" and len(s.shape) == 3]
    return [Camera(s.name, f"ipc://{workdir}/camera-{i}.sock", s.shape[0], s.shape[1]) for i, s in enumerate(images)]


def _config(workdir: Path, port: int, bundle: str, cameras: list[Camera]) -> Path:
    path = workdir / "config.toml"
    engine = f'[engine]\nbundle = "{Path(bundle).resolve()}"\n' if bundle else ""
    streams = "".join(
        f'[[control.streams]]\ninput = "{c.input}"\nendpoint = "{c.endpoint}"\nmax_age_ms = 200.0\n' for c in cameras
    )
    path.write_text(
        "# bench soak: the daemon (built-in defaults but for the bundle) on endpoints of its own\n"
        f"{engine}"
        "[server]\n"
        f'endpoints = ["ipc://{workdir}/policy.sock", "tcp://127.0.0.1:{port}"]\n'
        f"{streams}"
        "[daemon]\n"
        f'state_dir = "{workdir}/state"\n'
    )
    return path


def _stop(proc: subprocess.Popen[Any] | None, sig: int = signal.SIGTERM) -> int | None:
    """Stop ``proc`` with ``sig``, then SIGKILL after STOP_TIMEOUT_S; its exit status."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("bench soak: PID %d did not stop within %g s; killing it", proc.pid, STOP_TIMEOUT_S)
            proc.kill()
            proc.wait()
    return proc.returncode


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _wait_ready(endpoint: str, daemon: subprocess.Popen[Any], daemon_log: Path) -> None:
    from runtime.client import PolicyClient, RequestTimeoutError

    deadline = time.monotonic() + READY_TIMEOUT_S
    with PolicyClient(endpoint, timeout_s=1.0) as client:
        while True:
            if daemon.poll() is not None:
                raise RuntimeError(f"the daemon exited with status {daemon.returncode}: {_tail(daemon_log)}")
            try:
                client.hello()
                return
            except RequestTimeoutError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the daemon did not answer hello within {READY_TIMEOUT_S:g} s: {_tail(daemon_log)}"
                    ) from None


def _start_motion(endpoint: str) -> None:
    """``control start``, retried while the camera's first frames are on their way."""
    from runtime.client import PolicyClient
    from runtime.protocol.errors import ControlRefusedError, NoControlError

    deadline = time.monotonic() + START_TIMEOUT_S
    with PolicyClient(endpoint, timeout_s=30.0) as client:
        task = TASK if client.hello().takes_task else ""  # a language policy's loop follows an instruction
        while True:
            try:
                client.control("start", who="bench soak", task=task)
                return
            except (ControlRefusedError, NoControlError) as e:  # refused, or the arm process still starting
                if time.monotonic() > deadline:
                    raise RuntimeError(f"control start refused for {START_TIMEOUT_S:g} s: {e.message}") from None
                time.sleep(0.2)


def _sample(proc: Any, status: dict[str, Any], t_s: float) -> dict[str, Any]:
    counters = status.get("counters", {})
    return {
        "t_s": round(t_s, 1),
        "rss_mb": round(proc.memory_info().rss / 2**20, 2),
        "fds": proc.num_fds(),
        "threads": proc.num_threads(),
        "ticks": counters.get("ticks", 0),
        "overruns": counters.get("overruns", 0),
        "mode": status.get("mode", "?"),
    }


def _at(samples: list[dict[str, Any]], t_s: float) -> dict[str, Any]:
    """The first sample taken at or after ``t_s`` (the last one if none was)."""
    return next((s for s in samples if s["t_s"] >= t_s), samples[-1])


def run_soak_bench(
    *, minutes: float, interval_s: float = 5.0, malloc_arena_max: int = 0, bundle: str = ""
) -> dict[str, Any]:
    """Run the daemon under back-to-back infers for ``minutes`` and sample it every ``interval_s``.

    ``bundle``: serve this bundle instead of the demo one, with a synthetic camera per image input;
    the serving canary runs at its default period either way, and the result says what it saw.
    ``malloc_arena_max`` > 0 starts the daemon with ``MALLOC_ARENA_MAX`` set (glibc's arena count).
    """
    import psutil

    from runtime.bench.machine import cpu_line
    from runtime.client import PolicyClient

    if not 0 < minutes <= MAX_MINUTES:
        raise ValueError(f"bench soak --minutes: expected 0 < minutes <= {MAX_MINUTES:g}, got {minutes:g}")
    if not 0 < interval_s <= 60:
        raise ValueError(f"bench soak --interval: expected 0 < seconds <= 60, got {interval_s:g}")
    duration_s = minutes * 60.0
    with tempfile.TemporaryDirectory(prefix="lrt-bench-soak-") as tmp:
        workdir = Path(tmp)
        port = _free_tcp_port()
        cameras = _cameras(workdir, bundle)
        config = _config(workdir, port, bundle, cameras)
        ipc, tcp = f"ipc://{workdir}/policy.sock", f"tcp://127.0.0.1:{port}"
        env = dict(os.environ)
        if malloc_arena_max > 0:
            env["MALLOC_ARENA_MAX"] = str(malloc_arena_max)
        daemon_log = workdir / "daemon.log"
        runtime_cmd = [sys.executable, "-m", "runtime", "--log-level"]
        daemon = client = None
        camera_procs: list[subprocess.Popen[Any]] = []
        try:
            with daemon_log.open("w") as out:
                daemon = subprocess.Popen(
                    [*runtime_cmd, "INFO", "serve", "--config", str(config)], stdout=out, stderr=out, env=env
                )
            for c in cameras:
                camera_procs.append(subprocess.Popen(c.command(), stdout=subprocess.DEVNULL))
            _wait_ready(ipc, daemon, daemon_log)
            _start_motion(ipc)
            # refusals of control start while the first camera frames were on their way are the
            # start-up's, not the load's: the load's errors are counted from here
            with PolicyClient(ipc, timeout_s=CLIENT_TIMEOUT_S) as asking:
                errors_before = Counter(asking.stats().errors)
            client = subprocess.Popen(
                [sys.executable, "-m", "runtime.bench.soak", "client", tcp, str(duration_s)],
                stdout=subprocess.PIPE,
                text=True,
            )
            proc = psutil.Process(daemon.pid)
            samples: list[dict[str, Any]] = []
            started = time.monotonic()
            next_at = started
            with PolicyClient(ipc, timeout_s=CLIENT_TIMEOUT_S) as control:
                while True:
                    now = time.monotonic()
                    if now >= next_at:
                        samples.append(_sample(proc, control.control("status"), now - started))
                        next_at += interval_s
                        if (len(samples) - 1) % max(1, round(60 / interval_s)) == 0 and len(samples) > 1:
                            s = samples[-1]
                            log.info(
                                "bench soak: %.0f s, RSS %.1f MB, %d fds, %d ticks",
                                s["t_s"],
                                s["rss_mb"],
                                s["fds"],
                                s["ticks"],
                            )
                    if client.poll() is not None or daemon.poll() is not None:
                        break
                    time.sleep(max(0.0, min(next_at, started + duration_s + 1.0) - time.monotonic()))
                samples.append(_sample(proc, control.control("status"), time.monotonic() - started))
                stats = control.stats()
            if daemon.poll() is not None:
                raise RuntimeError(f"the daemon exited with status {daemon.returncode}: {_tail(daemon_log)}")
            out_text, _ = client.communicate(timeout=CLIENT_TIMEOUT_S * 2)
            if client.returncode != 0 or not out_text.strip():
                raise RuntimeError(f"the load client failed with status {client.returncode}")
            load: dict[str, Any] = json.loads(out_text.strip().splitlines()[-1])
        finally:
            _stop(client, signal.SIGKILL)
            for camera in camera_procs:
                _stop(camera)
            daemon_status = _stop(daemon)
    first, last = _at(samples, FIRST_MINUTE_S), samples[-1]
    growth = round(last["rss_mb"] - first["rss_mb"], 2)
    return {
        "minutes": minutes,
        "interval_s": interval_s,
        "cpu": cpu_line(),
        "malloc_arena_max": malloc_arena_max or None,
        "load": "one client process sends infer back to back over tcp 127.0.0.1; the control loop runs",
        "replies": load["replies"],
        "errors": load["errors"],
        "replies_per_s": round(load["replies"] / load["seconds"], 1) if load["seconds"] else 0.0,
        "server_replies_ok": stats.replies_ok,
        "server_errors": dict(Counter(stats.errors) - errors_before),
        "bundle": bundle or "demo",
        "canary": dict(stats.verification),
        "ticks": last["ticks"],
        "overruns": last["overruns"],
        "mode_at_end": last["mode"],
        "rss_mb": {"start": samples[0]["rss_mb"], "first_minute": first["rss_mb"], "end": last["rss_mb"]},
        "rss_growth_after_first_minute_mb": growth,
        "fds": {"first_minute": first["fds"], "end": last["fds"], "max": max(s["fds"] for s in samples)},
        "target": {f"growth<{TARGET_GROWTH_MB:g}MB": growth < TARGET_GROWTH_MB},
        "daemon_exit_status": daemon_status,
        "samples": samples,
    }


def format_table(result: dict[str, Any]) -> str:
    arena = f", MALLOC_ARENA_MAX={result['malloc_arena_max']}" if result["malloc_arena_max"] else ""
    lines = [
        f"bench soak: {result['minutes']:g} min, bundle {result['bundle']}, the control loop running{arena}",
        f"CPU: {result['cpu']}",
        f"load: {result['load']}",
        "",
        f"{'t':>7} {'RSS MB':>8} {'fds':>5} {'threads':>7} {'ticks':>8} {'overruns':>8}",
    ]
    per_line = max(1, round(60 / result["interval_s"]))
    samples = result["samples"]
    shown = [s for i, s in enumerate(samples) if i % per_line == 0 or i == len(samples) - 1]
    for s in shown:
        lines.append(
            f"{s['t_s']:>6.0f}s {s['rss_mb']:>8.1f} {s['fds']:>5} {s['threads']:>7} {s['ticks']:>8} {s['overruns']:>8}"
        )
    rss, fds = result["rss_mb"], result["fds"]
    errors = sum(result["errors"].values())
    lines += [
        "",
        f"RSS: {rss['start']:.1f} MB at start, {rss['first_minute']:.1f} MB after the first minute, "
        f"{rss['end']:.1f} MB at the end: {result['rss_growth_after_first_minute_mb']:+.1f} MB after the first "
        f"minute (target < {TARGET_GROWTH_MB:g} MB)",
        f"fds: {fds['first_minute']} after the first minute, {fds['end']} at the end (max {fds['max']})",
        f"replies {result['replies']} ({result['replies_per_s']:g}/s), errors {errors}"
        + (f" {result['errors']}" if errors else "")
        + f"; ticks {result['ticks']}, overruns {result['overruns']}, control mode at the end {result['mode_at_end']}",
    ]
    canary = result.get("canary") or {}
    if canary:
        worst = canary.get("worst_max_abs_err")
        text = f"canary: {canary.get('checks', 0)} checks every {canary.get('interval_s', 0):g} s, "
        text += f"FAILED: {canary.get('failure')}" if canary.get("failed") else "no failure"
        if worst is not None:
            text += f", worst error {worst:.3g} {canary.get('units')} (tolerance {canary.get('tolerance'):.3g})"
        lines.append(text)
    return "\n".join(lines)


def _client(endpoint: str, seconds: float) -> int:
    """The load: infers back to back until ``seconds`` have passed; prints one JSON line of counts."""
    import numpy as np

    from runtime.client import PolicyClient, RequestTimeoutError
    from runtime.protocol.errors import ServerError

    errors: Counter[str] = Counter()
    replies = 0
    with PolicyClient(endpoint, timeout_s=CLIENT_TIMEOUT_S) as client:
        info = client.hello()
        rng = np.random.default_rng(0)
        obs: dict[str, np.ndarray] = {}
        for spec in info.inputs:
            dtype = np.dtype(spec.dtype)
            if dtype.kind in "ui":
                obs[spec.name] = rng.integers(0, 256, size=spec.shape).astype(dtype)
            else:
                obs[spec.name] = rng.standard_normal(spec.shape).astype(dtype)
        task = TASK if info.takes_task else None
        started = time.monotonic()
        end = started + seconds
        while time.monotonic() < end:
            try:
                client.infer(obs, task=task)
                replies += 1
            except ServerError as e:
                errors[e.code] += 1
            except RequestTimeoutError:
                errors["timeout"] += 1
        elapsed = time.monotonic() - started
    print(json.dumps({"replies": replies, "errors": dict(errors), "seconds": round(elapsed, 3)}))
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["client"] and len(sys.argv) == 4:
    sys.exit(_client(sys.argv[2], float(sys.argv[3])))
