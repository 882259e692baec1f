"""The drivers' control tables against the vendors' datasheets, copied here by hand.

Feetech: STS/SMS servo user manual, memory table (STS3215). Dynamixel: ROBOTIS e-manual, control
table of the XL330-M288-T / XL430-W250-T (the same addresses). Each row is (address, size in bytes,
access); a signed field also names its encoding.
"""

from __future__ import annotations

from drivers.dynamixel import tables as dxl
from drivers.feetech import tables as sts
from drivers.registers import Register

STS3215 = {
    "Firmware_Major_Version": (0, 1, "R"),
    "Firmware_Minor_Version": (1, 1, "R"),
    "Model_Number": (3, 2, "R"),
    "ID": (5, 1, "RW"),
    "Baud_Rate": (6, 1, "RW"),
    "Return_Delay_Time": (7, 1, "RW"),
    "Response_Status_Level": (8, 1, "RW"),
    "Min_Position_Limit": (9, 2, "RW"),
    "Max_Position_Limit": (11, 2, "RW"),
    "Max_Temperature_Limit": (13, 1, "RW"),
    "Max_Voltage_Limit": (14, 1, "RW"),
    "Min_Voltage_Limit": (15, 1, "RW"),
    "Max_Torque_Limit": (16, 2, "RW"),
    "P_Coefficient": (21, 1, "RW"),
    "D_Coefficient": (22, 1, "RW"),
    "I_Coefficient": (23, 1, "RW"),
    "Homing_Offset": (31, 2, "RW"),
    "Operating_Mode": (33, 1, "RW"),
    "Torque_Enable": (40, 1, "RW"),
    "Acceleration": (41, 1, "RW"),
    "Goal_Position": (42, 2, "RW"),
    "Goal_Time": (44, 2, "RW"),
    "Goal_Velocity": (46, 2, "RW"),
    "Torque_Limit": (48, 2, "RW"),
    "Lock": (55, 1, "RW"),
    "Present_Position": (56, 2, "R"),
    "Present_Velocity": (58, 2, "R"),
    "Present_Load": (60, 2, "R"),
    "Present_Voltage": (62, 1, "R"),
    "Present_Temperature": (63, 1, "R"),
    "Status": (65, 1, "R"),
    "Moving": (66, 1, "R"),
    "Present_Current": (69, 2, "R"),
}
# sign-magnitude fields: the bit that carries the direction
STS3215_SIGN_BITS = {"Homing_Offset": 11, "Goal_Velocity": 15, "Present_Velocity": 15, "Present_Load": 10}

XL330 = {
    "Model_Number": (0, 2, "R"),
    "Firmware_Version": (6, 1, "R"),
    "ID": (7, 1, "RW"),
    "Baud_Rate": (8, 1, "RW"),
    "Return_Delay_Time": (9, 1, "RW"),
    "Drive_Mode": (10, 1, "RW"),
    "Operating_Mode": (11, 1, "RW"),
    "Homing_Offset": (20, 4, "RW"),
    "Max_Voltage_Limit": (32, 2, "RW"),
    "Min_Voltage_Limit": (34, 2, "RW"),
    "Max_Position_Limit": (48, 4, "RW"),
    "Min_Position_Limit": (52, 4, "RW"),
    "Torque_Enable": (64, 1, "RW"),
    "LED": (65, 1, "RW"),
    "Status_Return_Level": (68, 1, "RW"),
    "Hardware_Error_Status": (70, 1, "R"),
    "Goal_Current": (102, 2, "RW"),
    "Goal_Velocity": (104, 4, "RW"),
    "Profile_Acceleration": (108, 4, "RW"),
    "Profile_Velocity": (112, 4, "RW"),
    "Goal_Position": (116, 4, "RW"),
    "Moving": (122, 1, "R"),
    "Present_Current": (126, 2, "R"),
    "Present_Velocity": (128, 4, "R"),
    "Present_Position": (132, 4, "R"),
    "Present_Input_Voltage": (144, 2, "R"),
    "Present_Temperature": (146, 1, "R"),
}
# two's-complement fields
XL330_SIGNED = {
    "Homing_Offset",
    "Goal_Current",
    "Goal_Velocity",
    "Goal_Position",
    "Present_Current",
    "Present_Velocity",
    "Present_Position",
}


def _rows(table: dict[str, Register]) -> dict[str, tuple[int, int, str]]:
    return {name: (r.address, r.size, r.access) for name, r in table.items()}


def test_sts3215_addresses_sizes_and_access_are_the_datasheets() -> None:
    assert _rows(sts.STS_TABLE) == STS3215
    signs = {name: r.sign_bit for name, r in sts.STS_TABLE.items() if r.sign_bit is not None}
    assert signs == STS3215_SIGN_BITS
    assert not any(r.twos_complement for r in sts.STS_TABLE.values())


def test_xl330_addresses_sizes_and_access_are_the_emanuals() -> None:
    assert _rows(dxl.X_TABLE) == XL330
    assert {name for name, r in dxl.X_TABLE.items() if r.twos_complement} == XL330_SIGNED
    assert all(r.sign_bit is None for r in dxl.X_TABLE.values())


def test_model_numbers_and_units() -> None:
    assert sts.MODEL_NUMBERS == {777: "sts3215", 2825: "sts3250"}
    assert sts.STS3215_MODEL_NUMBER == 777
    assert dxl.MODEL_NUMBERS == {1190: "xl330-m077", 1200: "xl330-m288", 1060: "xl430-w250"}
    assert dxl.XL330_M288_MODEL_NUMBER == 1200
    assert sts.RESOLUTION == dxl.RESOLUTION == 4096
    assert sts.VOLTAGE_UNIT_V == dxl.VOLTAGE_UNIT_V == 0.1


def test_the_control_loops_block_is_one_contiguous_read() -> None:
    # Goal_Position .. Present_Temperature, the bus's single sync read per tick
    sts_first, sts_last = sts.STS_TABLE["Goal_Position"], sts.STS_TABLE["Present_Temperature"]
    assert (sts_first.address, sts_last.address + sts_last.size - sts_first.address) == (42, 22)
    dxl_first, dxl_last = dxl.X_TABLE["Goal_Position"], dxl.X_TABLE["Present_Temperature"]
    assert (dxl_first.address, dxl_last.address + dxl_last.size - dxl_first.address) == (116, 31)
