"""The local fallback in front of a remote policy: hold first, then the local policy; the remote back
drives again only from the next run; a local bundle that cannot stand in is refused by what differs."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.bundle.interface import PolicyInterface
from runtime.bundle.manifest import TensorSpec
from runtime.errors import ConfigError
from runtime.remote.fallback import Fallback, check_fallback


class Side:
    def __init__(self, name: str) -> None:
        self.name = name
        self.task = ""
        self.takes_task = False
        self.lost: str | None = None
        self.failed: str | None = None
        self.asked: list[bool] = []

    def submit(self, inputs: Any, on_done: Any, *, reset: bool = False, prefix: Any = None) -> bool:
        self.asked.append(reset)
        return True

    def observe(self, inputs: Any, *, reset: bool = False) -> None: ...

    def failure(self) -> str | None:
        return self.failed

    def pending(self) -> str | None:
        return None

    def unreachable(self) -> str | None:
        return self.lost

    def describe(self) -> dict[str, Any]:
        return {"where": self.name}


def made() -> tuple[Fallback, Side, Side, list[float]]:
    now = [100.0]
    remote, local = Side("remote"), Side("local")
    return Fallback(remote, local, "act-small (/b)", 0.5, clock=lambda: now[0]), remote, local, now  # type: ignore[arg-type]


def test_the_loop_holds_first_then_the_local_policy_drives_until_the_next_run() -> None:
    f, remote, local, now = made()
    assert f.unreachable() is None and f.submit([], lambda a, e: None) and remote.asked == [False]
    remote.lost = "the policy at tcp://h:1: no reply to ping request 9"
    assert f.unreachable() == remote.lost  # held
    now[0] += 0.4
    assert f.unreachable() == remote.lost and f.driving == "remote"
    now[0] += 0.2
    assert f.unreachable() is None and f.driving == "local" and f.takeovers == 1
    f.submit([], lambda a, e: None)
    assert local.asked == [False] and remote.asked == [False]
    remote.lost = None  # back: the local policy goes on driving this run
    f.submit([], lambda a, e: None)
    assert local.asked == [False, False] and f.driving == "local"
    assert f.describe()["driving"] == "local fallback" and f.describe()["fallback"]["name"] == "act-small (/b)"
    f.submit([], lambda a, e: None, reset=True)  # control start: a new run, and the remote answers
    assert f.driving == "remote" and remote.asked == [False, True]


def test_a_local_policy_that_cannot_be_trusted_never_takes_over() -> None:
    f, remote, local, now = made()
    remote.lost, local.failed = "lost", "the serving canary failed"
    f.unreachable()
    now[0] += 5.0
    assert f.unreachable() == "lost" and f.driving == "remote"


def test_the_task_goes_to_both() -> None:
    f, remote, local, _ = made()
    f.task = "pick the cube"
    assert remote.task == local.task == "pick the cube" == f.task


def test_a_local_bundle_that_cannot_stand_in_is_refused_by_what_differs() -> None:
    state = (TensorSpec("state", "float32", (6,), "state"),)
    remote = PolicyInterface("act", state, tuple("abcdef"), 50, 30.0)
    check_fallback(remote, PolicyInterface("act-small", state, tuple("abcdef"), 50, 30.0, source="bundle /b"))
    with pytest.raises(ConfigError, match=r"^policy.fallback: the local bundle's chunk length \(20\) differ"):
        check_fallback(remote, PolicyInterface("small", state, tuple("abcdef"), 20, 30.0))
    with pytest.raises(ConfigError, match=r"^policy.fallback: the local bundle's joints"):
        check_fallback(remote, PolicyInterface("small", state, tuple("abcdeg"), 50, 30.0))
