"""The simulated arm: a simulator seeded from a calibration, and a real driver connected to it."""

from __future__ import annotations

from types import TracebackType
from typing import Literal, Self

from drivers.bus import SerialServoBus
from drivers.calibration import Calibration
from drivers.sim.simulator import ServoSimulator
from drivers.vendors import bus_class


def simulator_for(calibration: Calibration, protocol: Literal["feetech", "dynamixel"] = "feetech") -> ServoSimulator:
    """Simulated servos for ``calibration``: seeded so they hold the file's homing offsets and rest
    mid-range, as a calibrated arm would after power-up."""
    joints = calibration.joints.values()
    return ServoSimulator(
        protocol,
        [j.id for j in joints],
        positions={j.id: round(j.mid) for j in joints},
        homing_offsets={j.id: j.homing_offset for j in joints},
    )


class SimArm:
    """Start with :meth:`start`; ``bus`` is an ordinary Feetech/Dynamixel bus on the simulator's pty."""

    def __init__(self, simulator: ServoSimulator, bus: SerialServoBus) -> None:
        self.simulator = simulator
        self.bus = bus

    @classmethod
    def start(
        cls,
        calibration: Calibration,
        *,
        protocol: Literal["feetech", "dynamixel"] = "feetech",
        timeout_ms: int = 20,
        retries: int = 2,
        disable_torque_on_disconnect: bool = True,
        verify_goals: bool = False,
        connect: bool = True,
    ) -> SimArm:
        sim = simulator_for(calibration, protocol).start()
        try:
            bus = bus_class(protocol)(
                sim.port,
                calibration,
                timeout_ms=timeout_ms,
                retries=retries,
                disable_torque_on_disconnect=disable_torque_on_disconnect,
                verify_goals=verify_goals,
            )
            bus.add_close_hook(sim.stop)
            if connect:
                bus.connect()
        except BaseException:
            sim.stop()
            raise
        return cls(sim, bus)

    def close(self) -> None:
        try:
            self.bus.disconnect()
        finally:
            self.simulator.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
