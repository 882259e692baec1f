"""The daemon's hold on the arm: health tracking and a disconnect that reports a failed torque-off."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from drivers.calibration import load_calibration
from drivers.config import ArmConfig
from drivers.sim.arm import SimArm
from runtime.arm_monitor import ArmMonitor
from runtime.paths import configs_dir


@pytest.fixture
def sim_arm() -> Iterator[SimArm]:
    arm = SimArm.start(load_calibration(configs_dir() / "calibration" / "so101_sim.toml"))
    yield arm
    arm.close()


def test_health_follows_the_port(sim_arm: SimArm, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    monitor = ArmMonitor(ArmConfig(kind="sim"), bus=sim_arm.bus)
    monitor.open()
    assert monitor.healthy and monitor.summary()["positions"]["gripper"] == pytest.approx(50.0, abs=0.5)
    sim_arm.simulator.unplug()
    monitor.poll()
    monitor.poll()
    assert not monitor.healthy and monitor.failures == 2
    assert caplog.text.count("arm read failed") == 1  # logged once, not every poll
    sim_arm.simulator.replug()
    monitor.poll()
    assert monitor.healthy
    assert "arm read works again" in caplog.text
    assert monitor.close()


def test_failed_torque_off_is_reported(sim_arm: SimArm, caplog: pytest.LogCaptureFixture) -> None:
    monitor = ArmMonitor(ArmConfig(kind="sim"), bus=sim_arm.bus)
    monitor.open()
    sim_arm.simulator.unplug()
    assert monitor.close() is False
    assert "turning torque off failed" in caplog.text
    assert monitor.bus is None
