"""Scheduling classes a library changed put back: the calling thread through the C library, and every
real-time thread returned to SCHED_OTHER. Real threads where no privilege is needed (SCHED_BATCH back to
SCHED_OTHER); a stand-in ``os`` where a real-time class would be."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from runtime import scheduling


def on_a_thread(body: Callable[[], Any]) -> Any:
    """``body`` run on a thread of its own (its class changes die with it); its result or its exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(body())
        except BaseException as e:  # handed back to the test
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(10)
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


class StandInOs:
    """The parts of ``os`` the module uses, over a table of thread ids and their classes."""

    SCHED_OTHER, SCHED_FIFO, SCHED_RR, SCHED_BATCH = os.SCHED_OTHER, os.SCHED_FIFO, os.SCHED_RR, os.SCHED_BATCH
    sched_param = os.sched_param

    def __init__(self, classes: dict[int, int], gone: tuple[int, ...] = (), this: tuple[int, int] = (0, 0)) -> None:
        self.classes = dict(classes)
        self.gone = gone
        self.this = this  # thread id 0: the calling thread's class and priority
        self.set: list[tuple[int, int, int]] = []
        self.listed: list[list[str]] = []

    def listdir(self, path: str) -> list[str]:
        assert path == "/proc/self/task"
        names = [str(t) for t in self.classes]
        self.listed.append(names)
        return names

    def sched_getscheduler(self, tid: int) -> int:
        if tid == 0:
            return self.this[0]
        if tid in self.gone:
            raise ProcessLookupError(3, "No such process")
        return self.classes[tid]

    def sched_getparam(self, tid: int) -> Any:
        assert tid == 0
        return os.sched_param(self.this[1])

    def sched_setscheduler(self, tid: int, policy: int, param: Any) -> None:
        self.set.append((tid, policy, param.sched_priority))
        self.classes[tid] = policy


def test_normal_scheduling_returns_each_real_time_thread_to_other(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = StandInOs({10: os.SCHED_OTHER, 11: os.SCHED_FIFO, 12: os.SCHED_RR, 13: os.SCHED_BATCH, 14: os.SCHED_FIFO})
    monkeypatch.setattr(scheduling, "os", fake)
    assert scheduling.normal_scheduling() == 3
    assert fake.set == [(11, os.SCHED_OTHER, 0), (12, os.SCHED_OTHER, 0), (14, os.SCHED_OTHER, 0)]
    assert scheduling.normal_scheduling() == 0


def test_a_thread_that_ended_since_it_was_listed_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = StandInOs({10: os.SCHED_FIFO, 11: os.SCHED_FIFO}, gone=(10,))
    monkeypatch.setattr(scheduling, "os", fake)
    assert scheduling.normal_scheduling() == 1
    assert fake.set == [(11, os.SCHED_OTHER, 0)]


def test_keep_scheduling_puts_the_thread_back_and_normalises_threads_the_body_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = StandInOs({1: os.SCHED_FIFO, 2: os.SCHED_FIFO}, this=(os.SCHED_FIFO, 7))
    restored: list[tuple[int, int]] = []
    monkeypatch.setattr(scheduling, "_pthread_setschedparam", lambda policy, prio: restored.append((policy, prio)))
    monkeypatch.setattr(scheduling, "os", fake)
    with scheduling.keep_scheduling():
        # the codec's pool: three new threads, two of them real-time and one of those gone by the end
        fake.classes.update({3: os.SCHED_FIFO, 4: os.SCHED_RR, 5: os.SCHED_OTHER})
        fake.gone = (4,)
    assert restored == [(os.SCHED_FIFO, 7)]
    # only the threads started inside, and of them the real-time ones still there
    assert fake.set == [(3, os.SCHED_OTHER, 0)]


def test_keep_scheduling_puts_the_thread_back_also_after_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    restored: list[tuple[int, int]] = []
    monkeypatch.setattr(scheduling, "_pthread_setschedparam", lambda policy, prio: restored.append((policy, prio)))

    def body() -> None:
        with scheduling.keep_scheduling():
            raise RuntimeError("codec failed")

    with pytest.raises(RuntimeError, match="codec failed"):
        on_a_thread(body)
    assert restored == [(os.SCHED_OTHER, 0)]


def test_keep_scheduling_undoes_a_class_change_on_a_real_thread() -> None:
    def body() -> tuple[int, int]:
        with scheduling.keep_scheduling():
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
            inside = os.sched_getscheduler(0)
        return inside, os.sched_getscheduler(0)

    assert on_a_thread(body) == (os.SCHED_BATCH, os.SCHED_OTHER)


def test_the_class_is_set_through_the_c_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """pthread_setschedparam on this very thread works without the system call's fallback."""
    fallback: list[tuple[int, int]] = []

    def body() -> int:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        monkeypatch.setattr(
            scheduling,
            "os",
            SimpleNamespace(sched_setscheduler=lambda tid, p, param: fallback.append((p, param.sched_priority))),
        )
        scheduling._pthread_setschedparam(os.SCHED_OTHER, 0)
        return os.sched_getscheduler(0)

    assert on_a_thread(body) == os.SCHED_OTHER
    assert fallback == []


def test_when_the_c_library_refuses_the_kernel_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int, int]] = []
    told: list[tuple[int, int, int]] = []

    class Fn:
        def __init__(self, result: Callable[..., int]) -> None:
            self.result = result
            self.restype: Any = None
            self.argtypes: Any = None

        def __call__(self, *args: Any) -> int:
            return self.result(*args)

    libc = SimpleNamespace(
        pthread_self=Fn(lambda: 4242),
        pthread_setschedparam=Fn(lambda t, p, param: calls.append((t, p, param._obj.sched_priority)) or 1),
    )
    monkeypatch.setattr(scheduling.ctypes, "CDLL", lambda name, use_errno: libc)
    monkeypatch.setattr(
        scheduling,
        "os",
        SimpleNamespace(
            sched_setscheduler=lambda tid, p, param: told.append((tid, p, param.sched_priority)),
            sched_param=os.sched_param,
        ),
    )
    scheduling._pthread_setschedparam(os.SCHED_FIFO, 50)
    assert calls == [(4242, os.SCHED_FIFO, 50)]
    assert told == [(0, os.SCHED_FIFO, 50)]

    def refuse(tid: int, p: int, param: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(scheduling, "os", SimpleNamespace(sched_setscheduler=refuse, sched_param=os.sched_param))
    scheduling._pthread_setschedparam(os.SCHED_FIFO, 50)  # not allowed either: nothing raised
