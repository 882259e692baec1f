"""The inference queue alone: bounded, never blocking the producer, the newest observation of a client
taking its older one's place in line, the control loop's jobs ahead of everyone."""

from __future__ import annotations

import threading
import time

import numpy as np

from runtime.server.queue import Job, PutResult, RequestQueue


def job(client: bytes, rid: int, socket_index: int = 0) -> Job:
    return Job(socket_index, [client], rid, [np.zeros(1)], 0.0)


def drain(q: RequestQueue) -> list[int]:
    out = []
    while len(q):
        j = q.get(timeout=0)
        assert j is not None
        out.append(j.request_id)
    return out


def test_jobs_come_out_in_order_and_the_bound_refuses_without_blocking() -> None:
    q = RequestQueue(2)
    assert q.put(job(b"a", 1)) == PutResult(True)
    assert q.put(job(b"b", 2)) == PutResult(True)
    started = time.monotonic()
    assert q.put(job(b"c", 3)) == PutResult(False)
    assert time.monotonic() - started < 0.5
    assert len(q) == 2 and q.depth_max == 2
    assert drain(q) == [1, 2]
    assert q.depth_max == 2


def test_a_newer_job_of_the_same_client_takes_the_older_ones_place_in_line() -> None:
    q = RequestQueue(3)
    first_a = job(b"a", 1)
    q.put(first_a)
    q.put(job(b"b", 2))
    result = q.put(job(b"a", 3))
    assert result.accepted and result.superseded is first_a
    assert len(q) == 2
    assert drain(q) == [3, 2]  # a's turn kept, with its newest observation


def test_the_newest_replaces_even_when_the_queue_is_full() -> None:
    q = RequestQueue(1)
    old = job(b"a", 1)
    q.put(old)
    result = q.put(job(b"a", 2))
    assert result == PutResult(True, old)
    assert drain(q) == [2]


def test_a_client_is_its_socket_and_routing_id() -> None:
    q = RequestQueue(4)
    q.put(job(b"a", 1, socket_index=0))
    result = q.put(job(b"a", 2, socket_index=1))  # the same routing id on another endpoint
    assert result == PutResult(True)
    assert drain(q) == [1, 2]


def test_a_job_taken_by_the_worker_is_not_superseded_by_the_next() -> None:
    q = RequestQueue(4)
    q.put(job(b"a", 1))
    running = q.get(timeout=0)
    assert running is not None and running.request_id == 1
    assert q.put(job(b"a", 2)) == PutResult(True)
    third = q.put(job(b"a", 3))
    assert third.accepted and third.superseded is not None and third.superseded.request_id == 2
    assert drain(q) == [3]


def test_without_latest_wins_every_job_waits_its_turn() -> None:
    q = RequestQueue(2, latest_wins=False)
    assert q.put(job(b"a", 1)) == PutResult(True)
    assert q.put(job(b"a", 2)) == PutResult(True)
    assert q.put(job(b"a", 3)) == PutResult(False)
    assert drain(q) == [1, 2]


def test_a_front_job_goes_first_and_past_the_bound() -> None:
    q = RequestQueue(2)
    q.put(job(b"a", 1))
    q.put(job(b"b", 2))
    assert q.put(job(b"loop", 3), front=True) == PutResult(True)
    assert len(q) == 3 and q.depth_max == 3
    assert drain(q) == [3, 1, 2]
    q.put(job(b"loop", 4), front=True)
    assert q.put(job(b"loop", 5), front=True).superseded is not None  # the loop's newest too
    assert drain(q) == [5]


def test_get_waits_for_a_job_up_to_its_timeout() -> None:
    q = RequestQueue(2)
    started = time.monotonic()
    assert q.get(timeout=0.2) is None
    assert 0.15 <= time.monotonic() - started < 2.0
    got: list[Job | None] = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=5.0)))
    t.start()
    time.sleep(0.1)
    q.put(job(b"a", 7))
    t.join(5.0)
    assert got and got[0] is not None and got[0].request_id == 7


def test_close_refuses_new_jobs_hands_out_the_queued_ones_and_wakes_a_waiting_get() -> None:
    q = RequestQueue(3)
    q.put(job(b"a", 1))
    q.close()
    assert q.closed
    assert q.put(job(b"b", 2)) == PutResult(False)
    assert q.put(job(b"a", 3)) == PutResult(False)  # not even in place of its own queued job
    assert drain(q) == [1]
    assert q.get(timeout=5.0) is None
    waiting = RequestQueue(1)
    got: list[Job | None] = [job(b"x", 0)]
    t = threading.Thread(target=lambda: got.__setitem__(0, waiting.get(timeout=30.0)))
    t.start()
    time.sleep(0.1)
    started = time.monotonic()
    waiting.close()
    t.join(5.0)
    assert not t.is_alive() and got == [None]
    assert time.monotonic() - started < 2.0


def test_cancel_pending_hands_back_every_queued_job_and_closes() -> None:
    q = RequestQueue(3)
    q.put(job(b"a", 1))
    q.put(job(b"b", 2))
    cancelled = q.cancel_pending()
    assert [j.request_id for j in cancelled] == [1, 2]
    assert len(q) == 0 and q.closed
    assert q.put(job(b"a", 3)) == PutResult(False)
    assert q.get(timeout=0) is None
    got: list[Job | None] = [job(b"x", 0)]
    waiting = RequestQueue(1)
    t = threading.Thread(target=lambda: got.__setitem__(0, waiting.get(timeout=30.0)))
    t.start()
    time.sleep(0.1)
    assert waiting.cancel_pending() == []
    t.join(5.0)
    assert not t.is_alive() and got == [None]


def test_a_job_names_its_client() -> None:
    assert job(b"id", 1, socket_index=2).client == (2, b"id")


def test_a_client_streaming_faster_than_the_worker_keeps_one_job_queued() -> None:
    q = RequestQueue(4)
    assert q.depth_max == 0
    q.put(job(b"a", 1))
    for rid in range(2, 6):
        result = q.put(job(b"a", rid))
        assert result.superseded is not None and result.superseded.request_id == rid - 1
    assert len(q) == 1 and q.depth_max == 1
    assert drain(q) == [5]
