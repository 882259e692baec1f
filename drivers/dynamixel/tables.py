"""Dynamixel X-series control table (XL330 / XL430 on the Koch arm).

Source: ROBOTIS e-manual, control table of the XL330-M288-T and XL430-W250-T
(emanual.robotis.com/docs/en/dxl/x/xl330-m288/#control-table and .../xl430-w250/#control-table);
both share these addresses. Addresses 0-63 are EEPROM (writable only with torque off). Values are
little-endian two's complement where signed.
"""

from __future__ import annotations

from drivers.registers import Register, RegisterTable

X_TABLE: RegisterTable = {
    # EEPROM
    "Model_Number": Register(0, 2, "R"),
    "Firmware_Version": Register(6, 1, "R"),
    "ID": Register(7, 1),
    "Baud_Rate": Register(8, 1),
    "Return_Delay_Time": Register(9, 1),
    "Drive_Mode": Register(10, 1),
    "Operating_Mode": Register(11, 1),
    "Homing_Offset": Register(20, 4, twos_complement=True),
    "Max_Voltage_Limit": Register(32, 2),
    "Min_Voltage_Limit": Register(34, 2),
    "Max_Position_Limit": Register(48, 4),
    "Min_Position_Limit": Register(52, 4),
    # RAM
    "Torque_Enable": Register(64, 1),
    "LED": Register(65, 1),
    "Status_Return_Level": Register(68, 1),
    "Hardware_Error_Status": Register(70, 1, "R"),
    "Goal_Current": Register(102, 2, twos_complement=True),
    "Goal_Velocity": Register(104, 4, twos_complement=True),
    "Profile_Acceleration": Register(108, 4),
    "Profile_Velocity": Register(112, 4),
    "Goal_Position": Register(116, 4, twos_complement=True),
    "Moving": Register(122, 1, "R"),
    "Present_Current": Register(126, 2, "R", twos_complement=True),
    "Present_Velocity": Register(128, 4, "R", twos_complement=True),
    "Present_Position": Register(132, 4, "R", twos_complement=True),
    "Present_Input_Voltage": Register(144, 2, "R"),
    "Present_Temperature": Register(146, 1, "R"),
}

# Model numbers from each model's e-manual page (address 0).
MODEL_NUMBERS: dict[int, str] = {1190: "xl330-m077", 1200: "xl330-m288", 1060: "xl430-w250"}
XL330_M288_MODEL_NUMBER = 1200
RESOLUTION = 4096
VOLTAGE_UNIT_V = 0.1
