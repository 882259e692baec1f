"""The teleop goal source: the newest leader pose, handed from the I/O thread to the control loop,
and the hand-over that keeps the follower from jumping to it.

The I/O thread puts each target into a one-slot handoff (:class:`~runtime.control.handoff.Latest`)
of :class:`TeleopTarget`; the runner peeks at the newest fresh one each tick, never waiting, and hands
it to the controller's step. Targets arriving out of order (an older ``seq`` than the newest) are
dropped and counted. A target the daemon received before a tick was due that lands after that tick
read the slot missed the tick it was in time for (in the arm process targets land when the tick
drains the link, so this is the hop the station's round trip does not include): it is counted
(``late``), and the station widens its lead by it. The hand-over (:class:`Handover`) is the
controller's own: it is worked on the loop's thread alone, from the target the step was given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from runtime.control.handoff import Latest
from runtime.teleop.config import TeleopConfig


@dataclass(frozen=True, slots=True)
class Target:
    seq: int
    positions: np.ndarray  # float64, the follower's joint order
    received_at: float  # time.monotonic() on arrival


class TeleopTarget:
    """Where the station's targets land (any thread puts), and the newest fresh one (the runner)."""

    def __init__(self, joints: int, config: TeleopConfig) -> None:
        self.joints = joints
        self.config = config
        self.deadman_s = config.deadman_ms / 1e3
        self._slot: Latest[Target] = Latest()
        self.out_of_order = 0
        self.received = 0
        #: targets that landed after the tick they reached the daemon in time for
        self.late = 0
        #: when the last tick that read the slot was due (the loop's clock, as ``received_at``)
        self._read_due = -math.inf

    # --- the I/O thread ---------------------------------------------------------------------

    def put(self, seq: int, positions: np.ndarray, now: float) -> bool:
        """Store a target received at ``now``; False (and counted) when it is older than the newest one.
        Counted ``late`` when a tick due after ``now`` read the slot before it landed."""
        last = self._slot.peek()
        if last is not None and seq <= last.seq:
            self.out_of_order += 1
            return False
        # read before the store: a tick that reads the slot after it got the target, so is never
        # counted as missed (a put racing a tick on another thread may go uncounted, never miscounted)
        read_due = self._read_due
        self._slot.put(Target(seq, positions, now))
        self.received += 1
        if now < read_due:
            self.late += 1
        return True

    def clear(self) -> None:
        """Forget the stored target (a new session starts from nothing)."""
        self._slot.clear()

    # --- the runner -------------------------------------------------------------------------

    def fresh(self, now: float, due: float | None = None) -> Target | None:
        """The newest target if it is younger than ``deadman_ms``, else None; ``due``: when the tick
        reading it was due (a target received before then that lands later missed that tick)."""
        target = self._slot.peek()
        if due is not None:
            self._read_due = due
        if target is None or now - target.received_at > self.deadman_s:
            return None
        return target


class Handover:
    """The per-tick goal the controller asks for in ``teleop`` mode, from the fresh target.

    ``phase`` is ``handover`` after :meth:`begin` until the follower is at the leader's pose (or the
    leader within tolerance, for ``wait``), then ``tracking``.
    """

    def __init__(self, config: TeleopConfig, period_s: float) -> None:
        self.config = config
        self._step = config.handover_speed_deg_s * period_s
        self.phase = "tracking"
        self.handover_ticks = 0

    def begin(self) -> None:
        self.phase = "handover"
        self.handover_ticks = 0

    def goal(self, target: np.ndarray, last_goal: np.ndarray, present: np.ndarray) -> np.ndarray:
        """The requested goal for this tick (before the safety envelope)."""
        if self.phase == "tracking":
            return target
        self.handover_ticks += 1
        if self.config.handover == "wait":
            if float(np.max(np.abs(target - present))) <= self.config.handover_tolerance_deg:
                self.phase = "tracking"
                return target
            return last_goal
        gap = target - last_goal
        if float(np.max(np.abs(gap))) <= self._step:
            self.phase = "tracking"
            return target
        stepped: np.ndarray = last_goal + np.clip(gap, -self._step, self._step)
        return stepped
