"""Typed messages of protocol version 1 (see ``docs/protocol.md``).

Requests and replies are frozen dataclasses; the codec (``runtime.protocol.codec``) is the only place
that sees the msgpack maps they travel as.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np

PROTOCOL_VERSION: Final = 1
SUPPORTED_VERSIONS: Final = (PROTOCOL_VERSION,)
MAX_REQUEST_ID: Final = 2**64 - 1

Kind = Literal["hello", "infer", "ping", "stats"]
# The control loop's requests (answered by a daemon that owns an arm; ``no_control`` otherwise).
CONTROL_KINDS: Final[tuple[str, ...]] = (
    "control.start",
    "control.stop",
    "control.estop",
    "control.release",
    "control.status",
    "control.dump",
    "control.teleop",
)
# A station driving the arm (answered by a daemon that owns an arm; ``no_control`` otherwise).
TELEOP_KINDS: Final[tuple[str, ...]] = (
    "teleop.open",
    "teleop.target",
    "teleop.take_over",
    "teleop.hand_back",
    "teleop.episode_start",
    "teleop.episode_stop",
    "teleop.episode_discard",
    "teleop.close",
)
KINDS: Final[tuple[str, ...]] = ("hello", "infer", "ping", "stats", *CONTROL_KINDS, *TELEOP_KINDS)
# Name spaces kept for later versions: refused as ``unsupported_kind`` today, never reinterpreted.
RESERVED_KIND_PREFIXES: Final = ("session.",)


@dataclass(frozen=True, slots=True)
class Timing:
    """Server-side milliseconds from monotonic clocks: waiting in the queue, running, receive to reply."""

    queue_ms: float = 0.0
    infer_ms: float = 0.0
    total_ms: float = 0.0


ZERO_TIMING: Final = Timing()


# --- requests --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HelloRequest:
    id: int
    kind: Literal["hello"] = "hello"


@dataclass(frozen=True, slots=True)
class PingRequest:
    id: int
    kind: Literal["ping"] = "ping"


@dataclass(frozen=True, slots=True)
class StatsRequest:
    id: int
    kind: Literal["stats"] = "stats"


@dataclass(frozen=True, slots=True)
class PrefixFields:
    """Real-time chunking's fields of an infer, each None when absent (checked against the policy by
    runtime.server.rtc): ``prefix``, the previous chunk's leftover (``[steps, joints]`` in the action's
    joint order and units); ``delay``, the inference delay in steps; and the guidance settings, which
    default to the bundle's."""

    prefix: np.ndarray | None = None
    delay: int | None = None
    execution_horizon: int | None = None
    prefix_attention_schedule: str | None = None
    max_guidance_weight: float | None = None

    def given(self) -> tuple[str, ...]:
        """The fields the request carries, in wire order."""
        return tuple(name for name in PREFIX_FIELDS if getattr(self, name) is not None)


#: the infer body's real-time chunking keys, as the wire names them
PREFIX_FIELDS: Final = ("prefix", "delay", "execution_horizon", "prefix_attention_schedule", "max_guidance_weight")


@dataclass(frozen=True, slots=True)
class InferRequest:
    """``reset``: this observation starts a new episode (a policy with observation history forgets
    the client's earlier frames). ``task``: the instruction a language policy follows (SmolVLA),
    None when the request carries none. ``rtc``: the previous chunk's leftover and how to follow it
    (a policy with real-time chunking)."""

    id: int
    observation: Mapping[str, np.ndarray]
    kind: Literal["infer"] = "infer"
    reset: bool = False
    task: str | None = None
    rtc: PrefixFields = PrefixFields()


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """``control.*``: ``who`` names the operator (for the log), ``reason`` goes with an e-stop, ``task``
    with a start,
    ``latch`` with a release: the e-stop latch it releases, as ``control.estop``/``control.status``
    reported it (a newer latch refuses the release)."""

    id: int
    kind: str
    who: str = ""
    reason: str = ""
    latch: int = 0
    #: with ``control.start``: the instruction a language policy follows (empty: the loop's own)
    task: str = ""


@dataclass(frozen=True, slots=True)
class TeleopRequest:
    """``teleop.*``: ``session`` is the token ``teleop.open`` returned (every kind but ``open``);
    ``seq`` and ``positions`` (one per joint, in the arm's joint order) come with ``teleop.target``;
    ``task`` with ``teleop.episode_start``; ``who`` names the operator (``open``)."""

    id: int
    kind: str
    session: str = ""
    who: str = ""
    seq: int = 0
    positions: tuple[float, ...] = ()
    task: str = ""


Request = HelloRequest | PingRequest | StatsRequest | InferRequest | ControlRequest | TeleopRequest


# --- replies ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str = "other"

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "role": self.role}


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    """The ``hello`` reply: what the policy takes and returns, and what it runs on."""

    protocol_version: int
    server_version: str
    policy_name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    action_output: str
    chunk_length: int
    action_names: tuple[str, ...]
    control_rate_hz: float
    engine: Mapping[str, Any]  # EngineInfo.to_json(): engine, device, precision, threads, cpus...
    versions: Mapping[str, str]
    kinds: tuple[str, ...]
    max_message_bytes: int
    queue_depth: int
    # the arm the daemon holds (health, e-stop, temperatures), None for a pure policy server
    arm: Mapping[str, Any] | None = None
    # observations the policy looks at (the server keeps each client's history) and the inputs the
    # server draws itself (sampling noise); clients send neither
    history_frames: int = 1
    noise_inputs: tuple[str, ...] = ()
    # a language policy needs a task string with every infer, of at most this many UTF-8 bytes; 0: the
    # policy takes no task (and refuses one)
    max_task_bytes: int = 0
    # real-time chunking: the most leftover steps a prefix may have (0: the policy takes no prefix), the
    # largest delay and the guidance defaults (execution_horizon, prefix_attention_schedule,
    # max_guidance_weight)
    prefix_steps: int = 0
    max_delay: int = 0
    prefix_defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def takes_task(self) -> bool:
        return self.max_task_bytes > 0

    @property
    def takes_prefix(self) -> bool:
        return self.prefix_steps > 0

    @property
    def device(self) -> str:
        return str(self.engine.get("device", ""))

    @property
    def precision(self) -> str:
        return str(self.engine.get("precision", ""))

    def to_wire(self) -> dict[str, Any]:
        return {
            "protocol_version": self.protocol_version,
            "server_version": self.server_version,
            "policy": {"name": self.policy_name},
            "inputs": [t.to_wire() for t in self.inputs],
            "outputs": [t.to_wire() for t in self.outputs],
            "action": {
                "output": self.action_output,
                "chunk_length": self.chunk_length,
                "names": list(self.action_names),
            },
            "control_rate_hz": self.control_rate_hz,
            "engine": dict(self.engine),
            "versions": dict(self.versions),
            "kinds": list(self.kinds),
            "limits": {"max_message_bytes": self.max_message_bytes, "queue_depth": self.queue_depth},
            "arm": None if self.arm is None else dict(self.arm),
            "observation": {
                "history_frames": self.history_frames,
                "server_drawn": list(self.noise_inputs),
                "task": {"required": True, "max_bytes": self.max_task_bytes} if self.takes_task else None,
                "prefix": (
                    {"max_steps": self.prefix_steps, "max_delay": self.max_delay, **self.prefix_defaults}
                    if self.takes_prefix
                    else None
                ),
            },
        }


@dataclass(frozen=True, slots=True)
class ActionChunk:
    """The ``infer`` reply: ``actions`` is [chunk_length, len(action_names)]."""

    request_id: int
    actions: np.ndarray
    timing: Timing
    round_trip_ms: float = 0.0  # measured by the client, on the client's clock


@dataclass(frozen=True, slots=True)
class Pong:
    request_id: int
    uptime_s: float
    timing: Timing
    round_trip_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Percentiles:
    count: int = 0
    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    max: float = 0.0

    def to_wire(self) -> dict[str, Any]:
        return {"count": self.count, "p50": self.p50, "p90": self.p90, "p99": self.p99, "max": self.max}


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """The ``stats`` reply: counters since start and latency percentiles over recent infers."""

    uptime_s: float
    requests: Mapping[str, int]  # by kind, including requests that failed
    errors: Mapping[str, int]  # by error code
    replies_ok: int
    queue_depth: int
    queue_depth_max: int
    queue_capacity: int
    in_flight: int
    latency_ms: Mapping[str, Percentiles] = field(default_factory=dict)  # queue, infer, total
    arm: Mapping[str, Any] | None = None  # as in PolicyInfo.arm
    clients: int = 0  # distinct clients heard from in the last minute
    inference_cpus: Mapping[int, int] = field(default_factory=dict)  # CPU -> inferences that ran there
    engine: Mapping[str, Any] = field(default_factory=dict)  # EngineInfo.to_json() of the serving engine
    # the serving canary (CanaryState.to_wire()); empty when it is off
    verification: Mapping[str, Any] = field(default_factory=dict)
    # the part of requests and errors that is the daemon's own control loop's (counted in both)
    local_requests: Mapping[str, int] = field(default_factory=dict)
    local_errors: Mapping[str, int] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {
            "uptime_s": self.uptime_s,
            "requests": dict(self.requests),
            "errors": dict(self.errors),
            "replies_ok": self.replies_ok,
            "queue": {
                "depth": self.queue_depth,
                "depth_max": self.queue_depth_max,
                "capacity": self.queue_capacity,
                "in_flight": self.in_flight,
            },
            "latency_ms": {k: v.to_wire() for k, v in self.latency_ms.items()},
            "arm": None if self.arm is None else dict(self.arm),
            "clients": self.clients,
            "inference_cpus": {str(k): v for k, v in self.inference_cpus.items()},
            "engine": dict(self.engine),
            "verification": dict(self.verification),
            "local_requests": dict(self.local_requests),
            "local_errors": dict(self.local_errors),
        }
