"""What the servos see in ``bench field``: the simulated arm in a process of its own, and the log it leaves.

Hardware answers whatever the host's threads are doing, and stamps nothing; a simulator that judges
the host's timing must come close to that. So the simulated STS3215 chain runs in a process of its
own at real-time priority (``SCHED_FIFO``; hardware is never descheduled), with a short interpreter
switch interval, and stamps every write with the time its bytes arrived (right after ``os.read``
returned them), not when the simulator got round to parsing it: every goal and torque write lands in
the servo's log with that stamp, on ``CLOCK_MONOTONIC``, which every process on the machine shares.

- ``python -m tools.bench.field.servos serve LOG CAPACITY`` prints one JSON line (the pty port and
  the scheduling it got), serves until its stdin closes, then writes every servo's goal and torque log
  to ``LOG`` (JSON).
- ``python -m tools.bench.field.servos floor PORT SECONDS CPU`` is the simulator's own floor: a
  minimal writer pinned to ``CPU`` at real-time priority that does nothing but one sync write of six
  goals per period at 30 Hz on absolute deadlines, through the real Feetech driver; it prints its own
  completion stamps (JSON). What the simulator then sees beyond this writer's own error is its noise.

The bench's side: :class:`ServoProcess` starts ``serve`` and hands back its log, a :class:`ServoLog`;
:func:`floor_command` is the floor writer's command. What the log says is worked out in
:mod:`tools.bench.field.measures`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from drivers.calibration import Calibration, load_calibration
from drivers.sim.simulator import ServoSimulator
from tools.bench.field.config import RATE_HZ, calibration_path
from tools.bench.field.processes import LineReader

#: below the control loop's default 50: a woken SCHED_FIFO task of lower priority than the one running
#: on its CPU is placed on another CPU instead of preempting it, so the simulator takes its time from
#: whatever runs at normal priority (inference), not from the loop it judges
SIM_RT_PRIORITY = 40
FLOOR_RT_PRIORITY = 50
SWITCH_INTERVAL_S = 2e-4
START_TIMEOUT_S = 30.0


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
        return [sys.executable, "-m", "tools.bench.field.servos", "serve", str(log_path), str(capacity)]

    def close(self, timeout_s: float = 10.0) -> ServoLog:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # its cue to stop and write the log
        self.proc.wait(timeout_s)
        return ServoLog.load(self.log_path)


def floor_command(port: str, seconds: float, cpu: int) -> list[str]:
    return [sys.executable, "-m", "tools.bench.field.servos", "floor", port, str(seconds), str(cpu)]


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "serve":
        sys.exit(_serve(args[1], int(args[2])))
    if len(args) == 4 and args[0] == "floor":
        sys.exit(_floor(args[1], float(args[2]), int(args[3])))
    print("usage: python -m tools.bench.field.servos serve LOG CAPACITY | floor PORT SECONDS CPU", file=sys.stderr)
    sys.exit(2)
