"""The ticker's deadlines, late wakes and overruns on a clock the test moves; the control thread's
CPU pinning and scheduling class, with the OS calls stood in for."""

from __future__ import annotations

import logging
import os

import pytest

from runtime.control import clock as clock_module
from runtime.control.clock import Ticker, pin_thread, request_realtime

from .small_arm import Clock


class Sleeper:
    """A sleep that records what it was asked for and moves the clock by that much (plus ``extra``)."""

    def __init__(self, clock: Clock, extra: float = 0.0) -> None:
        self.clock = clock
        self.extra = extra
        self.asked: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        self.clock.now += seconds + self.extra


def ticker(now: float = 100.0, period: float = 0.25, extra: float = 0.0) -> tuple[Ticker, Clock, Sleeper]:
    clock = Clock(now)
    sleep = Sleeper(clock, extra)
    return Ticker(period, clock=clock, sleep=sleep), clock, sleep


def test_a_new_ticker_has_not_started() -> None:
    t, _, _ = ticker()
    assert (t.period, t.t0, t.tick, t.overruns) == (0.25, 0.0, 0, 0)


def test_start_takes_the_clock_and_counts_ticks_from_there() -> None:
    t, clock, _ = ticker(now=100.0)
    assert t.start() == 100.0
    assert t.t0 == 100.0 and t.tick == 0
    assert t.deadline(0) == 100.0
    assert t.deadline(3) == 100.75
    t.wait()
    clock.now = 200.0
    assert t.start() == 200.0
    assert t.tick == 0 and t.deadline(1) == 200.25


def test_wait_sleeps_until_the_next_deadline_and_returns_it() -> None:
    t, clock, sleep = ticker(now=100.0)
    t.start()
    clock.now = 100.125
    assert t.wait() == (1, 100.25, 0.0)
    assert sleep.asked == [0.125]
    assert t.wait() == (2, 100.5, 0.0)
    assert sleep.asked == [0.125, 0.25]
    assert t.overruns == 0


def test_deadlines_are_counted_from_the_start_so_lateness_does_not_add_up() -> None:
    t, _, sleep = ticker(now=100.0, extra=0.125)  # every sleep oversleeps by half a period
    t.start()
    assert t.wait() == (1, 100.25, 0.125)
    # the next sleep is to tick 2's deadline, from where the last one woke: a quarter less
    assert t.wait() == (2, 100.5, 0.125)
    assert sleep.asked == [0.25, 0.125]
    assert t.overruns == 0


def test_a_wake_on_the_deadline_does_not_sleep() -> None:
    t, clock, sleep = ticker(now=100.0)
    t.start()
    clock.now = 100.25
    assert t.wait() == (1, 100.25, 0.0)
    assert sleep.asked == []


def test_a_wake_less_than_a_period_late_runs_that_tick_late() -> None:
    t, clock, sleep = ticker(now=100.0)
    t.start()
    clock.now = 100.375  # tick 1 was due at 100.25
    assert t.wait() == (1, 100.25, 0.125)
    assert sleep.asked == [] and t.overruns == 0


def test_a_wake_a_whole_period_late_skips_the_missed_deadline_as_an_overrun() -> None:
    t, clock, _ = ticker(now=100.0)
    t.start()
    clock.now = 100.5  # tick 1 due at 100.25: exactly one period late
    assert t.wait() == (2, 100.5, 0.0)
    assert t.overruns == 1


def test_missed_deadlines_are_counted_and_the_tick_after_them_runs() -> None:
    t, clock, _ = ticker(now=100.0)
    t.start()
    clock.now = 101.0 + 0.125  # tick 1 due at 100.25: 0.875 s late, three whole periods missed
    assert t.wait() == (4, 101.0, 0.125)
    assert t.overruns == 3
    clock.now = 101.875  # tick 5 due at 101.25: two periods and a half late
    assert t.wait() == (7, 101.75, 0.125)
    assert t.overruns == 5
    # and back on time: the next deadline is the tick after the last one run
    assert t.wait() == (8, 102.0, 0.0)


def test_pin_thread_pins_to_the_one_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[int]] = []
    monkeypatch.setattr(clock_module, "pin_current_thread", asked.append)
    assert pin_thread(3) is True
    assert asked == [[3]]


def test_pin_thread_to_a_cpu_it_cannot_have_says_false(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(cpus: list[int]) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(clock_module, "pin_current_thread", refuse)
    with caplog.at_level(logging.WARNING, logger="runtime.control.clock"):
        assert pin_thread(7) is False
    assert "control loop: cannot pin to CPU 7" in caplog.text


@pytest.mark.parametrize("priority", [0, -1])
def test_no_realtime_priority_asks_for_nothing(monkeypatch: pytest.MonkeyPatch, priority: int) -> None:
    asked: list[object] = []
    monkeypatch.setattr(os, "sched_setscheduler", lambda *a: asked.append(a))
    assert request_realtime(priority) == "SCHED_OTHER (rt_priority = 0)"
    assert asked == []


def test_realtime_is_asked_for_this_thread_and_reset_on_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[int, int, int]] = []
    monkeypatch.setattr(
        os, "sched_setscheduler", lambda pid, policy, param: asked.append((pid, policy, param.sched_priority))
    )
    assert request_realtime(1) == "SCHED_FIFO 1"
    assert request_realtime(50) == "SCHED_FIFO 50"
    assert asked == [(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, 1), (0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, 50)]


def test_realtime_refused_says_how_to_grant_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(pid: int, policy: int, param: os.sched_param) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    assert request_realtime(80) == (
        "SCHED_OTHER: SCHED_FIFO 80 refused (Operation not permitted); grant it with LimitRTPRIO= "
        "(the systemd unit does) or CAP_SYS_NICE"
    )
