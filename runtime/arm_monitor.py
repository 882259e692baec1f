"""The arm as the daemon holds it: connected at start-up, watched, released at shutdown.

The daemon connects the configured arm (the simulated SO-101 by default) and disconnects it on the
way out, which turns torque off. Health comes from the control loop's own reads once the loop runs
(one thread owns the serial port); without a loop, the monitor reads the state every
``daemon.arm_poll_s`` to notice a vanished port or a servo fault.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from drivers.arm import open_arm, start_sim_arm
from drivers.bus import JointState, SerialServoBus
from drivers.calibration import load_calibration
from drivers.config import ArmConfig
from drivers.errors import BusError
from drivers.sim.arm import SimArm

log = logging.getLogger(__name__)


class ArmReadings(Protocol):
    """What the control loop exposes of its own reads."""

    arm_error: str
    last_state: dict[str, JointState]


class ArmMonitor:
    def __init__(self, config: ArmConfig, bus: SerialServoBus | None = None) -> None:
        """``bus``: an already connected bus to hold instead of opening one from ``config``."""
        self.config = config
        self.bus: SerialServoBus | None = bus
        self.healthy = False
        self.last_error = ""
        self.last_state: dict[str, JointState] = {}
        self.reads = 0
        self.failures = 0
        #: the simulated arm (``kind = "sim"``): its servos show what the arm received
        self.sim: SimArm | None = None
        #: the control loop, once it owns the port: health is taken from its reads
        self.source: ArmReadings | None = None

    def open(self) -> None:
        """Connect the arm and read it once; raises the bus error if the arm cannot be reached."""
        cfg = self.config
        where = "simulated servos on a pseudo-terminal" if cfg.kind == "sim" else cfg.port
        if self.bus is None:
            if cfg.kind == "sim":
                self.sim = start_sim_arm(cfg, load_calibration(cfg.calibration))
                self.bus = self.sim.bus
            else:
                self.bus = open_arm(cfg)
        self.poll()
        if not self.healthy:
            raise BusError(f"arm ({cfg.kind}, {where}) connected but its first read failed: {self.last_error}")
        positions = ", ".join(f"{n} {s.position:.1f}" for n, s in self.last_state.items())
        log.info("arm connected: %s %s on %s; positions %s", cfg.model, cfg.kind, where, positions)

    def poll(self) -> None:
        """Read every joint once; log only changes between healthy and failing."""
        if self.bus is None:
            return
        try:
            if self.source is not None:
                if self.source.arm_error:
                    raise BusError(self.source.arm_error)
                self.last_state = dict(self.source.last_state)
            else:
                self.last_state = self.bus.read_state()
        except BusError as e:
            self.failures += 1
            if self.healthy or not self.last_error:
                log.error("arm read failed: %s", e)
            self.healthy, self.last_error = False, str(e)
            return
        self.reads += 1
        if not self.healthy and self.last_error:
            log.info("arm read works again after: %s", self.last_error)
        self.healthy = True

    def summary(self) -> dict[str, Any]:
        return {
            "kind": self.config.kind,
            "healthy": self.healthy,
            "reads": self.reads,
            "failures": self.failures,
            "last_error": self.last_error,
            "positions": {n: round(s.position, 2) for n, s in self.last_state.items()},
        }

    def close(self) -> bool:
        """Disconnect (torque off by default, the port closed in the driver's finally).

        Returns False, after logging why, when torque could not be confirmed off.
        """
        bus, self.bus = self.bus, None
        if bus is None:
            return True
        try:
            bus.disconnect()
        except BusError as e:
            log.error("arm disconnected, but turning torque off failed: %s; check the arm by hand", e)
            return False
        log.info("arm disconnected")
        return True
