"""The control loop's way to the policy: the joints it read go in, chunks come out.

The loop knows only joint positions. What else the policy looks at (the newest frame of each camera
stream) is added on the daemon's side of this seam (:class:`runtime.arm_control.feed.StreamFeed`), so
camera frames never pass through the arm's process: the loop hands over ``state`` and gets back a
chunk or a reason. Whether the policy may be asked at all (every stream fresh, no failed self-check)
is :meth:`PolicyFeed.blocked`; whether the side that answers is still there at all is
:meth:`PolicyFeed.lost` (the daemon gone, seen from the arm's process). With real-time chunking a
request also carries a :class:`Prefix`: the plan's leftover and the inference delay, which the server
turns into the program's prefix inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from runtime.bundle.interface import PolicyInterface
from runtime.errors import ConfigError

OnDone = Callable[[np.ndarray | None, str | None], None]


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why the policy may not be asked now: ``key`` names the cause (``stale:front,wrist``,
    ``untrusted``, ``gate``, ``daemon``) so a change of cause drops the plan; ``reason`` is for the log."""

    key: str
    reason: str
    stale: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Prefix:
    """Real-time chunking: what the new chunk continues. ``actions``: the plan for the ticks from the
    one the observation is taken at (float32 ``[steps, joints]``, the policy's joint order and units;
    the first is the action that tick executed); ``delay``: how many ticks the chunk is expected to
    take to arrive (its first ``delay`` steps are past by then and follow the leftover)."""

    actions: np.ndarray
    delay: int


class PolicyFeed(Protocol):
    """What the control loop asks of the policy's side."""

    def submit(self, state: np.ndarray, on_done: OnDone, *, reset: bool = False, prefix: Prefix | None = None) -> bool:
        """Ask for a chunk from the joint positions ``state`` (float32, the policy's joint order) and
        whatever else the policy looks at; ``on_done(actions, None)`` or ``on_done(None, reason)``
        is called once. ``reset``: the first observation of a run (a policy with history restarts).
        ``prefix``: the plan the chunk continues (real-time chunking), None for none."""
        ...

    def observe(self, state: np.ndarray, *, reset: bool = False) -> None:
        """Add this tick's observation to the policy's history without asking for a chunk."""
        ...

    def blocked(self, now: float) -> Blocked | None:
        """Why no chunk may be asked for or executed now, or None."""
        ...

    def lost(self) -> str | None:
        """Why nothing from this side can be trusted any more (its process is gone), or None."""
        ...


def state_input(policy: PolicyInterface) -> str:
    """The one input with role ``state``: the loop fills it from the joints."""
    names = tuple(policy.action_names)
    states = [s for s in policy.observation_inputs if s.role == "state"]
    if len(states) != 1:
        raise ConfigError(
            f"the control loop fills exactly one input with role 'state' from the joints; the policy has "
            f"{len(states)} ({', '.join(s.name for s in states) or 'none'})"
        )
    spec = states[0]
    if spec.shape != (len(names),) or spec.dtype != "float32":
        raise ConfigError(
            f"state input {spec.name}: expected float32[{len(names)}] (one value per joint), "
            f"the policy takes {spec.dtype}{list(spec.shape)}"
        )
    return spec.name


