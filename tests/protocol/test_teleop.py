"""The ``teleop.*`` request bodies (docs/protocol.md's teleop table): the keys each kind takes, and
every refusal naming the key, what was expected and what came, at both edges of each bound."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.protocol.errors import BadRequestError
from runtime.protocol.messages import TELEOP_KINDS, TeleopRequest
from runtime.protocol.teleop import MAX_JOINTS, MAX_SEQ, MAX_TEXT, parse_teleop

TEXT = f"a non-empty string of at most {MAX_TEXT} characters"


def refused(kind: str, body: dict[Any, Any], data: list[Any] | None = None) -> BadRequestError:
    with pytest.raises(BadRequestError) as caught:
        parse_teleop(3, kind, body, data or [])
    return caught.value


def target(**changes: Any) -> dict[str, Any]:
    return {"session": "ab", "seq": 4, "positions": [1.5, -2, 0.0], **changes}


def test_the_bounds_are_the_documented_ones() -> None:
    assert (MAX_TEXT, MAX_JOINTS, MAX_SEQ) == (200, 64, 2**63 - 1)


def test_a_target_is_its_session_seq_and_positions_as_floats() -> None:
    req = parse_teleop(9, "teleop.target", target(), [])
    assert req == TeleopRequest(9, "teleop.target", session="ab", seq=4, positions=(1.5, -2.0, 0.0))
    assert all(type(p) is float for p in req.positions)
    assert (req.who, req.task) == ("", "")


@pytest.mark.parametrize(
    "kind", ["teleop.take_over", "teleop.hand_back", "teleop.episode_stop", "teleop.episode_discard", "teleop.close"]
)
def test_the_kinds_that_take_only_a_session(kind: str) -> None:
    assert parse_teleop(5, kind, {"session": "ab"}, []) == TeleopRequest(5, kind, session="ab")
    e = refused(kind, {"session": "ab", "task": "x"})
    assert e.message == f"{kind} body: unknown key 'task'"
    assert (e.field, e.expected, e.received) == ("body.task", "session", "task")


def test_an_episode_start_takes_its_task() -> None:
    req = parse_teleop(5, "teleop.episode_start", {"session": "ab", "task": "pick the cube"}, [])
    assert req == TeleopRequest(5, "teleop.episode_start", session="ab", task="pick the cube")


def test_an_open_takes_who_or_nothing() -> None:
    assert parse_teleop(5, "teleop.open", {"who": "ana"}, []) == TeleopRequest(5, "teleop.open", who="ana")
    assert parse_teleop(5, "teleop.open", {}, []) == TeleopRequest(5, "teleop.open")
    assert parse_teleop(5, "teleop.open", {"who": ""}, []).who == ""
    assert parse_teleop(5, "teleop.open", {"who": "x" * MAX_TEXT}, []).who == "x" * MAX_TEXT
    e = refused("teleop.open", {"session": "ab"})
    assert (e.field, e.expected) == ("body.session", "who")


def test_an_open_with_a_who_that_is_not_a_short_string_is_refused_naming_open() -> None:
    e = refused("teleop.open", {"who": 5})
    assert e.message == f"teleop.open body.who: expected {TEXT}, got int 5"
    assert (e.field, e.expected, e.received) == ("body.who", TEXT, "5")
    e = refused("teleop.open", {"who": "w" * (MAX_TEXT + 1)})
    assert e.message == f"teleop.open body.who: expected {TEXT}, got str '{'w' * 56}..."


def test_every_kind_is_parsed() -> None:
    bodies = {"teleop.open": {}, "teleop.target": target(), "teleop.episode_start": {"session": "s", "task": "t"}}
    for kind in TELEOP_KINDS:
        assert parse_teleop(1, kind, bodies.get(kind, {"session": "s"}), []).kind == kind


def test_data_frames_are_refused() -> None:
    e = refused("teleop.target", target(), [b"\x00"])
    assert e.message == "teleop.target: takes no data frames"
    assert (e.field, e.expected, e.received) == ("(frames)", "positions, seq, session", "1 data frames")


@pytest.mark.parametrize(
    ("kind", "key"), [("teleop.close", "session"), ("teleop.target", "session"), ("teleop.episode_start", "task")]
)
def test_a_missing_text_is_refused_saying_nothing_came(kind: str, key: str) -> None:
    body = {"session": "ab", "task": "t", "seq": 1, "positions": [0.0]}
    del body[key]
    if kind != "teleop.target":
        body.pop("seq"), body.pop("positions")
    if kind != "teleop.episode_start":
        body.pop("task", None)
    e = refused(kind, body)
    assert e.message == f"{kind} body.{key}: expected {TEXT}, got nothing"
    assert (e.field, e.expected, e.received) == (f"body.{key}", TEXT, "nothing")


@pytest.mark.parametrize(
    ("value", "shown", "received"),
    [
        ("", "str ''", "''"),
        ("  ", "str '  '", "'  '"),
        (5, "int 5", "5"),
        (None, "NoneType None", "None"),
        ("x" * (MAX_TEXT + 1), "str '" + "x" * 56 + "...", "'" + "x" * 56 + "..."),
    ],
)
def test_a_session_that_is_not_a_short_non_empty_string_is_refused(value: Any, shown: str, received: str) -> None:
    e = refused("teleop.close", {"session": value})
    assert e.message == f"teleop.close body.session: expected {TEXT}, got {shown}"
    assert (e.field, e.expected, e.received) == ("body.session", TEXT, received)


def test_a_text_of_the_longest_length_is_taken() -> None:
    assert parse_teleop(1, "teleop.close", {"session": "s" * MAX_TEXT}, []).session == "s" * MAX_TEXT
    assert parse_teleop(1, "teleop.close", {"session": "s"}, []).session == "s"
    e = refused("teleop.episode_start", {"session": "s", "task": "t" * (MAX_TEXT + 1)})
    assert e.field == "body.task"
    e = refused("teleop.open", {"who": "w" * (MAX_TEXT + 1)})
    assert e.field == "body.who"


def test_a_value_is_shown_whole_up_to_60_characters_and_cut_after() -> None:
    sixty = ["y" * 56]  # repr: 60 characters
    assert len(repr(sixty)) == 60
    e = refused("teleop.close", {"session": sixty})
    assert e.received == repr(sixty)
    assert e.message.endswith(f"got list {sixty!r}")
    sixty_one = ["y" * 57]
    e = refused("teleop.close", {"session": sixty_one})
    assert e.received == repr(sixty_one)[:57] + "..."
    assert len(e.received) == 60
    assert e.message.endswith(f"got list {repr(sixty_one)[:57]}...")


@pytest.mark.parametrize("seq", [0, 1, MAX_SEQ])
def test_a_seq_in_range_is_taken(seq: int) -> None:
    assert parse_teleop(1, "teleop.target", target(seq=seq), []).seq == seq


@pytest.mark.parametrize(
    ("seq", "shown"),
    [(-1, "int -1"), (MAX_SEQ + 1, f"int {MAX_SEQ + 1}"), (True, "bool True"), (1.0, "float 1.0"), ("1", "str '1'")],
)
def test_a_seq_out_of_range_or_not_an_integer_is_refused(seq: Any, shown: str) -> None:
    e = refused("teleop.target", target(seq=seq))
    assert e.message == f"teleop.target body.seq: expected an integer in [0, 2**63), got {shown}"
    assert (e.field, e.expected, e.received) == ("body.seq", "an integer in [0, 2**63)", shown.split(" ", 1)[1])


def test_a_target_without_seq_or_positions_is_refused_saying_nothing_came() -> None:
    e = refused("teleop.target", {"session": "ab", "positions": [0.0]})
    assert (e.field, e.received) == ("body.seq", "nothing")
    assert e.message == "teleop.target body.seq: expected an integer in [0, 2**63), got nothing"
    e = refused("teleop.target", {"session": "ab", "seq": 1})
    assert (e.field, e.received) == ("body.positions", "nothing")


@pytest.mark.parametrize("n", [1, MAX_JOINTS])
def test_one_to_the_most_joints_are_taken(n: int) -> None:
    assert parse_teleop(1, "teleop.target", target(positions=[0.5] * n), []).positions == (0.5,) * n


@pytest.mark.parametrize(
    ("positions", "shown"),
    [
        ([], "list []"),
        ([0] * (MAX_JOINTS + 1), "list " + repr([0] * (MAX_JOINTS + 1))[:57] + "..."),
        ((0.0,), "tuple (0.0,)"),
        (0.0, "float 0.0"),
    ],
)
def test_positions_that_are_not_a_list_of_one_to_the_most_joints_are_refused(positions: Any, shown: str) -> None:
    e = refused("teleop.target", target(positions=positions))
    expected = f"a list of 1 to {MAX_JOINTS} numbers (one per joint)"
    assert e.message == f"teleop.target body.positions: expected {expected}, got {shown}"
    assert (e.field, e.expected, e.received) == ("body.positions", expected, shown.split(" ", 1)[1])


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (float("nan"), "float nan"),
        (float("inf"), "float inf"),
        (float("-inf"), "float -inf"),
        (True, "bool True"),
        ("1", "str '1'"),
        (None, "NoneType None"),
    ],
)
def test_a_position_that_is_not_a_finite_number_is_refused_by_index(value: Any, shown: str) -> None:
    e = refused("teleop.target", target(positions=[0.0, 1, value, 2.0]))
    assert e.message == f"teleop.target body.positions[2]: expected a finite number, got {shown}"
    assert (e.field, e.expected, e.received) == ("body.positions[2]", "a finite number", shown.split(" ", 1)[1])


def test_the_first_bad_position_is_named() -> None:
    assert refused("teleop.target", target(positions=[float("nan"), "x"])).field == "body.positions[0]"
