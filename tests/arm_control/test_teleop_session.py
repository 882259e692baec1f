"""One teleop session at a time on a clock the test moves: opening, the refusal naming the holder, a
token checked and its deadline refreshed, closing, and a session lost at its timeout's edge."""

from __future__ import annotations

import pytest

from runtime.arm_control.teleop_session import NoSession, SessionHeld, TeleopSessions


def test_a_fresh_table_holds_nothing_and_counts_nothing() -> None:
    s = TeleopSessions(timeout_s=1.5)
    assert (s.timeout_s, s.current, s.opened, s.refused, s.lost) == (1.5, None, 0, 0, 0)
    assert s.expire(1e9) is None and s.lost == 0


def test_opening_gives_a_new_16_hex_digit_token_naming_who_and_when() -> None:
    s = TeleopSessions(timeout_s=1.0)
    a = s.open("alice (client 7)", 10.0)
    assert a.who == "alice (client 7)" and a.opened_at == 10.0
    assert len(a.token) == 16 and int(a.token, 16) >= 0
    assert s.current is a and s.last_heard == 10.0 and s.opened == 1
    s.close(a.token, 11.0)
    b = s.open("bob", 12.0)
    assert b.token != a.token and len(b.token) == 16
    assert s.opened == 2


def test_a_second_station_is_refused_naming_the_holder_until_the_timeout_inclusive() -> None:
    s = TeleopSessions(timeout_s=1.0)
    s.open("alice (client 7)", 10.0)
    s.check(s.current.token, 12.5)  # type: ignore[union-attr]
    with pytest.raises(SessionHeld) as err:
        s.open("bob", 13.5)  # exactly timeout_s after alice was last heard: still hers
    assert str(err.value) == (
        "the arm is held by alice (client 7) (session open 4 s, last heard 1000 ms ago); "
        "watch with control status, or ask them to close"
    )
    assert s.refused == 1 and s.current is not None and s.current.who == "alice (client 7)"
    with pytest.raises(SessionHeld):
        s.open("carol", 13.5)
    assert s.refused == 2
    # a moment later the session has lapsed: the next station gets the arm without an expire first
    bob = s.open("bob", 13.75)
    assert s.current is bob and s.opened == 2 and s.refused == 2


def test_a_token_that_is_not_the_open_sessions_is_refused_naming_the_holder() -> None:
    s = TeleopSessions(timeout_s=1.0)
    alice = s.open("alice", 0.0)
    with pytest.raises(NoSession) as err:
        s.check("0123456789abcdef-and-more", 0.5)
    assert str(err.value) == (
        "session '0123456789abcdef' is not the open teleop session (closed or lost); the arm is held by alice"
    )
    assert s.last_heard == 0.0  # a wrong token keeps no session alive
    assert s.check(alice.token, 0.75) is alice and s.last_heard == 0.75


def test_a_token_when_no_session_is_open_is_refused_saying_so() -> None:
    s = TeleopSessions(timeout_s=1.0)
    with pytest.raises(NoSession) as err:
        s.check("abc", 0.0)
    assert str(err.value) == "session 'abc' is not the open teleop session (closed or lost); no session is open"


def test_closing_ends_the_session_and_its_token() -> None:
    s = TeleopSessions(timeout_s=1.0)
    alice = s.open("alice", 0.0)
    with pytest.raises(NoSession):
        s.close("not-hers", 0.25)
    assert s.current is alice
    assert s.close(alice.token, 0.5) is alice
    assert s.current is None and s.last_heard == 0.5
    with pytest.raises(NoSession, match="no session is open"):
        s.check(alice.token, 0.5)
    assert s.lost == 0  # a closed session is not a lost one
    assert s.expire(100.0) is None


def test_a_session_is_lost_once_past_its_timeout_and_not_at_it() -> None:
    s = TeleopSessions(timeout_s=1.5)
    alice = s.open("alice", 10.0)
    s.check(alice.token, 11.0)
    assert s.expire(12.5) is None and s.current is alice  # exactly 1.5 s since heard
    assert s.expire(12.5001) is alice
    assert s.current is None and s.lost == 1
    assert s.expire(20.0) is None and s.lost == 1  # lost once
    s.open("bob", 30.0)
    assert s.expire(32.0) is not None and s.lost == 2


def test_a_token_with_characters_outside_ascii_is_refused_like_any_other() -> None:
    # a station's garbled token is still "not the open session", not a failure of the server
    s = TeleopSessions(timeout_s=1.0)
    with pytest.raises(NoSession) as err:
        s.check("jeton-é", 0.0)
    assert str(err.value) == "session 'jeton-é' is not the open teleop session (closed or lost); no session is open"
    alice = s.open("alice", 0.0)
    with pytest.raises(NoSession) as err:
        s.check("tök" + alice.token[3:], 0.5)
    assert str(err.value).endswith("(closed or lost); the arm is held by alice")
    assert s.last_heard == 0.0 and s.check(alice.token, 0.5) is alice
