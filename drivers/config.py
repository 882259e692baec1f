"""The ``[arm]`` table of the daemon's TOML, built with ``from_mapping(ArmConfig, data["arm"], "arm")``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ArmKind = Literal["sim", "feetech", "dynamixel", "none"]
CalibrationPolicy = Literal["check", "write", "ignore"]


@dataclass(frozen=True)
class ArmConfig:
    """How to reach one arm.

    ``kind = "none"`` means no arm (a pure policy server). ``kind = "sim"`` starts the simulator on a
    pseudo-terminal and drives it with the ``sim_protocol`` driver; ``port`` is then ignored.
    ``calibration`` is a TOML or LeRobot JSON file; in a daemon config file a relative path is taken
    from the file's folder (``open_arm`` itself takes it from ``base_dir``).
    ``on_calibration_mismatch``: what ``connect`` does when a servo's stored homing offset differs
    from the file: ``check`` raises, ``write`` writes the file's value (EEPROM), ``ignore`` only logs.
    """

    kind: ArmKind = "sim"
    port: str = ""
    baud: int = 1_000_000
    model: str = "so101"
    calibration: str = "configs/calibration/so101_sim.toml"
    disable_torque_on_disconnect: bool = True
    retries: int = 2
    timeout_ms: int = 20
    verify_goals: bool = False
    on_calibration_mismatch: CalibrationPolicy = "check"
    sim_protocol: Literal["feetech", "dynamixel"] = "feetech"

    def __post_init__(self) -> None:
        if self.kind in ("feetech", "dynamixel") and not self.port:
            raise ValueError(f"port is required for kind = {self.kind!r} (e.g. /dev/ttyACM0)")
        if not 0 <= self.retries <= 20:
            raise ValueError(f"retries must be within 0..20, got {self.retries}")
        if not 1 <= self.timeout_ms <= 10_000:
            raise ValueError(f"timeout_ms must be within 1..10000, got {self.timeout_ms}")
        if self.baud <= 0:
            raise ValueError(f"baud must be positive, got {self.baud}")
