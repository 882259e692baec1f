"""A small arm with round numbers for the controller's and the runner's tests: no bus, no export.

Resolution 361, so one tick is one degree (as in ``test_safety.py``): ``a`` spans -90..90 degrees,
``b`` -50..50, the gripper 0..100 %. The policy interface is made here (joints in, a chunk out); the policy's
feed is a stand-in that records what it is handed and answers when the test says so; the bus is one
that logs every read, write and torque switch on the loop's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from drivers.bus import JointState
from drivers.calibration import Calibration, JointCalibration
from runtime.bundle.interface import PolicyInterface
from runtime.bundle.manifest import TensorSpec
from runtime.control.feed import Blocked

JOINTS = ("a", "b", "gripper")
CAL = Calibration(
    {
        "a": JointCalibration(id=1, range_min=90, range_max=270, resolution=361),
        "b": JointCalibration(id=2, range_min=130, range_max=230, resolution=361),
        "gripper": JointCalibration(id=3, range_min=0, range_max=360, mode="percent", resolution=361),
    }
)
#: where the arm is unless a test moves it
P = np.array([10.0, -5.0, 40.0])
CHUNK = 4


def interface(
    *, chunk: int = CHUNK, history: int = 1, state: bool = True, names: tuple[str, ...] = JOINTS, rate_hz: float = 10
) -> PolicyInterface:
    """Joints in (one float32 input of role ``state``), ``chunk`` actions out; the policy looks at
    ``history`` frames."""
    n = len(names)
    if state:
        inputs = (TensorSpec("state", "float32", (n,), "state"),)
    else:
        inputs = (TensorSpec("cam", "uint8", (2, 2, 3), "image"),)
    return PolicyInterface("p", inputs, tuple(names), chunk, float(rate_hz), history)


class Clock:
    """The loop's clock, moved by the test (and by ``sleep``, for a ticker that must not wait)."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Feed:
    """The policy's side: records what it is handed; ``gate`` blocks, ``gone`` is a lost daemon."""

    def __init__(self) -> None:
        self.submitted: list[tuple[np.ndarray, bool]] = []
        self.prefixes: list[Any] = []
        self.observed: list[tuple[np.ndarray, bool]] = []
        self.callbacks: list[Any] = []
        self.accept = True
        self.gate: Blocked | None = None
        self.gone: str | None = None
        self.blocked_at: list[float] = []

    def submit(self, state: np.ndarray, on_done: Any, *, reset: bool = False, prefix: Any = None) -> bool:
        self.submitted.append((state, reset))
        self.prefixes.append(prefix)
        self.callbacks.append(on_done)
        return self.accept

    def observe(self, state: np.ndarray, *, reset: bool = False) -> None:
        self.observed.append((state, reset))

    def blocked(self, now: float) -> Blocked | None:
        self.blocked_at.append(now)
        return self.gate

    def lost(self) -> str | None:
        return self.gone


class Bus:
    """The arm: joints at ``positions``; every read, write and torque switch logged with the clock."""

    def __init__(self, clock: Clock, joints: tuple[str, ...] = JOINTS) -> None:
        self._joints = joints
        self.clock = clock
        self.positions = dict(zip(joints, (float(x) for x in P), strict=True))
        self.log: list[tuple[Any, ...]] = []
        self.read_errors: list[BaseException] = []
        self.write_errors: list[BaseException] = []
        self.torque_errors: list[BaseException] = []  # raised by disable_torque
        self.torque_on_errors: list[BaseException] = []
        self.write_takes = 0.0
        self.follow = False  # the joints go where they are told

    @property
    def joints(self) -> tuple[str, ...]:
        return self._joints

    def read_state(self) -> dict[str, JointState]:
        self.log.append(("read", self.clock.now))
        if self.read_errors:
            raise self.read_errors.pop(0)
        return {
            n: JointState(
                position=self.positions[n],
                raw_position=i,
                goal=0.0,
                velocity_raw=0,
                load_raw=0,
                voltage_v=12.0,
                temperature_c=30 + i,
            )
            for i, n in enumerate(self._joints)
        }

    def write_goals(self, goals: Mapping[str, float]) -> dict[str, float]:
        self.log.append(("write", self.clock.now, dict(goals)))
        if self.write_errors:
            raise self.write_errors.pop(0)
        self.clock.now += self.write_takes
        if self.follow:
            self.positions.update(goals)
        return dict(goals)

    def torque_on(self) -> None:
        self.log.append(("torque", "on"))
        if self.torque_on_errors:
            raise self.torque_on_errors.pop(0)

    def disable_torque(self) -> None:
        self.log.append(("torque", "off"))
        if self.torque_errors:
            raise self.torque_errors.pop(0)

    def writes(self) -> list[dict[str, float]]:
        return [e[2] for e in self.log if e[0] == "write"]


def rows(*offsets: float, joint: int = 0, base: np.ndarray = P) -> np.ndarray:
    """A chunk: ``base`` with joint ``joint`` moved by each offset in turn."""
    out = np.repeat(base[None, :], len(offsets), axis=0).astype(np.float32)
    out[:, joint] += np.asarray(offsets, dtype=np.float32)
    return out


def at(*, a: float = P[0], b: float = P[1], g: float = P[2]) -> np.ndarray:
    return np.array([a, b, g])


def same(goal: Any, expected: np.ndarray) -> bool:
    return goal is not None and np.allclose(np.asarray(goal), expected, atol=1e-9)


class Runner:
    """Plays the runner for a bare :class:`~runtime.control.controller.Controller`, as
    :class:`~runtime.control.loop.ControlLoop` does, with no bus and no thread: gathers each tick's
    inputs (its mailbox, the chunks the feed's callbacks answered, the feed's gate and loss, the fresh
    teleop target, at the clock's now), switches torque with ``torque`` as the decision says, takes the
    decision's goal as written, hands the reading after the write to the feed as the decision asks and
    moves the controller's events to ``events``."""

    def __init__(self, controller: Any, feed: Any, torque: Any, clock: Any) -> None:
        from runtime.control.controller import ChunkResult
        from runtime.control.events import EventLog
        from runtime.control.handoff import Latest
        from runtime.control.mailbox import Mailbox
        from runtime.control.target import TeleopTarget

        self.c, self.feed, self.torque, self.clock = controller, feed, torque, clock
        self.mailbox = Mailbox(clock)
        self.results: Latest[ChunkResult] = Latest()
        self.teleop = TeleopTarget(len(controller.names), controller.handover.config)
        self.events = EventLog()
        self.dumps: list[str] = []
        self._latch: Any = None
        self._chunk_result = ChunkResult

    def inputs(self, now: float) -> Any:
        from runtime.control.controller import Inputs

        commands = []
        while (command := self.mailbox.take_command()) is not None:
            commands.append(command)
            if type(command).__name__ == "Shutdown":
                break
        return Inputs(
            self.mailbox.estop_requests(),
            tuple(commands),
            self.results.take(),
            self.feed.blocked(now),
            self.feed.lost(),
            self.teleop.fresh(now),
        )

    def step(self, k: int, now: float, present: np.ndarray | None) -> Any:
        """Tick ``k``'s decision, its torque switches carried out and its goal taken as written."""
        inputs = self.inputs(now)
        d = self.c.step(k, now, present, inputs)
        self._latch = self.c.latch
        self.mailbox.drop_estops(len(inputs.estops))
        while d.torque:
            self.dumps.extend(d.dumps)
            if d.goal is not None:
                self.c.written(d.goal)
            d = self.c.torque_done(self.switch(d.torque))
        self.dumps.extend(d.dumps)
        if d.goal is not None:
            self.c.written(d.goal)
        self.c.events.move_to(self.events)
        return d

    def switch(self, what: str) -> str | None:
        try:
            if what == "on":
                self.torque.enable_torque()
            else:
                self.torque.disable_torque()
        except Exception as e:
            return str(e)
        return None

    def after_read(self, d: Any, reading: np.ndarray | None, now: float) -> None:
        """Hand ``reading`` to the feed if ``d`` asked, as the runner does after its read."""
        ask = d.ask
        if ask is None or reading is None:
            return
        state = reading.astype(np.float32)
        if not ask.chunk:
            self.feed.observe(state, reset=ask.reset)
            self.c.asked(ask, True, now)
            return
        results, make, gen, k = self.results, self._chunk_result, ask.gen, ask.k

        def done(actions: Any, error: Any) -> None:
            results.put(make(gen, k, actions, error))

        self.c.asked(ask, self.feed.submit(state, done, reset=ask.reset, prefix=ask.prefix), now)
        self.c.events.move_to(self.events)

    @property
    def estop(self) -> Any:
        from runtime.control.mailbox import newest_latch

        return newest_latch(self.mailbox.pending_estop(), self._latch)

    def fault(self, reason: str | None) -> None:
        """A servo fault's or a bus failure's e-stop, latched as the runner does."""
        if reason is not None and self.estop is None:
            self.mailbox.estop(reason)
        self.c.events.move_to(self.events)
