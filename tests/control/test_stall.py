"""Stalls: hold from the first stalled tick, report each new reason, act once after the timeout."""

from __future__ import annotations

import pytest

from runtime.control.stall import Stall


def test_hold_then_act_once_after_the_timeout() -> None:
    stall = Stall(timeout_s=0.5)
    first = stall.tick(10.0, "starved", "starved: no action due")
    assert first.began and first.new_reason and not first.act
    again = stall.tick(10.3, "starved", "starved: no action due")
    assert not again.began and not again.new_reason and not again.act
    due = stall.tick(10.6, "starved", "starved: no action due")
    assert due.act and due.waited == pytest.approx(0.6)
    assert not stall.tick(11.0, "starved", "starved: no action due").act  # once per stall


def test_a_new_reason_is_reported_but_the_clock_keeps_running() -> None:
    stall = Stall(timeout_s=0.5)
    stall.tick(0.0, "priming", "waiting for the first chunk")
    deadman = stall.tick(0.4, "deadman", "deadman: no teleop target")
    assert deadman.new_reason and not deadman.began
    assert stall.tick(0.6, "deadman", "deadman: no teleop target").act
    assert stall.reason == "deadman: no teleop target"


def test_resume_reports_a_stall_but_not_priming() -> None:
    stall = Stall(timeout_s=1.0)
    stall.tick(1.0, "priming", "waiting for the first chunk")
    assert stall.resume(1.2) is None  # the first chunk arriving is no recovery worth a log line
    stall.tick(2.0, "starved", "starved")
    assert stall.resume(2.25) == pytest.approx(0.25)
    assert stall.since is None and stall.key == "" and not stall.acted
    assert stall.tick(3.0, "starved", "starved").began  # a new stall after resuming
