"""Events raised on the control thread and logged on another.

The control tick must not do I/O, so it appends one event per occurrence (a clamp starting, a
refused chunk, an e-stop) to a bounded deque; the daemon's main loop drains it into the log. A full
deque drops the oldest event and counts it, so nothing is lost silently.

The controller and its safety envelope raise theirs into :class:`TickEvents`, a plain list only the
loop's thread touches, with no clock: the runner moves them into the :class:`EventLog` (stamped as it
does) after each tick, so a controller's step reads no clock and hands nothing to another thread.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("runtime.control")


@dataclass(frozen=True, slots=True)
class Event:
    t: float  # time.monotonic()
    level: int
    message: str
    args: tuple[Any, ...]

    def text(self) -> str:
        return self.message % self.args if self.args else self.message


class Emit(Protocol):
    """Where a part of the loop raises its events: an :class:`EventLog` or a :class:`TickEvents`."""

    def emit(self, level: int, message: str, *args: Any) -> None: ...


class TickEvents:
    """The events the controller raised since the runner last took them, in order: no clock, no lock,
    for the loop's thread alone."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: list[tuple[int, str, tuple[Any, ...]]] = []

    def emit(self, level: int, message: str, *args: Any) -> None:
        self._pending.append((level, message, args))

    def move_to(self, log: EventLog) -> None:
        """Hand every pending event to ``log`` (the runner, after the tick), oldest first."""
        pending = self._pending
        if pending:
            for level, message, args in pending:
                log.emit(level, message, *args)
            pending.clear()


class EventLog:
    def __init__(self, capacity: int = 1024) -> None:
        self._events: deque[Event] = deque(maxlen=capacity)
        self.dropped = 0
        self._capacity = capacity

    def emit(self, level: int, message: str, *args: Any) -> None:
        if len(self._events) == self._capacity:
            self.dropped += 1
        self._events.append(Event(time.monotonic(), level, message, args))

    def drain(self) -> list[Event]:
        out: list[Event] = []
        while True:
            try:
                out.append(self._events.popleft())
            except IndexError:
                return out

    def flush_to_log(self) -> int:
        """Log every pending event (on the calling thread); returns how many."""
        events = self.drain()
        for e in events:
            log.log(e.level, e.message, *e.args)
        if self.dropped:
            log.warning("%d control events were dropped (the log fell behind)", self.dropped)
            self.dropped = 0
        return len(events)
