"""What differs between a simulated Feetech and a simulated Dynamixel servo, besides the codec."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from drivers.dynamixel import protocol as dxl
from drivers.dynamixel import tables as dxl_tables
from drivers.feetech import protocol as ft
from drivers.feetech import tables as ft_tables
from drivers.packets import PacketCodec
from drivers.registers import RegisterTable


@dataclass(frozen=True)
class Dialect:
    name: str
    codec: PacketCodec
    table: RegisterTable
    model_number: int
    resolution: int
    # Present_Position = actual - Homing_Offset (Feetech) or actual + Homing_Offset (Dynamixel).
    homing_sign: int
    velocity_steps_per_unit: float
    load_register: str
    voltage_register: str
    voltage_raw: int
    ping_reply_params: bool
    # Hardware faults: Feetech puts the bits in the status byte itself; Dynamixel sets the Alert
    # flag and keeps the bits in Hardware_Error_Status.
    alert_flag: int | None

    def split_read(self, params: bytes) -> tuple[int, int]:
        n = self.codec.address_size
        return int.from_bytes(params[:n], "little"), int.from_bytes(params[n : 2 * n], "little")

    def split_write(self, params: bytes) -> tuple[int, bytes]:
        n = self.codec.address_size
        return int.from_bytes(params[:n], "little"), params[n:]

    def split_sync_read(self, params: bytes) -> tuple[int, int, Sequence[int]]:
        address, size = self.split_read(params)
        return address, size, params[2 * self.codec.address_size :]

    def split_sync_write(self, params: bytes) -> tuple[int, list[tuple[int, bytes]]]:
        address, size = self.split_read(params)
        rest = params[2 * self.codec.address_size :]
        step = size + 1
        return address, [(rest[i], rest[i + 1 : i + step]) for i in range(0, len(rest) - size, step)]


FEETECH = Dialect(
    name="feetech",
    codec=ft.CODEC,
    table=ft_tables.STS_TABLE,
    model_number=ft_tables.STS3215_MODEL_NUMBER,
    resolution=ft_tables.RESOLUTION,
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
    codec=dxl.CODEC,
    table=dxl_tables.X_TABLE,
    model_number=dxl_tables.XL330_M288_MODEL_NUMBER,
    resolution=dxl_tables.RESOLUTION,
    homing_sign=1,
    velocity_steps_per_unit=0.229 * 4096 / 60,  # 0.229 rpm per unit
    load_register="Present_Current",
    voltage_register="Present_Input_Voltage",
    voltage_raw=50,  # 5.0 V, XL330
    ping_reply_params=True,
    alert_flag=dxl.ALERT,
)

DIALECTS = {"feetech": FEETECH, "dynamixel": DYNAMIXEL}
