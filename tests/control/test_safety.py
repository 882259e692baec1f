"""The safety envelope, number by number: what each bound does to the goal the servos receive, what it
reports, and the configurations it refuses.

A small arm with round numbers (resolution 361, so one tick is one degree) keeps every expected
value here worked by hand: joint ``a`` spans -90..90 degrees, ``b`` -50..50, the gripper 0..100 %.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from drivers.calibration import Calibration, JointCalibration
from runtime.control.config import SafetyConfig
from runtime.control.events import EventLog
from runtime.control.safety import ACCEL, LIMIT, NONFINITE, STEP, SafetyEnvelope
from runtime.errors import ConfigError

JOINTS = ("a", "b", "gripper")
CAL = Calibration(
    {
        "a": JointCalibration(id=1, range_min=90, range_max=270, resolution=361),
        "b": JointCalibration(id=2, range_min=130, range_max=230, resolution=361),
        "gripper": JointCalibration(id=3, range_min=0, range_max=360, mode="percent", resolution=361),
    }
)


def make(**overrides: object) -> SafetyEnvelope:
    cfg = {
        "max_step_deg": 4.0,
        "max_step_change_deg": 1.0,
        "gripper_max_step_pct": 10.0,
        "gripper_max_step_change_pct": 3.0,
        "max_first_step_deg": 10.0,
        **overrides,
    }
    return SafetyEnvelope(JOINTS, CAL, SafetyConfig(**cfg), EventLog())  # type: ignore[arg-type]


def texts(env: SafetyEnvelope) -> list[str]:
    return [e.text() for e in env.events.drain()]


class TestLimitsFromConfig:
    def test_body_joints_take_the_calibrated_range_and_degree_bounds(self):
        env = make()
        assert list(env.lo) == [-90.0, -50.0, 0.0] and list(env.hi) == [90.0, 50.0, 100.0]
        assert list(env.max_step) == [4.0, 4.0, 10.0]
        assert list(env.max_change) == [1.0, 1.0, 3.0]

    def test_gripper_limits_and_bounds_are_its_own(self):
        env = make(gripper_limits_pct=(10.0, 90.0))
        assert (env.lo[2], env.hi[2]) == (10.0, 90.0)
        assert (env.lo[0], env.hi[0]) == (-90.0, 90.0)  # the gripper's limits touch no other joint

    def test_soft_limits_only_narrow_the_calibrated_range(self):
        env = make(soft_limits={"a": (-30.0, 120.0), "b": (-80.0, 20.0)})
        assert (env.lo[0], env.hi[0]) == (-30.0, 90.0)
        assert (env.lo[1], env.hi[1]) == (-50.0, 20.0)

    def test_soft_limits_leaving_no_room_are_refused_with_the_calibrated_range(self):
        with pytest.raises(ConfigError) as e:
            make(soft_limits={"b": (60.0, 70.0)})
        assert str(e.value) == "control.safety.soft_limits.b: no room left inside the calibrated range -50.0..50.0"
        with pytest.raises(ConfigError) as e:
            make(soft_limits={"a": (90.0, 120.0)})  # touching the range's end leaves one point: no room either
        assert str(e.value) == "control.safety.soft_limits.a: no room left inside the calibrated range -90.0..90.0"

    def test_unknown_joints_are_named(self):
        with pytest.raises(ConfigError) as e:
            make(soft_limits={"z": (0.0, 1.0), "y": (0.0, 1.0)})
        assert str(e.value) == "control.safety.soft_limits: unknown joint(s) y, z; the arm has a, b, gripper"
        with pytest.raises(ConfigError) as e:
            make(rest_pose={"elbow": 0.0, "a": 1.0, "wrist": 0.0})
        assert str(e.value) == "control.safety.rest_pose: unknown joint(s) elbow, wrist; the arm has a, b, gripper"

    def test_counts_start_at_zero(self):
        assert make().counts == {"limit": 0, "step": 0, "accel": 0, "nonfinite": 0, "refused_chunks": 0}


class TestApply:
    def test_a_request_inside_every_bound_passes_untouched(self):
        env = make()
        env.reset(np.array([0.0, 0.0, 50.0]))
        goal = env.apply(np.array([1.0, -1.0, 53.0]), np.array([0.0, 0.0, 50.0]))
        assert list(goal) == [1.0, -1.0, 53.0]
        assert list(env.last_bits) == [0, 0, 0]
        assert texts(env) == []

    def test_integer_requests_are_taken_as_degrees(self):
        env = make()
        goal = env.apply(np.array([1, 0, 50]), np.array([0, 0, 50]))
        assert goal.dtype == np.float64 and list(goal) == [1.0, 0.0, 50.0]

    def test_acceleration_bound_ramps_the_step_and_is_counted(self):
        env = make()
        present = np.array([0.0, 0.0, 50.0])
        env.reset(present)
        goals = []
        for _ in range(6):
            goal = env.apply(np.array([30.0, 0.0, 50.0]), present)
            goals.append(goal[0])
            present = goal
        # +1 per tick, then the velocity bound (4 from the present position) takes over
        assert goals == [1.0, 3.0, 6.0, 10.0, 14.0, 18.0]
        assert env.counts["accel"] == 6 and env.counts["step"] == 2
        assert texts(env) == [
            "safety: a accel: requested 30.00, commanded 1.00 (present 0.00, limits -90.00..90.00, "
            "max step 4.00, max step change 1.00)",
            "safety: a step: requested 30.00, commanded 14.00 (present 10.00, limits -90.00..90.00, "
            "max step 4.00, max step change 1.00)",
        ]

    def test_velocity_bound_is_counted_when_it_cuts(self):
        env = make(max_step_change_deg=100.0)
        env.reset(np.array([0.0, 0.0, 50.0]))
        goal = env.apply(np.array([-30.0, 0.0, 50.0]), np.array([0.0, 0.0, 50.0]))
        assert goal[0] == -4.0
        assert list(env.last_bits) == [STEP, 0, 0]
        assert env.counts == {"limit": 0, "step": 1, "accel": 0, "nonfinite": 0, "refused_chunks": 0}

    def test_limit_holds_from_below_at_the_edge(self):
        env = make(soft_limits={"a": (-20.0, 20.0)}, max_step_change_deg=100.0)
        present = np.array([-19.0, 0.0, 50.0])
        env.reset(present)
        goal = env.apply(np.array([-60.0, 0.0, 50.0]), present)
        assert goal[0] == -20.0  # not present - max_step: the limit has the last word below too
        assert list(env.last_bits) == [LIMIT, 0, 0]
        assert env.counts["limit"] == 1 and env.counts["step"] == 0

    def test_a_clamp_at_the_limit_while_accelerating_reports_both(self):
        env = make(soft_limits={"a": (-20.0, 20.0)})
        present = np.array([19.5, 0.0, 50.0])
        env.reset(present)
        goal = env.apply(np.array([60.0, 0.0, 50.0]), present)
        assert goal[0] == 20.0
        assert list(env.last_bits) == [LIMIT | ACCEL, 0, 0]
        assert env.counts["limit"] == 1 and env.counts["accel"] == 1

    def test_a_request_on_the_limit_is_no_intervention(self):
        env = make(soft_limits={"a": (-20.0, 20.0)})
        for edge in (-20.0, 20.0):
            env.reset(np.array([edge, 0.0, 50.0]))
            env.apply(np.array([edge, 0.0, 50.0]), np.array([edge, 0.0, 50.0]))
            assert list(env.last_bits) == [0, 0, 0]
        assert env.counts["limit"] == 0

    def test_nonfinite_request_holds_the_joint_and_keeps_its_other_bits(self):
        env = make()
        present = np.array([0.0, 0.0, 50.0])
        env.reset(present)
        for _ in range(3):  # moving at +3 degrees a tick
            present = env.apply(np.array([30.0, 0.0, 50.0]), present)
        assert present[0] == 6.0
        goal = env.apply(np.array([np.nan, 0.0, np.inf]), present)
        # the NaN holds the previous goal, but a stop from 3 deg/tick is itself bounded: 6 + 2
        assert goal[0] == 8.0 and goal[2] == 50.0
        assert env.last_bits[0] == NONFINITE | ACCEL and env.last_bits[2] == NONFINITE
        assert env.counts["nonfinite"] == 2

    def test_each_bit_names_its_kind_once_per_occurrence(self):
        env = make(soft_limits={"b": (-10.0, 10.0)}, max_step_change_deg=100.0)
        present = np.array([0.0, 9.0, 50.0])
        env.reset(present)
        far = np.array([0.0, 40.0, 50.0])
        for _ in range(3):
            env.apply(far, present)
        env.apply(present, present)  # the occurrence ends
        env.apply(far, present)  # and starts again
        events = env.events.drain()
        assert [e.level for e in events] == [logging.WARNING] * 2
        assert [e.text() for e in events] == [
            "safety: b limit: requested 40.00, commanded 10.00 (present 9.00, limits -10.00..10.00, "
            "max step 4.00, max step change 100.00)"
        ] * 2
        assert env.counts["limit"] == 4

    def test_reset_starts_from_rest_and_reports_afresh(self):
        env = make()
        present = np.array([0.0, 0.0, 50.0])
        for _ in range(3):
            present = env.apply(np.array([30.0, 0.0, 50.0]), present)
        texts(env)
        env.reset(present)
        goal = env.apply(np.array([30.0, 0.0, 50.0]), present)
        assert goal[0] == present[0] + 1.0  # from standstill again, not at the old speed
        assert len(texts(env)) == 1  # the accel clamp is a new occurrence after a reset

    def test_hold_zeroes_the_velocity_at_the_held_goal(self):
        env = make()
        present = np.array([0.0, 0.0, 50.0])
        for _ in range(4):
            present = env.apply(np.array([30.0, 0.0, 50.0]), present)
        assert present[0] == 10.0
        env.hold(np.array([12, 0, 50]))
        goal = env.apply(np.array([30.0, 0.0, 50.0]), np.array([11.0, 0.0, 50.0]))
        assert goal[0] == 13.0  # the held goal (not the present position) plus one step-change


class TestChunkChecks:
    def test_the_first_nonfinite_value_is_named(self):
        env = make()
        chunk = np.zeros((5, 3))
        chunk[3, 1] = np.inf
        chunk[4, 0] = np.nan
        assert env.check_chunk(chunk, np.zeros(3), 0) == "chunk holds a non-finite value (inf) at step 3 for joint b"

    def test_first_executed_step_distance(self):
        env = make()
        present = np.array([0.0, 0.0, 50.0])
        chunk = np.tile(present, (4, 1))
        chunk[2:, 1] = 10.0  # exactly max_first_step_deg away: allowed
        assert env.check_chunk(chunk, present, 2) is None
        chunk[2:, 1] = -10.5
        assert env.check_chunk(chunk, present, 2) == (
            "first executed step is 10.50 from the present position of b "
            "(goal -10.50, present 0.00; max_first_step_deg 10)"
        )

    def test_a_chunk_wholly_in_the_past_is_not_judged_by_distance(self):
        env = make()
        chunk = np.full((4, 3), 80.0)
        assert env.check_chunk(chunk, np.zeros(3), 4) is None
        assert env.check_chunk(chunk, np.zeros(3), 3) is not None

    def test_refusal_is_counted_and_reported(self):
        env = make()
        env.refuse("too far")
        env.refuse("too far again")
        events = env.events.drain()
        assert [(e.level, e.text()) for e in events] == [
            (logging.WARNING, "safety: chunk refused: too far"),
            (logging.WARNING, "safety: chunk refused: too far again"),
        ]
        assert env.counts["refused_chunks"] == 2


def test_rest_target_uses_the_rest_pose_inside_the_limits():
    env = make(rest_pose={"a": 120.0, "gripper": 30.5}, soft_limits={"a": (-45.0, 45.0)})
    target = env.rest_target(np.array([5, -70, 60]))  # present positions may come as integers
    # a: rest pose clipped to its soft limit; b: where it is, clipped into its range; gripper: rest pose
    assert list(target) == [45.0, -50.0, 30.5]


class TestHoldGoals:
    """A hold (stop, stall, e-stop) passes the envelope too: limits and the velocity bound, no ramp."""

    def test_a_hold_at_the_present_pose_inside_the_limits_is_written_as_it_is(self):
        env = make()
        present = np.array([10.0, -20.0, 50.0])
        assert list(env.hold_goal(present, present)) == [10.0, -20.0, 50.0]

    def test_a_hold_stops_at_once_however_fast_the_arm_was_moving(self):
        env = make()
        present = np.zeros(3)
        for _ in range(4):  # ramp up: the step grows by max_step_change each tick
            present = env.apply(present + 4.0, present)
        held = env.hold_goal(present, present)
        assert list(held) == list(present)  # no ramp down, unlike apply
        moved = env.apply(present + 4.0, present)  # the next motion starts from rest
        assert list(moved - present) == pytest.approx([1.0, 1.0, 3.0])  # max step change (gripper: 3 %)

    def test_a_hold_outside_the_limits_or_far_from_the_arm_is_brought_in(self):
        env = make()
        present = np.array([89.0, 0.0, 50.0])
        held = env.hold_goal(np.array([120.0, 9.0, np.nan]), present)
        # a: inside the limit (90); b: within max_step (4) of the present pose; gripper: NaN holds present
        assert list(held) == [90.0, 4.0, 50.0]
        assert not texts(env)  # not a policy's intervention: nothing is reported
