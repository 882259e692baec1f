"""The simulated servos' control tables, from the vendors' datasheets (not the drivers' tables).

Feetech STS3215: "STS3215 memory table" in the FT-SMS-STS user manual (doc.feetech.cn); EEPROM at
0-39, SRAM from 40; multi-byte values little-endian; direction in bit 11 (offset), bit 15 (speed)
or bit 10 (load).
Dynamixel XL330-M288-T: control table in the ROBOTIS e-manual (emanual.robotis.com/docs/en/dxl/x/
xl330-m288/); EEPROM at 0-63, RAM from 64; signed values two's complement.
Only the fields the simulation reads or writes are named; every other address is plain memory.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Field:
    address: int
    size: int
    direction_bit: int | None = None  # Feetech: sign-magnitude with the sign in this bit
    signed: bool = False  # Dynamixel: two's complement

    def pack(self, value: int) -> bytes:
        if self.direction_bit is not None:
            raw = abs(value) | ((1 << self.direction_bit) if value < 0 else 0)
        elif self.signed:
            raw = value % (1 << (8 * self.size))
        else:
            raw = value
        return raw.to_bytes(self.size, "little")

    def unpack(self, data: bytes | bytearray) -> int:
        raw = int.from_bytes(data[self.address : self.address + self.size], "little")
        if self.direction_bit is not None and raw & (1 << self.direction_bit):
            return -(raw & ((1 << self.direction_bit) - 1))
        if self.signed and raw & (1 << (8 * self.size - 1)):
            return raw - (1 << (8 * self.size))
        return raw


STS3215: dict[str, Field] = {
    "Firmware_Major_Version": Field(0, 1),
    "Model_Number": Field(3, 2),
    "ID": Field(5, 1),
    "Min_Position_Limit": Field(9, 2),
    "Max_Position_Limit": Field(11, 2),
    "Homing_Offset": Field(31, 2, direction_bit=11),
    "Torque_Enable": Field(40, 1),
    "Goal_Position": Field(42, 2),  # position mode: plain ticks, as heard
    "Lock": Field(55, 1),
    "Present_Position": Field(56, 2),
    "Present_Velocity": Field(58, 2, direction_bit=15),
    "Present_Load": Field(60, 2, direction_bit=10),
    "Present_Voltage": Field(62, 1),
    "Present_Temperature": Field(63, 1),
    "Moving": Field(66, 1),
}

XL330: dict[str, Field] = {
    "Model_Number": Field(0, 2),
    "Firmware_Version": Field(6, 1),
    "ID": Field(7, 1),
    "Drive_Mode": Field(10, 1),
    "Homing_Offset": Field(20, 4, signed=True),
    "Max_Position_Limit": Field(48, 4),
    "Min_Position_Limit": Field(52, 4),
    "Torque_Enable": Field(64, 1),
    "Hardware_Error_Status": Field(70, 1),
    "Goal_Position": Field(116, 4, signed=True),
    "Moving": Field(122, 1),
    "Present_Current": Field(126, 2, signed=True),
    "Present_Velocity": Field(128, 4, signed=True),
    "Present_Position": Field(132, 4, signed=True),
    "Present_Input_Voltage": Field(144, 2),
    "Present_Temperature": Field(146, 1),
}

STS3215_MODEL_NUMBER = 777
XL330_M288_MODEL_NUMBER = 1200
MEMORY_SIZE = 256
