"""The arm process's garbage collection: due only after writes, young then full, timed."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from runtime.arm.collector import Collector


@pytest.fixture
def no_automatic_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _cycle() -> None:
    a: list[object] = []
    a.append(a)


def test_collections_come_every_second_and_everything_every_minute(no_automatic_gc: None) -> None:
    c = Collector(10.0, young_every_s=0.5, full_every_s=1.0)
    for _ in range(4):
        c.after_write()
    assert c.collections == 0
    _cycle()
    c.after_write()  # tick 5: young
    assert (c.collections, c.full_collections) == (1, 0) and c.freed >= 1
    for _ in range(5):
        c.after_write()  # tick 10: everything
    assert (c.collections, c.full_collections) == (2, 1)
    assert c.max_ms >= c.last_ms >= 0 and c.full_max_ms >= 0
    status = c.status()
    assert status["automatic"] is False and status["collections"] == 2 and status["full_collections"] == 1


def test_a_collection_frees_what_the_tick_left_in_cycles(no_automatic_gc: None) -> None:
    c = Collector(1.0)  # every tick a young collection (once a second at 1 Hz)
    for _ in range(100):
        _cycle()
    c.after_write()
    assert c.freed >= 100


def test_the_full_period_is_never_shorter_than_the_young_one() -> None:
    c = Collector(30.0, young_every_s=2.0, full_every_s=0.5)
    assert c._full_every == c._young_every == 60


def test_take_over_freezes_and_turns_automatic_collection_off() -> None:
    was = gc.isenabled()
    try:
        Collector.take_over()
        assert not gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        if was:
            gc.enable()


class _Clock:
    """perf_counter for the collector: each collection takes the next of ``durations`` (seconds)."""

    def __init__(self, durations: list[float]) -> None:
        self.now = 100.0
        self.durations = durations
        self.started = False

    def __call__(self) -> float:
        if self.started:
            self.now += self.durations.pop(0)
        self.started = not self.started
        return self.now


def test_status_reports_counts_and_times_of_young_and_full_collections(monkeypatch: pytest.MonkeyPatch) -> None:
    import runtime.arm.collector as collector

    generations: list[int] = []

    def collect(generation: int) -> int:
        generations.append(generation)
        return 3

    monkeypatch.setattr(collector.gc, "collect", collect)
    monkeypatch.setattr(collector.gc, "isenabled", lambda: True)
    clock = _Clock([0.0020004, 0.0050006, 0.001, 0.003, 0.0012346])
    monkeypatch.setattr(collector.time, "perf_counter", clock)
    c = Collector(2.0, young_every_s=1.0, full_every_s=2.0)  # young every 2 ticks, full every 4
    assert c.status() == {
        "automatic": True,
        "collections": 0,
        "full_collections": 0,
        "freed": 0,
        "last_ms": 0.0,
        "max_ms": 0.0,
        "full_max_ms": 0.0,
    }
    for _ in range(10):
        c.after_write()
    assert generations == [1, 2, 1, 2, 1]
    assert c.status() == {
        "automatic": True,
        "collections": 5,
        "full_collections": 2,
        "freed": 15,
        "last_ms": 1.235,
        "max_ms": 5.001,
        "full_max_ms": 5.001,
    }


def test_defaults_are_young_every_second_and_full_every_minute() -> None:
    c = Collector(30.0)
    assert (c._young_every, c._full_every) == (30, 1800)
    slow = Collector(0.1)  # below 1 Hz: every tick, never less often
    assert (slow._young_every, slow._full_every) == (1, 6)
