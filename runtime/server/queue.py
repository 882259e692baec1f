"""The bounded inference queue with explicit backpressure and "latest observation wins" per client."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class Job:
    """One infer request waiting for (or running on) the engine."""

    socket_index: int
    envelope: list[bytes]  # routing frames to send the reply back through the ROUTER
    request_id: int
    inputs: list[np.ndarray]  # validated, in the policy's input order
    received_at: float  # time.monotonic() at receive
    # Set for the control loop's own jobs: called with (actions, None) or (None, reason) on the
    # worker thread instead of a reply going out on a socket.
    on_done: Callable[[np.ndarray | None, str | None], None] | None = None

    @property
    def client(self) -> tuple[int, bytes]:
        return self.socket_index, self.envelope[0]


@dataclass(frozen=True, slots=True)
class PutResult:
    accepted: bool
    superseded: Job | None = None  # the older queued job from the same client this one replaced


class RequestQueue:
    """FIFO of jobs bounded at ``capacity``; never blocks the producer.

    With ``latest_wins`` a client has at most one queued job: a new one takes the old one's place in
    line (so a fast producer does not lose its turn) and the old one is handed back to be answered.
    """

    def __init__(self, capacity: int, latest_wins: bool = True) -> None:
        self.capacity = capacity
        self.latest_wins = latest_wins
        self._jobs: deque[Job] = deque()
        self._by_client: dict[tuple[int, bytes], Job] = {}
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self.depth_max = 0

    def put(self, job: Job, *, front: bool = False) -> PutResult:
        """Queue ``job``; ``front`` puts it ahead of every waiting job (the arm is waiting on it)."""
        with self._cond:
            if self._closed:
                return PutResult(False)
            if self.latest_wins:
                old = self._by_client.get(job.client)
                if old is not None:
                    # Identity search: the deque holds at most `capacity` jobs.
                    for i, queued in enumerate(self._jobs):
                        if queued is old:
                            self._jobs[i] = job
                            break
                    self._by_client[job.client] = job
                    return PutResult(True, old)
            if len(self._jobs) >= self.capacity and not front:
                return PutResult(False)
            if front:
                self._jobs.appendleft(job)
            else:
                self._jobs.append(job)
            if self.latest_wins:
                self._by_client[job.client] = job
            self.depth_max = max(self.depth_max, len(self._jobs))
            self._cond.notify()
            return PutResult(True)

    def get(self, timeout: float | None = None) -> Job | None:
        """The next job; None once closed and empty, or after ``timeout`` seconds with nothing."""
        with self._cond:
            while not self._jobs:
                if self._closed:
                    return None
                if not self._cond.wait(timeout):
                    return None
            job = self._jobs.popleft()
            if self.latest_wins and self._by_client.get(job.client) is job:
                del self._by_client[job.client]
            return job

    def close(self) -> None:
        """Refuse new jobs; ``get`` still hands out the queued ones, then returns None."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def cancel_pending(self) -> list[Job]:
        """Remove and return every queued job (the caller answers them)."""
        with self._cond:
            jobs = list(self._jobs)
            self._jobs.clear()
            self._by_client.clear()
            self._closed = True
            self._cond.notify_all()
            return jobs

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._jobs)
