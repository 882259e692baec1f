"""The ``[teleop]`` table: its defaults, every refusal word for word at its bound, and what it accepts."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from runtime.errors import ConfigError
from runtime.teleop.config import TeleopConfig

NUMBERS = ("handover_speed_deg_s", "handover_tolerance_deg", "deadman_ms", "session_timeout_ms")


def test_defaults() -> None:
    c = TeleopConfig()
    assert dataclasses.asdict(c) == {
        "handover": "move",
        "handover_speed_deg_s": 30.0,
        "handover_tolerance_deg": 5.0,
        "deadman_ms": 200.0,
        "session_timeout_ms": 2000.0,
        "leader_port": "",
        "leader_protocol": "feetech",
        "leader_calibration": "",
        "leader_who": "local leader",
    }


def test_both_hand_overs_and_both_leader_protocols_are_accepted() -> None:
    assert TeleopConfig(handover="wait").handover == "wait"
    assert TeleopConfig(handover="move").handover == "move"
    assert TeleopConfig(leader_protocol="dynamixel").leader_protocol == "dynamixel"
    assert TeleopConfig(leader_protocol="feetech").leader_protocol == "feetech"


def test_an_unknown_hand_over_is_refused_word_for_word() -> None:
    with pytest.raises(ConfigError) as err:
        TeleopConfig(handover="jump")  # type: ignore[arg-type]
    assert str(err.value) == 'teleop.handover: expected "move" or "wait", got \'jump\''


def test_an_unknown_leader_protocol_is_refused_word_for_word() -> None:
    with pytest.raises(ConfigError) as err:
        TeleopConfig(leader_protocol="can")  # type: ignore[arg-type]
    assert str(err.value) == 'teleop.leader_protocol: expected "feetech" or "dynamixel", got \'can\''


@pytest.mark.parametrize("key", NUMBERS)
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0"),
        (0.0, "0.0"),
        (-1.0, "-1.0"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (True, "True"),
        ("5", "'5'"),
        (None, "None"),
    ],
)
def test_each_number_must_be_finite_and_above_zero(key: str, value: Any, shown: str) -> None:
    # session_timeout_ms at least deadman_ms is checked after: keep that pair apart from this check
    others: dict[str, Any] = {"deadman_ms": 1e-9} if key == "session_timeout_ms" else {}
    with pytest.raises(ConfigError) as err:
        TeleopConfig(**{key: value, **others})
    assert str(err.value) == f"teleop.{key}: expected a finite number > 0, got {shown}"


@pytest.mark.parametrize("key", NUMBERS)
def test_each_number_may_be_tiny_or_a_whole_number(key: str) -> None:
    tiny: dict[str, Any] = {key: 1e-9 if key != "session_timeout_ms" else 200.0}
    assert getattr(TeleopConfig(**tiny), key) == tiny[key]
    whole: dict[str, Any] = {key: 7 if key != "session_timeout_ms" else 3000}
    assert getattr(TeleopConfig(**whole), key) == whole[key]


def test_the_session_may_time_out_no_sooner_than_the_deadman() -> None:
    assert TeleopConfig(deadman_ms=500.0, session_timeout_ms=500.0).session_timeout_ms == 500.0
    with pytest.raises(ConfigError) as err:
        TeleopConfig(deadman_ms=500.0, session_timeout_ms=499.5)
    assert str(err.value) == (
        "teleop.session_timeout_ms: expected >= deadman_ms (500), got 499.5 "
        "(the deadman must hold the arm before the session is lost)"
    )


def test_a_local_leader_needs_its_own_calibration() -> None:
    with pytest.raises(ConfigError) as err:
        TeleopConfig(leader_port="/dev/ttyACM1")
    assert str(err.value) == (
        "teleop.leader_calibration: the leader on '/dev/ttyACM1' needs its own calibration file "
        "(TOML or LeRobot JSON), got none"
    )
    c = TeleopConfig(leader_port="/dev/ttyACM1", leader_calibration="leader.toml")
    assert (c.leader_port, c.leader_calibration) == ("/dev/ttyACM1", "leader.toml")
    # a calibration without a port is no leader: accepted, and nothing reads it
    assert TeleopConfig(leader_calibration="leader.toml").leader_port == ""
