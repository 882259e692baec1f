"""Open an arm from the daemon's ``[arm]`` configuration."""

from __future__ import annotations

from pathlib import Path

from drivers.bus import SerialServoBus
from drivers.calibration import Calibration, load_calibration
from drivers.config import ArmConfig
from drivers.sim.arm import SimArm
from drivers.vendors import bus_class


def open_arm(
    config: ArmConfig, *, base_dir: str | Path | None = None, connect: bool = True
) -> SerialServoBus:
    """Build (and by default connect) the bus for ``config``.

    ``kind = "sim"`` starts a simulator on a pty first; it stops when the bus disconnects.
    A relative calibration path is resolved against ``base_dir`` (default: current directory).
    Use the result as a context manager or call ``disconnect()``; torque goes off on the way out.
    """
    if config.kind == "none":
        raise ValueError('arm.kind is "none": no arm is configured')
    cal_path = Path(config.calibration)
    if not cal_path.is_absolute() and base_dir is not None:
        cal_path = Path(base_dir) / cal_path
    calibration = load_calibration(cal_path)
    if config.kind == "sim":
        return start_sim_arm(config, calibration, connect=connect).bus
    bus = bus_class(config.kind)(
        config.port,
        calibration,
        baud=config.baud,
        timeout_ms=config.timeout_ms,
        retries=config.retries,
        disable_torque_on_disconnect=config.disable_torque_on_disconnect,
        verify_goals=config.verify_goals,
        on_calibration_mismatch=config.on_calibration_mismatch,
    )
    if connect:
        bus.connect()
    return bus


def start_sim_arm(config: ArmConfig, calibration: Calibration, *, connect: bool = True) -> SimArm:
    """The simulated arm for ``kind = "sim"``: its simulator (to look at what the servos received)
    and a real driver on its pty."""
    return SimArm.start(
        calibration,
        protocol=config.sim_protocol,
        timeout_ms=config.timeout_ms,
        retries=config.retries,
        disable_torque_on_disconnect=config.disable_torque_on_disconnect,
        verify_goals=config.verify_goals,
        connect=connect,
    )
