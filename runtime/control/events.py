"""Events raised on the control thread and logged on another.

The control tick must not do I/O, so it appends one event per occurrence (a clamp starting, a
refused chunk, an e-stop) to a bounded deque; the daemon's main loop drains it into the log. A full
deque drops the oldest event and counts it, so nothing is lost silently.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("runtime.control")


@dataclass(frozen=True, slots=True)
class Event:
    t: float  # time.monotonic()
    level: int
    message: str
    args: tuple[Any, ...]

    def text(self) -> str:
        return self.message % self.args if self.args else self.message


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
