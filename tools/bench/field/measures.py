"""What the servos' logs say in ``bench field``: pure functions over the write stamps the simulated servos
kept (:class:`~tools.bench.field.servos.ServoLog`) and the flight recording the daemon dumped.

- :func:`period_errors_ms` and :func:`write_periods`: a writer's timing as the servos saw it (each
  period's error, the periods more than 5 ms off, the periods with no write);
- :func:`worst_writes`: the writes furthest off, with what the loop and the hypervisor did around them;
- :func:`teleop_latency`: a leader's move to the first goal write that carries it;
- :func:`after_kill`: what reached the servos after the daemon was killed, write by write;
- :func:`raw_goals` and :func:`to_user`: a pose in the servos' raw ticks, raw ticks in degrees.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from drivers.calibration import Calibration
from runtime.bench.stats import pcts
from tools.bench.field.servos import ServoLog

OFF_MS = 5.0  # a period further off than this is counted (as the daemon's write_period_error_ms does)


def period_errors_ms(stamps: np.ndarray, period_s: float) -> np.ndarray:
    """Each period between consecutive writes minus ``period_s`` (ms); NaN where a write is missing
    (a gap of 1.5 periods or more: that is a missing write, counted apart, as the daemon breaks its chain)."""
    gaps = np.diff(np.asarray(stamps, dtype=np.float64))
    errors = (gaps - period_s) * 1e3
    errors[gaps >= 1.5 * period_s] = np.nan
    return errors


def write_periods(stamps: np.ndarray, period_s: float) -> dict[str, Any]:
    """What the servos saw of a writer's timing: |period error| p50/p99/max over consecutive writes,
    the periods more than 5 ms off, and the periods that had no write at all."""
    stamps = np.asarray(stamps, dtype=np.float64)
    gaps = np.diff(stamps)
    errors = period_errors_ms(stamps, period_s)
    long = gaps[gaps >= 1.5 * period_s]
    finite = errors[np.isfinite(errors)]
    return {
        "writes": len(stamps),
        "period_error_ms": pcts(errors, absolute=True),
        "periods": len(finite),
        "off_5ms": int((np.abs(finite) > OFF_MS).sum()),
        "missing_periods": int(np.maximum(0, np.round(long / period_s) - 1).sum()),
        "max_gap_ms": round(float(gaps.max()) * 1e3, 3) if len(gaps) else None,
    }


def teleop_latency(
    write_times: np.ndarray,
    write_values: np.ndarray,
    moves: Sequence[tuple[float, float]],
    sends: Sequence[tuple[float, float]],
    tolerance: float,
) -> dict[str, Any]:
    """Leader move -> follower goal write, for one joint.

    ``moves``: (time, value) the leader was put at; ``sends``: (time, value) of each target the
    station sent (stamped when it read the leader, just before sending); ``write_times`` /
    ``write_values``: the goals the servo received, in the same units. Per move: the first target
    sent after it that carries the new value, then the first goal write after that which does.
    """
    send_t = np.asarray([t for t, _ in sends], dtype=np.float64)
    send_v = np.asarray([v for _, v in sends], dtype=np.float64)
    send_to_write: list[float] = []
    move_to_write: list[float] = []
    missed = 0
    for t_move, value in moves:
        sent = np.nonzero((send_t >= t_move) & (np.abs(send_v - value) <= tolerance))[0]
        if not len(sent):
            missed += 1
            continue
        t_send = send_t[sent[0]]
        written = np.nonzero((write_times >= t_send) & (np.abs(write_values - value) <= tolerance))[0]
        if not len(written):
            missed += 1
            continue
        t_write = write_times[written[0]]
        send_to_write.append((t_write - t_send) * 1e3)
        move_to_write.append((t_write - t_move) * 1e3)
    return {
        "moves": len(moves),
        "measured": len(send_to_write),
        "missed": missed,
        "send_to_write_ms": pcts(send_to_write),
        "move_to_write_ms": pcts(move_to_write),
    }


WriteKind = Literal["hold", "rest", "still", "other"]


def after_kill(
    log: ServoLog, t_kill: float, period_s: float, rest_raw: Mapping[int, int], *, tolerance_ticks: int = 1
) -> dict[str, Any]:
    """What reached the servos after ``t_kill``: the first write (the hold goal, i.e. the last goal
    before the kill, at the next tick?), then each write classed as ``hold`` (that goal again),
    ``rest`` (a step toward ``rest_raw``, servo id -> raw ticks), ``still`` (where the write before it
    was, within a tick or two: a hold of the present pose) or ``other``, in runs; and torque writes."""
    ids = sorted(log.goals)
    times, goals = log.writes()
    before = np.nonzero(times < t_kill)[0]
    after = np.nonzero(times >= t_kill)[0]
    torque = sorted((float(t), i, int(v)) for i in sorted(log.torque) for t, v in log.torque[i] if t >= t_kill)
    torque_off = [t for t, _, v in torque if v == 0]
    result: dict[str, Any] = {
        "writes_after": len(after),
        "torque_writes_after": len(torque),
        "torque_off_after_ms": round((min(torque_off) - t_kill) * 1e3, 1) if torque_off else None,
        "last_write_before_ms": round((times[before[-1]] - t_kill) * 1e3, 1) if len(before) else None,
    }
    if not len(after):
        result["verdict"] = "no write after the kill" + (", torque off" if torque_off else "")
        result["first"] = None
        result["runs"] = []
        return result
    hold = goals[before[-1]] if len(before) else None
    first = after[0]
    first_gap = times[first] - times[before[-1]] if len(before) else None
    diff = int(np.abs(goals[first] - hold).max()) if hold is not None else None
    result["first"] = {
        "after_kill_ms": round((times[first] - t_kill) * 1e3, 1),
        "after_last_write_ms": round(first_gap * 1e3, 1) if first_gap is not None else None,
        "at_next_tick": bool(first_gap is not None and abs(first_gap - period_s) < 0.5 * period_s),
        "is_hold": bool(diff is not None and diff <= tolerance_ticks),
        "max_diff_from_last_goal_ticks": diff,
    }
    rest_cols = [(ids.index(i), raw) for i, raw in rest_raw.items() if i in ids]

    def distance(row: np.ndarray) -> float:
        return float(sum(abs(int(row[c]) - raw) for c, raw in rest_cols))

    kinds: list[WriteKind] = []
    previous = hold
    for k in after:
        row = goals[k]
        if hold is not None and int(np.abs(row - hold).max()) <= tolerance_ticks:
            kinds.append("hold")
        elif rest_cols and previous is not None and distance(row) < distance(previous):
            kinds.append("rest")
        elif previous is not None and int(np.abs(row - previous).max()) <= 2 * tolerance_ticks:
            kinds.append("still")
        else:
            kinds.append("other")
        previous = row
    runs: list[dict[str, Any]] = []
    for kind, k in zip(kinds, after, strict=True):
        at = round((times[k] - t_kill) * 1e3, 1)
        if runs and runs[-1]["kind"] == kind:
            runs[-1]["writes"] += 1
            runs[-1]["to_ms"] = at
        else:
            runs.append({"kind": kind, "writes": 1, "from_ms": at, "to_ms": at})
    result["runs"] = runs
    result["rest_reached"] = bool(rest_cols) and distance(goals[after[-1]]) <= tolerance_ticks * len(rest_cols)
    words = [f"{r['kind']} x{r['writes']}" for r in runs]
    if torque_off:
        words.append(f"torque off at {result['torque_off_after_ms']:g} ms")
    result["verdict"] = ", then ".join(words)
    return result


def raw_goals(calibration: Calibration, pose: Mapping[str, float]) -> dict[int, int]:
    """Servo id -> raw ticks of ``pose`` (joint name -> degrees or percent)."""
    out: dict[int, int] = {}
    for name, value in pose.items():
        joint = calibration.joints[name]
        out[joint.id], _ = joint.to_raw(value)
    return out


def to_user(calibration: Calibration, joint: str) -> Callable[[np.ndarray], np.ndarray]:
    cal = calibration.joints[joint]
    return lambda raw: np.asarray([cal.to_user(int(r)) for r in raw], dtype=np.float64)


def worst_writes(
    times: np.ndarray,
    period_s: float,
    window: tuple[float, float],
    flight: Mapping[str, np.ndarray] | None,
    steal: Callable[[float, float], float | None] | None,
    n: int = 5,
) -> list[dict[str, Any]]:
    """The ``n`` writes whose period at the servos was furthest off, worst first: when (seconds into
    the window), by how much, how late the loop woke and when its write left at that tick (from the
    flight recording: ms after the deadline), how long the bytes took from there to the simulator, and
    ``steal(t0, t1)`` around it (the hypervisor's)."""
    t0, t1 = window
    inside = times[(times >= t0) & (times <= t1)]
    errors = period_errors_ms(inside, period_s)
    finite = np.nonzero(np.isfinite(errors))[0]
    # worst first; equal to the microsecond: the earlier first
    order = finite[np.argsort(-np.round(np.abs(errors[finite]), 3), kind="stable")][:n]
    stamps = None
    if flight is not None and "write_ms" in flight:
        wrote = np.isfinite(flight["write_ms"])
        stamps = flight["t"][wrote] + (flight["write_ms"][wrote] - flight["late_ms"][wrote]) / 1e3
        late, write = flight["late_ms"][wrote], flight["write_ms"][wrote]
    rows: list[dict[str, Any]] = []
    for i in order:
        at = float(inside[i + 1])
        row: dict[str, Any] = {"at_s": round(at - t0, 3), "period_error_ms": round(float(errors[i]), 3)}
        if stamps is not None and len(stamps):
            j = int(np.argmin(np.abs(stamps - at)))
            if abs(stamps[j] - at) < period_s / 2:
                row["loop_woke_late_ms"] = round(float(late[j]), 3)
                row["loop_write_after_deadline_ms"] = round(float(write[j]), 3)
                # the kernel's part: from the write call's return to the bytes at the simulator (a
                # pty hands them over on a kernel worker thread, which real USB serial does not)
                row["arrived_after_loop_stamp_ms"] = round((at - float(stamps[j])) * 1e3, 3)
        if steal is not None:
            row["steal_ms_around"] = steal(at - 2 * period_s, at + period_s)
        rows.append(row)
    return rows
