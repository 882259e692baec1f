"""A request's leftover and delay to the program's real-time chunking inputs: checked, weighted, padded.

A policy exported with real-time chunking (the manifest's ``rtc`` section: SmolVLA with LeRobot's
RTC) takes, beside the observation, the previous chunk's leftover and the weights that say how much
each step of the new chunk follows it. A request carries the leftover as ``prefix`` (the actions not
yet executed, ``[steps, joints]`` in the action's joint order and units, 1 <= steps <= the policy's
chunk size) and ``delay`` (how many of them the robot will have executed when the new chunk arrives);
the server computes LeRobot's prefix weights from those, the execution horizon and the schedule
(runtime.bundle.rtc), and pads the leftover to the program's shape. A request without a prefix gets
zero weights: the flow samples exactly as without RTC.

A policy without those inputs refuses every one of these fields, as it refuses a task: nobody should
believe a policy follows a leftover it never reads.
"""

from __future__ import annotations

import math

import numpy as np

from runtime.bundle.manifest import Manifest
from runtime.bundle.rtc import SCHEDULES, no_prefix_weights, prefix_weights
from runtime.errors import InputValidationError
from runtime.protocol.messages import PrefixFields


def refuse_on_policy_without(fields: PrefixFields) -> InputValidationError | None:
    """For a policy that takes no prefix: the first real-time chunking field sent, refused by name."""
    given = fields.given()
    if not given:
        return None
    name = given[0]
    return InputValidationError(
        f"{name}: this policy takes no previous chunk (it was not exported with real-time chunking); send no "
        f"{name}",
        field=name,
        expected=f"no {name}",
        received=f"{name} sent",
    )


class PrefixInputs:
    """The policy's prefix inputs for each request; immutable, safe to share between threads."""

    def __init__(self, manifest: Manifest) -> None:
        entry = manifest.rtc
        if entry is None:
            raise ValueError("PrefixInputs: the manifest has no rtc section")
        self.chunk_size = entry.chunk_size
        self.joints = len(manifest.action_names)
        # a chunk that arrives after every step it serves has nothing left to execute
        self.max_delay = manifest.chunk_length - 1
        self.execution_horizon = entry.execution_horizon
        self.schedule = entry.prefix_attention_schedule
        self.max_guidance_weight = entry.max_guidance_weight
        self._none = self._frozen(
            np.zeros((self.chunk_size, self.joints), np.float32),
            no_prefix_weights(self.chunk_size),
            np.array([self.max_guidance_weight], np.float32),
        )

    @property
    def defaults(self) -> dict[str, object]:
        """What a request that names none of the guidance settings gets (``hello`` lists them)."""
        return {
            "execution_horizon": self.execution_horizon,
            "prefix_attention_schedule": self.schedule,
            "max_guidance_weight": self.max_guidance_weight,
        }

    def error(self, fields: PrefixFields) -> InputValidationError | None:
        """Why these fields cannot go with a request to this policy, or None when they can."""
        prefix, delay = fields.prefix, fields.delay
        steps = f"[1..{self.chunk_size}, {self.joints}]"
        if prefix is None and delay is not None:
            return InputValidationError(
                "delay: a delay says how much of a prefix the robot executes meanwhile; send it with the prefix",
                field="delay",
                expected="a prefix with it",
                received="delay without a prefix",
            )
        if prefix is not None:
            shape_ok = prefix.ndim == 2 and prefix.shape[1] == self.joints and 1 <= prefix.shape[0] <= self.chunk_size
            if prefix.dtype != np.float32 or not shape_ok:
                return InputValidationError(
                    f"prefix: expected float32{steps} (the leftover actions, at most the policy's {self.chunk_size} "
                    f"steps, one value per joint in the action's order), got {prefix.dtype}{list(prefix.shape)}",
                    field="prefix",
                    expected=f"float32{steps}",
                    received=f"{prefix.dtype}{list(prefix.shape)}",
                )
            if not np.isfinite(prefix).all():
                bad = int(np.count_nonzero(~np.isfinite(prefix)))
                return InputValidationError(
                    f"prefix: {bad} value(s) are NaN or infinite",
                    field="prefix",
                    expected="finite values",
                    received=f"{bad} non-finite value(s)",
                )
        if delay is not None and not 0 <= delay <= self.max_delay:
            return InputValidationError(
                f"delay: expected 0..{self.max_delay} steps (a chunk that arrives after all of its "
                f"{self.max_delay + 1} steps has none left to execute), got {delay}",
                field="delay",
                expected=f"0..{self.max_delay}",
                received=str(delay),
            )
        horizon = fields.execution_horizon
        if horizon is not None and not 1 <= horizon <= self.chunk_size:
            return InputValidationError(
                f"execution_horizon: expected 1..{self.chunk_size} steps, got {horizon}",
                field="execution_horizon",
                expected=f"1..{self.chunk_size}",
                received=str(horizon),
            )
        schedule = fields.prefix_attention_schedule
        if schedule is not None and schedule.upper() not in SCHEDULES:
            return InputValidationError(
                f"prefix_attention_schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}",
                field="prefix_attention_schedule",
                expected=" | ".join(SCHEDULES),
                received=schedule[:64],
            )
        cap = fields.max_guidance_weight
        if cap is not None and not (cap > 0 and math.isfinite(cap)):
            return InputValidationError(
                f"max_guidance_weight: expected a finite number > 0, got {cap}",
                field="max_guidance_weight",
                expected="> 0",
                received=str(cap),
            )
        return None

    def arrays(self, fields: PrefixFields) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The program's prefix, weights and cap for checked fields (:meth:`error` returned None)."""
        prefix = fields.prefix
        cap = fields.max_guidance_weight
        if prefix is None:
            if cap is None:
                return self._none
            return self._none[0], self._none[1], np.array([cap], np.float32)
        steps = prefix.shape[0]
        padded = np.zeros((self.chunk_size, self.joints), np.float32)
        padded[:steps] = prefix  # rows past the leftover have weight 0: their value does not count
        schedule = (fields.prefix_attention_schedule or self.schedule).upper()
        horizon = fields.execution_horizon or self.execution_horizon
        weights = prefix_weights(fields.delay or 0, horizon, self.chunk_size, schedule, steps)
        return padded, weights, np.array([cap if cap is not None else self.max_guidance_weight], np.float32)

    @staticmethod
    def _frozen(*arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        for a in arrays:
            a.flags.writeable = False
        return arrays[0], arrays[1], arrays[2]


def prefix_inputs(manifest: Manifest) -> PrefixInputs | None:
    """The policy's prefix inputs, None for a policy without real-time chunking."""
    return PrefixInputs(manifest) if manifest.rtc is not None else None
