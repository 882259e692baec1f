"""Calibration: conversions, file formats (TOML and LeRobot JSON), and errors that name the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drivers.calibration import Calibration, JointCalibration, dump_toml, load_calibration
from drivers.config import ArmConfig
from drivers.configtools import from_mapping
from drivers.errors import CalibrationError
from runtime.errors import ConfigError

LEROBOT_SO101 = {
    "shoulder_pan": {"id": 1, "drive_mode": 0, "homing_offset": -1470, "range_min": 758, "range_max": 3292},
    "shoulder_lift": {"id": 2, "drive_mode": 0, "homing_offset": 160, "range_min": 812, "range_max": 3210},
    "elbow_flex": {"id": 3, "drive_mode": 0, "homing_offset": -1154, "range_min": 880, "range_max": 3092},
    "wrist_flex": {"id": 4, "drive_mode": 0, "homing_offset": 1020, "range_min": 845, "range_max": 3175},
    "wrist_roll": {"id": 5, "drive_mode": 0, "homing_offset": -205, "range_min": 0, "range_max": 4095},
    "gripper": {"id": 6, "drive_mode": 0, "homing_offset": 1332, "range_min": 2021, "range_max": 3398},
}


def test_degrees_match_lerobot_formula() -> None:
    j = JointCalibration(id=1, range_min=758, range_max=3292)
    mid = (758 + 3292) / 2
    for raw in (758, 2025, 3292, 100):
        assert j.to_user(raw) == pytest.approx((raw - mid) * 360 / 4095)


@pytest.mark.parametrize("drive_mode", [0, 1])
def test_ticks_degrees_round_trip(drive_mode: int) -> None:
    j = JointCalibration(id=1, range_min=758, range_max=3292, drive_mode=drive_mode)
    for raw in range(758, 3293):
        back, clamped = j.to_raw(j.to_user(raw))
        assert (back, clamped) == (raw, False)


@pytest.mark.parametrize("drive_mode", [0, 1])
def test_gripper_percent_round_trip(drive_mode: int) -> None:
    g = JointCalibration(id=6, range_min=2021, range_max=3398, mode="percent", drive_mode=drive_mode)
    assert g.to_user(2021) == (100.0 if drive_mode else 0.0)
    assert g.to_user(3398) == (0.0 if drive_mode else 100.0)
    for raw in range(2021, 3399):
        assert g.to_raw(g.to_user(raw)) == (raw, False)
    assert g.to_raw(150.0)[1] is True


def test_reads_lerobot_json(tmp_path: Path) -> None:
    path = tmp_path / "so101_follower.json"
    path.write_text(json.dumps(LEROBOT_SO101))
    cal = load_calibration(path)
    assert list(cal.joints) == list(LEROBOT_SO101)
    assert cal.joints["gripper"].mode == "percent"
    assert cal.joints["shoulder_pan"].mode == "degrees"
    assert cal.joints["shoulder_pan"].homing_offset == -1470
    # Converting to TOML and back gives the same calibration.
    toml_path = tmp_path / "so101.toml"
    toml_path.write_text(dump_toml(cal))
    assert load_calibration(toml_path).joints == cal.joints


def test_shipped_sim_calibration_matches_lerobot_layout() -> None:
    cal = load_calibration(Path(__file__).resolve().parents[2] / "configs/calibration/so101_sim.toml")
    assert cal.model == "so101"
    assert [j.id for j in cal.joints.values()] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    ("joint_patch", "message"),
    [
        (
            {"range_min": 3000, "range_max": 1000},
            r"joint 'elbow_flex'.*range_min 3000 must be below range_max 1000",
        ),
        ({"range_max": 5000}, r"joint 'elbow_flex'.*range_max 5000 is outside 0..4095"),
        (
            {"homing_offset": "12"},
            r"joint 'elbow_flex'.*joints.elbow_flex.homing_offset: expected an integer",
        ),
        ({"drive_mode": 2}, r"joint 'elbow_flex'.*drive_mode must be 0 or 1"),
        ({"colour": "red"}, r"joint 'elbow_flex'.*unknown key\(s\) colour"),
        ({"id": None}, r"joint 'elbow_flex'.*joints.elbow_flex.id: expected an integer"),
    ],
)
def test_bad_calibration_names_joint_and_key(tmp_path: Path, joint_patch: dict[str, object], message: str) -> None:
    data = json.loads(json.dumps(LEROBOT_SO101))
    data["elbow_flex"].update(joint_patch)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=message):
        load_calibration(path)


def test_bad_calibration_files(tmp_path: Path) -> None:
    dup = json.loads(json.dumps(LEROBOT_SO101))
    dup["gripper"]["id"] = 1
    (tmp_path / "dup.json").write_text(json.dumps(dup))
    with pytest.raises(CalibrationError, match="'shoulder_pan' and 'gripper' both use servo id 1"):
        load_calibration(tmp_path / "dup.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(CalibrationError, match="not valid JSON"):
        load_calibration(tmp_path / "broken.json")
    (tmp_path / "x.toml").write_text("joints = 3\n")
    with pytest.raises(CalibrationError, match="expected a table of joints"):
        load_calibration(tmp_path / "x.toml")
    (tmp_path / "y.toml").write_text('model = "so101"\nextra = 1\n')
    with pytest.raises(CalibrationError, match="unknown key\\(s\\) extra"):
        load_calibration(tmp_path / "y.toml")
    with pytest.raises(CalibrationError, match="does not exist"):
        load_calibration(tmp_path / "missing.json")


def test_arm_config_from_toml_table() -> None:
    cfg = from_mapping(ArmConfig, {"kind": "feetech", "port": "/dev/ttyACM0", "retries": 3}, "arm")
    assert cfg.retries == 3 and cfg.disable_torque_on_disconnect is True
    assert from_mapping(ArmConfig, {}, "arm").kind == "sim"
    with pytest.raises(ConfigError, match=r"arm\.kind: expected one of"):
        from_mapping(ArmConfig, {"kind": "servo"}, "arm")
    with pytest.raises(ConfigError, match="port is required"):
        from_mapping(ArmConfig, {"kind": "dynamixel"}, "arm")
    with pytest.raises(ConfigError, match=r"arm\.timeout_ms: expected an integer"):
        from_mapping(ArmConfig, {"timeout_ms": "fast"}, "arm")


# drive_mode = 1: the joint is mounted mirrored, so positive degrees are the other way round in ticks.
@pytest.mark.parametrize("raw", [758, 1200, 2025, 3000, 3292])
def test_drive_mode_flips_degrees(raw: int) -> None:
    straight = JointCalibration(id=1, range_min=758, range_max=3292)
    mirrored = JointCalibration(id=1, range_min=758, range_max=3292, drive_mode=1)
    assert mirrored.to_user(raw) == pytest.approx(-straight.to_user(raw))


def test_drive_mode_flips_goals_to_the_other_side_of_mid() -> None:
    straight = JointCalibration(id=1, range_min=1000, range_max=3000)
    mirrored = JointCalibration(id=1, range_min=1000, range_max=3000, drive_mode=1)
    ticks_per_deg = 4095 / 360
    assert straight.to_raw(30.0) == (round(2000 + 30 * ticks_per_deg), False)
    assert mirrored.to_raw(30.0) == (round(2000 - 30 * ticks_per_deg), False)
    assert mirrored.to_raw(-30.0) == straight.to_raw(30.0)
    assert mirrored.user_range == straight.user_range  # symmetric range, flipped ends


def test_drive_mode_flips_percent() -> None:
    straight = JointCalibration(id=6, range_min=2000, range_max=3000, mode="percent")
    mirrored = JointCalibration(id=6, range_min=2000, range_max=3000, mode="percent", drive_mode=1)
    assert straight.to_user(2250) == 25.0 and mirrored.to_user(2250) == 75.0
    assert straight.to_raw(25.0) == (2250, False) and mirrored.to_raw(25.0) == (2750, False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"id": -1}, "id -1 is outside 0..252"),
        ({"id": 253}, "id 253 is outside 0..252"),
        ({"resolution": 1, "range_max": 1}, "resolution must be at least 2, got 1"),
        ({"range_min": -1}, "range_min -1 is outside 0..4095"),
        ({"range_max": 4096}, "range_max 4096 is outside 0..4095"),
        ({"range_min": 2000, "range_max": 2000}, "range_min 2000 must be below range_max 2000"),
    ],
)
def test_joint_bounds(kwargs: dict[str, int], message: str) -> None:
    args = {"id": 1, "range_min": 0, "range_max": 4095, **kwargs}
    with pytest.raises(ValueError) as info:
        JointCalibration(**args)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_joint_bounds_that_pass() -> None:
    for servo_id in (0, 252):
        assert JointCalibration(id=servo_id, range_min=0, range_max=4095).id == servo_id
    assert JointCalibration(id=1, range_min=0, range_max=1, resolution=2).user_range == (-180.0, 180.0)


def test_full_range_conversion_uses_resolution_minus_one() -> None:
    j = Calibration.uncalibrated([3]).joints["id3"]
    assert (j.range_min, j.range_max, j.resolution, j.mode) == (0, 4095, 4096, "degrees")
    assert j.to_user(4095) == 180.0 and j.to_user(0) == -180.0
    assert j.to_raw(179.9) == (4094, False)
    assert j.to_raw(181.0) == (4095, True)


def test_uncalibrated_and_name_of() -> None:
    cal = Calibration.uncalibrated([3, 7], resolution=1024)
    assert list(cal.joints) == ["id3", "id7"] and cal.source == "<uncalibrated>" and cal.model == ""
    assert cal.joints["id7"].range_max == 1023 and cal.joints["id7"].resolution == 1024
    assert cal.name_of(7) == "id7" and cal.name_of(3) == "id3" and cal.name_of(4) is None


def test_modes_and_resolution_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "arm.toml"
    path.write_text(
        "resolution = 1024\n"
        '[joints.pan]\nid = 1\nrange_min = 0\nrange_max = 1000\nmode = "percent"\n'
        '[joints.gripper]\nid = 2\nrange_min = 0\nrange_max = 1000\nmode = "degrees"\nresolution = 2048\n'
        "[joints.lift]\nid = 3\nrange_min = 0\nrange_max = 1000\n"
    )
    cal = load_calibration(path)
    assert cal.source == str(path) and cal.model == ""
    assert [(j.mode, j.resolution) for j in cal.joints.values()] == [
        ("percent", 1024),  # an explicit mode is kept, the file's resolution applies
        ("degrees", 2048),  # even for the gripper; the joint's own resolution wins
        ("degrees", 1024),
    ]


def test_errors_name_the_file(tmp_path: Path) -> None:
    data = json.loads(json.dumps(LEROBOT_SO101))
    data["gripper"]["id"] = 1
    path = tmp_path / "dup.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=f"^{path}: joints 'shoulder_pan' and 'gripper'"):
        load_calibration(path)
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(LEROBOT_SO101))
    assert load_calibration(ok).source == str(ok) and load_calibration(ok).model == ""
    bad = tmp_path / "bad.toml"
    bad.write_text("joints = [\n")
    with pytest.raises(CalibrationError, match=str(bad)):
        load_calibration(bad)
    two = tmp_path / "two.toml"
    two.write_text('zeta = 1\nalpha = 2\nmodel = "x"\n')
    with pytest.raises(CalibrationError) as info:
        load_calibration(two)
    assert str(info.value) == f"{two}: unknown key(s) alpha, zeta; expected model, resolution, joints"
    for text, message in (
        ("model = 3\n", "model: expected a string, got 3"),
        ("resolution = true\n", "resolution: expected an integer, got True"),
        ("resolution = 1.5\n", "resolution: expected an integer, got 1.5"),
    ):
        (tmp_path / "t.toml").write_text(text)
        with pytest.raises(CalibrationError) as info:
            load_calibration(tmp_path / "t.toml")
        assert str(info.value) == f"{tmp_path / 't.toml'}: {message}"
    (tmp_path / "j.toml").write_text("[joints]\npan = 3\n")
    with pytest.raises(CalibrationError, match="joint 'pan'"):
        load_calibration(tmp_path / "j.toml")


def test_dump_toml_writes_every_field() -> None:
    cal = Calibration({"pan": JointCalibration(2, 10, 20, -5, 1, "percent", 1024)}, model="koch")
    assert dump_toml(cal) == (
        'model = "koch"\n\n[joints.pan]\nid = 2\nrange_min = 10\nrange_max = 20\nhoming_offset = -5\n'
        'drive_mode = 1\nmode = "percent"\nresolution = 1024\n'
    )
    assert not dump_toml(Calibration({"pan": JointCalibration(2, 10, 20)})).startswith("model")
