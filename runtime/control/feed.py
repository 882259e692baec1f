"""The control loop's way to the policy: the joints it read go in, chunks come out.

The loop knows only joint positions. What else the policy looks at (the newest frame of each camera
stream) is added on the daemon's side of this seam, by :class:`StreamFeed`, so camera frames never pass
through the arm's process: the loop hands over ``state`` and gets back a chunk or a reason. Whether
the policy may be asked at all (every stream fresh, no failed self-check) is :meth:`PolicyFeed.blocked`;
whether the side that answers is still there at all is :meth:`PolicyFeed.lost` (never, in one process;
the daemon gone, seen from the arm's process). With real-time chunking a request also carries a
:class:`Prefix`: the plan's leftover and the inference delay, which the server turns into the
program's prefix inputs.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from runtime.bundle.manifest import Manifest
from runtime.engine.validate import validate_inputs
from runtime.errors import ConfigError, InputValidationError

if TYPE_CHECKING:  # the arm process imports this module: no ZeroMQ there
    from runtime.control.streams import ObservationStreams

log = logging.getLogger(__name__)

OnDone = Callable[[np.ndarray | None, str | None], None]


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why the policy may not be asked now: ``key`` names the cause (``stale:front,wrist``,
    ``untrusted``, ``daemon``) so a change of cause drops the plan; ``reason`` is for the log."""

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


class Inference(Protocol):
    """The server's inference worker (or a stand-in): whole observations in the policy's input order."""

    def submit(
        self, inputs: list[np.ndarray], on_done: OnDone, *, reset: bool = False, prefix: Prefix | None = None
    ) -> bool: ...
    def observe(self, inputs: list[np.ndarray], *, reset: bool = False) -> None: ...
    def failure(self) -> str | None: ...


def state_input(manifest: Manifest) -> str:
    """The one input with role ``state``: the loop fills it from the joints."""
    names = tuple(manifest.action_names)
    states = [s for s in manifest.observation_inputs if s.role == "state"]
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


def describe_stale(stale: list[tuple[str, float | None]], streams: ObservationStreams) -> str:
    parts = []
    for name, age in stale:
        limit = streams.configs[name].max_age_ms
        parts.append(f"{name} (nothing received yet)" if age is None else f"{name} ({age:.0f} ms old > {limit:g} ms)")
    return ", ".join(parts)


class StreamFeed:
    """The loop's joints plus the newest part of every camera stream, validated, to ``inference``.

    Runs wherever the streams are received: on the loop's thread when the loop shares the daemon's
    process, on the daemon's arm-link thread when the loop has a process of its own."""

    def __init__(self, inference: Inference, manifest: Manifest, streams: ObservationStreams | None = None) -> None:
        self.inference = inference
        self.streams = streams
        self.inputs = manifest.observation_inputs
        self.state_input = state_input(manifest)
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
        failure = self.inference.failure()
        if failure:
            return Blocked("untrusted", f"policy not trusted: {failure}")
        return None

    def lost(self) -> str | None:
        return None
