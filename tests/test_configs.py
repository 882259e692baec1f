"""Every config file shipped in configs/ parses and validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import load_config
from runtime.errors import ConfigError

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_loads(path: Path) -> None:
    config = load_config(path)
    assert config.server.endpoints
    assert config.arm.kind in ("sim", "feetech", "dynamixel", "none")


def test_default_calibration_file_exists() -> None:
    assert Path(load_config(None).arm.calibration).is_file()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[engine]\nengine = 'tensorrt'",
            "engine.engine: expected one of 'auto', 'openvino', 'executorch', got 'tensorrt'",
        ),
        ("[engine]\nthreads = '4'", "engine.threads: expected an integer, got str '4'"),
        ("[engine]\ndevices = ['TPU']", "engine.devices: expected CPU, GPU or NPU, got 'TPU'"),
        ("[engines]\nbundle = 'x'", "unknown key(s) engines"),
        ("[server]\nqueue_depth = 0", "server.queue_depth: expected >= 1, got 0"),
        ("[arm]\nkind = 'feetech'", "port is required for kind = 'feetech'"),
        ("[daemon]\ntick_s = -1", "daemon.tick_s: expected a period in (0, 5] seconds"),
        ("[control]\naggregate = 'median'", "control.aggregate: expected one of 'latest', 'average'"),
        ("[control.safety]\nmax_step_deg = 0", "control.safety.max_step_deg: expected a finite number > 0"),
        (
            "[control.safety]\nsoft_limits = { shoulder_pan = [10.0, -10.0] }",
            "control.safety.soft_limits.shoulder_pan: expected [min, max] with min < max, got [10.0, -10.0]",
        ),
        ("[control.safety]\nstall_action = 'panic'", "control.safety.stall_action: expected one of 'hold'"),
        ("[[control.streams]]\ninput = 'x'\nendpoint = 'udp://x'", "expected ipc://PATH or tcp://HOST:PORT"),
        ("[engine\n", "is not valid TOML"),
    ],
)
def test_bad_config_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value)


def test_default_toml_is_the_built_in_default() -> None:
    from dataclasses import replace

    shipped = load_config(Path(__file__).resolve().parents[1] / "configs" / "default.toml")
    built_in = load_config(None)
    # paths are resolved against different folders; everything else must be identical
    assert replace(shipped.control) == built_in.control
    assert shipped.teleop == built_in.teleop and shipped.recording == built_in.recording
    assert shipped.daemon == built_in.daemon
