"""The sim arm: simulated servos seeded from a calibration, and an ordinary bus on their pty."""

from __future__ import annotations

import os
from typing import Any

import pytest

from drivers.calibration import Calibration, JointCalibration
from drivers.dynamixel.bus import DynamixelBus
from drivers.feetech.bus import FeetechBus
from drivers.sim import arm as sim_arm
from drivers.sim.arm import SimArm, simulator_for
from drivers.sim.simulator import ServoSimulator


def two_joints() -> Calibration:
    return Calibration(
        {
            "elbow": JointCalibration(id=4, range_min=1000, range_max=2000, homing_offset=-30),
            "wrist": JointCalibration(id=7, range_min=100, range_max=300),
        }
    )


def test_the_simulator_holds_the_calibrations_offsets_and_rests_mid_range() -> None:
    sim = simulator_for(two_joints())
    try:
        assert sim.dialect.name == "feetech"
        assert [(s.id, s.position, s.get("Homing_Offset")) for s in sim.servos.values()] == [
            (4, 1500.0, -30),
            (7, 200.0, 0),
        ]
    finally:
        sim.stop()
    sim = simulator_for(two_joints(), "dynamixel")
    try:
        assert sim.dialect.name == "dynamixel"
    finally:
        sim.stop()


def test_a_mid_range_between_two_ticks_is_rounded() -> None:
    sim = simulator_for(Calibration({"j": JointCalibration(id=1, range_min=10, range_max=21)}))  # 15.5
    try:
        assert sim.servo(1).position == 16.0
    finally:
        sim.stop()


def test_start_hands_the_bus_the_simulators_port_and_its_defaults() -> None:
    arm = SimArm.start(two_joints(), connect=False)
    try:
        bus = arm.bus
        assert type(bus) is FeetechBus and arm.simulator.dialect.name == "feetech"
        assert bus.port == arm.simulator.port and arm.simulator.plugged
        assert (bus.timeout_s, bus.retries, bus.disable_torque_on_disconnect, bus.verify_goals) == (
            0.02,
            2,
            True,
            False,
        )
        assert not bus.is_connected
    finally:
        arm.close()


def test_start_passes_every_setting_on_and_connects() -> None:
    arm = SimArm.start(
        two_joints(),
        protocol="dynamixel",
        timeout_ms=500,
        retries=0,
        disable_torque_on_disconnect=False,
        verify_goals=True,
    )
    try:
        bus = arm.bus
        assert type(bus) is DynamixelBus and arm.simulator.dialect.name == "dynamixel"
        assert (bus.timeout_s, bus.retries, bus.disable_torque_on_disconnect, bus.verify_goals) == (0.5, 0, False, True)
        assert bus.is_connected
        assert arm.simulator.received[0x01] >= 2  # both servos pinged on the simulator
    finally:
        arm.close()


def test_closing_the_bus_stops_the_simulator() -> None:
    arm = SimArm.start(two_joints(), connect=False)
    port = arm.simulator.port
    arm.bus.disconnect()
    assert not arm.simulator.plugged and not os.path.lexists(port)


def test_close_and_the_with_block_stop_both() -> None:
    with SimArm.start(two_joints(), timeout_ms=500) as arm:
        assert arm.bus.is_connected
        port = arm.simulator.port
    assert not arm.bus.is_connected
    assert not arm.simulator.plugged and not os.path.lexists(port)


def test_a_bus_that_fails_to_start_leaves_no_simulator_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[ServoSimulator] = []

    def recording_simulator_for(*args: Any) -> ServoSimulator:
        sim = simulator_for(*args)
        made.append(sim)
        return sim

    class Refused(Exception):
        pass

    def failing_bus(*args: Any, **kwargs: Any) -> Any:
        raise Refused("no bus")

    monkeypatch.setattr(sim_arm, "simulator_for", recording_simulator_for)
    monkeypatch.setattr(sim_arm, "bus_class", lambda protocol: failing_bus)
    with pytest.raises(Refused):
        SimArm.start(two_joints())
    assert len(made) == 1 and made[0]._thread is None
    assert not made[0].plugged and not os.path.lexists(made[0].port)


def test_a_bus_that_cannot_disconnect_still_stops_the_simulator() -> None:
    class StuckBus:
        def disconnect(self) -> None:
            raise OSError("port gone")

    sim = ServoSimulator("feetech", (1,)).start()
    arm = SimArm(sim, StuckBus())  # type: ignore[arg-type]
    with pytest.raises(OSError, match="port gone"):
        arm.close()
    assert sim._thread is None and not sim.plugged
