"""The leader arm: the operator's hand-moved arm, read with torque off.

A leader is an ordinary Feetech or Dynamixel bus with its own calibration (TOML, or LeRobot's
calibration JSON); torque goes off at open so the operator can move it freely. Positions come back
in the follower's joint order, so the station sends them as they are. :class:`SimLeader` is the
simulated leader for the demo: a simulator on its own pseudo-terminal, read through the same real
driver, whose joints the demo (or a test) moves by hand.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from drivers.bus import SerialServoBus
from drivers.calibration import Calibration, load_calibration
from drivers.sim.arm import SimArm
from drivers.vendors import bus_class
from runtime.errors import ConfigError

Vendor = Literal["feetech", "dynamixel"]


class Leader(Protocol):
    joints: tuple[str, ...]

    def read(self) -> np.ndarray:
        """Positions in ``joints`` order (degrees, percent for a gripper)."""
        ...

    def close(self) -> None: ...


class LeaderArm:
    """A leader on a serial bus, torque off, read one sync read at a time."""

    def __init__(self, bus: SerialServoBus) -> None:
        self.bus = bus
        self.joints: tuple[str, ...] = tuple(bus.joints)

    @classmethod
    def open(cls, port: str, calibration: str | Path | Calibration, protocol: Vendor = "feetech") -> LeaderArm:
        cal = calibration if isinstance(calibration, Calibration) else load_calibration(calibration)
        bus = bus_class(protocol)(port, cal)
        bus.connect()
        try:
            bus.disable_torque()
        except BaseException:
            bus.disconnect()
            raise
        return cls(bus)

    def order(self, names: Sequence[str]) -> None:
        """Read in the follower's joint order; every follower joint must be a leader joint."""
        missing = [n for n in names if n not in self.bus.joints]
        if missing:
            raise ConfigError(
                f"the leader has no joint(s) {', '.join(missing)} (its calibration names "
                f"{', '.join(self.bus.joints)}); give the leader a calibration with the follower's joint names"
            )
        self.joints = tuple(names)

    def read(self) -> np.ndarray:
        positions = self.bus.read_positions()
        return np.fromiter((positions[n] for n in self.joints), dtype=np.float64, count=len(self.joints))

    def close(self) -> None:
        self.bus.disconnect()


class SimLeader(LeaderArm):
    """A simulated leader on its own pty; :meth:`move_to` plays the operator's hand."""

    def __init__(self, arm: SimArm, calibration: Calibration) -> None:
        super().__init__(arm.bus)
        self.arm = arm
        self.calibration = calibration
        self._wander: threading.Thread | None = None
        self._stop = threading.Event()

    @classmethod
    def start(cls, calibration: str | Path | Calibration, protocol: Vendor = "feetech") -> SimLeader:
        cal = calibration if isinstance(calibration, Calibration) else load_calibration(calibration)
        arm = SimArm.start(cal, protocol=protocol)
        arm.bus.disable_torque()
        return cls(arm, cal)

    def move_to(self, pose: Mapping[str, float]) -> None:
        """Put joints at ``pose`` (user units) at once, as a hand would."""
        sim = self.arm.simulator
        with sim._lock:  # the simulator's thread reads positions under this lock
            for name, value in pose.items():
                joint = self.calibration.joints[name]
                raw, _ = joint.to_raw(value)
                sim.servo(joint.id).position = float(raw)

    def wander(self, amplitude_deg: float = 15.0, period_s: float = 8.0) -> None:
        """Move every joint on a slow sine around where it is (the demo's operator)."""
        start = dict(zip(self.joints, self.read(), strict=True))

        def run() -> None:
            t0 = time.monotonic()
            while not self._stop.wait(0.01):
                phase = 2 * math.pi * (time.monotonic() - t0) / period_s
                self.move_to(
                    {n: v + amplitude_deg * math.sin(phase + i * 0.7) for i, (n, v) in enumerate(start.items())}
                )

        self._wander = threading.Thread(target=run, name="sim-leader", daemon=True)
        self._wander.start()

    def close(self) -> None:
        self._stop.set()
        if self._wander is not None:
            self._wander.join(2)
        self.arm.close()
