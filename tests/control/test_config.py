"""The ``[control]`` table's values: every default, every refusal word for word at its boundary,
real-time chunking asked of a bundle that can or cannot do it, and the loop's rate."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from runtime.control.config import ControlConfig, RtcConfig, SafetyConfig, StreamConfig, control_rate, rtc_in_effect
from runtime.errors import ConfigError


def refusal(make: Any, *args: Any, **kw: Any) -> str:
    with pytest.raises(ConfigError) as err:
        make(*args, **kw)
    return str(err.value)


# --- streams -------------------------------------------------------------------------------


def test_a_stream_by_default_is_stale_after_200_ms() -> None:
    s = StreamConfig("cam", "ipc://cam.sock")
    assert (s.input, s.endpoint, s.max_age_ms) == ("cam", "ipc://cam.sock", 200.0)
    assert StreamConfig("cam", "tcp://10.0.0.2:5600", 1e-3).max_age_ms == 1e-3


def test_a_stream_needs_an_input_name() -> None:
    assert refusal(StreamConfig, "", "ipc://x") == (
        "control.streams.input: expected a policy input name, got an empty string"
    )


@pytest.mark.parametrize("endpoint", ["udp://x:1", "ipc:/x", "", "x ipc://y"])
def test_a_stream_endpoint_is_ipc_or_tcp(endpoint: str) -> None:
    assert refusal(StreamConfig, "cam", endpoint) == (
        f"control.streams.endpoint (cam): expected ipc://PATH or tcp://HOST:PORT, got {endpoint!r}"
    )


@pytest.mark.parametrize("age", [0.0, -1.0, math.nan])
def test_a_stream_age_limit_is_positive(age: float) -> None:
    assert refusal(StreamConfig, "cam", "ipc://x", age) == f"control.streams.max_age_ms (cam): expected > 0, got {age}"


# --- safety --------------------------------------------------------------------------------


def test_the_safety_defaults() -> None:
    s = SafetyConfig()
    assert (s.soft_limits, s.rest_pose) == ({}, {})
    assert (s.max_step_deg, s.max_step_change_deg, s.gripper_max_step_pct, s.gripper_max_step_change_pct) == (
        5.0,
        2.0,
        10.0,
        5.0,
    )
    assert (s.gripper_limits_pct, s.max_first_step_deg, s.stall_timeout_s, s.rest_speed_deg_s) == (
        (0.0, 100.0),
        30.0,
        2.0,
        15.0,
    )
    assert (s.stall_action, s.estop_action, s.shutdown_action, s.max_bus_failures) == ("rest", "hold", "torque_off", 3)


POSITIVE = (
    "max_step_deg",
    "max_step_change_deg",
    "gripper_max_step_pct",
    "gripper_max_step_change_pct",
    "max_first_step_deg",
    "stall_timeout_s",
    "rest_speed_deg_s",
)


@pytest.mark.parametrize("key", POSITIVE)
@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_each_bound_is_a_finite_number_above_zero(key: str, value: float) -> None:
    assert refusal(SafetyConfig, **{key: value}) == f"control.safety.{key}: expected a finite number > 0, got {value}"


@pytest.mark.parametrize("key", POSITIVE)
def test_a_tiny_bound_is_a_bound(key: str) -> None:
    assert getattr(SafetyConfig(**{key: 1e-6}), key) == 1e-6


@pytest.mark.parametrize("pair", [(1.0, 1.0), (2.0, 1.0), (1.0,), (0.0, 1.0, 2.0)])
def test_a_soft_limit_is_min_below_max(pair: tuple[float, ...]) -> None:
    assert refusal(SafetyConfig, soft_limits={"ok": (-1.0, 1.0), "elbow": pair}) == (
        f"control.safety.soft_limits.elbow: expected [min, max] with min < max, got {list(pair)}"
    )
    assert SafetyConfig(soft_limits={"elbow": (-1.0, -0.5)}).soft_limits == {"elbow": (-1.0, -0.5)}


@pytest.mark.parametrize("lo_hi", [(-1.0, 50.0), (50.0, 50.0), (60.0, 50.0), (0.0, 100.5), (0.0,), (0.0, 50.0, 100.0)])
def test_the_gripper_limits_are_within_0_to_100(lo_hi: tuple[float, ...]) -> None:
    assert refusal(SafetyConfig, gripper_limits_pct=lo_hi) == (
        f"control.safety.gripper_limits_pct: expected [min, max] within 0..100, got {list(lo_hi)}"
    )


def test_the_gripper_limits_may_be_the_whole_range() -> None:
    assert SafetyConfig(gripper_limits_pct=(0.0, 100.0)).gripper_limits_pct == (0.0, 100.0)
    assert SafetyConfig(gripper_limits_pct=(99.0, 100.0)).gripper_limits_pct == (99.0, 100.0)


def test_at_least_one_bus_failure_before_the_estop() -> None:
    assert refusal(SafetyConfig, max_bus_failures=0) == "control.safety.max_bus_failures: expected >= 1, got 0"
    assert SafetyConfig(max_bus_failures=1).max_bus_failures == 1


# --- real-time chunking --------------------------------------------------------------------


def test_rtc_keys_absent_are_the_bundles() -> None:
    r = RtcConfig()
    assert (r.enabled, r.execution_horizon, r.prefix_attention_schedule, r.max_guidance_weight) == (None,) * 4
    assert r.given() == ()


def test_rtc_refusals() -> None:
    assert refusal(RtcConfig, execution_horizon=0) == "control.rtc.execution_horizon: expected >= 1 step, got 0"
    assert refusal(RtcConfig, prefix_attention_schedule="cosine") == (
        "control.rtc.prefix_attention_schedule: expected one of ZEROS, ONES, LINEAR, EXP, got 'cosine'"
    )
    for cap in (0.0, -1.0, math.inf, math.nan):
        assert refusal(RtcConfig, max_guidance_weight=cap) == (
            f"control.rtc.max_guidance_weight: expected a finite number > 0, got {cap}"
        )


def test_rtc_values_at_their_bounds() -> None:
    r = RtcConfig(True, 1, "linear", 1e-6)
    assert (r.execution_horizon, r.prefix_attention_schedule, r.max_guidance_weight) == (1, "linear", 1e-6)


def test_the_rtc_keys_given_in_order_and_enabled_only_when_true() -> None:
    assert RtcConfig(True, 8, "EXP", 5.0).given() == (
        "enabled",
        "execution_horizon",
        "prefix_attention_schedule",
        "max_guidance_weight",
    )
    assert RtcConfig(False, None, "EXP").given() == ("prefix_attention_schedule",)
    assert RtcConfig(None, 4).given() == ("execution_horizon",)
    assert RtcConfig(max_guidance_weight=2.0).given() == ("max_guidance_weight",)


def bundle(chunk_size: int | None) -> Any:
    return SimpleNamespace(rtc_chunk_size=chunk_size or 0)


def test_rtc_follows_the_bundle_when_not_asked() -> None:
    assert rtc_in_effect(ControlConfig(), bundle(None)) is False
    assert rtc_in_effect(ControlConfig(), bundle(10)) is True
    assert rtc_in_effect(ControlConfig(rtc=RtcConfig(enabled=False)), bundle(None)) is False
    assert rtc_in_effect(ControlConfig(rtc=RtcConfig(enabled=False)), bundle(10)) is False
    assert rtc_in_effect(ControlConfig(rtc=RtcConfig(enabled=True, execution_horizon=10)), bundle(10)) is True


def test_rtc_keys_for_a_bundle_without_rtc_name_the_first_key() -> None:
    assert refusal(rtc_in_effect, ControlConfig(rtc=RtcConfig(None, 4, "EXP")), bundle(None)) == (
        "control.rtc.execution_horizon: this bundle takes no previous chunk (it was not exported with real-time "
        "chunking: export --lerobot CHECKPOINT --rtc, a SmolVLA); remove the [control.rtc] keys"
    )
    assert refusal(rtc_in_effect, ControlConfig(rtc=RtcConfig(True)), bundle(None)).startswith(
        "control.rtc.enabled: this bundle takes no previous chunk"
    )


def test_rtc_needs_the_latest_aggregate() -> None:
    assert refusal(rtc_in_effect, ControlConfig(aggregate="average"), bundle(10)) == (
        "control.aggregate: expected 'latest' with real-time chunking (the new chunk already continues the "
        "leftover, as LeRobot's RTC queue replaces it; blending the two plans again would pull it back), got "
        "'average'; or set control.rtc.enabled = false"
    )
    assert rtc_in_effect(ControlConfig(aggregate="average", rtc=RtcConfig(enabled=False)), bundle(10)) is False


def test_rtc_horizon_is_at_most_the_chunk() -> None:
    assert refusal(rtc_in_effect, ControlConfig(rtc=RtcConfig(execution_horizon=11)), bundle(10)) == (
        "control.rtc.execution_horizon: expected 1..10 (the policy's chunk size), got 11"
    )


# --- the loop ------------------------------------------------------------------------------


def test_the_control_defaults() -> None:
    c = ControlConfig()
    assert (c.enabled, c.rate_hz, c.n_action_steps, c.chunk_size_threshold, c.aggregate, c.ensemble_coeff) == (
        True,
        0.0,
        0,
        0.5,
        "latest",
        0.01,
    )
    assert (c.rt_priority, c.recorder_s, c.process, c.task, c.link_timeout_s) == (50, 20.0, "own", "", 0.5)
    assert c.streams == (StreamConfig("observation.images.front", "ipc://camera-front.sock", 200.0),)
    assert c.safety == SafetyConfig() and c.rtc == RtcConfig()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"rate_hz": -0.5}, "control.rate_hz: expected 0 (the bundle's rate) or up to 1000 Hz, got -0.5"),
        ({"rate_hz": 1000.5}, "control.rate_hz: expected 0 (the bundle's rate) or up to 1000 Hz, got 1000.5"),
        ({"n_action_steps": -1}, "control.n_action_steps: expected 0 (whole chunk) or > 0, got -1"),
        ({"chunk_size_threshold": 1.0}, "control.chunk_size_threshold: expected a fraction in [0, 1), got 1.0"),
        ({"chunk_size_threshold": -0.1}, "control.chunk_size_threshold: expected a fraction in [0, 1), got -0.1"),
        ({"ensemble_coeff": -0.01}, "control.ensemble_coeff: expected >= 0, got -0.01"),
        ({"rt_priority": -1}, "control.rt_priority: expected 0 (none) to 99, got -1"),
        ({"rt_priority": 100}, "control.rt_priority: expected 0 (none) to 99, got 100"),
        ({"link_timeout_s": 0.049}, "control.link_timeout_s: expected 0.05 to 10 seconds, got 0.049"),
        ({"link_timeout_s": 10.01}, "control.link_timeout_s: expected 0.05 to 10 seconds, got 10.01"),
        ({"recorder_s": 0.0}, "control.recorder_s: expected > 0 seconds, got 0.0"),
        ({"recorder_s": math.nan}, "control.recorder_s: expected > 0 seconds, got nan"),
        (
            {"process": "thread"},
            "control.process: expected 'own' (the loop runs in the arm's own process; running it as a thread of "
            "the daemon is no longer offered), got 'thread'",
        ),
    ],
)
def test_each_control_refusal(kw: dict[str, Any], message: str) -> None:
    assert refusal(ControlConfig, **kw) == message


@pytest.mark.parametrize(
    "kw",
    [
        {"rate_hz": 1000.0},
        {"n_action_steps": 1},
        {"chunk_size_threshold": 0.0},
        {"chunk_size_threshold": 0.99},
        {"ensemble_coeff": 0.0},
        {"rt_priority": 0},
        {"rt_priority": 99},
        {"link_timeout_s": 0.05},
        {"link_timeout_s": 10.0},
        {"recorder_s": 0.001},
        {"streams": ()},
    ],
)
def test_control_values_at_their_bounds(kw: dict[str, Any]) -> None:
    c = ControlConfig(**kw)
    assert [getattr(c, k) for k in kw] == list(kw.values())


def test_two_streams_for_one_input_are_refused_naming_the_first_in_order() -> None:
    streams = tuple(StreamConfig(n, f"ipc://{i}") for i, n in enumerate(("b", "a", "c", "b", "a")))
    assert refusal(ControlConfig, streams=streams) == "control.streams: input 'a' has more than one stream"
    assert len(ControlConfig(streams=streams[:3]).streams) == 3


def test_the_rate_is_the_configs_or_the_bundles() -> None:
    assert control_rate(ControlConfig(), 30.0) == 30.0
    assert control_rate(ControlConfig(rate_hz=50.0), 30.0) == 50.0
