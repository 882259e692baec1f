"""Fixtures: simulated arms on real ptys, for both protocols."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from drivers.bus import SerialServoBus
from drivers.calibration import Calibration, load_calibration
from drivers.sim.arm import SimArm
from drivers.sim.servo import Faults

REPO = Path(__file__).resolve().parents[2]
SO101_SIM = REPO / "configs" / "calibration" / "so101_sim.toml"
PROTOCOLS = ("feetech", "dynamixel")


@pytest.fixture(scope="session")
def so101() -> Calibration:
    return load_calibration(SO101_SIM)


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def arm(protocol: str, so101: Calibration) -> Iterator[SimArm]:
    """A connected SO-101 sim arm; small timeout so fault tests stay fast. Connected with a generous one:
    on a loaded machine a 20 ms connect (ping and set-up of six servos) can time out before any test."""
    sim_arm = SimArm.start(so101, protocol=protocol, timeout_ms=500, retries=2)  # type: ignore[arg-type]
    sim_arm.bus.timeout_s = 0.02
    sim_arm.bus._port.timeout = 0.02  # type: ignore[union-attr]
    try:
        yield sim_arm
    finally:
        for servo in sim_arm.simulator.servos.values():
            servo.faults = Faults()
        sim_arm.close()


@pytest.fixture
def bus(arm: SimArm) -> SerialServoBus:
    return arm.bus
