"""The control loop's modes and the goal sources they imply.

The values are the words of the wire protocol (``control status``, replies, logs) and of flight
recordings; the member order is the recorder's mode code, so recordings written before stay readable.
"""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    IDLE = "idle"  # never commanded, or torque off
    RUNNING = "running"  # executing the policy's chunks
    HOLDING = "holding"  # torque on, one fixed goal
    RESTING = "resting"  # moving slowly to the rest pose
    ESTOPPED = "estopped"  # latched until released
    TELEOP = "teleop"  # a station's leader pose, after a hand-over that does not jump


class Source(StrEnum):
    """Who commands the arm: exactly one at a time, switched only by an explicit request."""

    POLICY = "policy"
    TELEOP = "teleop"
    HOLD = "hold"


#: modes with torque on and a goal of the loop's own, which a stop or a shutdown holds
MOVING = frozenset({Mode.RUNNING, Mode.RESTING, Mode.TELEOP})


def source_of(mode: Mode) -> Source:
    return Source.POLICY if mode is Mode.RUNNING else Source.TELEOP if mode is Mode.TELEOP else Source.HOLD
