"""The arm as the daemon's parts see it: :class:`ArmControl`, the one interface to the control loop.

The loop runs in the arm process; :class:`~runtime.arm_control.link.ArmLink` is this interface at the
daemon's end of its link, and the only implementation the daemon makes. The ``control.*`` and
``teleop.*`` handlers, the local leader, recording, status, metrics and the benches use nothing else,
so what they may ask of the arm is written here once: start, stop, release and teleop take-over
(:meth:`ArmControl.request`, checked first by :meth:`ArmControl.check`), e-stop
(:meth:`ArmControl.request_estop`), the newest teleop target (``teleop.put``), the per-tick snapshot
and ``control status``, the flight recording (``recorder.dump``) and the shutdown. The chunks the loop
asks for travel the other way, through the link's feed.

Everything here returns at once: a request is a message the arm takes at its next tick; what it did is
in the next snapshot.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from runtime.control.config import ControlConfig
from runtime.control.events import EventLog
from runtime.control.latch import Latch
from runtime.control.mailbox import Command
from runtime.control.snapshot import Snapshot
from runtime.teleop.config import TeleopConfig

if TYPE_CHECKING:
    from runtime.arm_control.episodes import EpisodeTap


class TeleopInput(Protocol):
    """The loop's teleop slot, seen from the daemon: the newest station (or local leader) target."""

    config: TeleopConfig
    #: targets forwarded, and those refused as older than the newest
    received: int
    out_of_order: int

    def put(self, seq: int, positions: np.ndarray, now: float) -> bool:
        """Forward a target; False (and counted) when ``seq`` is not newer than the last one."""

    def clear(self) -> None:
        """Forget the last target (a session opened, closed or lost): the deadman holds the arm."""

    @property
    def phase(self) -> str:
        """The hand-over's phase as of the newest tick."""


class FlightRecording(Protocol):
    def dump(self, directory: Path, reason: str, extra: dict[str, Any] | None = None) -> Path:
        """Write the flight recorder's last seconds of ticks; the path written (OSError if not)."""


class ArmControl(Protocol):
    names: tuple[str, ...]
    rate_hz: float
    period: float
    config: ControlConfig
    #: the loop's events, logged by the daemon's main loop
    events: EventLog
    #: why the flight recording should be written (e-stops, stall actions, an operator)
    dump_requests: deque[str]

    @property
    def teleop(self) -> TeleopInput:
        """Where the station's (or the local leader's) targets go."""

    @property
    def recorder(self) -> FlightRecording:
        """The loop's flight recorder (it lives with the loop, which writes it)."""

    #: the daemon's episode tap when ``[recording]`` is on (set by the daemon)
    episodes: EpisodeTap | None
    #: the arm process's pid
    pid: int

    @property
    def alive(self) -> bool:
        """False once the arm process is gone."""

    @property
    def death(self) -> str | None:
        """Why the arm process is gone, or None while it runs."""

    @property
    def estop(self) -> Latch | None:
        """The newest e-stop, requested (effective at the next tick) or in effect; None when released."""

    @property
    def estop_reason(self) -> str | None: ...

    def snapshot(self) -> Snapshot:
        """The newest tick's snapshot."""

    def stalled_for(self, now: float) -> float:
        """Seconds the loop is behind its ticks beyond five periods (0 while it ticks)."""

    def request_estop(self, reason: str) -> Latch:
        """Latch an e-stop (any thread, a signal handler too); the latch, numbered, as the release must name it."""

    def check(self, command: str, latch: int = 0) -> None:
        """Raise :class:`~runtime.control.latch.ControlRefused` saying why ``command`` cannot be carried
        out now (a release of any latch but the newest: :class:`~runtime.control.latch.StaleLatch`)."""

    def request(self, command: str | Command, who: str = "", latch: int = 0) -> None:
        """Queue a command for the next tick (``start``, ``stop``, ``teleop``, ``release``)."""

    def status(self) -> dict[str, Any]:
        """``control status``'s map."""

    def shutdown(self, timeout: float = 15.0) -> bool:
        """Stop motion, carry out ``safety.shutdown_action`` and end; False when the arm could not be
        confirmed safe."""
