"""The control thread's events (bounded, the oldest dropped and counted, logged at their level by
another thread) and what a snapshot derives: stalls, the goal's source, the e-stop's reason."""

from __future__ import annotations

import logging
import math
import time

import pytest

from runtime.control.events import Event, EventLog
from runtime.control.latch import Latch
from runtime.control.mode import Mode, Source
from runtime.control.snapshot import Snapshot


def test_an_event_with_arguments_is_formatted_and_one_without_is_not() -> None:
    assert Event(1.0, logging.INFO, "joint %s at %d %%", ("pan", 5)).text() == "joint pan at 5 %"
    assert Event(1.0, logging.INFO, "100 % of the ring", ()).text() == "100 % of the ring"


def test_events_are_drained_oldest_first_with_their_time_level_and_arguments() -> None:
    events = EventLog()
    before = time.monotonic()
    events.emit(logging.WARNING, "a %d", 1)
    events.emit(logging.ERROR, "b")
    after = time.monotonic()
    drained = events.drain()
    assert [(e.level, e.message, e.args) for e in drained] == [
        (logging.WARNING, "a %d", (1,)),
        (logging.ERROR, "b", ()),
    ]
    assert before <= drained[0].t <= drained[1].t <= after
    assert events.drain() == []
    assert events.dropped == 0


def test_the_default_log_holds_1024_events_and_drops_the_oldest() -> None:
    events = EventLog()
    for i in range(1025):
        events.emit(logging.INFO, "e %d", i)
    assert events.dropped == 1
    drained = events.drain()
    assert len(drained) == 1024 and drained[0].args == (1,) and drained[-1].args == (1024,)


def test_a_full_log_counts_each_event_it_drops() -> None:
    events = EventLog(capacity=2)
    events.emit(logging.INFO, "e %d", 0)
    events.emit(logging.INFO, "e %d", 1)
    assert events.dropped == 0
    events.emit(logging.INFO, "e %d", 2)
    events.emit(logging.INFO, "e %d", 3)
    assert events.dropped == 2
    assert [e.args for e in events.drain()] == [(2,), (3,)]


def test_flushing_logs_each_event_at_its_level_and_the_drops_once(caplog: pytest.LogCaptureFixture) -> None:
    events = EventLog(capacity=2)
    events.emit(logging.ERROR, "joint %s refused", "pan")
    events.emit(logging.INFO, "plain")
    events.emit(logging.WARNING, "late by %d ms", 7)
    with caplog.at_level(logging.DEBUG, logger="runtime.control"):
        assert events.flush_to_log() == 2
        got = [(r.name, r.levelno, r.getMessage()) for r in caplog.records]
        assert got == [
            ("runtime.control", logging.INFO, "plain"),
            ("runtime.control", logging.WARNING, "late by 7 ms"),
            ("runtime.control", logging.WARNING, "1 control events were dropped (the log fell behind)"),
        ]
        caplog.clear()
        assert events.dropped == 0
        assert events.flush_to_log() == 0
        assert caplog.records == []


def test_a_snapshot_before_the_first_tick() -> None:
    s = Snapshot()
    assert (s.tick, s.at, s.next_due, s.mode, s.latch, s.latches_taken, s.present) == (
        0,
        0.0,
        0.0,
        Mode.IDLE,
        None,
        0,
        None,
    )
    assert (s.arm_error, s.queue_depth, s.dropped_actions, s.overruns, s.latencies_measured) == ("", 0, 0, 0, 0)
    assert (s.teleop_phase, s.teleop_last_seq, s.intervention, s.scheduling, s.native_id) == ("", -1, False, "", 0)
    assert (s.last_write_at, s.write_periods, s.writes_off) == (0.0, 0, 0)
    assert math.isnan(s.last_latency_ticks) and math.isnan(s.last_write_error_ms)
    assert dict(s.state) == {} and dict(s.counters) == {} and dict(s.safety) == {} and dict(s.cpu_seen) == {}
    assert s.stalled_for(1e6, 0.1) == 0.0
    assert s.source is Source.HOLD and s.estop_reason is None


def test_a_loop_is_stalled_only_past_five_periods_and_for_all_of_its_lateness() -> None:
    s = Snapshot(tick=3, at=10.0)
    assert s.stalled_for(10.5, 0.25) == 0.0
    assert s.stalled_for(11.25, 0.25) == 0.0  # exactly five periods
    assert s.stalled_for(11.5, 0.25) == 1.5
    assert s.stalled_for(9.0, 0.25) == 0.0


@pytest.mark.parametrize(
    ("mode", "source"),
    [
        (Mode.RUNNING, Source.POLICY),
        (Mode.TELEOP, Source.TELEOP),
        (Mode.HOLDING, Source.HOLD),
        (Mode.IDLE, Source.HOLD),
        (Mode.ESTOPPED, Source.HOLD),
    ],
)
def test_the_source_follows_the_mode(mode: Mode, source: Source) -> None:
    assert Snapshot(mode=mode).source is source


def test_the_estop_reason_is_the_latchs() -> None:
    s = Snapshot(mode=Mode.ESTOPPED, latch=Latch(2, "hand in the way", 5.0))
    assert s.estop_reason == "hand in the way"
