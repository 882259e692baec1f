"""What crosses the link between the daemon and the arm process: one frozen dataclass per kind of message.

Each message's fields are the values the two sides work with (a :class:`Snapshot`, a :class:`Latch`,
numpy arrays, the configuration's own dataclasses), never the maps they travel as: those are seen
only by :mod:`runtime.arm.codec`, which :class:`runtime.arm.wire.Link` calls to send and to receive.
A message's kind on the wire is its class name in snake case (:data:`KINDS`).

:data:`LINK_VERSION` numbers the protocol: the daemon sends it in :class:`Init`, the first message, and
the arm process refuses a daemon of another version (both come from one install; a mismatch means the
service was not restarted after an upgrade). Change it whenever a kind, a field or its encoding changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from drivers.config import ArmConfig
from runtime.bundle.interface import PolicyInterface
from runtime.control.config import ControlConfig
from runtime.control.feed import Blocked, Prefix
from runtime.control.latch import Latch
from runtime.control.mailbox import Release, Start, Stop, TakeOver
from runtime.control.snapshot import Snapshot
from runtime.control.target import Target
from runtime.teleop.config import TeleopConfig

LINK_VERSION: Final = 3


@dataclass(frozen=True, slots=True)
class EpisodeRecord:
    """One tick of an episode, as the loop hands it to its episode tap: the daemon's tap adds the
    camera frames. The arrays are the tick's own (float64, the policy's joint order), sent before the
    next tick."""

    now: float
    present: np.ndarray | None
    goal: np.ndarray | None
    requested: np.ndarray | None
    source: str
    intervention: bool


# --- the daemon to the arm process ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Init:
    """The first message: the configuration the arm process runs with, and the link's version."""

    version: int
    control: ControlConfig
    teleop: TeleopConfig
    arm: ArmConfig
    policy: PolicyInterface
    #: the CPU the arm process keeps to, None for any
    cpu: int | None = None
    #: how long to wait for an absent arm, in seconds (0: not at all)
    arm_wait_s: float = 0.0
    #: whether each tick's episode record is sent with its snapshot
    record: bool = False


@dataclass(frozen=True, slots=True)
class Gate:
    """Whether the policy may be asked now (None: it may); sent every ``GATE_EVERY_S``, it is also
    the arm process's sign that the daemon is alive."""

    blocked: Blocked | None = None


@dataclass(frozen=True, slots=True)
class Chunk:
    """The answer to the :class:`Ask` numbered ``id``: its actions, or why there are none."""

    id: int
    actions: np.ndarray | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TargetPut:
    """A station's teleop target, ``received_at`` on the daemon's clock (``teleop.put`` on the arm's side)."""

    target: Target


@dataclass(frozen=True, slots=True)
class TargetClear:
    """Forget the stored teleop target: a new session starts from nothing."""


@dataclass(frozen=True, slots=True)
class Estop:
    """An e-stop latch the daemon numbered (the loop takes it at its next tick)."""

    latch: Latch


@dataclass(frozen=True, slots=True)
class CommandRequest:
    """A ``control.*`` command for the loop (a shutdown is :class:`ShutdownRequest`)."""

    command: Start | TakeOver | Stop | Release


@dataclass(frozen=True, slots=True)
class Dump:
    """Write the flight recording into ``directory``; answered by :class:`Dumped` with the same ``id``."""

    id: int
    directory: Path
    reason: str
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ShutdownRequest:
    """Stop motion, hold, carry out ``safety.shutdown_action`` and exit."""


# --- the arm process to the daemon ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Waiting:
    """What the arm process waits for while it starts (an absent arm)."""

    text: str


@dataclass(frozen=True, slots=True)
class Failed:
    """Why the arm process could not start; nothing moved. Its last word."""

    error: str


@dataclass(frozen=True, slots=True)
class StatusMap:
    """The loop's full ``control status`` map, a few times a second."""

    status: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Ready:
    """The arm process holds the arm: its pid, whether its memory is locked, the joints as the arm
    names them and where they were."""

    pid: int
    memory: str
    joints: tuple[str, ...]
    positions: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Tick:
    """Each tick's snapshot, the tick's episode record when recording, and whether the episode ended."""

    snapshot: Snapshot
    episode: EpisodeRecord | None = None
    episode_end: bool = False


@dataclass(frozen=True, slots=True)
class LoopEvent:
    """One of the loop's events, formatted, for the daemon to log."""

    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Ask:
    """The loop asks for a chunk from the joints of its tick (``state``, float32); answered by a
    :class:`Chunk` with the same ``id``."""

    id: int
    state: np.ndarray
    reset: bool
    prefix: Prefix | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """The tick's joints for the policy's history, without asking for a chunk."""

    state: np.ndarray
    reset: bool


@dataclass(frozen=True, slots=True)
class DumpRequest:
    """The loop asks for its flight recording to be written (an e-stop, a stall); the daemon answers
    with a :class:`Dump` naming where."""

    reason: str


@dataclass(frozen=True, slots=True)
class Dumped:
    """The answer to the :class:`Dump` numbered ``id``: where it was written, or why it was not."""

    id: int
    path: Path | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Bye:
    """The arm process's last word: whether it let the arm go safe (its torque off, the loop's last
    writes out)."""

    ok: bool


DaemonMessage = Init | Gate | Chunk | TargetPut | TargetClear | Estop | CommandRequest | Dump | ShutdownRequest
ArmMessage = Waiting | Failed | StatusMap | Ready | Tick | LoopEvent | Ask | Observation | DumpRequest | Dumped | Bye
Message = DaemonMessage | ArmMessage

DAEMON_MESSAGES: Final[tuple[type[DaemonMessage], ...]] = (
    Init,
    Gate,
    Chunk,
    TargetPut,
    TargetClear,
    Estop,
    CommandRequest,
    Dump,
    ShutdownRequest,
)
ARM_MESSAGES: Final[tuple[type[ArmMessage], ...]] = (
    Waiting,
    Failed,
    StatusMap,
    Ready,
    Tick,
    LoopEvent,
    Ask,
    Observation,
    DumpRequest,
    Dumped,
    Bye,
)


def kind_of(cls: type[Message]) -> str:
    """A message class's kind on the wire: its name in snake case (``TargetPut``: ``target_put``)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in cls.__name__).lstrip("_")


#: every kind, by the class it decodes to
KINDS: Final[Mapping[type[Message], str]] = {cls: kind_of(cls) for cls in (*DAEMON_MESSAGES, *ARM_MESSAGES)}
