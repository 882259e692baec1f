"""The daemon's TOML configuration: ``[engine]``, ``[policy]``, ``[server]`` (with ``[server.curve]``),
``[arm]``, ``[control]``, ``[teleop]``, ``[recording]``, ``[daemon]`` and ``[metrics]``.

``configs/default.toml`` spells out every key with its default; no file means those defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from drivers.config import ArmConfig
from drivers.configtools import from_mapping, load_toml
from runtime.control.config import ControlConfig
from runtime.engine.config import EngineConfig
from runtime.errors import ConfigError
from runtime.metrics import MetricsConfig
from runtime.recording.config import RecordingConfig
from runtime.remote.config import RemotePolicyConfig
from runtime.server.config import ServerConfig
from runtime.teleop.config import TeleopConfig


@dataclass(frozen=True)
class DaemonSettings:
    """``tick_s``: main loop period (watchdog, stats log); ``graceful_timeout_s``: how long queued
    infers may finish at shutdown; ``stats_log_interval_s``: one stats log line this often (0: never).
    ``inference_stall_s``: one inference (or the idle worker) may go this long without progress
    before the systemd watchdog ping is withheld. ``arm_wait_s``: how long start-up waits for an
    absent or silent arm (a late USB adapter, arm power) before giving up; 0: do not wait.
    """

    tick_s: float = 0.1
    graceful_timeout_s: float = 5.0
    stats_log_interval_s: float = 60.0
    arm_poll_s: float = 1.0
    state_dir: str = ""
    inference_stall_s: float = 5.0
    arm_wait_s: float = 120.0

    def state_path(self) -> Path:
        """Where flight recordings go: ``state_dir``, else systemd's $STATE_DIRECTORY, else ~/.local/state."""
        import os

        if self.state_dir:
            return Path(self.state_dir).expanduser()
        if state := os.environ.get("STATE_DIRECTORY"):
            return Path(state.split(":")[0])
        base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        return base / "lerobot-runtime"

    def __post_init__(self) -> None:
        if not 0 < self.tick_s <= 5:
            raise ConfigError(f"daemon.tick_s: expected a period in (0, 5] seconds, got {self.tick_s}")
        if self.graceful_timeout_s < 0:
            raise ConfigError(f"daemon.graceful_timeout_s: expected >= 0, got {self.graceful_timeout_s}")
        if not self.arm_poll_s > 0:
            raise ConfigError(f"daemon.arm_poll_s: expected a period > 0 seconds, got {self.arm_poll_s}")
        if not self.inference_stall_s > 0:
            raise ConfigError(f"daemon.inference_stall_s: expected seconds > 0, got {self.inference_stall_s}")
        if self.arm_wait_s < 0:
            raise ConfigError(f"daemon.arm_wait_s: expected seconds >= 0, got {self.arm_wait_s}")
        if self.stats_log_interval_s < 0:
            raise ConfigError(f"daemon.stats_log_interval_s: expected >= 0, got {self.stats_log_interval_s}")


@dataclass(frozen=True)
class DaemonConfig:
    engine: EngineConfig = field(default_factory=EngineConfig)
    policy: RemotePolicyConfig = field(default_factory=RemotePolicyConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    arm: ArmConfig = field(default_factory=ArmConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    teleop: TeleopConfig = field(default_factory=TeleopConfig)
    recording: RecordingConfig = field(default_factory=RecordingConfig)
    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)


def load_config(path: str | Path | None = None) -> DaemonConfig:
    """Parse a daemon config file; None gives the built-in defaults (the demo bundle)."""
    if path is None:
        # the built-in defaults name files that ship with the project (the sim arm's calibration)
        from runtime.paths import data_root

        return _relative_to(DaemonConfig(), data_root())
    data = load_toml(path)
    config = from_mapping(DaemonConfig, data, "")
    # Relative paths in the file are relative to the file, not to wherever the daemon was started;
    # a default the file leaves alone stays relative to the shipped data.
    from runtime.paths import data_root

    arm_table = data.get("arm")
    own_calibration = isinstance(arm_table, dict) and "calibration" in arm_table
    base = Path(path).resolve().parent
    return _relative_to(config, base, calibration_base=base if own_calibration else data_root())


def _relative_to(config: DaemonConfig, base: Path, calibration_base: Path | None = None) -> DaemonConfig:
    from dataclasses import replace

    cal_base = calibration_base if calibration_base is not None else base

    def fix(p: str) -> str:
        return str(base / p) if p and not Path(p).expanduser().is_absolute() else p

    curve = config.server.curve
    if curve.enabled:
        curve = replace(
            curve,
            server_secret_key=fix(curve.server_secret_key),
            authorized_keys_dir=fix(curve.authorized_keys_dir),
        )
    engine = replace(config.engine, bundle=fix(config.engine.bundle)) if config.engine.bundle else config.engine
    calibration = config.arm.calibration
    if calibration and not Path(calibration).expanduser().is_absolute():
        calibration = str(cal_base / calibration)
    arm = replace(config.arm, calibration=calibration)
    teleop = replace(config.teleop, leader_calibration=fix(config.teleop.leader_calibration))
    recording = replace(config.recording, dataset_dir=fix(config.recording.dataset_dir))
    policy = replace(
        config.policy,
        server_public_key=fix(config.policy.server_public_key),
        client_secret_key=fix(config.policy.client_secret_key),
    )
    return replace(
        config,
        engine=engine,
        policy=policy,
        server=replace(config.server, curve=curve),
        arm=arm,
        teleop=teleop,
        recording=recording,
    )
