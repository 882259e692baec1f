"""The ``[control]`` table: the control loop's rate, action queue, observation streams and safety envelope.

Units are in the key names: degrees for body joints, percent (0-100) for a gripper, as the drivers
report them. ``configs/default.toml`` lists every key with its default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from runtime.bundle.rtc import SCHEDULES
from runtime.errors import ConfigError

if TYPE_CHECKING:
    from runtime.bundle.interface import PolicyInterface

Aggregate = Literal["latest", "average", "temporal_ensemble"]
StallAction = Literal["hold", "rest", "torque_off"]
EstopAction = Literal["hold", "torque_off"]


@dataclass(frozen=True)
class StreamConfig:
    """One observation part that arrives over ZeroMQ from a producer process (a camera).

    ``input``: the policy input it fills (``observation.images.front``); ``endpoint``: where the
    producer publishes (the loop connects a SUB socket; relative ``ipc://`` paths live in the runtime
    directory); ``max_age_ms``: a part older than this (capture time to now) is stale.
    """

    input: str
    endpoint: str
    max_age_ms: float = 200.0

    def __post_init__(self) -> None:
        if not self.input:
            raise ConfigError("control.streams.input: expected a policy input name, got an empty string")
        if not self.endpoint.startswith(("ipc://", "tcp://")):
            raise ConfigError(
                f"control.streams.endpoint ({self.input}): expected ipc://PATH or tcp://HOST:PORT, "
                f"got {self.endpoint!r}"
            )
        if not self.max_age_ms > 0:
            raise ConfigError(f"control.streams.max_age_ms ({self.input}): expected > 0, got {self.max_age_ms}")


def _positive(key: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"control.safety.{key}: expected a finite number > 0, got {value}")


@dataclass(frozen=True)
class SafetyConfig:
    """The envelope every goal passes before it reaches the bus.

    ``soft_limits``: per joint ``[min, max]``, tighter than the calibrated range (which always applies).
    ``max_step_deg``: the most a goal may lead the present position, per tick (a velocity bound);
    ``max_step_change_deg``: the most the commanded step may change from one tick to the next (an
    acceleration bound). The ``gripper_*`` keys replace both for joints named ``gripper`` (percent).
    ``max_first_step_deg``: a chunk whose first action is further than this from the present
    position is refused whole. ``stall_timeout_s``: how long the loop holds when no action is due
    (starved, stale stream, failed inference) before ``stall_action``. ``rest_pose``: per joint,
    where ``rest`` goes, at ``rest_speed_deg_s``; joints left out rest where they are.
    ``estop_action``: hold the present pose, or turn torque off. ``shutdown_action``: what follows
    the hold at shutdown. ``max_bus_failures``: consecutive failed bus reads or writes before the loop
    latches the e-stop (the arm cannot be commanded safely without its present position).
    """

    soft_limits: dict[str, tuple[float, ...]] = field(default_factory=dict)
    max_step_deg: float = 5.0
    max_step_change_deg: float = 2.0
    gripper_max_step_pct: float = 10.0
    gripper_max_step_change_pct: float = 5.0
    gripper_limits_pct: tuple[float, ...] = (0.0, 100.0)
    max_first_step_deg: float = 30.0
    stall_timeout_s: float = 2.0
    stall_action: StallAction = "rest"
    rest_pose: dict[str, float] = field(default_factory=dict)
    rest_speed_deg_s: float = 15.0
    estop_action: EstopAction = "hold"
    shutdown_action: StallAction = "torque_off"
    max_bus_failures: int = 3

    def __post_init__(self) -> None:
        for key in (
            "max_step_deg",
            "max_step_change_deg",
            "gripper_max_step_pct",
            "gripper_max_step_change_pct",
            "max_first_step_deg",
            "stall_timeout_s",
            "rest_speed_deg_s",
        ):
            _positive(key, getattr(self, key))
        for joint, pair in self.soft_limits.items():
            if len(pair) != 2 or not pair[0] < pair[1]:
                raise ConfigError(
                    f"control.safety.soft_limits.{joint}: expected [min, max] with min < max, got {list(pair)}"
                )
        lo_hi = self.gripper_limits_pct
        if len(lo_hi) != 2 or not 0 <= lo_hi[0] < lo_hi[1] <= 100:
            raise ConfigError(
                f"control.safety.gripper_limits_pct: expected [min, max] within 0..100, got {list(lo_hi)}"
            )
        if self.max_bus_failures < 1:
            raise ConfigError(f"control.safety.max_bus_failures: expected >= 1, got {self.max_bus_failures}")


@dataclass(frozen=True)
class RtcConfig:
    """``[control.rtc]``: real-time chunking, for a bundle exported with it (LeRobot's names).

    Each request the loop makes then carries the plan's leftover (the actions queued for the ticks from
    the one it observes at) and the inference delay in ticks (the worst of the recent measured
    latencies), and the new chunk continues the leftover. ``enabled``: absent, on when the bundle takes
    a prefix; ``false`` samples every chunk afresh. The other keys, absent, are the bundle's (its
    checkpoint's ``rtc_config``; LeRobot's defaults are 10, ``LINEAR``, 10.0).
    """

    enabled: bool | None = None
    execution_horizon: int | None = None
    prefix_attention_schedule: str | None = None
    max_guidance_weight: float | None = None

    def __post_init__(self) -> None:
        if self.execution_horizon is not None and self.execution_horizon < 1:
            raise ConfigError(f"control.rtc.execution_horizon: expected >= 1 step, got {self.execution_horizon}")
        schedule = self.prefix_attention_schedule
        if schedule is not None and schedule.upper() not in SCHEDULES:
            raise ConfigError(
                f"control.rtc.prefix_attention_schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}"
            )
        cap = self.max_guidance_weight
        if cap is not None and not (cap > 0 and math.isfinite(cap)):
            raise ConfigError(f"control.rtc.max_guidance_weight: expected a finite number > 0, got {cap}")

    def given(self) -> tuple[str, ...]:
        """The keys the config sets, ``enabled = false`` aside (it asks for nothing a bundle must have)."""
        keys = ("execution_horizon", "prefix_attention_schedule", "max_guidance_weight")
        return (("enabled",) if self.enabled else ()) + tuple(k for k in keys if getattr(self, k) is not None)


@dataclass(frozen=True)
class ControlConfig:
    """The loop that executes action chunks on the arm the daemon owns.

    ``enabled``: run the loop when an arm is configured (motion still starts only on
    ``control.start``). ``rate_hz`` 0: the bundle's control rate. ``n_action_steps`` 0: the whole
    chunk; otherwise only the first n steps of each chunk are executed. ``chunk_size_threshold``: the
    next inference starts when the queued steps fall to this fraction of ``n_action_steps``.
    ``aggregate``: how overlapping chunks combine (``latest`` wins, plain ``average``, or ACT's
    ``temporal_ensemble`` with weights ``exp(-ensemble_coeff * i)``, i = 0 for the oldest).
    ``control_cpu``/``rt_priority``: where the loop thread runs and the SCHED_FIFO priority it asks
    for (0: none). ``recorder_s``: seconds of ticks the flight recorder keeps.
    ``process``: ``own``, the one host: the loop, the serial port and the envelope run in a process of
    their own (the arm process), which the daemon's interpreter, its network I/O, inference and
    recording cannot delay (the key stays so a config naming the removed ``thread`` is refused, saying so).
    ``link_timeout_s``: the arm process holds when it hears nothing from the daemon for this long.
    ``task``: the instruction a language policy (SmolVLA) follows until ``control start --task`` (or a
    teleop station's episode task, at its hand-back) gives another. ``rtc``: real-time chunking
    (:class:`RtcConfig`).
    """

    enabled: bool = True
    rate_hz: float = 0.0
    n_action_steps: int = 0
    chunk_size_threshold: float = 0.5
    aggregate: Aggregate = "latest"
    ensemble_coeff: float = 0.01
    rt_priority: int = 50
    recorder_s: float = 20.0
    process: str = "own"
    task: str = ""
    link_timeout_s: float = 0.5
    # The built-in demo policy's camera, as `lerobot-runtime camera` publishes it by default.
    streams: tuple[StreamConfig, ...] = (StreamConfig("observation.images.front", "ipc://camera-front.sock"),)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    rtc: RtcConfig = field(default_factory=RtcConfig)

    def __post_init__(self) -> None:
        if self.rate_hz < 0 or self.rate_hz > 1000:
            raise ConfigError(f"control.rate_hz: expected 0 (the bundle's rate) or up to 1000 Hz, got {self.rate_hz}")
        if self.n_action_steps < 0:
            raise ConfigError(f"control.n_action_steps: expected 0 (whole chunk) or > 0, got {self.n_action_steps}")
        if not 0 <= self.chunk_size_threshold < 1:
            raise ConfigError(
                f"control.chunk_size_threshold: expected a fraction in [0, 1), got {self.chunk_size_threshold}"
            )
        if self.ensemble_coeff < 0:
            raise ConfigError(f"control.ensemble_coeff: expected >= 0, got {self.ensemble_coeff}")
        if self.process != "own":
            raise ConfigError(
                f"control.process: expected 'own' (the loop runs in the arm's own process; running it as a thread "
                f"of the daemon is no longer offered), got {self.process!r}"
            )
        if not 0 <= self.rt_priority <= 99:
            raise ConfigError(f"control.rt_priority: expected 0 (none) to 99, got {self.rt_priority}")
        if not 0.05 <= self.link_timeout_s <= 10:
            raise ConfigError(f"control.link_timeout_s: expected 0.05 to 10 seconds, got {self.link_timeout_s}")
        if not self.recorder_s > 0:
            raise ConfigError(f"control.recorder_s: expected > 0 seconds, got {self.recorder_s}")
        names = [s.input for s in self.streams]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"control.streams: input {dup[0]!r} has more than one stream")


def rtc_in_effect(config: ControlConfig, policy: PolicyInterface) -> bool:
    """Whether the loop's requests carry the plan's leftover; raises :class:`ConfigError` naming the key
    when ``[control.rtc]`` asks for what the bundle cannot do."""
    rtc, steps = config.rtc, policy.rtc_chunk_size
    if not steps:
        given = rtc.given()
        if given:
            raise ConfigError(
                f"control.rtc.{given[0]}: this bundle takes no previous chunk (it was not exported with real-time "
                "chunking: export --lerobot CHECKPOINT --rtc, a SmolVLA); remove the [control.rtc] keys"
            )
        return False
    if rtc.enabled is False:
        return False
    if config.aggregate != "latest":
        raise ConfigError(
            f"control.aggregate: expected 'latest' with real-time chunking (the new chunk already continues the "
            f"leftover, as LeRobot's RTC queue replaces it; blending the two plans again would pull it back), got "
            f"{config.aggregate!r}; or set control.rtc.enabled = false"
        )
    horizon = rtc.execution_horizon
    if horizon is not None and horizon > steps:
        raise ConfigError(
            f"control.rtc.execution_horizon: expected 1..{steps} (the policy's chunk size), got {horizon}"
        )
    return True


def control_rate(config: ControlConfig, bundle_rate_hz: float) -> float:
    """The loop's rate: ``control.rate_hz``, or the bundle's own when it is 0."""
    return config.rate_hz or bundle_rate_hz
