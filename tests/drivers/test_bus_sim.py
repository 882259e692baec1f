"""Every bus operation against the simulator over a real pty, for both protocols."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from drivers.bus import GoalTypeError, GoalValueError, SerialServoBus
from drivers.calibration import Calibration
from drivers.errors import BusError, NotConnectedError, UnknownJointError
from drivers.sim.arm import SimArm
from drivers.sim.simulator import ServoSimulator


def test_scan_and_ping(bus: SerialServoBus, protocol: str) -> None:
    found = bus.scan(range(0, 9), timeout_ms=200)  # generous: a loaded machine must not lose a servo
    expected_model = 777 if protocol == "feetech" else 1200
    assert found == dict.fromkeys(range(1, 7), expected_model)
    assert bus.ping(42) is None


def test_read_state_reports_all_values(bus: SerialServoBus, protocol: str) -> None:
    state = bus.read_state()
    assert list(state) == list(bus.joints)
    for name, s in state.items():
        assert (
            s.position == pytest.approx(0.0, abs=0.1) if name != "gripper" else s.position == pytest.approx(50, abs=0.1)
        )
        assert s.voltage_v == (12.0 if protocol == "feetech" else 5.0)
        assert s.temperature_c == 31


def test_write_goals_moves_joints(arm: SimArm) -> None:
    bus = arm.bus
    bus.enable_torque()
    assert all(s.torque for s in arm.simulator.servos.values())
    sent = bus.write_goals({"shoulder_pan": 30.0, "gripper": 80.0})
    bus.read_positions()  # a sync write has no reply; one round trip guarantees the sim has handled it
    assert sent["shoulder_pan"] == pytest.approx(30.0, abs=0.1)
    assert sent["elbow_flex"] == pytest.approx(0.0, abs=0.1)  # kept its goal, re-sent with the set
    cal = bus.calibration.joints
    assert arm.simulator.servo(1).goal == cal["shoulder_pan"].to_raw(30.0)[0]
    assert arm.simulator.servo(6).goal == cal["gripper"].to_raw(80.0)[0]
    assert bus.read_state()["shoulder_pan"].goal == pytest.approx(30.0, abs=0.1)


def test_torque_on_switches_torque_and_writes_no_goal(arm: SimArm) -> None:
    bus = arm.bus
    before = {i: len(s.goal_log) for i, s in arm.simulator.servos.items()}
    bus.torque_on()
    bus.ping(1)  # one round trip: the sim has handled every write
    assert all(s.torque for s in arm.simulator.servos.values())
    assert {i: len(s.goal_log) for i, s in arm.simulator.servos.items()} == before  # the caller's goals stand


def test_enable_torque_still_holds_where_each_joint_is_first(arm: SimArm) -> None:
    bus = arm.bus
    bus.enable_torque()
    bus.ping(1)
    for servo in arm.simulator.servos.values():
        assert servo.torque and servo.goal_log and servo.goal_log[-1][1] == servo.position


def test_positions_follow_goals_at_the_speed_limit(protocol: str) -> None:
    now = [0.0]
    sim = ServoSimulator(protocol, [1], positions={1: 2048}, speed_steps_s=1000, clock=lambda: now[0])  # type: ignore[arg-type]
    with sim:
        bus = SimBus(protocol)(sim.port, Calibration.uncalibrated([1]))
        with bus:
            bus.enable_torque()
            bus.write_goals({"id1": 90.0})  # 1024 ticks away
            bus.ping(1)  # round trip, so the sim has the goal before the clock moves
            now[0] += 0.1
            assert bus.read_state()["id1"].raw_position == 2048 + 100
            now[0] += 10
            assert bus.read_state()["id1"].raw_position == bus.calibration.joints["id1"].to_raw(90.0)[0]


def SimBus(protocol: str) -> type[SerialServoBus]:
    from drivers.vendors import bus_class

    return bus_class(protocol)


def test_register_read_write(bus: SerialServoBus) -> None:
    bus.write_register("wrist_flex", "Torque_Enable", 1)
    assert bus.read_register("wrist_flex", "Torque_Enable") == 1
    assert bus.read_register("shoulder_pan", "Homing_Offset") == -1470
    with pytest.raises(BusError, match="read-only"):
        bus.write_register("wrist_flex", "Present_Position", 3)
    with pytest.raises(BusError, match=r"unknown .* register 'Bogus'"):
        bus.read_register("wrist_flex", "Bogus")


def test_unknown_joint_and_bad_goals(bus: SerialServoBus) -> None:
    with pytest.raises(UnknownJointError, match=r"unknown joint 'elbow'.*shoulder_pan"):
        bus.write_goals({"elbow": 1.0})
    with pytest.raises(GoalTypeError, match="'wrist_flex' must be a number, got str"):
        bus.write_goals({"wrist_flex": "10"})  # type: ignore[dict-item]
    with pytest.raises(GoalTypeError):
        bus.write_goals({"wrist_flex": True})
    with pytest.raises(GoalValueError, match="finite"):
        bus.write_goals({"wrist_flex": float("nan")})
    with pytest.raises(GoalTypeError, match="mapping"):
        bus.write_goals([1.0, 2.0])  # type: ignore[arg-type]


def test_goal_out_of_range_is_clamped_and_logged(arm: SimArm, caplog: pytest.LogCaptureFixture) -> None:
    bus = arm.bus
    cal = bus.calibration.joints["shoulder_pan"]
    with caplog.at_level(logging.WARNING, logger="drivers.bus"):
        sent = bus.write_goals({"shoulder_pan": 400.0, "gripper": -20.0})
    bus.read_positions()  # round trip: the sim has handled the sync write
    assert arm.simulator.servo(1).goal == cal.range_max
    assert sent["shoulder_pan"] == pytest.approx(cal.user_range[1])
    assert sent["gripper"] == 0.0
    assert "goal for shoulder_pan clamped: 400.00" in caplog.text
    assert "goal for gripper clamped" in caplog.text


def test_not_connected_and_calibration_mismatch(protocol: str, so101: Calibration) -> None:
    sim = ServoSimulator(protocol, range(1, 7))  # type: ignore[arg-type]
    with sim:
        bus = SimBus(protocol)(sim.port, so101)
        with pytest.raises(NotConnectedError):
            bus.read_positions()
        with pytest.raises(BusError, match=r"homing offsets .* differ .*shoulder_pan: servo has 0, file has -1470"):
            bus.connect()
        assert not bus.is_connected
        bus.on_calibration_mismatch = "write"
        with bus:
            assert sim.servo(1).get("Homing_Offset") == -1470
        if protocol == "feetech":
            assert sim.servo(1).get("Lock") == 1  # EEPROM locked again after the write


def test_missing_servo_on_connect(protocol: str, so101: Calibration) -> None:
    with ServoSimulator(protocol, range(1, 6)) as sim:  # type: ignore[arg-type]
        bus = SimBus(protocol)(sim.port, so101, retries=0, on_calibration_mismatch="ignore")
        with pytest.raises(BusError, match=r"no reply .* from gripper \(id 6\)"):
            bus.connect()


def test_drive_mode_mirrors_a_joint_on_the_wire(protocol: str, so101: Calibration) -> None:
    # A mirrored shoulder_pan: +30 degrees must reach the servo as ticks below the middle of its range,
    # and ticks above the middle must read back as negative degrees.
    joints = dict(so101.joints)
    joints["shoulder_pan"] = replace(joints["shoulder_pan"], drive_mode=1)
    cal = Calibration(joints, model=so101.model)
    pan = cal.joints["shoulder_pan"]
    ticks_per_deg = (pan.resolution - 1) / 360
    with SimArm.start(cal, protocol=protocol) as arm:  # type: ignore[arg-type]
        servo = arm.simulator.servo(pan.id)
        servo.position = pan.mid + 100  # torque is off: the shaft stays where it is put
        assert arm.bus.read_positions()["shoulder_pan"] == pytest.approx(-100 / ticks_per_deg, abs=0.01)
        arm.bus.enable_torque()
        arm.bus.write_goals({"shoulder_pan": 30.0, "elbow_flex": 30.0})
        arm.bus.ping(pan.id)  # one round trip: the sim has handled the sync write
        assert servo.goal_log[-1][1] == round(pan.mid - 30 * ticks_per_deg)
        elbow = cal.joints["elbow_flex"]
        assert arm.simulator.servo(elbow.id).goal_log[-1][1] == round(elbow.mid + 30 * ticks_per_deg)
        assert arm.bus.read_state()["shoulder_pan"].goal == pytest.approx(30.0, abs=0.05)
