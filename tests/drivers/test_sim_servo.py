"""One simulated servo on a clock the test moves: its control table at power-up byte for byte, the
shaft following its goal at the speed limit, limits, homing offsets, the write logs, faults.

Register addresses and encodings are the datasheets' (STS3215 memory table, XL330 control table),
written out here; multi-byte values are little-endian.
"""

from __future__ import annotations

from drivers.sim.dialect import DYNAMIXEL, FEETECH
from drivers.sim.servo import Faults, SimServo


def h(text: str) -> bytes:
    return bytes.fromhex(text)


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def feetech(clock: Clock, position: int | None = 1000, **kw: int | float) -> SimServo:
    return SimServo(3, FEETECH, position=position, clock=clock, **kw)  # type: ignore[arg-type]


# ---- power-up --------------------------------------------------------------------------------


def test_a_feetech_servo_at_power_up_byte_for_byte() -> None:
    servo = SimServo(3, FEETECH, position=1000, homing_offset=-20, clock=Clock())
    expected = bytearray(256)
    expected[3:5] = h("09 03")  # Model_Number 777
    expected[5] = 3  # ID
    expected[9:11] = h("00 00")  # Min_Position_Limit
    expected[11:13] = h("FF 0F")  # Max_Position_Limit 4095
    expected[31:33] = h("14 08")  # Homing_Offset -20: 20 with the direction bit 11
    expected[42:44] = h("E8 03")  # Goal_Position 1000, where it rests
    expected[56:58] = h("E8 03")  # Present_Position 1000
    expected[62] = 120  # Present_Voltage 12.0 V
    expected[63] = 31  # Present_Temperature
    assert servo.mem == expected
    assert (servo.id, servo.position, servo.velocity, servo.speed) == (3, 1000.0, 0.0, 3000.0)
    assert (servo.goal, servo.torque) == (1000, False)
    assert servo.faults == Faults()
    assert list(servo.goal_log) == list(servo.torque_log) == []


def test_a_dynamixel_servo_at_power_up_byte_for_byte() -> None:
    servo = SimServo(2, DYNAMIXEL, homing_offset=-10, speed_steps_s=500.0, clock=Clock())
    expected = bytearray(256)
    expected[0:2] = h("B0 04")  # Model_Number 1200 (XL330-M288)
    expected[6] = 46  # Firmware_Version
    expected[7] = 2  # ID
    expected[20:24] = h("F6 FF FF FF")  # Homing_Offset -10, two's complement
    expected[48:52] = h("FF 0F 00 00")  # Max_Position_Limit 4095
    expected[116:120] = h("00 08 00 00")  # Goal_Position 2048: mid-range without a position
    expected[132:136] = h("00 08 00 00")  # Present_Position 2048
    expected[144:146] = h("32 00")  # Present_Input_Voltage 5.0 V
    expected[146] = 31  # Present_Temperature
    assert servo.mem == expected
    assert (servo.position, servo.speed) == (2048.0, 500.0)


def test_get_decodes_a_named_field() -> None:
    servo = SimServo(2, DYNAMIXEL, homing_offset=-10, clock=Clock())
    assert servo.get("Homing_Offset") == -10
    assert servo.get("Model_Number") == 1200
    assert servo.get("Present_Position") == 2048


# ---- following the goal ------------------------------------------------------------------


def test_with_torque_on_the_shaft_moves_toward_the_goal_at_the_speed_limit() -> None:
    clock = Clock()
    servo = feetech(clock)
    servo.write(40, h("01"))  # Torque_Enable
    servo.write(42, h("E1 05"))  # Goal_Position 1505
    clock.t += 0.125  # 3000 steps/s for 125 ms: 375 steps
    # Present_Position 1375, Present_Velocity 3000, Present_Load 300 (30 % at full speed), Moving
    assert servo.read(56, 11) == h("5F 05 B8 0B 2C 01 78 1F 00 00 01")
    assert (servo.position, servo.velocity) == (1375.0, 3000.0)
    clock.t += 1.0  # the 130 steps left, at 130 steps/s over that second
    # velocity 130, load round(130 / 3000 * 300) = 13, still moving
    assert servo.read(56, 11) == h("E1 05 82 00 0D 00 78 1F 00 00 01")
    # no time passed: stopped (Present_Voltage 120 and Present_Temperature 31 in between)
    assert servo.read(56, 11) == h("E1 05 00 00 00 00 78 1F 00 00 00")


def test_moving_down_reads_negative_velocity_and_load() -> None:
    clock = Clock()
    servo = feetech(clock)
    servo.write(40, h("01"))
    servo.write(42, h("F4 01"))  # Goal_Position 500
    clock.t += 0.125
    # 625; velocity -3000: 3000 with the direction bit 15; load -300: 300 with the direction bit 10
    assert servo.read(56, 6) == h("71 02 B8 8B 2C 05")
    assert servo.velocity == -3000.0


def test_a_slow_move_is_still_moving() -> None:
    clock = Clock()
    servo = feetech(clock)
    servo.write(40, h("01"))
    servo.write(42, h("F2 03"))  # Goal_Position 1010
    clock.t += 20.0  # 10 steps in 20 s: 0.5 steps/s
    assert servo.read(66, 1) == h("01")
    assert servo.velocity == 0.5


def test_a_slow_servo_moving_up_reads_positive_load() -> None:
    clock = Clock()
    servo = feetech(clock, speed_steps_s=1.0)
    servo.write(40, h("01"))
    servo.write(42, h("E9 03"))  # Goal_Position 1001
    clock.t += 2.0  # 1 step in 2 s: 0.5 steps/s, half the speed limit
    # load round(0.5 / 1 * 300) = 150, positive: no direction bit; velocity round(0.5) = 0
    assert servo.read(56, 6) == h("E9 03 00 00 96 00")


def test_dynamixel_velocity_in_its_units_and_load_as_current() -> None:
    clock = Clock()
    servo = SimServo(1, DYNAMIXEL, position=1000, clock=clock)
    servo.write(64, h("01"))
    servo.write(116, h("DC 05 00 00"))  # Goal_Position 1500
    clock.t += 0.125
    # 1375; 3000 steps/s / (0.229 rpm x 4096 / 60 = 15.633 steps/s) = 191.9 -> 192 units; current 300
    assert servo.read(126, 10) == h("2C 01 C0 00 00 00 5F 05 00 00")
    servo.write(116, h("E8 03 00 00"))  # back to 1000
    clock.t += 0.125
    assert servo.read(126, 10) == h("D4 FE 40 FF FF FF E8 03 00 00")  # -300, -192, 1000


def test_with_torque_off_the_shaft_stays() -> None:
    clock = Clock()
    servo = feetech(clock)
    servo.write(42, h("4C 04"))
    clock.t += 1.0
    assert servo.read(56, 11) == h("E8 03 00 00 00 00 78 1F 00 00 00")
    assert servo.velocity == 0.0


def test_a_clock_that_goes_back_moves_nothing_and_counts_from_there() -> None:
    clock = Clock()
    servo = feetech(clock)
    servo.write(40, h("01"))
    servo.write(42, h("E1 05"))  # Goal_Position 1505
    clock.t -= 1.0
    assert servo.read(56, 2) == h("E8 03")
    assert servo.velocity == 0.0
    clock.t += 0.125  # 125 ms after the earlier time, not 1.125 s after the first: 375 steps
    assert servo.read(56, 2) == h("5F 05")


def test_two_reads_at_the_same_instant_with_torque_on() -> None:
    clock = Clock()
    servo = feetech(clock)
    servo.write(40, h("01"))
    servo.write(42, h("4C 04"))
    assert servo.read(56, 2) == h("E8 03")  # no time has passed since the write
    assert (servo.velocity, servo.position) == (0.0, 1000.0)


def test_a_servo_with_speed_zero_never_moves_and_reads_no_load() -> None:
    clock = Clock()
    servo = feetech(clock, speed_steps_s=0.0)
    servo.write(40, h("01"))
    servo.write(42, h("4C 04"))
    clock.t += 1.0
    assert servo.read(56, 6) == h("E8 03 00 00 00 00")


# ---- limits, homing offset, logs -------------------------------------------------------------


def test_position_limits_clamp_the_shaft_and_the_goal_but_the_log_keeps_what_was_heard() -> None:
    clock = Clock()
    servo = feetech(clock)
    servo.write(9, h("1A 04"))  # Min_Position_Limit 1050: the shaft is put inside at once
    assert servo.read(56, 2) == h("1A 04")
    servo.write(11, h("B8 0B"))  # Max_Position_Limit 3000
    clock.t += 0.5
    servo.write(42, h("AC 0D"))  # Goal_Position 3500
    assert servo.read(42, 2) == h("B8 0B")  # kept at 3000
    clock.t += 0.5
    servo.write(42, h("F4 01"))  # 500
    assert servo.goal == 1050
    assert list(servo.goal_log) == [(100.5, 3500), (101.0, 500)]


def test_a_feetech_homing_offset_moves_the_reported_position_down() -> None:
    clock = Clock()
    servo = feetech(clock, position=2048)
    servo.write(31, h("64 00"))  # Homing_Offset 100: Present_Position = actual - offset
    assert servo.read(56, 2) == h("9C 07")  # 1948
    servo.write(31, h("64 08"))  # -100
    assert servo.read(56, 2) == h("64 08")  # 2148
    servo.write(30, h("00 00 00"))  # a block starting before the offset, setting it to 0
    assert servo.read(56, 2) == h("00 08")


def test_a_dynamixel_homing_offset_moves_the_reported_position_up() -> None:
    servo = SimServo(1, DYNAMIXEL, clock=Clock())
    servo.write(20, h("64 00 00 00"))  # Homing_Offset 100: Present_Position = actual + offset
    assert servo.read(132, 4) == h("64 08 00 00")  # 2148


def test_a_write_next_to_a_field_is_not_a_write_of_it() -> None:
    clock = Clock()
    servo = feetech(clock)
    servo.write(32, h("00"))  # the byte after Homing_Offset's first
    servo.write(38, h("00 00"))  # the two bytes before Torque_Enable
    servo.write(40, h("01 00"))  # Torque_Enable and the byte after it, before Goal_Position
    servo.write(44, h("00 00"))  # after Goal_Position
    assert servo.read(56, 2) == h("E8 03")
    assert list(servo.torque_log) == [(100.0, 1)]
    assert list(servo.goal_log) == []


def test_torque_writes_are_logged_with_the_time_and_value() -> None:
    clock = Clock()
    servo = feetech(clock)
    servo.write(40, h("01"))
    clock.t = 100.5
    servo.write(40, h("00"))
    clock.t = 101.0
    servo.write(38, h("00 00 01"))  # a block ending on Torque_Enable
    assert list(servo.torque_log) == [(100.0, 1), (100.5, 0), (101.0, 1)]
    assert servo.torque is True


# ---- faults ------------------------------------------------------------------------------


def test_fault_counters_count_down_and_minus_one_lasts() -> None:
    assert Faults.take(0) == (False, 0)
    assert Faults.take(1) == (True, 0)
    assert Faults.take(3) == (True, 2)
    assert Faults.take(-1) == (True, -1)


def test_faults_start_cleared() -> None:
    f = Faults()
    assert (f.no_reply, f.bad_checksum, f.short_reply, f.ignore_writes, f.error_bits, f.delay_s) == (0, 0, 0, 0, 0, 0.0)


def test_feetech_error_bits_go_in_the_status_byte() -> None:
    servo = feetech(Clock())
    assert servo.status_error() == 0
    servo.faults.error_bits = 0x24
    assert servo.status_error() == 0x24
    servo.read(0, 1)
    assert servo.mem[70] == 0  # no Hardware_Error_Status on a Feetech servo


def test_dynamixel_error_bits_set_the_alert_and_hardware_error_status() -> None:
    servo = SimServo(1, DYNAMIXEL, clock=Clock())
    assert servo.status_error() == 0
    servo.faults.error_bits = 0x24
    assert servo.status_error() == 0x80
    assert servo.read(70, 1) == h("24")
    servo.faults.error_bits = 0
    assert servo.read(70, 1) == h("00")


def test_dynamixel_ping_reply_is_model_number_and_firmware() -> None:
    assert SimServo(1, DYNAMIXEL, clock=Clock()).ping_params() == h("B0 04 2E")


def test_the_logs_keep_the_newest_2048_writes() -> None:
    clock = Clock()
    servo = feetech(clock)
    for i in range(2050):
        clock.t = 100.0 + i
        servo.write(40, bytes([i % 2, 0, i % 256, i // 256]))  # Torque_Enable and Goal_Position together
    assert len(servo.goal_log) == len(servo.torque_log) == 2048
    assert servo.goal_log[0] == (102.0, 2) and servo.goal_log[-1] == (2149.0, 2049)
    assert servo.torque_log[0] == (102.0, 0) and servo.torque_log[-1] == (2149.0, 1)
