"""What the servos see in ``bench field``: the simulated arm in a process of its own, and what its log says.

Hardware answers whatever the host's threads are doing, and stamps nothing; a simulator that judges
the host's timing must come close to that. So the simulated STS3215 chain runs in a process of its
own at real-time priority (``SCHED_FIFO``; hardware is never descheduled), with a short interpreter
switch interval, and stamps every write with the time its bytes arrived (right after ``os.read``
returned them), not when the simulator got round to parsing it: every goal and torque write lands in
the servo's log with that stamp, on ``CLOCK_MONOTONIC``, which every process on the machine shares.

- ``python -m runtime.bench.field_servos serve LOG CAPACITY`` prints one JSON line (the pty port and
  the scheduling it got), serves until its stdin closes, then writes every servo's goal and torque log
  to ``LOG`` (JSON).
- ``python -m runtime.bench.field_servos floor PORT SECONDS CPU`` is the simulator's own floor: a
  minimal writer pinned to ``CPU`` at real-time priority that does nothing but one sync write of six
  goals per period at 30 Hz on absolute deadlines, through the real Feetech driver; it prints its own
  completion stamps (JSON). What the simulator then sees beyond this writer's own error is its noise.

The rest are pure functions over the logs: write periods (errors, missing periods), teleop latency
(the first goal write that carries a target) and what was written after a kill.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from drivers.calibration import Calibration, load_calibration
from drivers.sim.simulator import ServoSimulator
from runtime.bench.stats import pcts
from runtime.paths import data_root

CALIBRATION = ("configs", "calibration", "so101_sim.toml")
RATE_HZ = 30.0
#: below the control loop's default 50: a woken SCHED_FIFO task of lower priority than the one running
#: on its CPU is placed on another CPU instead of preempting it, so the simulator takes its time from
#: whatever runs at normal priority (inference), not from the loop it judges
SIM_RT_PRIORITY = 40
FLOOR_RT_PRIORITY = 50
SWITCH_INTERVAL_S = 2e-4
OFF_MS = 5.0  # a period further off than this is counted (as the daemon's write_period_error_ms does)
START_TIMEOUT_S = 30.0


def calibration_path() -> Path:
    return data_root().joinpath(*CALIBRATION)


def request_fifo(priority: int) -> str:
    """SCHED_FIFO at ``priority`` for the calling thread (threads it starts inherit it), in words."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (OSError, AttributeError) as e:
        return f"SCHED_OTHER (SCHED_FIFO {priority} refused: {e}; run as root or grant RLIMIT_RTPRIO)"
    return f"SCHED_FIFO {priority}"


class ArrivalStampedSimulator(ServoSimulator):
    """A :class:`ServoSimulator` whose servos' clock, while a read's bytes are handled, is the moment
    those bytes arrived: every goal and torque write is logged at its arrival."""

    def __init__(self, calibration: Calibration) -> None:
        self._arrived: float | None = None
        joints = calibration.joints.values()
        # seeded as drivers.sim.arm.simulator_for seeds it: homing offsets stored, resting mid-range
        super().__init__(
            "feetech",
            [j.id for j in joints],
            positions={j.id: round(j.mid) for j in joints},
            homing_offsets={j.id: j.homing_offset for j in joints},
            clock=self._now,
        )

    def _now(self) -> float:
        return self._arrived if self._arrived is not None else time.monotonic()

    def _drain(self, buf: bytearray) -> None:
        # called right after os.read returned these bytes
        self._arrived = time.monotonic()
        try:
            super()._drain(buf)
        finally:
            self._arrived = None


def _serve(log_path: str, capacity: int) -> int:
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    scheduling = request_fifo(SIM_RT_PRIORITY)  # before the serving thread starts: it inherits this
    sim = ArrivalStampedSimulator(load_calibration(calibration_path()))
    for servo in sim.servos.values():
        servo.goal_log = deque(maxlen=capacity)
        servo.torque_log = deque(maxlen=capacity)
    sim.start()
    print(json.dumps({"port": sim.port, "scheduling": scheduling}), flush=True)
    sys.stdin.read()  # until the bench closes our stdin (or dies)
    sim.stop()
    log = {
        "scheduling": scheduling,
        "goals": {str(i): list(s.goal_log) for i, s in sim.servos.items()},
        "torque": {str(i): list(s.torque_log) for i, s in sim.servos.items()},
        "received": {str(k): v for k, v in sim.received.items()},
    }
    tmp = Path(log_path).with_suffix(".tmp")
    tmp.write_text(json.dumps(log))
    tmp.replace(log_path)
    return 0


def _floor(port: str, seconds: float, cpu: int) -> int:
    from drivers.errors import BusError
    from drivers.feetech.bus import FeetechBus

    os.sched_setaffinity(0, {cpu})
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    scheduling = request_fifo(FLOOR_RT_PRIORITY)
    bus = FeetechBus(port, load_calibration(calibration_path()))
    for attempt in range(3):  # a reply late under load is matched to the next request: connect again
        try:
            bus.connect()
            break
        except BusError:
            if attempt == 2:
                raise
            time.sleep(0.2)
    stamps: list[float] = []
    try:
        goals = bus.read_positions()
        period = 1.0 / RATE_HZ
        start = time.monotonic() + period
        for k in range(round(seconds * RATE_HZ)):
            delay = start + k * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            bus.write_goals(goals)
            stamps.append(time.monotonic())
    finally:
        bus.disconnect()
    print(json.dumps({"scheduling": scheduling, "cpu": cpu, "stamps": stamps}), flush=True)
    return 0


# --- the bench's side --------------------------------------------------------------------------------


class LineReader:
    """Lines from a child's unbuffered pipe, each waited for with a timeout (a silent child never hangs us)."""

    def __init__(self, stream: Any) -> None:
        self.fd = stream.fileno()
        self._buf = b""
        self.closed = False

    def line(self, timeout_s: float) -> str | None:
        """The next line (without its newline); None at the timeout or at end of file."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return None
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.closed = True
                if self._buf:  # the last line had no newline
                    text, self._buf = self._buf, b""
                    return text.decode(errors="replace")
                return None
            self._buf += chunk
        text, _, self._buf = self._buf.partition(b"\n")
        return text.decode(errors="replace")


@dataclass(frozen=True)
class ServoLog:
    """Every goal write each servo heard, as (arrival time, raw goal), and every torque write."""

    scheduling: str
    goals: Mapping[int, np.ndarray]  # servo id -> [n, 2]: time, raw ticks
    torque: Mapping[int, np.ndarray]

    @classmethod
    def load(cls, path: Path) -> ServoLog:
        data = json.loads(path.read_text())

        def arrays(table: Mapping[str, list[list[float]]]) -> dict[int, np.ndarray]:
            return {int(k): np.asarray(v, dtype=np.float64).reshape(-1, 2) for k, v in table.items()}

        return cls(str(data["scheduling"]), arrays(data["goals"]), arrays(data["torque"]))

    def writes(self) -> tuple[np.ndarray, np.ndarray]:
        """(times, raw goals [n, servos] in id order) of the goal writes, one row per write; a servo a
        write did not reach is -1 in that row."""
        ids = sorted(self.goals)
        times = np.unique(np.concatenate([self.goals[i][:, 0] for i in ids])) if ids else np.zeros(0)
        goals = np.full((len(times), len(ids)), -1, dtype=np.int64)
        for j, i in enumerate(ids):
            log = self.goals[i]
            goals[np.searchsorted(times, log[:, 0]), j] = log[:, 1].astype(np.int64)
        return times, goals


class ServoProcess:
    """``serve`` started by the bench: its port, then its log once its stdin is closed."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.proc = proc
        self.log_path = log_path
        assert proc.stdout is not None
        line = LineReader(proc.stdout).line(START_TIMEOUT_S)
        if not line:
            raise RuntimeError(f"the servo simulator process did not start within {START_TIMEOUT_S:g} s")
        hello = json.loads(line)
        self.port: str = hello["port"]
        self.scheduling: str = hello["scheduling"]

    @staticmethod
    def command(log_path: Path, capacity: int) -> list[str]:
        return [sys.executable, "-m", "runtime.bench.field_servos", "serve", str(log_path), str(capacity)]

    def close(self, timeout_s: float = 10.0) -> ServoLog:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # its cue to stop and write the log
        self.proc.wait(timeout_s)
        return ServoLog.load(self.log_path)


def floor_command(port: str, seconds: float, cpu: int) -> list[str]:
    return [sys.executable, "-m", "runtime.bench.field_servos", "floor", port, str(seconds), str(cpu)]


# --- analysis ----------------------------------------------------------------------------------------


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


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "serve":
        sys.exit(_serve(args[1], int(args[2])))
    if len(args) == 4 and args[0] == "floor":
        sys.exit(_floor(args[1], float(args[2]), int(args[3])))
    print("usage: python -m runtime.bench.field_servos serve LOG CAPACITY | floor PORT SECONDS CPU", file=sys.stderr)
    sys.exit(2)
