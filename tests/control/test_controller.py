"""The controller alone: no thread, no bus, no clock of its own. Each step is the decision for one tick
from the reading and the tick's inputs; the runner (here ``small_arm.Runner``) carries it out.
Asserted on the decisions.

The manifest is made here, for the simulated SO-101's joints (no export): ``tests/control/
test_controller_modes.py`` goes through the mode machine on a smaller arm."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from drivers.calibration import SO101_JOINTS, Calibration
from runtime.bundle.interface import PolicyInterface
from runtime.bundle.manifest import Manifest, parse_manifest
from runtime.control.config import ControlConfig, SafetyConfig
from runtime.control.controller import ChunkResult, Controller
from runtime.control.feed import Blocked
from runtime.control.mailbox import Release, Start, Stop
from runtime.control.mode import Mode
from runtime.teleop.config import TeleopConfig

from .small_arm import Runner


class Torque:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def enable_torque(self) -> None:
        self.calls.append("on")

    def disable_torque(self) -> None:
        self.calls.append("off")


class Feed:
    def __init__(self) -> None:
        self.asked: list[tuple[np.ndarray, bool]] = []
        self.prefixes: list[Any] = []  # the Prefix each request carried (None: none)
        self.done = None
        self.gate: Blocked | None = None

    def submit(self, state, on_done, *, reset=False, prefix=None):  # type: ignore[no-untyped-def]
        self.asked.append((state, reset))
        self.prefixes.append(prefix)
        self.done = on_done
        return True

    def observe(self, state, *, reset=False):  # type: ignore[no-untyped-def]
        pass

    def blocked(self, now):  # type: ignore[no-untyped-def]
        return self.gate

    def lost(self):  # type: ignore[no-untyped-def]
        return None


CHUNK = 50


@pytest.fixture
def manifest() -> Manifest:
    """Joints in, a chunk of CHUNK actions per joint out, at 30 Hz."""
    n = len(SO101_JOINTS)
    return parse_manifest(
        {
            "format": "lerobot-runtime-bundle",
            "format_version": 1,
            "policy": {"name": "p"},
            "inputs": [{"name": "observation.state", "dtype": "float32", "shape": [n], "role": "state"}],
            "outputs": [{"name": "action", "dtype": "float32", "shape": [CHUNK, n], "role": "action"}],
            "action": {"output": "action", "chunk_length": CHUNK, "names": list(SO101_JOINTS)},
            "control_rate_hz": 30,
            "programs": {"CPU": {"file": "p.pte", "precision": "f32", "sha256": "0" * 64, "delegation": "full"}},
            "test_case": {"file": "t.npz", "sha256": "0" * 64},
        }
    )


@pytest.fixture
def made(calibration: Calibration, manifest: Manifest):  # type: ignore[no-untyped-def]
    clock = [100.0]
    torque, feed = Torque(), Feed()
    config = ControlConfig(rate_hz=30.0, rt_priority=0, safety=SafetyConfig(max_step_deg=5.0, stall_timeout_s=1.0))
    policy = PolicyInterface.of_manifest(manifest)
    c = Controller(tuple(manifest.action_names), calibration, policy, config, teleop=TeleopConfig(), period=1 / 30)
    return Runner(c, feed, torque, lambda: clock[0]), torque, feed, clock


def test_a_start_turns_torque_on_holds_while_priming_then_follows_the_chunk_within_the_envelope(made) -> None:  # type: ignore[no-untyped-def]
    r, torque, feed, clock = made
    c = r.c
    n = len(c.names)
    present = np.zeros(n)
    assert r.step(0, clock[0], present).goal is None and c.mode is Mode.IDLE
    r.mailbox.post(Start("test"))
    d = r.step(1, clock[0], present)
    assert torque.calls == ["on"] and c.mode is Mode.RUNNING
    # the first running tick holds where the arm is and, once its goal is written and the joints read
    # again, asks for a chunk from that fresh reading
    assert feed.asked == []
    fresh = present + 0.5
    r.after_read(d, fresh, clock[0])
    assert len(feed.asked) == 1 and feed.asked[0][1] is True
    np.testing.assert_allclose(feed.asked[0][0], fresh)
    assert d.goal is not None and d.requested is None
    np.testing.assert_allclose(d.goal, present)
    # the chunk, 20 degrees away on every step: the goal moves max_step_deg toward it, no further
    chunk = np.full((c.n_steps, n), 20.0, dtype=np.float32)
    r.results.put(ChunkResult(c._plan.gen, 1, chunk, None))
    d = r.step(2, clock[0], present)
    assert d.requested is not None and np.allclose(d.requested, 20.0)
    assert d.goal is not None and np.all(np.abs(np.asarray(d.goal) - present) <= 5.0 + 1e-9)
    assert np.any(np.asarray(d.goal) > 0)


def test_an_estop_holds_in_the_tick_it_is_taken_and_only_the_newest_latch_releases(made) -> None:  # type: ignore[no-untyped-def]
    r, torque, _feed, clock = made
    c = r.c
    present = np.full(len(c.names), 3.0)
    r.mailbox.post(Start("test"))
    d = r.step(1, clock[0], present)
    assert d.goal is not None
    first = r.mailbox.estop("first")
    second = r.mailbox.estop("second")
    d = r.step(2, clock[0], present)
    assert c.mode is Mode.ESTOPPED and c.latch == second and c.latches_taken == second.id
    np.testing.assert_allclose(d.goal, present)  # the hold, decided in the very tick
    r.mailbox.post(Release("op", first.id))
    r.step(3, clock[0], present)
    assert c.mode is Mode.ESTOPPED  # a release naming an older latch changes nothing
    r.mailbox.post(Start("op"))
    assert r.step(4, clock[0], present).goal is None and c.mode is Mode.ESTOPPED
    r.mailbox.post(Release("op", second.id))
    r.step(5, clock[0], present)
    assert c.mode is Mode.HOLDING and c.latch is None and torque.calls == ["on"]


def test_a_blocked_policy_holds_then_takes_the_stall_action_after_the_timeout(made) -> None:  # type: ignore[no-untyped-def]
    r, _torque, feed, clock = made
    c = r.c
    present = np.zeros(len(c.names))
    r.mailbox.post(Start("test"))
    d = r.step(1, clock[0], present)
    feed.gate = Blocked("stale:front", "stale observation stream: front")
    d = r.step(2, clock[0], present)
    np.testing.assert_allclose(d.goal, present)
    assert c.counters["blocked_ticks"] == 1 and c.mode is Mode.RUNNING
    clock[0] += 1.5  # past stall_timeout_s
    r.step(3, clock[0], present)
    assert c.counters["stall_actions"] == 1 and c.mode in (Mode.RESTING, Mode.HOLDING)
    assert r.dumps and r.dumps[-1].startswith("stall")


def test_a_stop_holds_the_present_pose_and_a_step_never_touches_the_bus_for_goals(made) -> None:  # type: ignore[no-untyped-def]
    r, torque, _feed, clock = made
    c = r.c
    present = np.full(len(c.names), 7.0)
    r.mailbox.post(Start("test"))
    r.step(1, clock[0], present)
    r.mailbox.post(Stop("op"))
    d = r.step(2, clock[0], present)
    assert c.mode is Mode.HOLDING
    np.testing.assert_allclose(d.goal, present)
    assert r.step(3, clock[0], present).goal is None  # holding: the servos keep the goal they have
    assert torque.calls == ["on"]
