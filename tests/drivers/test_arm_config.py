"""The ``[arm]`` table: its defaults and every refusal word for word, at the edges of each range."""

from __future__ import annotations

import pytest

from drivers.config import ArmConfig
from drivers.configtools import from_mapping
from drivers.errors import ConfigError


def test_the_defaults_are_the_simulated_so101() -> None:
    c = ArmConfig()
    assert (c.kind, c.port, c.baud, c.model) == ("sim", "", 1_000_000, "so101")
    assert c.calibration == "configs/calibration/so101_sim.toml"
    assert (c.disable_torque_on_disconnect, c.retries, c.timeout_ms, c.verify_goals) == (True, 2, 20, False)
    assert (c.on_calibration_mismatch, c.sim_protocol) == ("check", "feetech")


@pytest.mark.parametrize("kind", ["feetech", "dynamixel"])
def test_a_real_arm_needs_a_port(kind: str) -> None:
    with pytest.raises(ValueError) as e:
        ArmConfig(kind=kind)  # type: ignore[arg-type]
    assert str(e.value) == f"port is required for kind = {kind!r} (e.g. /dev/ttyACM0)"
    assert ArmConfig(kind=kind, port="/dev/ttyACM0").port == "/dev/ttyACM0"  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["sim", "none"])
def test_no_port_is_needed_without_a_real_arm(kind: str) -> None:
    assert ArmConfig(kind=kind).port == ""  # type: ignore[arg-type]


def test_retries_timeout_and_baud_are_refused_just_outside_their_ranges() -> None:
    for retries in (0, 20):
        assert ArmConfig(retries=retries).retries == retries
    for retries in (-1, 21):
        with pytest.raises(ValueError) as e:
            ArmConfig(retries=retries)
        assert str(e.value) == f"retries must be within 0..20, got {retries}"
    for timeout_ms in (1, 10_000):
        assert ArmConfig(timeout_ms=timeout_ms).timeout_ms == timeout_ms
    for timeout_ms in (0, 10_001):
        with pytest.raises(ValueError) as e:
            ArmConfig(timeout_ms=timeout_ms)
        assert str(e.value) == f"timeout_ms must be within 1..10000, got {timeout_ms}"
    assert ArmConfig(baud=1).baud == 1
    for baud in (0, -9600):
        with pytest.raises(ValueError) as e:
            ArmConfig(baud=baud)
        assert str(e.value) == f"baud must be positive, got {baud}"


def test_from_the_toml_table_a_refusal_names_the_table() -> None:
    with pytest.raises(ConfigError) as e:
        from_mapping(ArmConfig, {"kind": "dynamixel"}, "arm")
    assert str(e.value) == "arm: port is required for kind = 'dynamixel' (e.g. /dev/ttyACM0)"
    with pytest.raises(ConfigError) as e:
        from_mapping(ArmConfig, {"retries": 21}, "arm")
    assert str(e.value) == "arm: retries must be within 0..20, got 21"
