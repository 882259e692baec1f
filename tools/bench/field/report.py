"""The report of ``bench field``: what one run saw (:mod:`tools.bench.field.run`) turned into figures.

:func:`build_report` puts together, as one JSON-able map: the run's settings and the machine, the
engine and the cameras, how everything was scheduled, the load; the goal-write periods at the servos
beside the daemon's own figures and how the two agree, the worst writes with the steal around them,
the simulator's floor, teleop latency, the recording and its dataset check, and what reached the
servos after a kill. :mod:`tools.bench.field.table` prints it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.bench.machine import cpu_summary
from runtime.bench.stats import pcts
from tools.bench.field.config import CAMERA_FPS, JOINT, RATE_HZ, REST_POSE, calibration_path
from tools.bench.field.measures import (
    after_kill,
    period_errors_ms,
    raw_goals,
    teleop_latency,
    to_user,
    worst_writes,
    write_periods,
)
from tools.bench.field.servos import ServoLog

if TYPE_CHECKING:
    from tools.bench.field.run import Ends, Episode, Kill, Window, Workload


def build_report(work: Workload, window: Window, episode: Episode, kill: Kill | None, ends: Ends) -> dict[str, Any]:
    """The report of one run (see :mod:`tools.bench.field`); the keys in the order they are printed."""
    period = 1.0 / RATE_HZ
    s, cal = work.settings, _calibration()
    r: dict[str, Any] = {
        "seconds": s.seconds,
        "rate_hz": RATE_HZ,
        "kill_case": s.kill,
        "encoder_delay_ms": s.encoder_delay_ms,
    }
    if s.kill is None:  # the daemon was stopped as systemd stops it
        r["daemon_exit_status"] = ends.daemon_exit_status
        r["daemon_children_left_behind"] = ends.children_left_behind
    r.update(cpu_summary())
    info, status0, status1 = window.info, window.status0, window.status1
    r.update(
        {
            "bundle": str(work.bundle),
            "policy": info.policy_name,
            "engine": {k: info.engine.get(k) for k in ("engine", "device", "precision", "threads", "cpus")},
            "cameras": [
                {"input": c.input, "height": c.height, "width": c.width, "fps": CAMERA_FPS} for c in work.cameras
            ],
            "scheduling": {
                "control_loop": status1.get("scheduling"),
                "servo_simulator": ends.servo_log.scheduling,
                "floor_writer": ends.floor_writer["scheduling"] if ends.floor_writer else None,
            },
            "control_cpu": work.control_cpu,
            # other work on the machine (1-minute load average), at the start and the end of the window
            "loadavg": list(window.loadavg),
            "daemon_scheduling": window.daemon_scheduling,
            "daemon_realtime_threads": _realtime_threads(window.daemon_scheduling),
            "mode_at_end": status1["mode"],
            "estop_at_end": status1["estop"],
            "load": _load(ends.load, window.stats0, window.stats1, window.t_end - window.t_start),
        }
    )
    flight = _flight_rows(episode.flight) if episode.flight is not None else None
    span = (window.t_start, window.t_end)
    r["servos"], r["daemon"], r["agreement"] = _writes(ends.servo_log, status0, status1, flight, span, period)
    servo_times, _ = ends.servo_log.writes()
    control_cpu, steal = work.control_cpu, window.steal
    r["worst_writes"] = worst_writes(servo_times, period, span, flight, lambda a, b: steal.ms(control_cpu, a, b))
    r["steal"] = steal.report(sorted(set(work.cpus)), *span)
    r["floor"] = _floor(ends.floor_log, ends.floor_writer, period)
    r["teleop"] = _teleop(ends.servo_log, ends.done, window.tracking, cal, span, status0, status1, period)
    r["recording"] = _recording(
        status0,
        status1,
        episode,
        _dataset_check(work.workdir / "dataset"),
        work.cameras,
        window.t_end - window.t_start,
    )
    if kill is not None:
        r["kill"] = {**kill.seen, **after_kill(ends.servo_log, kill.t_kill, period, raw_goals(cal, REST_POSE))}
    r["daemon_log_tail"] = ends.daemon_tail if r.get("daemon_exit_status") not in (0, None) or s.kill else ""
    return r


def recorder_of(status: dict[str, Any]) -> dict[str, Any]:
    """The recorder's part of a ``control status`` reply (empty without one)."""
    recording = status.get("recording") or {}
    recorder: dict[str, Any] = recording.get("recorder") or {}
    return recorder


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
    done: dict[str, Any],
    tracking: dict[str, Any],
    cal: Any,
    window: tuple[float, float],
    status0: dict[str, Any],
    status1: dict[str, Any],
    period: float,
) -> dict[str, Any]:
    t0, t1 = window
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
    episode: Episode,
    dataset: dict[str, Any],
    cameras: list[Any],
    window_s: float,
) -> dict[str, Any]:
    written, stopped = episode.written, episode.stop
    recorder = recorder_of(written)
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
