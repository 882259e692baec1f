"""The loop's mailbox: commands in order, e-stops first and each one a latch of its own."""

from __future__ import annotations

import pytest

from runtime.control.mailbox import Mailbox, Release, Shutdown, Start, Stop, TakeOver, parse, word


def test_words_round_trip_to_commands() -> None:
    assert parse("start", "ana") == Start("ana")
    assert parse("teleop", "bo") == TakeOver("bo")
    assert parse("stop") == Stop()
    assert parse("release", "ana", 3) == Release("ana", 3)
    assert [word(c) for c in (Start(), TakeOver(), Stop(), Release(), Shutdown())] == [
        "start",
        "teleop",
        "stop",
        "release",
        "shutdown",
    ]
    with pytest.raises(ValueError, match="expected one of start, teleop, stop, release, got 'dance'"):
        parse("dance")


def test_commands_come_out_in_order() -> None:
    box = Mailbox(clock=lambda: 1.0)
    box.post(Start("a"))
    box.post(Stop("b"))
    assert box.take_command() == Start("a")
    assert box.take_command() == Stop("b")
    assert box.take_command() is None


def test_every_estop_is_a_latch_of_its_own_and_stays_pending_until_dropped() -> None:
    box = Mailbox(clock=lambda: 2.5)
    first, second = box.estop("button"), box.estop("again")
    assert (first.id, second.id) == (1, 2) and first.requested_at == 2.5
    assert box.pending_estop() == second
    assert box.estop_requests() == (first, second)
    third = box.estop("while the loop looks")  # after the loop read the requests, before it dropped them
    box.drop_estops(2)
    assert box.estop_requests() == (third,) and box.pending_estop() == third
    box.drop_estops(1)
    assert box.pending_estop() is None
