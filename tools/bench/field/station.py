"""The teleop station of ``bench field``: a process of its own, and the bench's handle on it.

``python -m tools.bench.field.station ENDPOINT CALIBRATION`` is the station: it starts a simulated
leader arm (its own pty), takes the daemon's arm over, starts an episode, streams the leader's targets
at the control rate while a thread moves the leader now and then; ``episode_stop`` and ``hand_back``
come on its stdin, its end is the end of its stdin. It reports on stdout, one JSON line per event
(``tracking``, ``episode_stop``, ``hand_back``, ``done`` with every move and send it stamped, or
``failed`` with why). :class:`Station` is the bench's side: it starts that process, writes the
commands and reads the events back.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from typing import Any

import numpy as np

from tools.bench.field.config import JOINT, MOVE_DEG, READY_STEP_TIMEOUT_S, calibration_path
from tools.bench.field.processes import PIPES, LineReader, Processes

STATION_TIMEOUT_S = 1.0  # the station's client timeout


# --- the station's process -------------------------------------------------------------------------------


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


def run_station(endpoint: str, calibration: str) -> int:
    """The station: take over, start an episode, stream and move the leader; ``episode_stop`` and
    ``hand_back`` come on stdin, its end is the end of stdin. Events go to stdout as JSON lines."""
    import queue

    from runtime.client import PolicyClient
    from runtime.teleop.leader import SimLeader
    from runtime.teleop.station import Station as TeleopStation

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
            station = TeleopStation(client, leader, who="bench field", task="field workload")
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


# --- the bench's side ------------------------------------------------------------------------------------


def read_event(reader: LineReader, name: str, timeout_s: float, who: str) -> dict[str, Any]:
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


class Station:
    """The station's process as the bench drives it: started on the daemon's ``endpoint``, told what to
    do on its stdin, its events read off its stdout; :attr:`done` is its last event once it ended."""

    def __init__(self, procs: Processes, endpoint: str) -> None:
        self.proc = procs.start("teleop station", self.command(endpoint), **PIPES)
        self.out = LineReader(self.proc.stdout)
        self.done: dict[str, Any] | None = None

    @staticmethod
    def command(endpoint: str) -> list[str]:
        return [sys.executable, "-m", "tools.bench.field.station", endpoint, str(calibration_path())]

    def event(self, name: str, timeout_s: float) -> dict[str, Any]:
        return read_event(self.out, name, timeout_s, "station")

    def tell(self, command: str) -> dict[str, Any]:
        """``command`` on the station's stdin; its reply event."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        return self.event(command, 10.0)

    def hand_back(self) -> dict[str, Any]:
        """Hand the arm back to the policy and leave: the station's last event."""
        self.tell("hand_back")
        self.done = self.event("done", 20.0)
        return self.done

    def end(self) -> dict[str, Any]:
        """The station's end (end of its stdin), unless it left already: its last event."""
        if self.done is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.done = self.event("done", 30.0)
        return self.done

    def exited(self) -> int | None:
        """The station's exit status if it ended, else None."""
        status: int | None = self.proc.poll()
        return status


def main(argv: list[str]) -> int:
    if len(argv) == 2:
        return run_station(argv[0], argv[1])
    print("usage: python -m tools.bench.field.station ENDPOINT CALIBRATION", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
