"""The one-slot handoff between threads: the newest value, taken without waiting.

A producer replaces the value; a consumer takes (or peeks at) whatever is newest and never waits,
never sees a backlog, and never makes the producer wait (ros realtime_tools' RealtimeBuffer is the
same idea). The slot is a ``deque(maxlen=1)``: ``append`` and ``popleft`` are each one C call, atomic
under the interpreter lock, so a value put while another is being taken is kept, not lost. There is
no lock for a slow thread to hold.

One consumer takes from a slot (the loop takes the finished chunk); any number of readers may peek
(the loop peeks at the newest camera part, status peeks at the loop's snapshot).
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Latest(Generic[T]):
    __slots__ = ("_slot", "puts")

    def __init__(self) -> None:
        self._slot: deque[T] = deque(maxlen=1)
        #: values put since the slot was made (replaced ones included); written by the producer only
        self.puts = 0

    def put(self, value: T) -> None:
        """Make ``value`` the newest, dropping the one before if it was not taken."""
        self._slot.append(value)
        self.puts += 1

    def take(self) -> T | None:
        """The newest value, removing it; None when nothing new was put since the last take.

        For the slot's one consumer: a put in between only replaces the value, so the slot cannot
        empty between the check and the pop."""
        slot = self._slot
        return slot.popleft() if slot else None

    def peek(self) -> T | None:
        """The newest value, left in place; None when there is none."""
        try:
            return self._slot[-1]
        except IndexError:  # empty, or emptied by a take since
            return None

    def clear(self) -> None:
        """Forget the value (a new session starts from nothing)."""
        self._slot.clear()
