"""The control loop's way in: commands as small frozen values, and e-stops that are never lost.

Other threads (the server's I/O thread, a signal handler, the daemon) post; the loop takes at its next
tick, e-stops before any command. Each e-stop request is a :class:`~runtime.control.latch.Latch` of
its own, numbered from 1, also while one is latched, so a release already on its way names a latch
that is no longer the newest and is refused. Posting takes no lock (``deque.append`` and ``next`` on
a counter are each one C call), so it is safe from a signal handler.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from runtime.control.latch import LATCH_ID, ControlRefused, Latch, LatchNumbers, StaleLatch


@dataclass(frozen=True, slots=True)
class Start:
    """Source ``policy``: motion from the present pose, the queue empty."""

    who: str = ""


@dataclass(frozen=True, slots=True)
class TakeOver:
    """Source ``teleop``: a hand-over from the last goal written (or the present pose)."""

    who: str = ""


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop motion and hold the present pose."""

    who: str = ""


@dataclass(frozen=True, slots=True)
class Release:
    """Release e-stop latch ``latch`` (refused unless it is the newest)."""

    who: str = ""
    latch: int = 0


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Stop, hold, then the configured shutdown action; the loop ends."""

    who: str = "daemon"


Command = Start | TakeOver | Stop | Release | Shutdown

#: the words of ``control.*`` requests for each command
WORDS: dict[str, type[Start | TakeOver | Stop | Release]] = {
    "start": Start,
    "teleop": TakeOver,
    "stop": Stop,
    "release": Release,
}


def word(command: Command) -> str:
    """The request word for ``command`` (``shutdown`` for :class:`Shutdown`)."""
    for name, kind in WORDS.items():
        if isinstance(command, kind):
            return name
    return "shutdown"


def parse(name: str, who: str = "", latch: int = 0) -> Command:
    """The command a ``control.*`` word names; ValueError naming the word and the known ones."""
    kind = WORDS.get(name)
    if kind is None:
        raise ValueError(f"command: expected one of {', '.join(WORDS)}, got {name!r}")
    if kind is Release:
        return Release(who, latch)
    return kind(who)


class Mailbox:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._numbers = LatchNumbers()
        self._estops: deque[Latch] = deque()
        self._commands: deque[Command] = deque()

    # --- other threads --------------------------------------------------------------------

    def post(self, command: Command) -> None:
        self._commands.append(command)

    def estop(self, reason: str) -> Latch:
        """A new latch, taken at the next tick before any command."""
        latch = self._numbers.issue(reason, self._clock())
        self._estops.append(latch)
        return latch

    def post_estop(self, latch: Latch) -> Latch:
        """A latch numbered elsewhere (the daemon, for the arm's process), renumbered as
        :meth:`LatchNumbers.claim` says; returned as posted. For one posting thread (the arm
        process's loop), beside :meth:`estop` on the same thread."""
        latch = self._numbers.claim(latch)
        self._estops.append(latch)
        return latch

    def pending_estop(self) -> Latch | None:
        """The newest e-stop requested and not yet taken, or None."""
        return max(tuple(self._estops), key=LATCH_ID, default=None)  # tuple(): one C-level copy

    # --- the loop -------------------------------------------------------------------------

    def estop_requests(self) -> tuple[Latch, ...]:
        """The e-stops requested and not yet taken, oldest first; they stay pending until
        :meth:`drop_estops`, so the loop makes the newest effective first and a reader never sees
        neither (the loop's ``estop`` reads the requests before the latch)."""
        return tuple(self._estops)

    def drop_estops(self, n: int) -> None:
        """Drop the ``n`` oldest e-stop requests (those the loop has made effective)."""
        for _ in range(n):
            self._estops.popleft()

    def take_command(self) -> Command | None:
        commands = self._commands
        return commands.popleft() if commands else None


def newest_latch(pending: Latch | None, current: Latch | None) -> Latch | None:
    """The e-stop in effect or on its way, whichever is newer (None: none is latched)."""
    if pending is None or (current is not None and current.id > pending.id):
        return current
    return pending


def check_command(command: str, latch: int, estop: Latch | None, arm_error: str, blocked: str | None) -> None:
    """Raise :class:`ControlRefused` when ``command`` cannot be carried out now.

    ``estop``: the newest latch (:func:`newest_latch`); a release of any latch but it (``latch``)
    raises :class:`StaleLatch`. ``arm_error``: why the arm's last read failed (empty: it answered).
    ``blocked``: why the policy may not be asked now (stale stream, failed self-check), or None."""
    if command in ("start", "teleop"):
        if estop is not None:
            raise ControlRefused(
                f"e-stop is latched (latch {estop.id}: {estop.reason}); release it first (control release)"
            )
        if arm_error:
            raise ControlRefused(f"the arm is failing: {arm_error}")
        if command == "start" and blocked:
            raise ControlRefused(blocked)
    elif command == "release":
        if estop is None:
            raise ControlRefused("no e-stop is latched")
        if latch != estop.id:
            raise StaleLatch(latch, estop)
    elif command != "stop":
        raise ControlRefused(f"unknown command {command!r}")
