"""The control loop's way in: commands as small frozen values, and e-stops that are never lost.

Other threads (the server's I/O thread, a signal handler, the daemon) post; the loop takes at its next
tick, e-stops before any command. Each e-stop request is a :class:`~runtime.control.latch.Latch` of
its own, numbered from 1, also while one is latched, so a release already on its way names a latch
that is no longer the newest and is refused. Posting takes no lock (``deque.append`` and ``next`` on
a counter are each one C call), so it is safe from a signal handler.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from runtime.control.latch import LATCH_ID, Latch


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
        self._latch_ids = itertools.count(1)  # next() is atomic: any thread, a signal handler too
        self._estops: deque[Latch] = deque()
        self._commands: deque[Command] = deque()

    # --- other threads --------------------------------------------------------------------

    def post(self, command: Command) -> None:
        self._commands.append(command)

    def estop(self, reason: str) -> Latch:
        """A new latch, taken at the next tick before any command."""
        latch = Latch(next(self._latch_ids), reason, self._clock())
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
