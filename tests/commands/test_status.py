"""``lerobot-runtime status``: which endpoint it asks (``--connect``, ``--config``, the installed config,
the defaults), how long it waits, what it prints, and a daemon that does not answer (exit 2)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import runtime.client
import runtime.commands.status
import runtime.config
import runtime.status
from runtime.cli import main
from runtime.protocol.errors import BusyError, ServerError
from tests.commands.parsers import handler, options


class Client:
    """A stand-in PolicyClient: records how it was made, answers hello and stats or raises ``fail``."""

    made: list[tuple[str, float]]
    fail: BaseException | None = None

    def __init__(self, endpoint: str, timeout_s: float) -> None:
        self.made.append((endpoint, timeout_s))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def hello(self) -> str:
        if self.fail is not None:
            raise self.fail
        return "info"

    def stats(self) -> str:
        return "stats"


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    seen = SimpleNamespace(configs=[], made=[])
    Client.made, Client.fail = seen.made, None
    monkeypatch.setattr(runtime.client, "PolicyClient", Client)

    def load_config(path: Any) -> str:
        seen.configs.append(path)
        return f"config of {path}"

    monkeypatch.setattr(runtime.config, "load_config", load_config)
    monkeypatch.setattr(runtime.status, "status_endpoint", lambda config: f"ipc:///run/{config}.sock")
    monkeypatch.setattr(runtime.status, "gather", lambda info, stats: {"from": [info, stats]})
    monkeypatch.setattr(runtime.status, "format_status", lambda s: f"formatted {sorted(s.items())}")
    monkeypatch.setattr(runtime.commands.status, "DEFAULT_CONFIG", "/nonexistent/lerobot-runtime/config.toml")
    return seen


def test_the_options() -> None:
    assert options("status") == [
        (
            "--config",
            None,
            None,
            None,
            False,
            "FILE",
            "the daemon's config, to find its endpoint (default: /etc/lerobot-runtime/config.toml if present, "
            "else the defaults)",
        ),
        (
            "--connect",
            None,
            None,
            None,
            False,
            "ENDPOINT",
            "the daemon's endpoint, instead of the config's (e.g. ipc:///run/lerobot-runtime/policy.sock)",
        ),
        ("--timeout-s", 3.0, float, None, False, None, "how long to wait for the daemon (default 3)"),
        ("--json", False, None, None, False, None, "print JSON"),
    ]
    assert runtime.commands.status.DEFAULT_CONFIG == "/etc/lerobot-runtime/config.toml"
    assert handler("status") is runtime.commands.status._status


def test_connect_is_asked_as_given_and_no_config_is_read(
    daemon: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--connect", "tcp://127.0.0.1:5555", "--timeout-s", "0.5"]) == 0
    assert daemon.made == [("tcp://127.0.0.1:5555", 0.5)]
    assert daemon.configs == []
    assert capsys.readouterr().out == (
        "formatted [('endpoint', 'tcp://127.0.0.1:5555'), ('from', ['info', 'stats'])]\n"
    )


def test_the_endpoint_comes_from_the_config_given_else_the_installed_one_else_the_defaults(
    daemon: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--config", "my.toml"]) == 0
    assert main(["status"]) == 0  # no installed config: the defaults
    installed = tmp_path / "config.toml"
    installed.write_text("")
    monkeypatch.setattr(runtime.commands.status, "DEFAULT_CONFIG", str(installed))
    assert main(["status"]) == 0
    assert main(["status", "--config", "my.toml"]) == 0
    assert daemon.configs == ["my.toml", None, str(installed), "my.toml"]
    assert daemon.made == [
        ("ipc:///run/config of my.toml.sock", 3.0),
        ("ipc:///run/config of None.sock", 3.0),
        (f"ipc:///run/config of {installed}.sock", 3.0),
        ("ipc:///run/config of my.toml.sock", 3.0),
    ]
    capsys.readouterr()
    monkeypatch.setattr(runtime.commands.status, "DEFAULT_CONFIG", str(tmp_path))  # a folder is not a config
    assert main(["status"]) == 0
    assert daemon.configs[-1] is None


def test_json_prints_the_gathered_status_with_its_endpoint(
    daemon: SimpleNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--connect", "ipc:///x.sock", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {"from": ["info", "stats"], "endpoint": "ipc:///x.sock"}
    assert out == '{\n  "from": [\n    "info",\n    "stats"\n  ],\n  "endpoint": "ipc:///x.sock"\n}\n'


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (TimeoutError("no reply in 3 s"), "no reply in 3 s"),
        (BusyError("queue full"), "[busy] queue full"),
        (ServerError("refused"), "[error] refused"),
        (ConnectionRefusedError("refused by the OS"), "refused by the OS"),
    ],
)
def test_a_daemon_that_does_not_answer_is_exit_2_saying_where_and_what_to_check(
    error: BaseException,
    text: str,
    daemon: SimpleNamespace,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    Client.fail = error
    assert main(["status", "--connect", "ipc:///x.sock"]) == 2
    assert capsys.readouterr().out == ""
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING] == [
        (
            "runtime.commands.status",
            logging.ERROR,
            f"no daemon answers at ipc:///x.sock ({text}): is it running (systemctl status lerobot-runtime), "
            "and may this user connect (members of the lerobot group may)?",
        )
    ]
