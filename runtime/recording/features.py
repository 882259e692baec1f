"""What a recording holds: joint names, cameras and their frame size, the control rate.

:class:`RecordingFeatures` is given to the recorder once; from it come the dataset's ``features``
(``meta/info.json``) and the checks every frame goes through. The columns:

- ``observation.state`` (float32, one per joint): the joint positions read at the tick;
- ``action`` (float32): what was commanded after the safety envelope, the column policies train on;
- ``request.action`` (float32): what the source asked for before the envelope clamped it. Not
  named ``action.*``: LeRobot treats every ``action*`` column as a policy output;
- ``observation.images.<camera>`` (video, uint8 H x W x 3): the frame current at the tick;
- ``control.source`` (string ``policy``/``teleop``/``hold``) and ``control.intervention`` (bool):
  who commanded the frame, and whether an operator had taken over from the policy;
- ``control.time_s`` (float64): the control loop's own clock at the tick, from the episode's first
  frame. ``timestamp`` stays ``frame_index / fps``, as LeRobot needs it to find video frames.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from runtime.errors import ConfigError
from runtime.recording.layout import INDEX_FEATURES

STATE = "observation.state"
ACTION = "action"
REQUESTED_ACTION = "request.action"
IMAGE_PREFIX = "observation.images."
SOURCE = "control.source"
INTERVENTION = "control.intervention"
CONTROL_TIME = "control.time_s"

Source = Literal["policy", "teleop", "hold"]
SOURCES: tuple[str, ...] = ("policy", "teleop", "hold")

_CAMERA_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class RecordingFeatures:
    """``fps``: the control rate (one frame per tick); ``joint_names``: state and action order;
    ``cameras``: camera name -> (height_px, width_px) of its RGB frames; ``robot_type``: written to
    ``info.json`` (``so101_follower``...), free text."""

    fps: int
    joint_names: tuple[str, ...]
    cameras: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    robot_type: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.fps, bool) or not isinstance(self.fps, int) or not 1 <= self.fps <= 1000:
            # LeRobot stores fps as an integer and finds video frames at multiples of 1/fps
            raise ConfigError(f"recording.fps: expected an integer rate in [1, 1000] Hz, got {self.fps!r}")
        names = tuple(self.joint_names)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f"recording.joint_names: expected non-empty names, got {self.joint_names!r}")
        if len(set(names)) != len(names):
            raise ConfigError(f"recording.joint_names: names repeat in {list(names)}")
        object.__setattr__(self, "joint_names", names)
        cams: dict[str, tuple[int, int]] = {}
        for name, size in dict(self.cameras).items():
            if not isinstance(name, str) or not _CAMERA_NAME.match(name):
                raise ConfigError(
                    f"recording.cameras: camera name {name!r} must be letters, digits, '_', '-' or '.' "
                    "(it becomes a folder name and part of a column name)"
                )
            try:
                height, width = (int(v) for v in size)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"recording.cameras.{name}: expected (height_px, width_px), got {size!r}") from e
            # yuv420p video halves the chroma planes: odd sizes cannot be encoded
            if height < 16 or width < 16 or height % 2 or width % 2:
                raise ConfigError(
                    f"recording.cameras.{name}: expected even height and width >= 16 px, got {height}x{width}"
                )
            cams[name] = (height, width)
        object.__setattr__(self, "cameras", cams)

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    def image_key(self, camera: str) -> str:
        return IMAGE_PREFIX + camera

    @property
    def image_keys(self) -> tuple[str, ...]:
        return tuple(self.image_key(c) for c in self.cameras)

    def dataset_features(self) -> dict[str, dict[str, Any]]:
        """The ``features`` entry of ``meta/info.json``: recorded columns, then LeRobot's index columns."""
        joints = list(self.joint_names)
        vector = {"dtype": "float32", "shape": [self.num_joints], "names": joints}
        features: dict[str, dict[str, Any]] = {
            STATE: dict(vector),
            ACTION: dict(vector),
            REQUESTED_ACTION: dict(vector),
        }
        for camera, (height, width) in self.cameras.items():
            features[self.image_key(camera)] = {
                "dtype": "video",
                "shape": [height, width, 3],
                "names": ["height", "width", "channels"],
            }
        features[SOURCE] = {"dtype": "string", "shape": [1], "names": None}
        features[INTERVENTION] = {"dtype": "bool", "shape": [1], "names": None}
        features[CONTROL_TIME] = {"dtype": "float64", "shape": [1], "names": None}
        for key, ft in INDEX_FEATURES.items():
            features[key] = dict(ft)
        return features
