"""The bus class for each servo protocol name (``feetech``, ``dynamixel``).

Kept apart from :mod:`drivers.arm` so the simulator can build a real driver on its pty without
importing the module that starts simulators.
"""

from __future__ import annotations

from drivers.bus import SerialServoBus
from drivers.dynamixel.bus import DynamixelBus
from drivers.feetech.bus import FeetechBus


def bus_class(protocol: str) -> type[SerialServoBus]:
    if protocol == "feetech":
        return FeetechBus
    if protocol == "dynamixel":
        return DynamixelBus
    raise ValueError(f"unknown servo protocol {protocol!r}; expected feetech or dynamixel")
