"""The ``[teleop]`` table: hand-over, deadman and session timing, and an optional local leader arm.

Units are in the key names; positions are degrees for body joints and percent for a gripper, as the
drivers report them (``handover_speed_deg_s`` and ``handover_tolerance_deg`` apply to a gripper in
percent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from runtime.errors import ConfigError

Handover = Literal["move", "wait"]


#: how long before the loop's tick a station reads its leader and sends until its trips are measured
#: (:mod:`runtime.teleop.lead`), and for good with ``teleop --fixed-lead`` (``teleop --lead-ms``): a loaded
#: 2-CPU robot computer delayed more than 1 % of the targets past a 4 ms lead, each then waiting a whole
#: tick (target sent -> servo write p99 36 ms in ``tools.bench.field``); 8 ms covers them
LEAD_MS = 8.0


@dataclass(frozen=True)
class TeleopConfig:
    """``handover``: when a station takes over, ``move`` brings the follower to the leader's pose at
    ``handover_speed_deg_s`` before it tracks; ``wait`` holds until the operator brings the leader
    within ``handover_tolerance_deg`` of the follower (every joint). ``deadman_ms``: no target for this
    long holds the arm, then the stall policy (``control.safety.stall_timeout_s``, ``stall_action``)
    follows. ``session_timeout_ms``: a station heard from by no message for this long loses the
    session, and the arm goes to hold. ``leader_port``: a leader arm on this computer, read by the
    daemon itself (empty: none); ``leader_protocol`` and ``leader_calibration`` (TOML or LeRobot
    JSON) describe it; ``leader_who`` names it in the log."""

    handover: Handover = "move"
    handover_speed_deg_s: float = 30.0
    handover_tolerance_deg: float = 5.0
    deadman_ms: float = 200.0
    session_timeout_ms: float = 2000.0
    leader_port: str = ""
    leader_protocol: Literal["feetech", "dynamixel"] = "feetech"
    leader_calibration: str = ""
    leader_who: str = "local leader"

    def __post_init__(self) -> None:
        if self.handover not in ("move", "wait"):
            raise ConfigError(f'teleop.handover: expected "move" or "wait", got {self.handover!r}')
        if self.leader_protocol not in ("feetech", "dynamixel"):
            raise ConfigError(
                f'teleop.leader_protocol: expected "feetech" or "dynamixel", got {self.leader_protocol!r}'
            )
        for key in ("handover_speed_deg_s", "handover_tolerance_deg", "deadman_ms", "session_timeout_ms"):
            value = getattr(self, key)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (value > 0 and math.isfinite(value))
            ):
                raise ConfigError(f"teleop.{key}: expected a finite number > 0, got {value!r}")
        if self.session_timeout_ms < self.deadman_ms:
            raise ConfigError(
                f"teleop.session_timeout_ms: expected >= deadman_ms ({self.deadman_ms:g}), got "
                f"{self.session_timeout_ms:g} (the deadman must hold the arm before the session is lost)"
            )
        if self.leader_port and not self.leader_calibration:
            raise ConfigError(
                f"teleop.leader_calibration: the leader on {self.leader_port!r} needs its own calibration file "
                "(TOML or LeRobot JSON), got none"
            )
