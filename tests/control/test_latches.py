"""E-stop latches: a release names the newest latch or is refused, and a latch numbered elsewhere never
takes the number of one already given out. Asserted on the mailbox and the checks alone, no loop."""

from __future__ import annotations

import pytest

from runtime.control.latch import ControlRefused, Latch, LatchNumbers, StaleLatch, estop_status
from runtime.control.mailbox import (
    Mailbox,
    Release,
    Shutdown,
    Start,
    Stop,
    TakeOver,
    check_command,
    newest_latch,
    parse,
)


def test_one_numbering_issues_after_what_it_gave_out_and_what_the_caller_saw_elsewhere() -> None:
    numbers = LatchNumbers()
    assert numbers.issue("button", 1.0) == Latch(1, "button", 1.0)
    # the arm latched 2 and 3 itself (a fault, a signal): the daemon's next request is numbered after them
    assert numbers.issue("operator", 2.0, seen=3) == Latch(4, "operator", 2.0)
    assert numbers.issue("again", 3.0) == Latch(5, "again", 3.0)
    assert numbers.issue("behind", 4.0, seen=2) == Latch(6, "behind", 4.0)  # an older sighting changes nothing


def test_one_numbering_renumbers_a_claimed_latch_only_when_its_number_was_given_out() -> None:
    numbers = LatchNumbers()
    assert numbers.claim(Latch(3, "daemon", 1.0)) == Latch(3, "daemon", 1.0)
    assert numbers.issue("fault", 2.0).id == 4  # continues after the claimed one
    assert numbers.claim(Latch(4, "daemon, on its way", 3.0)) == Latch(5, "daemon, on its way", 3.0)
    assert numbers.issue("fault", 4.0).id == 6


def test_a_latch_posted_from_elsewhere_keeps_its_number_when_it_is_the_newest() -> None:
    box = Mailbox(clock=lambda: 3.0)
    posted = box.post_estop(Latch(5, "from the daemon", 1.5))
    assert posted == Latch(5, "from the daemon", 1.5)
    assert box.estop_requests() == (posted,)
    after = box.estop("a fault here")  # numbered after the posted one
    assert after == Latch(6, "a fault here", 3.0)
    assert box.pending_estop() == after


def test_a_latch_posted_with_a_number_already_given_out_is_numbered_after_it() -> None:
    box = Mailbox(clock=lambda: 4.0)
    box.estop("one")
    box.estop("two")
    same = box.post_estop(Latch(2, "from the daemon", 1.0))
    assert same == Latch(3, "from the daemon", 1.0)
    older = box.post_estop(Latch(1, "late", 2.0))
    assert older == Latch(4, "late", 2.0)
    assert box.estop("three") == Latch(5, "three", 4.0)
    assert [latch.id for latch in box.estop_requests()] == [1, 2, 3, 4, 5]


def test_a_latch_posted_after_a_gap_continues_from_its_number() -> None:
    box = Mailbox(clock=lambda: 0.0)
    box.estop("one")
    assert box.post_estop(Latch(9, "far ahead", 0.0)).id == 9
    assert box.post_estop(Latch(9, "same number again", 0.0)).id == 10
    assert box.estop("next").id == 11


def test_the_pending_estop_is_the_newest_by_number_not_by_arrival() -> None:
    box = Mailbox(clock=lambda: 0.0)
    box.post_estop(Latch(7, "seven", 0.0))
    box._estops.append(Latch(3, "three, arrived last", 0.0))
    pending = box.pending_estop()
    assert pending is not None and pending.id == 7
    box.drop_estops(0)
    assert len(box.estop_requests()) == 2


def test_the_newest_latch_of_pending_and_current() -> None:
    old, new = Latch(1, "a", 0.0), Latch(2, "b", 0.0)
    assert newest_latch(None, None) is None
    assert newest_latch(None, old) is old
    assert newest_latch(new, None) is new
    assert newest_latch(new, old) is new
    assert newest_latch(old, new) is new
    assert newest_latch(old, old) is old


def test_estop_status_maps_the_latch() -> None:
    assert estop_status(None) == {"latched": False, "reason": "", "latch": 0}
    assert estop_status(Latch(4, "button", 1.0)) == {"latched": True, "reason": "button", "latch": 4}


LATCHED = Latch(4, "button", 1.0)


@pytest.mark.parametrize(
    ("command", "latch", "estop", "arm_error", "blocked", "message"),
    [
        ("start", 0, LATCHED, "", None, "e-stop is latched (latch 4: button); release it first (control release)"),
        ("teleop", 0, LATCHED, "", None, "e-stop is latched (latch 4: button); release it first (control release)"),
        ("start", 0, None, "servo 3 timed out", None, "the arm is failing: servo 3 timed out"),
        ("teleop", 0, None, "servo 3 timed out", None, "the arm is failing: servo 3 timed out"),
        ("start", 0, None, "", "camera front is 900 ms old", "camera front is 900 ms old"),
        ("release", 4, None, "", None, "no e-stop is latched"),
        ("dance", 0, None, "", None, "unknown command 'dance'"),
    ],
)
def test_a_command_that_cannot_be_carried_out_is_refused_saying_why(
    command: str, latch: int, estop: Latch | None, arm_error: str, blocked: str | None, message: str
) -> None:
    with pytest.raises(ControlRefused) as err:
        check_command(command, latch, estop, arm_error, blocked)
    assert str(err.value) == message
    assert not isinstance(err.value, StaleLatch)


@pytest.mark.parametrize(
    ("command", "latch", "estop", "arm_error", "blocked"),
    [
        ("start", 0, None, "", None),
        ("start", 0, None, "", ""),
        ("teleop", 0, None, "", "camera front is 900 ms old"),  # teleop needs no policy
        ("release", 4, LATCHED, "servo 3 timed out", "blocked"),  # a release is never blocked by the arm
        ("stop", 0, LATCHED, "servo 3 timed out", "blocked"),  # nor a stop, by anything
        ("stop", 0, None, "", None),
    ],
)
def test_a_command_that_can_be_carried_out_passes(
    command: str, latch: int, estop: Latch | None, arm_error: str, blocked: str | None
) -> None:
    check_command(command, latch, estop, arm_error, blocked)


@pytest.mark.parametrize(
    ("named", "why"),
    [(3, "another e-stop came since"), (0, "another e-stop came since"), (5, "no such latch was given out yet")],
)
def test_a_release_naming_another_latch_is_stale(named: int, why: str) -> None:
    with pytest.raises(StaleLatch) as err:
        check_command("release", named, LATCHED, "", None)
    assert str(err.value) == (
        f"the release names e-stop latch {named}, but the latch now is 4 (button): {why}; check the arm, "
        "then release latch 4"
    )
    assert (err.value.named, err.value.current) == (named, LATCHED)


def test_parse_fills_who_and_the_latch() -> None:
    assert parse("release", "ana", 7) == Release("ana", 7)
    assert parse("release") == Release("", 0)
    assert parse("start") == Start("")
    assert parse("teleop", "x", 9) == TakeOver("x")
    assert parse("stop", "y", 9) == Stop("y")
    assert Shutdown().who == "daemon"


def test_the_first_latch_posted_to_a_fresh_mailbox_keeps_number_one() -> None:
    box = Mailbox(clock=lambda: 0.0)
    assert box.post_estop(Latch(1, "from the daemon", 0.0)).id == 1
    assert box.estop("next").id == 2
