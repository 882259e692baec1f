"""The daemon's own config: ``[daemon]``'s defaults and refusals, the state directory, and the paths a
config file names, resolved against the file (or the shipped data when the file leaves them alone)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from drivers.config import ArmConfig
from runtime.config import DaemonConfig, DaemonSettings, load_config
from runtime.control.config import ControlConfig
from runtime.engine.config import EngineConfig
from runtime.errors import ConfigError
from runtime.metrics import MetricsConfig
from runtime.recording.config import RecordingConfig
from runtime.server.config import ServerConfig
from runtime.teleop.config import TeleopConfig

CHECKOUT = Path(__file__).resolve().parents[1]


def test_daemon_settings_defaults() -> None:
    assert dataclasses.asdict(DaemonSettings()) == {
        "tick_s": 0.1,
        "graceful_timeout_s": 5.0,
        "stats_log_interval_s": 60.0,
        "arm_poll_s": 1.0,
        "state_dir": "",
        "inference_stall_s": 5.0,
        "arm_wait_s": 120.0,
    }


def test_a_config_without_tables_is_every_sections_default() -> None:
    config = DaemonConfig()
    assert config.engine == EngineConfig()
    assert config.server == ServerConfig()
    assert config.arm == ArmConfig()
    assert config.control == ControlConfig()
    assert config.teleop == TeleopConfig()
    assert config.recording == RecordingConfig()
    assert config.daemon == DaemonSettings()
    assert config.metrics == MetricsConfig()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("tick_s", 0.0, "daemon.tick_s: expected a period in (0, 5] seconds, got 0.0"),
        ("tick_s", -0.1, "daemon.tick_s: expected a period in (0, 5] seconds, got -0.1"),
        ("tick_s", 5.001, "daemon.tick_s: expected a period in (0, 5] seconds, got 5.001"),
        ("graceful_timeout_s", -0.001, "daemon.graceful_timeout_s: expected >= 0, got -0.001"),
        ("arm_poll_s", 0.0, "daemon.arm_poll_s: expected a period > 0 seconds, got 0.0"),
        ("arm_poll_s", float("nan"), "daemon.arm_poll_s: expected a period > 0 seconds, got nan"),
        ("inference_stall_s", 0.0, "daemon.inference_stall_s: expected seconds > 0, got 0.0"),
        ("inference_stall_s", float("nan"), "daemon.inference_stall_s: expected seconds > 0, got nan"),
        ("arm_wait_s", -0.001, "daemon.arm_wait_s: expected seconds >= 0, got -0.001"),
        ("stats_log_interval_s", -0.001, "daemon.stats_log_interval_s: expected >= 0, got -0.001"),
    ],
)
def test_each_daemon_refusal_at_its_bound(key: str, value: float, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        DaemonSettings(**{key: value})  # type: ignore[arg-type]
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tick_s", 5.0),
        ("tick_s", 1e-6),
        ("graceful_timeout_s", 0.0),
        ("arm_poll_s", 1e-6),
        ("inference_stall_s", 1e-6),
        ("arm_wait_s", 0.0),
        ("stats_log_interval_s", 0.0),
    ],
)
def test_each_daemon_bound_itself_is_accepted(key: str, value: float) -> None:
    assert getattr(DaemonSettings(**{key: value}), key) == value  # type: ignore[arg-type]


def test_the_daemon_table_is_read_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[daemon]\ntick_s = 0.25\narm_wait_s = 0\n")
    settings = load_config(path).daemon
    assert settings == DaemonSettings(tick_s=0.25, arm_wait_s=0.0)


class TestStatePath:
    @pytest.fixture(autouse=True)
    def _no_state_env(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.delenv("STATE_DIRECTORY", raising=False)
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))

    def test_state_dir_wins_over_systemd_and_is_expanded(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/lerobot-runtime")
        monkeypatch.setenv("XDG_STATE_HOME", "/xdg")
        assert DaemonSettings(state_dir="/srv/flights").state_path() == Path("/srv/flights")
        assert DaemonSettings(state_dir="~/flights").state_path() == tmp_path / "home" / "flights"

    def test_systemds_first_state_directory(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/a:/var/lib/b")
        monkeypatch.setenv("XDG_STATE_HOME", "/xdg")
        assert DaemonSettings().state_path() == Path("/var/lib/a")

    def test_xdg_state_home_then_the_home_directory(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.setenv("STATE_DIRECTORY", "")
        monkeypatch.setenv("XDG_STATE_HOME", "/xdg")
        assert DaemonSettings().state_path() == Path("/xdg/lerobot-runtime")
        monkeypatch.setenv("XDG_STATE_HOME", "")
        assert DaemonSettings().state_path() == tmp_path / "home" / ".local" / "state" / "lerobot-runtime"
        monkeypatch.delenv("XDG_STATE_HOME")
        assert DaemonSettings().state_path() == tmp_path / "home" / ".local" / "state" / "lerobot-runtime"


def test_built_in_defaults_take_their_files_from_the_shipped_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEROBOT_RUNTIME_DATA", raising=False)
    config = load_config(None)
    assert config.arm.calibration == str(CHECKOUT / "configs" / "calibration" / "so101_sim.toml")
    # empty paths stay empty (the demo bundle, no leader, recording off, no CURVE)
    assert config.engine.bundle == ""
    assert config.teleop.leader_calibration == ""
    assert config.recording.dataset_dir == ""
    assert config.server.curve.server_secret_key == "" and config.server.curve.authorized_keys_dir == ""
    assert dataclasses.replace(config, arm=ArmConfig()) == DaemonConfig()


def test_built_in_defaults_follow_the_data_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LEROBOT_RUNTIME_DATA", str(tmp_path))
    assert load_config(None).arm.calibration == str(tmp_path / "configs" / "calibration" / "so101_sim.toml")


def test_relative_paths_in_a_file_are_relative_to_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "etc"
    folder.mkdir()
    path = folder / "daemon.toml"
    path.write_text(
        """
[engine]
bundle = "bundles/pick"
[server.curve]
server_secret_key = "keys/server.key_secret"
authorized_keys_dir = "keys/clients"
[arm]
calibration = "cal/arm.json"
[teleop]
leader_calibration = "cal/leader.toml"
[recording]
dataset_dir = "data/set"
[policy]
endpoint = "tcp://10.0.0.2:5555"
server_public_key = "keys/server.key"
client_secret_key = "keys/robot.key_secret"
"""
    )
    config = load_config(path)
    assert config.engine.bundle == str(folder / "bundles" / "pick")
    assert config.policy.endpoint == "tcp://10.0.0.2:5555"
    assert config.policy.server_public_key == str(folder / "keys" / "server.key")
    assert config.policy.client_secret_key == str(folder / "keys" / "robot.key_secret")
    assert config.server.curve.server_secret_key == str(folder / "keys" / "server.key_secret")
    assert config.server.curve.authorized_keys_dir == str(folder / "keys" / "clients")
    assert config.arm.calibration == str(folder / "cal" / "arm.json")
    assert config.teleop.leader_calibration == str(folder / "cal" / "leader.toml")
    assert config.recording.dataset_dir == str(folder / "data" / "set")
    # and nothing else moved
    assert config.server.endpoints == ServerConfig().endpoints
    assert config.arm.kind == ArmConfig().kind
    assert config.recording.buffer_frames == RecordingConfig().buffer_frames


def test_a_relative_file_path_is_taken_from_where_the_daemon_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "c.toml").write_text('[engine]\nbundle = "b"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config("c.toml").engine.bundle == str(tmp_path / "b")


def test_absolute_and_home_paths_in_a_file_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        """
[engine]
bundle = "/opt/bundles/pick"
[server.curve]
server_secret_key = "~/keys/server.key_secret"
authorized_keys_dir = "/etc/keys"
[arm]
calibration = "~/cal/arm.json"
[teleop]
leader_calibration = "/etc/leader.toml"
[recording]
dataset_dir = "~/data"
"""
    )
    config = load_config(path)
    assert config.engine.bundle == "/opt/bundles/pick"
    assert config.server.curve.server_secret_key == "~/keys/server.key_secret"
    assert config.server.curve.authorized_keys_dir == "/etc/keys"
    assert config.arm.calibration == "~/cal/arm.json"
    assert config.teleop.leader_calibration == "/etc/leader.toml"
    assert config.recording.dataset_dir == "~/data"


@pytest.mark.parametrize("arm_table", ["", "[arm]\nkind = 'sim'\n"], ids=["no arm table", "arm table without it"])
def test_a_calibration_the_file_leaves_alone_is_the_shipped_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arm_table: str
) -> None:
    monkeypatch.delenv("LEROBOT_RUNTIME_DATA", raising=False)
    path = tmp_path / "c.toml"
    path.write_text(arm_table + '[recording]\ndataset_dir = "data"\n')
    config = load_config(path)
    assert config.arm.calibration == str(CHECKOUT / "configs" / "calibration" / "so101_sim.toml")
    # the file's own relative paths still follow the file
    assert config.recording.dataset_dir == str(tmp_path / "data")


def test_empty_paths_in_a_file_stay_empty(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[engine]\nbundle = ""\n[arm]\nkind = "none"\ncalibration = ""\n')
    config = load_config(path)
    assert config.engine.bundle == ""
    assert config.arm.calibration == ""
    assert config.teleop.leader_calibration == ""
    assert config.recording.dataset_dir == ""


def test_an_unknown_table_is_refused_naming_it_and_every_table_there_is(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[engines]\nbundle = 'x'\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        ": unknown key(s) engines; expected some of arm, control, daemon, engine, metrics, policy, recording, "
        "server, teleop"
    )
