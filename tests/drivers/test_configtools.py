"""TOML tables into frozen dataclasses: every annotation the checks support, what each refuses, and
the whole message (dotted key, what was expected, what came)."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal

import pytest

from drivers.configtools import from_mapping, load_toml
from drivers.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Inner:
    speed: float = 1.0
    name: str = "a"


@dataclasses.dataclass(frozen=True)
class Outer:
    count: int = 0
    on: bool = False
    mode: Literal["x", "y"] = "x"
    limit: int | None = None
    either: int | str = 0
    ids: tuple[int, ...] = ()
    per_joint: dict[str, float] = dataclasses.field(default_factory=dict)
    inner: Inner = Inner()
    anything: Any = None
    derived: int = dataclasses.field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError(f"count must be >= 0, got {self.count}")
        if self.count == 13:
            raise ConfigError("thirteen is refused as it is")


@dataclasses.dataclass(frozen=True)
class Untyped:
    loose: typing.Tuple = ()  # type: ignore[type-arg]  # noqa: UP006
    table: typing.Dict = dataclasses.field(default_factory=dict)  # type: ignore[type-arg]  # noqa: UP006
    odd: set[int] = dataclasses.field(default_factory=set)


def refusal(data: Any, where: str = "cfg", cls: type = Outer) -> str:
    with pytest.raises(ConfigError) as e:
        from_mapping(cls, data, where)
    return str(e.value)


def test_load_toml_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text('[arm]\nkind = "sim"\n')
    assert load_toml(path) == {"arm": {"kind": "sim"}}
    assert load_toml(str(path)) == {"arm": {"kind": "sim"}}


def test_load_toml_names_a_missing_file_and_a_broken_one(tmp_path: Path) -> None:
    missing = tmp_path / "none.toml"
    with pytest.raises(ConfigError) as e:
        load_toml(missing)
    assert str(e.value) == f"config file {missing} does not exist"
    assert isinstance(e.value.__cause__, FileNotFoundError)
    broken = tmp_path / "broken.toml"
    broken.write_text("[arm\n")
    with pytest.raises(ConfigError) as e:
        load_toml(broken)
    assert str(e.value).startswith(f"config file {broken} is not valid TOML: ")
    assert str(e.value) == f"config file {broken} is not valid TOML: {e.value.__cause__}"
    assert "line 1" in str(e.value)


def test_no_table_is_every_default_and_a_full_table_is_every_value() -> None:
    assert from_mapping(Outer, None, "cfg") == Outer()
    assert from_mapping(Outer, {}, "cfg") == Outer()
    got = from_mapping(
        Outer,
        {
            "count": 3,
            "on": True,
            "mode": "y",
            "limit": 7,
            "either": "s",
            "ids": [1, 2],
            "per_joint": {"gripper": 2, "wrist": 0.5},
            "inner": {"speed": 2, "name": "b"},
            "anything": [1, "two"],
        },
        "cfg",
    )
    assert got == Outer(3, True, "y", 7, "s", (1, 2), {"gripper": 2.0, "wrist": 0.5}, Inner(2.0, "b"), [1, "two"])
    assert type(got.inner.speed) is float and type(got.per_joint["gripper"]) is float
    assert got.ids == (1, 2) and isinstance(got.ids, tuple)
    assert from_mapping(Outer, {"limit": None, "either": 5}, "cfg") == Outer(limit=None, either=5)


def test_not_a_table_and_not_a_dataclass() -> None:
    assert refusal([1, 2]) == "cfg: expected a table, got list [1, 2]"
    assert refusal({"inner": 3}) == "cfg.inner: expected a table, got int 3"
    with pytest.raises(TypeError) as e:
        from_mapping(int, {}, "cfg")
    assert str(e.value) == "<class 'int'> is not a dataclass"


def test_unknown_keys_are_listed_with_the_known_ones() -> None:
    assert refusal({"zeta": 1, "alpha": 2, "count": 1}) == (
        "cfg: unknown key(s) alpha, zeta; expected some of anything, count, either, ids, inner, limit, mode, "
        "on, per_joint"
    )
    # a field the constructor does not take is not a key
    assert refusal({"derived": 1}).startswith("cfg: unknown key(s) derived; ")


def test_a_key_without_a_table_name_is_named_alone() -> None:
    assert refusal({"count": "3"}, where="") == "count: expected an integer, got str '3'"
    assert refusal({"inner": {"speed": "x"}}, where="") == "inner.speed: expected a number, got str 'x'"


def test_each_scalar_refusal() -> None:
    assert refusal({"count": "3"}) == "cfg.count: expected an integer, got str '3'"
    assert refusal({"count": True}) == "cfg.count: expected an integer, got bool True"
    assert refusal({"count": 1.0}) == "cfg.count: expected an integer, got float 1.0"
    assert refusal({"on": 1}) == "cfg.on: expected true or false, got int 1"
    assert refusal({"inner": {"speed": True}}) == "cfg.inner.speed: expected a number, got bool True"
    assert refusal({"inner": {"speed": "1"}}) == "cfg.inner.speed: expected a number, got str '1'"
    assert refusal({"inner": {"name": 5}}) == "cfg.inner.name: expected a string, got int 5"
    assert refusal({"mode": "z"}) == "cfg.mode: expected one of 'x', 'y', got 'z'"


def test_optional_and_union_refusals() -> None:
    # one non-None choice: its own refusal
    assert refusal({"limit": "7"}) == "cfg.limit: expected an integer, got str '7'"
    # two: none fits
    assert refusal({"either": 1.5}) == "cfg.either: float 1.5 fits none of int | str"
    assert refusal({"either": None}) == "cfg.either: NoneType None fits none of int | str"


def test_lists_and_tables_name_the_item() -> None:
    assert refusal({"ids": 3}) == "cfg.ids: expected a list, got int 3"
    assert refusal({"ids": [1, "2"]}) == "cfg.ids[1]: expected an integer, got str '2'"
    assert refusal({"per_joint": [1]}) == "cfg.per_joint: expected a table, got list [1]"
    assert refusal({"per_joint": {"wrist": "fast"}}) == "cfg.per_joint.wrist: expected a number, got str 'fast'"


def test_unparametrised_lists_and_tables_take_anything() -> None:
    got = from_mapping(Untyped, {"loose": [1, "a"], "table": {"k": [1]}}, "u")
    assert (got.loose, got.table) == ((1, "a"), {"k": [1]})
    with pytest.raises(TypeError) as e:
        from_mapping(Untyped, {"odd": [1]}, "u")
    assert str(e.value) == "u.odd: unsupported config annotation set[int]"


def test_the_dataclass_own_checks_name_the_table() -> None:
    assert refusal({"count": -1}) == "cfg: count must be >= 0, got -1"
    # a ConfigError raised by the dataclass itself passes as it is
    assert refusal({"count": 13}) == "thirteen is refused as it is"
