"""What the deployment relies on: socket permissions, the cache directory, the shipped unit's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.engine.config import EngineConfig
from runtime.engine.loader import effective_cache_dir

ROOT = Path(__file__).resolve().parents[1]


def test_cache_dir_follows_systemds_cache_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CACHE_DIRECTORY", raising=False)
    assert effective_cache_dir(EngineConfig()) == ""
    monkeypatch.setenv("CACHE_DIRECTORY", "/var/cache/lerobot-runtime")
    assert effective_cache_dir(EngineConfig()) == "/var/cache/lerobot-runtime/openvino"
    assert effective_cache_dir(EngineConfig(cache_dir="/srv/c")) == "/srv/c"  # the config wins


def _unit() -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for line in (ROOT / "systemd" / "lerobot-runtime.service").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            keys.setdefault(key, []).append(value)
    return keys


def test_unit_has_no_hard_group_dependency_nor_sim_devices() -> None:
    unit = _unit()
    assert "SupplementaryGroups" not in unit  # sysusers.d creates and joins the groups instead
    assert not [d for d in unit["DeviceAllow"] if "pts" in d or "ptmx" in d]
    assert unit["RestartPreventExitStatus"] == ["65 78"]
    assert unit["UMask"] == ["0007"]
    sysusers = (ROOT / "systemd" / "sysusers.d" / "lerobot-runtime.conf").read_text()
    for group in ("dialout", "render", "video"):
        assert f"m lerobot {group}" in sysusers


def test_exit_statuses_the_unit_relies_on() -> None:
    from runtime.cli import EXIT_CONFIG, EXIT_DATAERR, exit_status
    from runtime.errors import BundleError, ConfigError, ParityError

    assert exit_status(ConfigError("x")) == EXIT_CONFIG == 78
    assert exit_status(BundleError("x")) == exit_status(ParityError("x")) == EXIT_DATAERR == 65


def test_keys_refuses_to_overwrite_without_force(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from runtime.cli import main

    out = tmp_path / "keys"
    assert main(["keys", "--out", str(out), "--name", "server"]) == 0
    secret = (out / "server.key_secret").read_bytes()
    assert main(["keys", "--out", str(out), "--name", "server"]) == 78
    assert "already exist" in caplog.text and "--force" in caplog.text
    assert (out / "server.key_secret").read_bytes() == secret  # untouched
    assert main(["keys", "--out", str(out), "--name", "server", "--force"]) == 0
    assert (out / "server.key_secret").read_bytes() != secret


def test_keys_bad_out_is_a_clear_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from runtime.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["keys", "--out", str(blocker / "keys")]) == 78
    assert f"cannot write the key pair into --out {blocker / 'keys'}" in caplog.text
    assert "Traceback" not in caplog.text


def test_third_party_import_noise_stays_out_of_default_output(demo_bundle: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "runtime", "check", str(demo_bundle), "--engine", "executorch", "--device", "CPU",
         "--accept-lower-arithmetic"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "parity ok" in done.stderr
    for noise in ("torchao", "triton", "_pytree", "Warning"):
        assert noise not in done.stderr, done.stderr
