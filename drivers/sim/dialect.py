"""What differs between a simulated Feetech and a simulated Dynamixel servo, besides the framing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from drivers.sim import memory
from drivers.sim.wire import DynamixelWire, FeetechWire, ServoWire

# Dynamixel status packets: bit 7 of the error byte is the hardware Alert flag (Protocol 2.0).
DYNAMIXEL_ALERT = 0x80


@dataclass(frozen=True)
class Dialect:
    name: str
    wire: ServoWire
    table: dict[str, memory.Field]
    model_number: int
    resolution: int
    # Present_Position = actual - Homing_Offset (Feetech) or actual + Homing_Offset (Dynamixel).
    homing_sign: int
    velocity_steps_per_unit: float
    load_register: str
    voltage_register: str
    voltage_raw: int
    # Dynamixel answers a ping with model number and firmware version; Feetech with no parameters.
    ping_reply_params: bool
    # Hardware faults: Feetech puts the bits in the status byte itself; Dynamixel sets the Alert
    # flag and keeps the bits in Hardware_Error_Status.
    alert_flag: int | None

    def _number(self, params: bytes, at: int) -> int:
        n = self.wire.address_size
        return int.from_bytes(params[at * n : (at + 1) * n], "little")

    def split_read(self, params: bytes) -> tuple[int, int]:
        """READ parameters: start address, data length (1 byte each on Feetech, 2 on Dynamixel)."""
        return self._number(params, 0), self._number(params, 1)

    def split_write(self, params: bytes) -> tuple[int, bytes]:
        """WRITE parameters: start address, then the data."""
        return self._number(params, 0), params[self.wire.address_size :]

    def split_sync_read(self, params: bytes) -> tuple[int, int, Sequence[int]]:
        """SYNC READ parameters: start address, data length, then one id per servo."""
        address, size = self.split_read(params)
        return address, size, params[2 * self.wire.address_size :]

    def split_sync_write(self, params: bytes) -> tuple[int, list[tuple[int, bytes]]]:
        """SYNC WRITE parameters: start address, data length, then (id, data) per servo."""
        address, size = self.split_read(params)
        rest = params[2 * self.wire.address_size :]
        step = size + 1
        return address, [(rest[i], rest[i + 1 : i + step]) for i in range(0, len(rest) - size, step)]


FEETECH = Dialect(
    name="feetech",
    wire=FeetechWire(),
    table=memory.STS3215,
    model_number=memory.STS3215_MODEL_NUMBER,
    resolution=4096,
    homing_sign=-1,
    velocity_steps_per_unit=1.0,
    load_register="Present_Load",
    voltage_register="Present_Voltage",
    voltage_raw=120,  # 12.0 V supply of the SO-101 follower
    ping_reply_params=False,
    alert_flag=None,
)

DYNAMIXEL = Dialect(
    name="dynamixel",
    wire=DynamixelWire(),
    table=memory.XL330,
    model_number=memory.XL330_M288_MODEL_NUMBER,
    resolution=4096,
    homing_sign=1,
    velocity_steps_per_unit=0.229 * 4096 / 60,  # 0.229 rpm per unit
    load_register="Present_Current",
    voltage_register="Present_Input_Voltage",
    voltage_raw=50,  # 5.0 V, XL330
    ping_reply_params=True,
    alert_flag=DYNAMIXEL_ALERT,
)

DIALECTS = {"feetech": FEETECH, "dynamixel": DYNAMIXEL}
