"""The daemon's side of the loop's way to the policy: the joints the loop read, plus the newest part of
every camera stream, validated, to the inference worker (:class:`StreamFeed`); and whether the
policy may be asked now (every stream fresh, no failed self-check)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Protocol

import numpy as np

from runtime.arm_control.streams import ObservationStreams
from runtime.bundle.interface import PolicyInterface
from runtime.control.feed import Blocked, OnDone, Prefix, state_input
from runtime.engine.validate import validate_inputs
from runtime.errors import ConfigError, InputValidationError

log = logging.getLogger(__name__)


class Inference(Protocol):
    """Where the loop's chunks come from: the daemon's own inference worker
    (:class:`runtime.arm_control.handler.ServerInference`), a policy on another machine
    (:class:`runtime.remote.inference.RemoteInference`) or a stand-in. Whole observations in the
    policy's input order."""

    #: the instruction every request of the loop carries (a language policy needs one)
    task: str

    @property
    def takes_task(self) -> bool: ...

    def submit(
        self, inputs: list[np.ndarray], on_done: OnDone, *, reset: bool = False, prefix: Prefix | None = None
    ) -> bool: ...
    def observe(self, inputs: list[np.ndarray], *, reset: bool = False) -> None: ...
    def failure(self) -> str | None: ...
    def pending(self) -> str | None:
        """What the policy still proves before it may be asked (the rest of the parity gate), or None."""
        ...

    def unreachable(self) -> str | None:
        """Why the policy cannot be asked now (a remote one's link is lost), or None."""
        ...

    def describe(self) -> dict[str, Any]:
        """Which policy drives and where (for status and metrics)."""
        ...


def describe_stale(stale: list[tuple[str, float | None]], streams: ObservationStreams) -> str:
    parts = []
    for name, age in stale:
        limit = streams.configs[name].max_age_ms
        parts.append(f"{name} (nothing received yet)" if age is None else f"{name} ({age:.0f} ms old > {limit:g} ms)")
    return ", ".join(parts)


class StreamFeed:
    """The loop's joints plus the newest part of every camera stream, validated, to ``inference``.

    Runs where the streams are received: on the daemon's arm-link thread, for the loop in the arm process."""

    def __init__(
        self, inference: Inference, policy: PolicyInterface, streams: ObservationStreams | None = None
    ) -> None:
        self.inference = inference
        self.streams = streams
        self.inputs = policy.observation_inputs
        self.state_input = state_input(policy)
        stream_names = set(streams.names) if streams is not None else set()
        unfed = [s.name for s in self.inputs if s.name != self.state_input and s.name not in stream_names]
        if unfed:
            raise ConfigError(
                f"the policy input(s) {', '.join(unfed)} have no source: add a [[control.streams]] entry "
                "(input = NAME, endpoint = where its producer publishes) for each"
            )
        #: observations that could not be made (a stream part missing or refused)
        self.counters: Counter[str] = Counter()
        self.last_error = ""

    def _observation(self, state: np.ndarray) -> list[np.ndarray] | str:
        observation: dict[str, Any] = {self.state_input: state.astype(np.float32, copy=False)}
        if self.streams is not None:
            for name in self.streams.names:
                part = self.streams.latest(name)
                if part is None:
                    return f"nothing received yet on stream {name}"
                observation[name] = part.array
        try:
            return validate_inputs(self.inputs, observation)
        except InputValidationError as e:
            self.counters["observation_errors"] += 1
            return str(e)

    def submit(self, state: np.ndarray, on_done: OnDone, *, reset: bool = False, prefix: Prefix | None = None) -> bool:
        arrays = self._observation(state)
        if isinstance(arrays, str):
            self.last_error = arrays
            on_done(None, f"observation refused: {arrays}")
            return True
        return self.inference.submit(arrays, on_done, reset=reset, prefix=prefix)

    def observe(self, state: np.ndarray, *, reset: bool = False) -> None:
        arrays = self._observation(state)
        if not isinstance(arrays, str):
            self.inference.observe(arrays, reset=reset)
            self.counters["observations"] += 1

    def blocked(self, now: float) -> Blocked | None:
        if self.streams is not None:
            stale = self.streams.stale(now)
            if stale:
                return Blocked(
                    "stale:" + ",".join(n for n, _ in stale),
                    "stale observation stream: " + describe_stale(stale, self.streams),
                    tuple(n for n, _ in stale),
                )
        unreachable = self.inference.unreachable()
        if unreachable:
            return Blocked("unreachable", f"policy unreachable: {unreachable}")
        failure = self.inference.failure()
        if failure:
            return Blocked("untrusted", f"policy not trusted: {failure}")
        pending = self.inference.pending()
        if pending:
            return Blocked("gate", f"policy not proven yet: {pending}")
        return None

    def lost(self) -> str | None:
        return None
