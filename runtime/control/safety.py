"""The safety envelope: every goal passes here before it reaches the servo bus.

Per joint, in this order: the change of step from the previous tick is bounded (acceleration), the
goal is kept inside the calibrated range and the configured soft limits, and it may lead the
present position by at most ``max_step`` (velocity). The velocity bound has the last word, so a
joint that starts outside its soft limits is brought back at that speed rather than jumped.
Whole chunks are refused when they hold NaN/Inf anywhere or when their first executed step is
further than ``max_first_step_deg`` from where the arm is.

Each intervention is counted per tick and reported once per occurrence (when it starts for a
joint), with the numbers, through the events it is given (the controller's
:class:`~runtime.control.events.TickEvents`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NewType

import numpy as np
import numpy.typing as npt

from drivers.calibration import Calibration
from runtime.control.config import SafetyConfig
from runtime.control.events import Emit
from runtime.errors import ConfigError

#: a goal that passed the envelope: the only kind the loop writes to the bus (the type says so)
Goal = NewType("Goal", npt.NDArray[np.float64])

LIMIT, STEP, ACCEL, NONFINITE = 1, 2, 4, 8
KINDS = {LIMIT: "limit", STEP: "step", ACCEL: "accel", NONFINITE: "nonfinite"}


class SafetyEnvelope:
    def __init__(self, joints: Sequence[str], calibration: Calibration, config: SafetyConfig, events: Emit) -> None:
        self.joints = tuple(joints)
        self.config = config
        self.events = events
        n = len(self.joints)
        lo, hi = np.empty(n), np.empty(n)
        step, change = np.empty(n), np.empty(n)
        unknown = sorted(set(config.soft_limits) - set(self.joints))
        if unknown:
            raise ConfigError(
                f"control.safety.soft_limits: unknown joint(s) {', '.join(unknown)}; "
                f"the arm has {', '.join(self.joints)}"
            )
        unknown = sorted(set(config.rest_pose) - set(self.joints))
        if unknown:
            raise ConfigError(
                f"control.safety.rest_pose: unknown joint(s) {', '.join(unknown)}; the arm has {', '.join(self.joints)}"
            )
        for i, name in enumerate(self.joints):
            cal = calibration.joints[name]
            lo[i], hi[i] = cal.user_range
            gripper = cal.mode == "percent"
            if gripper:
                glo, ghi = config.gripper_limits_pct
                lo[i], hi[i] = max(lo[i], glo), min(hi[i], ghi)
                step[i], change[i] = config.gripper_max_step_pct, config.gripper_max_step_change_pct
            else:
                step[i], change[i] = config.max_step_deg, config.max_step_change_deg
            if name in config.soft_limits:
                slo, shi = config.soft_limits[name]
                lo[i], hi[i] = max(lo[i], slo), min(hi[i], shi)
            if not lo[i] < hi[i]:
                raise ConfigError(
                    f"control.safety.soft_limits.{name}: no room left inside the calibrated range "
                    f"{cal.user_range[0]:.1f}..{cal.user_range[1]:.1f}"
                )
        self.lo, self.hi, self.max_step, self.max_change = lo, hi, step, change
        self.counts = {"limit": 0, "step": 0, "accel": 0, "nonfinite": 0, "refused_chunks": 0}
        self._active = np.zeros(n, dtype=np.int8)  # bits active per joint on the previous tick
        self._prev_goal: np.ndarray | None = None
        self._prev_step = np.zeros(n)
        self.last_bits = np.zeros(n, dtype=np.int8)

    def reset(self, present: np.ndarray) -> None:
        """Start from rest at ``present`` (motion start, hold, e-stop release)."""
        self._prev_goal = np.array(present, dtype=np.float64)
        self._prev_step[:] = 0.0
        self._active[:] = 0

    def check_chunk(self, chunk: np.ndarray, present: np.ndarray, offset: int) -> str | None:
        """Why ``chunk`` must be refused whole, or None. ``offset``: its first step to be executed."""
        finite = np.isfinite(chunk)
        if not finite.all():
            step, joint = np.argwhere(~finite)[0]
            return (
                f"chunk holds a non-finite value ({chunk[step, joint]}) at step {int(step)} for joint "
                f"{self.joints[int(joint)]}"
            )
        if offset >= len(chunk):
            return None
        dist = np.abs(chunk[offset] - present)
        worst = int(np.argmax(dist))
        limit = self.config.max_first_step_deg
        if dist[worst] > limit:
            return (
                f"first executed step is {dist[worst]:.2f} from the present position of {self.joints[worst]} "
                f"(goal {chunk[offset, worst]:.2f}, present {present[worst]:.2f}; max_first_step_deg {limit:g})"
            )
        return None

    def refuse(self, reason: str) -> None:
        self.counts["refused_chunks"] += 1
        self.events.emit(logging.WARNING, "safety: chunk refused: %s", reason)

    def apply(self, requested: np.ndarray, present: np.ndarray) -> Goal:
        """The goal to write for this tick: ``requested`` inside the envelope."""
        if self._prev_goal is None:
            self.reset(present)
        assert self._prev_goal is not None
        prev = self._prev_goal
        bits = self.last_bits
        bits[:] = 0
        req = np.array(requested, dtype=np.float64)
        bad = ~np.isfinite(req)
        if bad.any():
            req[bad] = prev[bad]
            bits[bad] |= NONFINITE
        step = req - prev
        step_c = np.clip(step, self._prev_step - self.max_change, self._prev_step + self.max_change)
        bits[step_c != step] |= ACCEL
        goal = prev + step_c
        limited = np.clip(goal, self.lo, self.hi)
        # A clamp to the limits is only an intervention when the request itself was outside them.
        bits[(req < self.lo) | (req > self.hi)] |= LIMIT
        lo_v, hi_v = present - self.max_step, present + self.max_step
        final: np.ndarray = np.clip(limited, lo_v, hi_v)
        bits[final != limited] |= STEP
        self._prev_step = final - prev
        self._prev_goal = final
        if bits.any():
            self._report(bits, req, final, present)
        self._active[:] = bits
        return Goal(final)

    def hold(self, goal: np.ndarray) -> None:
        """The loop holds ``goal`` (no motion): the next step starts from zero velocity."""
        self._prev_goal = np.array(goal, dtype=np.float64)
        self._prev_step[:] = 0.0

    def hold_goal(self, goal: np.ndarray, present: np.ndarray) -> Goal:
        """``goal`` to hold (a stop, a stall, an e-stop): inside the limits and within ``max_step`` of
        the present position, a non-finite value replaced by the present one; no ramp (a hold stops
        now). The next motion starts from it at rest."""
        held = np.array(goal, dtype=np.float64)
        bad = ~np.isfinite(held)
        held[bad] = present[bad]
        held = np.clip(np.clip(held, self.lo, self.hi), present - self.max_step, present + self.max_step)
        self.hold(held)
        return Goal(held)

    def _report(self, bits: np.ndarray, req: np.ndarray, goal: np.ndarray, present: np.ndarray) -> None:
        for bit, kind in KINDS.items():
            hit = (bits & bit) != 0
            if not hit.any():
                continue
            self.counts[kind] += int(hit.sum())
            new = hit & ((self._active & bit) == 0)
            for i in np.flatnonzero(new):
                self.events.emit(
                    logging.WARNING,
                    "safety: %s %s: requested %.2f, commanded %.2f (present %.2f, limits %.2f..%.2f, "
                    "max step %.2f, max step change %.2f)",
                    self.joints[i],
                    kind,
                    req[i],
                    goal[i],
                    present[i],
                    self.lo[i],
                    self.hi[i],
                    self.max_step[i],
                    self.max_change[i],
                )

    def rest_target(self, present: np.ndarray) -> np.ndarray:
        target = np.array(present, dtype=np.float64)
        for i, name in enumerate(self.joints):
            if name in self.config.rest_pose:
                target[i] = self.config.rest_pose[name]
        clipped: np.ndarray = np.clip(target, self.lo, self.hi)
        return clipped
