"""``lerobot-runtime bundle install``: what the installer is handed, what it prints, and ``--reload``
finding the daemon by its endpoint's lock (SIGHUP) or saying it found none (exit 2)."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import runtime.commands.bundle
import runtime.config
import runtime.engine.install
import runtime.server.instance
from runtime.cli import main
from runtime.commands.bundle import daemon_pid
from runtime.engine.config import EngineConfig
from runtime.engine.install import Installed
from tests.commands.parsers import actions, defaults, options


@pytest.fixture
def installs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []

    def install_bundle(src: str, bundles_dir: str, *, link: str, engine: EngineConfig) -> Installed:
        calls.append((src, bundles_dir, link, engine))
        return Installed(Path("/b/act-2"), Path("/b/current"), Path("/b/act-1"), "ok (max abs error 1e-06)")

    monkeypatch.setattr(runtime.engine.install, "install_bundle", install_bundle)
    return calls


def test_the_options() -> None:
    assert actions("bundle") == {
        "install": "verify a bundle, run its parity gate and switch DIR/current to it atomically"
    }
    assert options("bundle", "install") == [
        ("src", None, None, None, True, "SRC", "bundle directory to install"),
        (
            "--dir",
            "/var/lib/lerobot-runtime/bundles",
            None,
            None,
            False,
            None,
            "bundle directory (default: /var/lib/lerobot-runtime/bundles)",
        ),
        ("--link", "current", None, None, False, None, "symlink to switch (default: current)"),
        (
            "--config",
            None,
            None,
            None,
            False,
            "FILE",
            "daemon config: its [engine] settings run the parity gate, its endpoints find the daemon",
        ),
        ("--reload", False, None, None, False, None, "then ask the running daemon to reload (SIGHUP)"),
    ]
    assert defaults("bundle", "install", "x") == {
        "command": "bundle",
        "bundle_command": "install",
        "src": "x",
        "dir": "/var/lib/lerobot-runtime/bundles",
        "link": "current",
        "config": None,
        "reload": False,
    }


def test_install_hands_over_the_default_engine_and_says_the_daemon_keeps_its_program(
    installs: list[tuple[Any, ...]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bundle", "install", "new", "--dir", "/b", "--link", "live"]) == 0
    assert installs == [("new", "/b", "live", EngineConfig())]
    assert capsys.readouterr().out == (
        "installed /b/act-2\n/b/current -> act-2 (was /b/act-1)\n"
        "parity: ok (max abs error 1e-06)\n"
        "the running daemon keeps its program until it reloads: systemctl reload lerobot-runtime\n"
    )


def test_install_takes_the_configs_engine_and_says_when_nothing_was_installed_before(
    installs: list[tuple[Any, ...]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "daemon.toml"
    config.write_text('[engine]\nprecision = "bf16"\n')
    first = Installed(Path("/b/act-1"), Path("/b/current"), None, "ok")
    monkeypatch.setattr(runtime.engine.install, "install_bundle", lambda *a, **k: installs.append(k) or first)
    assert main(["bundle", "install", "new", "--config", str(config)]) == 0
    assert installs[0]["engine"].precision == "bf16"
    assert installs[0]["link"] == "current"
    assert capsys.readouterr().out.splitlines()[1] == "/b/current -> act-1 (was nothing)"


def test_reload_signals_the_daemon_holding_the_endpoint(
    installs: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(runtime.commands.bundle, "daemon_pid", lambda config: seen.append(config) or 4242)
    monkeypatch.setattr(runtime.commands.bundle.os, "kill", lambda pid, sig: seen.append((pid, sig)))
    assert main(["bundle", "install", "new", "--reload"]) == 0
    assert seen == [runtime.config.DaemonConfig(), (4242, signal.SIGHUP)]
    assert capsys.readouterr().out.splitlines()[-1] == (
        "asked the daemon (PID 4242) to reload; it switches once the new program passes its parity gate"
    )


def test_reload_without_a_daemon_is_exit_2_naming_the_config(
    installs: list[tuple[Any, ...]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(runtime.commands.bundle, "daemon_pid", lambda config: None)
    monkeypatch.setattr(runtime.commands.bundle.os, "kill", lambda pid, sig: pytest.fail("nobody to signal"))
    config = tmp_path / "daemon.toml"
    config.write_text("")
    assert main(["bundle", "install", "new", "--reload"]) == 2
    assert main(["bundle", "install", "new", "--reload", "--config", str(config)]) == 2
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING] == [
        (
            "runtime.commands.bundle",
            logging.ERROR,
            "no running daemon found for the endpoints of the defaults; reload it by hand",
        ),
        (
            "runtime.commands.bundle",
            logging.ERROR,
            f"no running daemon found for the endpoints of {config}; reload it by hand",
        ),
    ]
    assert "asked the daemon" not in capsys.readouterr().out


def test_the_daemon_is_the_holder_of_the_first_locked_ipc_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Path] = []
    holders = {"/run/a.sock.lock": None, "/run/b.sock.lock": 77, "/run/c.sock.lock": 88}

    def lock_holder(path: Path) -> int | None:
        asked.append(path)
        return holders[str(path)]

    monkeypatch.setattr(runtime.server.instance, "lock_holder", lock_holder)
    endpoints = (
        "tcp://127.0.0.1:5555",
        "ipc://@abstract",
        "ipc:///run/a.sock",
        "ipc:///run/b.sock",
        "ipc:///run/c.sock",
    )
    assert daemon_pid(SimpleNamespace(server=SimpleNamespace(endpoints=endpoints))) == 77  # type: ignore[arg-type]
    assert asked == [Path("/run/a.sock.lock"), Path("/run/b.sock.lock")]
    asked.clear()
    assert daemon_pid(SimpleNamespace(server=SimpleNamespace(endpoints=endpoints[:3]))) is None  # type: ignore[arg-type]
    assert asked == [Path("/run/a.sock.lock")]


def test_a_relative_ipc_endpoint_is_looked_for_in_the_runtime_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path))
    asked: list[Path] = []
    monkeypatch.setattr(runtime.server.instance, "lock_holder", lambda path: asked.append(path))
    assert daemon_pid(SimpleNamespace(server=SimpleNamespace(endpoints=("ipc://policy.sock",)))) is None  # type: ignore[arg-type]
    assert asked == [tmp_path / "policy.sock.lock"]


def test_an_action_and_a_source_are_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bundle"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "usage: lerobot-runtime bundle [-h] ACTION ...\n"
        "lerobot-runtime bundle: error: the following arguments are required: ACTION\n"
    )
    with pytest.raises(SystemExit) as exit_:
        main(["bundle", "install"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith("error: the following arguments are required: SRC\n")
