"""Per-joint calibration and the ticks <-> user-unit conversion.

The conversion matches LeRobot's ``MotorsBus._normalize`` so values line up with policies trained
there: body joints in degrees, ``(raw - mid) * 360 / (resolution - 1)`` with
``mid = (range_min + range_max) / 2``; the gripper in percent of its range, 0-100. Two deliberate
differences: writes round to the nearest tick instead of truncating (so ticks -> degrees -> ticks
round-trips exactly), and ``drive_mode = 1`` flips the sign of degrees too (LeRobot ignores it in
degrees mode; its SO-101 calibration always writes 0, so files from LeRobot convert identically).

The homing offset lives in the servo (it is applied by the servo's firmware to Present_Position);
the bus checks or writes it on connect, the host never adds it.

Files: TOML (``configs/calibration/*.toml``, see :func:`load_calibration`) or LeRobot's JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from drivers.configtools import from_mapping, load_toml
from drivers.errors import CalibrationError, ConfigError

NormMode = Literal["degrees", "percent"]

# LeRobot's SO-100/SO-101 joint names, in bus order; the gripper is normalised to 0-100 %.
SO101_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


@dataclass(frozen=True)
class JointCalibration:
    id: int
    range_min: int
    range_max: int
    homing_offset: int = 0
    drive_mode: int = 0
    mode: NormMode = "degrees"
    resolution: int = 4096

    def __post_init__(self) -> None:
        if not 0 <= self.id <= 252:
            raise ValueError(f"id {self.id} is outside 0..252")
        if self.drive_mode not in (0, 1):
            raise ValueError(f"drive_mode must be 0 or 1, got {self.drive_mode}")
        if self.resolution < 2:
            raise ValueError(f"resolution must be at least 2, got {self.resolution}")
        top = self.resolution - 1
        for key, value in (("range_min", self.range_min), ("range_max", self.range_max)):
            if not 0 <= value <= top:
                raise ValueError(f"{key} {value} is outside 0..{top}")
        if self.range_min >= self.range_max:
            raise ValueError(f"range_min {self.range_min} must be below range_max {self.range_max}")

    @property
    def mid(self) -> float:
        return (self.range_min + self.range_max) / 2

    def clamp_raw(self, raw: int) -> int:
        return min(self.range_max, max(self.range_min, raw))

    def to_user(self, raw: int) -> float:
        """Servo ticks -> degrees (or percent for a ``percent`` joint)."""
        if self.mode == "percent":
            norm = (self.clamp_raw(raw) - self.range_min) / (self.range_max - self.range_min) * 100
            return 100 - norm if self.drive_mode else norm
        degrees = (raw - self.mid) * 360 / (self.resolution - 1)
        return -degrees if self.drive_mode else degrees

    def to_raw(self, value: float) -> tuple[int, bool]:
        """Degrees (or percent) -> ticks, clamped to the calibrated range; also says if it clamped."""
        if self.mode == "percent":
            norm = 100 - value if self.drive_mode else value
            raw = round(norm / 100 * (self.range_max - self.range_min) + self.range_min)
        else:
            degrees = -value if self.drive_mode else value
            raw = round(degrees * (self.resolution - 1) / 360 + self.mid)
        clamped = self.clamp_raw(raw)
        return clamped, clamped != raw

    @property
    def user_range(self) -> tuple[float, float]:
        a, b = self.to_user(self.range_min), self.to_user(self.range_max)
        return (min(a, b), max(a, b))


@dataclass(frozen=True)
class Calibration:
    """Ordered joint name -> calibration; the order is the bus order used in sync packets."""

    joints: dict[str, JointCalibration]
    model: str = ""
    source: str = "<memory>"
    _by_id: dict[int, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_id: dict[int, str] = {}
        for name, joint in self.joints.items():
            if joint.id in by_id:
                raise CalibrationError(
                    f"{self.source}: joints {by_id[joint.id]!r} and {name!r} both use servo id {joint.id}"
                )
            by_id[joint.id] = name
        object.__setattr__(self, "_by_id", by_id)

    def name_of(self, servo_id: int) -> str | None:
        return self._by_id.get(servo_id)

    @classmethod
    def uncalibrated(cls, ids: list[int], resolution: int = 4096) -> Calibration:
        """Full-range calibration for servos nobody calibrated yet (e.g. ``motors read`` without a file)."""
        joints = {
            f"id{i}": JointCalibration(id=i, range_min=0, range_max=resolution - 1, resolution=resolution)
            for i in ids
        }
        return cls(joints, source="<uncalibrated>")


def _joint(name: str, table: Any, where: str, *, default_mode: NormMode) -> JointCalibration:
    if isinstance(table, Mapping) and "mode" not in table:
        table = {**table, "mode": default_mode}
    try:
        return from_mapping(JointCalibration, table, where)
    except ConfigError as e:
        raise CalibrationError(f"joint {name!r}: {e}") from e


def calibration_from_mapping(
    joints: Mapping[str, Any], *, source: str, model: str = "", resolution: int | None = None
) -> Calibration:
    if not isinstance(joints, Mapping) or not joints:
        raise CalibrationError(f"{source}: expected a table of joints, got {joints!r}")
    built: dict[str, JointCalibration] = {}
    for name, table in joints.items():
        if resolution is not None and isinstance(table, Mapping) and "resolution" not in table:
            table = {**table, "resolution": resolution}
        default: NormMode = "percent" if name == "gripper" else "degrees"
        built[name] = _joint(name, table, f"{source}: joints.{name}", default_mode=default)
    return Calibration(built, model=model, source=source)


def load_calibration(path: str | Path) -> Calibration:
    """Read a TOML calibration file or a LeRobot calibration JSON (chosen by the suffix).

    TOML layout::

        model = "so101"          # optional
        resolution = 4096        # optional, applies to every joint
        [joints.shoulder_pan]
        id = 1
        range_min = 758
        range_max = 3292
        homing_offset = -1470    # optional, default 0
        drive_mode = 0           # optional
        mode = "degrees"         # optional; "percent" is the default for a joint named gripper

    LeRobot JSON: ``{"shoulder_pan": {"id": 1, "drive_mode": 0, "homing_offset": -1470,
    "range_min": 758, "range_max": 3292}, ...}``.
    """
    p = Path(path)
    if p.suffix == ".json":
        try:
            data = json.loads(p.read_text())
        except FileNotFoundError as e:
            raise CalibrationError(f"calibration file {p} does not exist") from e
        except json.JSONDecodeError as e:
            raise CalibrationError(f"calibration file {p} is not valid JSON: {e}") from e
        return calibration_from_mapping(data, source=str(p))
    try:
        data = load_toml(p)
    except ConfigError as e:
        raise CalibrationError(str(e)) from e
    unknown = sorted(set(data) - {"model", "resolution", "joints"})
    if unknown:
        raise CalibrationError(
            f"{p}: unknown key(s) {', '.join(unknown)}; expected model, resolution, joints"
        )
    model = data.get("model", "")
    resolution = data.get("resolution")
    if not isinstance(model, str):
        raise CalibrationError(f"{p}: model: expected a string, got {model!r}")
    if resolution is not None and (isinstance(resolution, bool) or not isinstance(resolution, int)):
        raise CalibrationError(f"{p}: resolution: expected an integer, got {resolution!r}")
    return calibration_from_mapping(data.get("joints", {}), source=str(p), model=model, resolution=resolution)


def dump_toml(cal: Calibration) -> str:
    """Write a calibration in this project's TOML layout (e.g. to convert a LeRobot JSON)."""
    lines = [f'model = "{cal.model}"', ""] if cal.model else []
    for name, j in cal.joints.items():
        lines += [
            f"[joints.{name}]",
            f"id = {j.id}",
            f"range_min = {j.range_min}",
            f"range_max = {j.range_max}",
            f"homing_offset = {j.homing_offset}",
            f"drive_mode = {j.drive_mode}",
            f'mode = "{j.mode}"',
            f"resolution = {j.resolution}",
            "",
        ]
    return "\n".join(lines)
