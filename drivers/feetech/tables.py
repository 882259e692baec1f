"""Feetech STS/SMS control table (STS3215 on the SO-100 / SO-101 arms).

Source: Feetech STS/SMS servo user manual, memory table
(doc.feetech.cn, document FT-SMS-STS-emanual-229f4476422d4059abfb1cb0). Addresses 0-39 are EEPROM
(kept across power cycles, writable only after Lock=0), 40 and up are SRAM. Multi-byte fields are
little-endian; signed fields use sign-magnitude with the sign in the listed bit.
"""

from __future__ import annotations

from drivers.registers import Register, RegisterTable

STS_TABLE: RegisterTable = {
    # EEPROM
    "Firmware_Major_Version": Register(0, 1, "R"),
    "Firmware_Minor_Version": Register(1, 1, "R"),
    "Model_Number": Register(3, 2, "R"),
    "ID": Register(5, 1),
    "Baud_Rate": Register(6, 1),
    "Return_Delay_Time": Register(7, 1),
    "Response_Status_Level": Register(8, 1),
    "Min_Position_Limit": Register(9, 2),
    "Max_Position_Limit": Register(11, 2),
    "Max_Temperature_Limit": Register(13, 1),
    "Max_Voltage_Limit": Register(14, 1),
    "Min_Voltage_Limit": Register(15, 1),
    "Max_Torque_Limit": Register(16, 2),
    "P_Coefficient": Register(21, 1),
    "D_Coefficient": Register(22, 1),
    "I_Coefficient": Register(23, 1),
    "Homing_Offset": Register(31, 2, sign_bit=11),
    "Operating_Mode": Register(33, 1),
    # SRAM
    "Torque_Enable": Register(40, 1),
    "Acceleration": Register(41, 1),
    "Goal_Position": Register(42, 2),
    "Goal_Time": Register(44, 2),
    "Goal_Velocity": Register(46, 2, sign_bit=15),
    "Torque_Limit": Register(48, 2),
    "Lock": Register(55, 1),
    "Present_Position": Register(56, 2, "R"),
    "Present_Velocity": Register(58, 2, "R", sign_bit=15),
    "Present_Load": Register(60, 2, "R", sign_bit=10),
    "Present_Voltage": Register(62, 1, "R"),
    "Present_Temperature": Register(63, 1, "R"),
    "Status": Register(65, 1, "R"),
    "Moving": Register(66, 1, "R"),
    "Present_Current": Register(69, 2, "R"),
}

# Model numbers read from Model_Number (as published by Feetech; the STS3215 reports 777).
MODEL_NUMBERS: dict[int, str] = {777: "sts3215", 2825: "sts3250"}
STS3215_MODEL_NUMBER = 777
# 12-bit magnetic encoder: 4096 steps per turn.
RESOLUTION = 4096
# Units: Present_Voltage is 0.1 V, Present_Load 0.1 % of max torque, Present_Velocity steps/s.
VOLTAGE_UNIT_V = 0.1
