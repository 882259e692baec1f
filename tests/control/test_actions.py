"""The action queue worked by hand: its ring's size, an empty or cleared queue, past and
too-far-ahead actions, the counts, each aggregate over a slot used before, take, and the leftover
a real-time chunking request continues."""

from __future__ import annotations

import math

import numpy as np
import pytest

from runtime.control.actions import ActionQueue


def ramp(first: float, n: int, joints: int = 1) -> np.ndarray:
    """n actions first, first + 1, ... on every joint."""
    return np.repeat(np.arange(first, first + n, dtype=np.float64)[:, None], joints, axis=1)


@pytest.mark.parametrize(("horizon", "size"), [(1, 8), (7, 8), (8, 8), (9, 9), (40, 40)])
def test_the_ring_holds_the_horizon_and_at_least_eight_ticks(horizon: int, size: int) -> None:
    assert ActionQueue(2, horizon=horizon).size == size


def test_the_coefficient_is_kept_except_for_a_plain_average() -> None:
    assert ActionQueue(1, 8, "temporal_ensemble", coeff=0.25).coeff == 0.25
    assert ActionQueue(1, 8, "latest", coeff=0.25).coeff == 0.25
    assert ActionQueue(1, 8, "average", coeff=0.25).coeff == 0.0
    assert ActionQueue(1, 8).coeff == 0.01 and ActionQueue(1, 8).aggregate == "latest"


@pytest.mark.parametrize("tick", [0, 1, 2])
def test_an_empty_queue_has_no_action_for_any_tick(tick: int) -> None:
    q = ActionQueue(2, horizon=8)
    assert q.take(tick) is None
    assert q.leftover(tick, 4) is None
    assert q.depth(tick) == 0
    assert (q.dropped, q.merged) == (0, 0)


@pytest.mark.parametrize("tick", [0, 1, 2])
def test_a_cleared_queue_has_no_action_for_any_tick(tick: int) -> None:
    q = ActionQueue(1, horizon=8)
    q.merge(ramp(10.0, 4), first_tick=0, now=0)
    q.take(1)
    q.clear()
    assert q.take(tick) is None
    assert q.leftover(tick, 4) is None
    assert q.depth(0) == 0
    # counts since the start survive a clear
    assert (q.dropped, q.merged) == (0, 4)


def test_depth_counts_the_ticks_from_now_to_the_last_queued() -> None:
    q = ActionQueue(1, horizon=8)
    q.merge(ramp(0.0, 4), first_tick=5, now=5)
    assert [q.depth(t) for t in (3, 5, 8, 9, 20)] == [6, 4, 1, 0, 0]


def test_merge_counts_what_it_queued_and_dropped_over_several_chunks() -> None:
    q = ActionQueue(1, horizon=20)
    assert q.merge(ramp(0.0, 5), first_tick=0, now=2) == 2
    assert (q.dropped, q.merged) == (2, 3)
    assert q.merge(ramp(0.0, 5), first_tick=3, now=4) == 1
    assert (q.dropped, q.merged) == (3, 7)


def test_a_chunk_wholly_in_the_past_is_dropped_and_its_length_returned() -> None:
    q = ActionQueue(1, horizon=20)
    assert q.merge(ramp(0.0, 3), first_tick=0, now=10) == 3
    assert (q.dropped, q.merged) == (3, 0)
    assert q.depth(0) == 0
    assert q.merge(ramp(0.0, 3), first_tick=0, now=3) == 3  # its last action was for tick 2
    assert (q.dropped, q.merged) == (6, 0)
    assert all(q.take(t) is None for t in range(12))


def test_actions_past_the_ring_are_not_queued_over_a_tick_still_queued() -> None:
    q = ActionQueue(1, horizon=8)  # 8 slots: ticks 0..7 from now 0
    assert q.merge(ramp(0.0, 10), first_tick=0, now=0) == 0
    assert q.merged == 8 and q.depth(0) == 8
    assert q.take(0)[0] == 0.0
    assert q.take(7)[0] == 7.0
    assert q.take(8) is None and q.take(9) is None


def test_a_chunk_wholly_past_the_ring_queues_nothing() -> None:
    q = ActionQueue(1, horizon=8)
    q.merge(ramp(1.0, 2), first_tick=0, now=0)
    assert q.merge(ramp(50.0, 4), first_tick=8, now=0) == 0
    assert q.merged == 2 and q.depth(0) == 2
    assert q.take(0)[0] == 1.0 and q.take(8) is None


def test_a_tick_is_taken_once_whichever_tick() -> None:
    q = ActionQueue(1, horizon=8)
    q.merge(ramp(5.0, 3), first_tick=1, now=1)
    assert q.take(1)[0] == 5.0
    assert q.take(1) is None
    assert q.take(2)[0] == 6.0
    assert q.take(2) is None


def test_latest_replaces_and_a_later_tick_of_the_same_slot_is_not_the_earlier() -> None:
    q = ActionQueue(1, horizon=8)
    q.merge(ramp(0.0, 8), first_tick=0, now=0)
    q.merge(ramp(100.0, 4), first_tick=2, now=2)
    assert [q.take(t)[0] for t in range(2, 6)] == [100.0, 101.0, 102.0, 103.0]
    assert q.take(6)[0] == 6.0
    # tick 10 shares tick 2's slot: nothing for it until a chunk brings it
    assert q.take(10) is None


def test_average_of_a_tick_starts_over_in_a_slot_used_before() -> None:
    q = ActionQueue(1, horizon=8, aggregate="average")
    q.merge(ramp(0.0, 8), first_tick=0, now=0)
    q.merge(ramp(2.0, 8), first_tick=0, now=0)
    assert q.take(0)[0] == 1.0
    for t in range(1, 8):
        q.take(t)
    # ticks 8..15 reuse slots 0..7: their averages owe nothing to ticks 0..7
    q.merge(ramp(20.0, 8), first_tick=8, now=8)
    q.merge(ramp(40.0, 8), first_tick=8, now=8)
    assert [q.take(t)[0] for t in (8, 9, 15)] == [30.0, 31.0, 37.0]


def test_temporal_ensemble_of_a_tick_starts_over_in_a_slot_used_before() -> None:
    c = 0.5
    q = ActionQueue(1, horizon=8, aggregate="temporal_ensemble", coeff=c)
    for value in (1.0, 5.0, 9.0):
        q.merge(np.full((8, 1), value), first_tick=0, now=0)
    for t in range(8):
        q.take(t)
    q.merge(np.full((8, 1), 2.0), first_tick=8, now=8)
    q.merge(np.full((8, 1), 4.0), first_tick=8, now=8)
    w1 = math.exp(-c)
    assert q.take(8)[0] == pytest.approx((2.0 + 4.0 * w1) / (1.0 + w1))


def test_a_nan_left_in_a_slot_does_not_reach_the_next_tick_there() -> None:
    q = ActionQueue(1, horizon=8, aggregate="average")
    q.merge(np.full((8, 1), np.nan), first_tick=0, now=0)
    for t in range(8):
        q.take(t)
    q.merge(np.full((8, 1), 3.0), first_tick=8, now=8)
    assert q.take(8)[0] == 3.0


def test_the_leftover_is_the_ticks_own_action_and_the_queued_ones_after_it() -> None:
    q = ActionQueue(2, horizon=8)
    q.merge(ramp(10.0, 5, joints=2), first_tick=1, now=1)
    out = q.leftover(1, 10)
    assert out is not None and out.dtype == np.float32
    assert out.tolist() == [[10.0, 10.0], [11.0, 11.0], [12.0, 12.0], [13.0, 13.0], [14.0, 14.0]]
    assert q.leftover(1, 2).tolist() == [[10.0, 10.0], [11.0, 11.0]]
    assert q.leftover(1, 0) is None
    assert q.leftover(3, 10).tolist() == [[12.0, 12.0], [13.0, 13.0], [14.0, 14.0]]
    assert q.leftover(6, 10) is None


def test_the_leftover_keeps_the_action_taken_at_its_tick() -> None:
    q = ActionQueue(1, horizon=8)
    q.merge(ramp(10.0, 4), first_tick=1, now=1)
    q.take(1)
    assert q.leftover(1, 10).tolist() == [[10.0], [11.0], [12.0], [13.0]]
    q.take(2)
    # only the newest taken one: tick 1's action is gone from the plan
    assert q.leftover(1, 10) is None
    assert q.leftover(2, 10).tolist() == [[11.0], [12.0], [13.0]]


def test_the_leftover_stops_at_the_first_tick_without_an_action() -> None:
    q = ActionQueue(1, horizon=8)
    q.merge(ramp(10.0, 2), first_tick=0, now=0)
    q.merge(ramp(20.0, 2), first_tick=3, now=0)
    assert q.leftover(0, 8).tolist() == [[10.0], [11.0]]
    assert q.leftover(3, 8).tolist() == [[20.0], [21.0]]


def test_the_leftover_is_at_most_the_ring() -> None:
    q = ActionQueue(1, horizon=8)
    q.merge(ramp(0.0, 8), first_tick=0, now=0)
    q.take(0)
    q.merge(ramp(8.0, 1), first_tick=8, now=1)  # tick 8 in tick 0's slot
    out = q.leftover(1, 100)
    assert out.tolist() == [[float(t)] for t in range(1, 9)]


def test_ensemble_weights_are_exp_of_minus_coeff_times_the_age() -> None:
    assert ActionQueue.ensemble_weights(0, 0.5) == []
    assert ActionQueue.ensemble_weights(3, 0.5) == [1.0, math.exp(-0.5), math.exp(-1.0)]
    assert ActionQueue.ensemble_weights(2, 0.0) == [1.0, 1.0]
