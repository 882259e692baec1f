"""Heartbeats and the registry the daemon checks before each ``WATCHDOG=1``, on a clock the test moves."""

from __future__ import annotations

import logging

import pytest

from runtime.liveness import Heartbeat, LivenessRegistry, Stall


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_deadline_must_be_positive_and_is_named_in_the_refusal() -> None:
    with pytest.raises(ValueError) as err:
        Heartbeat("control loop", 0.0)
    assert str(err.value) == "heartbeat 'control loop': deadline_s must be > 0, got 0.0"
    with pytest.raises(ValueError, match=r"^heartbeat 'w': deadline_s must be > 0, got nan$"):
        Heartbeat("w", float("nan"))
    beat = Heartbeat("w", 1e-9, Clock())
    assert (beat.name, beat.deadline_s) == ("w", 1e-9)


def test_a_new_heartbeat_counts_from_its_creation_while_starting() -> None:
    clock = Clock(50.0)
    beat = Heartbeat("worker", 2.0, clock)
    assert beat.stalled(52.0) is None  # exactly at the deadline is still in time
    assert beat.stalled(52.5) == (2.5, "starting")


def test_a_beat_says_what_comes_next_and_restarts_the_count() -> None:
    clock = Clock(10.0)
    beat = Heartbeat("worker", 1.0, clock)
    clock.t = 12.0
    beat.beat("running request 7")
    assert beat.stalled(13.0) is None
    assert beat.stalled(13.25) == (1.25, "running request 7")


def test_the_default_clock_is_monotonic() -> None:
    import time

    before = time.monotonic()
    beat = Heartbeat("w", 1.0)
    assert beat.stalled(before + 1.0) is None  # created at or after `before`
    assert beat.stalled(time.monotonic() + 2.0) is not None
    registry = LivenessRegistry()
    registry.register("w", 1.0)
    assert registry.check() == []
    assert [s.name for s in registry.check(time.monotonic() + 5.0)] == ["w"]


def test_check_reports_each_stalled_worker_by_name_in_registration_order() -> None:
    clock = Clock(0.0)
    registry = LivenessRegistry(clock)
    loop = registry.register("control loop", 0.5)
    worker = registry.register("inference worker", 5.0)
    assert registry.names == ["control loop", "inference worker"]
    loop.beat("tick 41")
    worker.beat("job 3")
    clock.t = 1.0
    assert registry.check() == [Stall("control loop", 1.0, "tick 41")]
    assert registry.check(6.0) == [Stall("control loop", 6.0, "tick 41"), Stall("inference worker", 6.0, "job 3")]
    assert registry.check(0.5) == []  # a time given is used instead of the clock


def test_a_stall_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="runtime.liveness")
    clock = Clock(0.0)
    registry = LivenessRegistry(clock)
    beat = registry.register("inference worker", 2.0)
    beat.beat("running request 3")
    clock.t = 3.0
    registry.check()
    registry.check()
    clock.t = 4.5
    assert len(registry.check()) == 1
    stalls = [r for r in caplog.records if "stalled" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in stalls] == [
        (
            logging.ERROR,
            "inference worker stalled: no progress for 3.0 s (deadline 2.0 s) while running request 3; "
            "withholding the systemd watchdog ping",
        )
    ]
    beat.beat("idle")
    registry.check()
    registry.check()
    again = [r for r in caplog.records if "again" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in again] == [
        (logging.WARNING, "inference worker is making progress again")
    ]
    # a new stall is news again
    clock.t = 10.0
    registry.check()
    assert len([r for r in caplog.records if "stalled" in r.getMessage()]) == 2


def test_unregistering_forgets_the_worker_and_its_stall(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="runtime.liveness")
    clock = Clock(0.0)
    registry = LivenessRegistry(clock)
    beat = registry.register("control loop", 0.5)
    other = registry.register("inference worker", 60.0)
    clock.t = 1.0
    assert [s.name for s in registry.check()] == ["control loop"]
    registry.unregister(beat)
    assert registry.names == ["inference worker"]
    assert registry.check() == []
    registry.unregister(beat)  # twice is harmless
    assert registry.names == ["inference worker"]
    # registered again under the same name, its first stall is logged again
    again = registry.register("control loop", 0.5)
    clock.t = 2.0
    registry.check()
    assert len([r for r in caplog.records if "control loop stalled" in r.getMessage()]) == 2
    assert "making progress again" not in caplog.text
    registry.unregister(again)
    registry.unregister(other)
    assert registry.names == []
