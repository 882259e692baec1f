"""Simulated servo chains on pseudo-terminals, and the "sim" arm the daemon uses by default."""

from drivers.sim.servo import Faults, SimServo
from drivers.sim.simulator import ServoSimulator

__all__ = ["Faults", "ServoSimulator", "SimServo"]
