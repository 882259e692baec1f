"""Opening an arm from the ``[arm]`` table: every setting reaches the bus, the calibration path is
resolved where the table says, and ``kind = "sim"`` starts its simulator and stops it on the way out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from drivers.arm import open_arm, start_sim_arm
from drivers.calibration import load_calibration
from drivers.config import ArmConfig
from drivers.dynamixel.bus import DynamixelBus
from drivers.feetech.bus import FeetechBus
from drivers.sim.arm import simulator_for

REPO = Path(__file__).resolve().parents[2]
CALIBRATION = REPO / "configs" / "calibration" / "so101_sim.toml"


def test_no_arm_is_refused() -> None:
    with pytest.raises(ValueError) as e:
        open_arm(ArmConfig(kind="none"), base_dir=REPO)
    assert str(e.value) == 'arm.kind is "none": no arm is configured'


def test_a_real_arm_gets_every_setting_and_the_file_from_base_dir() -> None:
    with simulator_for(load_calibration(CALIBRATION), "feetech") as sim:
        config = ArmConfig(
            kind="feetech",
            port=sim.port,
            baud=500_000,
            calibration="so101_sim.toml",
            retries=4,
            timeout_ms=35,
            disable_torque_on_disconnect=False,
            verify_goals=True,
            on_calibration_mismatch="ignore",
        )
        bus = open_arm(config, base_dir=CALIBRATION.parent)
        try:
            assert type(bus) is FeetechBus
            assert bus.is_connected is True
            assert (bus.port, bus.baud, bus.retries, bus.timeout_s) == (sim.port, 500_000, 4, 0.035)
            assert (bus.disable_torque_on_disconnect, bus.verify_goals) == (False, True)
            assert bus.on_calibration_mismatch == "ignore"
            assert bus.calibration.source == str(CALIBRATION)
            assert bus.joints == ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
        finally:
            bus.disconnect()
        unconnected = open_arm(config, base_dir=CALIBRATION.parent, connect=False)
        assert type(unconnected) is FeetechBus and unconnected.is_connected is False


def test_an_absolute_calibration_ignores_base_dir_and_a_relative_one_without_it_is_from_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ArmConfig(kind="dynamixel", port="/dev/ttyACM9", calibration=str(CALIBRATION))
    bus = open_arm(config, base_dir=tmp_path, connect=False)
    assert type(bus) is DynamixelBus and bus.calibration.source == str(CALIBRATION)
    assert bus.port == "/dev/ttyACM9" and bus.is_connected is False
    monkeypatch.chdir(REPO)
    config = ArmConfig(kind="dynamixel", port="/dev/ttyACM9", calibration="configs/calibration/so101_sim.toml")
    bus = open_arm(config, connect=False)
    assert bus.calibration.source == "configs/calibration/so101_sim.toml"
    assert os.path.samefile(bus.calibration.source, CALIBRATION)


@pytest.mark.parametrize(("protocol", "cls"), [("feetech", FeetechBus), ("dynamixel", DynamixelBus)])
def test_a_sim_arm_runs_the_driver_asked_for_and_stops_with_it(protocol: str, cls: type) -> None:
    config = ArmConfig(
        kind="sim",
        sim_protocol=protocol,  # type: ignore[arg-type]
        calibration="configs/calibration/so101_sim.toml",
        retries=1,
        timeout_ms=30,
        disable_torque_on_disconnect=False,
        verify_goals=True,
    )
    bus = open_arm(config, base_dir=REPO)
    port = bus.port
    try:
        assert type(bus) is cls and bus.is_connected is True
        assert (bus.retries, bus.timeout_s, bus.disable_torque_on_disconnect, bus.verify_goals) == (
            1,
            0.03,
            False,
            True,
        )
        assert bus.calibration.source == str(CALIBRATION)
        assert os.path.lexists(port)
    finally:
        bus.disconnect()
    assert not os.path.lexists(port)  # the simulator stopped with the bus
    bus = open_arm(config, base_dir=REPO, connect=False)
    try:
        assert type(bus) is cls and bus.is_connected is False
        assert os.path.lexists(bus.port)  # the simulator runs, the driver has not connected
    finally:
        bus.disconnect()  # never connected: the simulator stops all the same
    assert not os.path.lexists(bus.port)


def test_start_sim_arm_connects_only_when_asked() -> None:
    calibration = load_calibration(CALIBRATION)
    config = ArmConfig(sim_protocol="dynamixel", retries=3, timeout_ms=25)
    arm = start_sim_arm(config, calibration, connect=False)
    try:
        assert arm.simulator.dialect.name == "dynamixel" and type(arm.bus) is DynamixelBus
        assert arm.bus.is_connected is False
        assert (arm.bus.retries, arm.bus.timeout_s) == (3, 0.025)
        assert (arm.bus.disable_torque_on_disconnect, arm.bus.verify_goals) == (True, False)
    finally:
        arm.close()
    arm = start_sim_arm(ArmConfig(), calibration)
    try:
        assert arm.simulator.dialect.name == "feetech" and arm.bus.is_connected is True
    finally:
        arm.close()
