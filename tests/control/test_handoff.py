"""The one-slot handoff: newest value wins, take empties, nothing put concurrently is lost."""

from __future__ import annotations

import threading

from runtime.control.handoff import Latest


def test_empty_slot_gives_none() -> None:
    slot: Latest[int] = Latest()
    assert slot.take() is None and slot.peek() is None and slot.puts == 0


def test_newest_value_replaces_the_one_not_taken() -> None:
    slot: Latest[str] = Latest()
    slot.put("a")
    slot.put("b")
    assert slot.peek() == "b" and slot.puts == 2
    assert slot.take() == "b"
    assert slot.take() is None  # taken once: nothing new since
    assert slot.peek() is None


def test_peek_leaves_the_value_in_place() -> None:
    slot: Latest[int] = Latest()
    slot.put(3)
    assert slot.peek() == 3 and slot.peek() == 3 and slot.take() == 3


def test_clear_forgets_the_value() -> None:
    slot: Latest[int] = Latest()
    slot.put(1)
    slot.clear()
    assert slot.take() is None and slot.puts == 1


def test_a_value_put_while_the_consumer_takes_is_never_lost() -> None:
    """The producer's last value always reaches the consumer, whatever the interleaving."""
    slot: Latest[int] = Latest()
    n = 20_000
    seen: list[int] = []
    done = threading.Event()

    def produce() -> None:
        for i in range(n):
            slot.put(i)
        done.set()

    def consume() -> None:
        while not done.is_set():
            v = slot.take()
            if v is not None:
                seen.append(v)
        v = slot.take()
        if v is not None:
            seen.append(v)

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen and seen[-1] == n - 1
    assert seen == sorted(seen) and len(set(seen)) == len(seen)  # in order, each at most once
