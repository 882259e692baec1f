"""A small arm with round numbers for the controller's and the runner's tests: no bus, no export.

Resolution 361, so one tick is one degree (as in ``test_safety.py``): ``a`` spans -90..90 degrees,
``b`` -50..50, the gripper 0..100 %. The manifest is made here (joints in, a chunk out); the policy's
feed is a stand-in that records what it is handed and answers when the test says so; the bus is one
that logs every read, write and torque switch on the loop's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from drivers.bus import JointState
from drivers.calibration import Calibration, JointCalibration
from runtime.bundle.manifest import Manifest, parse_manifest
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


def manifest(
    *, chunk: int = CHUNK, history: int = 1, state: bool = True, names: tuple[str, ...] = JOINTS, rate_hz: float = 10
) -> Manifest:
    """Joints in (one float32 input of role ``state``, ``history`` frames), ``chunk`` actions out."""
    n = len(names)
    if state:
        shape = [n] if history == 1 else [history, n]
        inputs = [{"name": "state", "dtype": "float32", "shape": shape, "role": "state"}]
    else:
        inputs = [{"name": "cam", "dtype": "uint8", "shape": [2, 2, 3], "role": "image"}]
    return parse_manifest(
        {
            "format": "lerobot-runtime-bundle",
            "format_version": 1,
            "policy": {"name": "p"},
            "inputs": inputs,
            "outputs": [{"name": "action", "dtype": "float32", "shape": [chunk, n], "role": "action"}],
            "action": {"output": "action", "chunk_length": chunk, "names": list(names)},
            "control_rate_hz": rate_hz,
            "observation_history": history,
            "programs": {"CPU": {"file": "p.pte", "precision": "f32", "sha256": "0" * 64, "delegation": "full"}},
            "test_case": {"file": "t.npz", "sha256": "0" * 64},
        }
    )


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
        self.torque_errors: list[BaseException] = []
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

    def enable_torque(self) -> None:
        self.log.append(("torque", "on"))

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
