"""The ``lerobot-runtime`` entry point: the commands it offers, the log level, and the exit status of
each way a command can end (its own status, a refusal by kind, Ctrl-C, an unexpected exception).

Handlers are replaced by stand-ins through their module (``register`` reads them when the parser is
built), so nothing here loads a bundle or opens a socket.
"""

from __future__ import annotations

import argparse
import logging

import pytest

import runtime.commands.status
from runtime.cli import EXIT_CONFIG, EXIT_DATAERR, EXIT_ERROR, EXIT_FAILURE, exit_status, main
from runtime.errors import (
    BundleError,
    BundleFileNotFoundError,
    ConfigError,
    DeviceError,
    InstanceRunningError,
    LerobotRuntimeError,
    ParityError,
)
from tests.commands.parsers import actions, defaults, options


def _failing_with(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def handler(args: argparse.Namespace) -> int:
        raise exc

    monkeypatch.setattr(runtime.commands.status, "_status", handler)


def _errors(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    return [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_exit_statuses_are_those_of_sysexits() -> None:
    assert (EXIT_FAILURE, EXIT_ERROR, EXIT_DATAERR, EXIT_CONFIG) == (1, 2, 65, 78)


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (ConfigError("x"), 78),
        (BundleError("x"), 65),
        (BundleFileNotFoundError("x"), 65),
        (ParityError("x"), 65),
        (DeviceError("x"), 2),
        (InstanceRunningError("x"), 2),
        (LerobotRuntimeError("x"), 2),
    ],
)
def test_each_kind_of_refusal_has_its_exit_status(exc: LerobotRuntimeError, status: int) -> None:
    assert exit_status(exc) == status


def test_every_command_and_benchmark_is_offered_with_what_it_does() -> None:
    assert actions() == {
        "bench": "benchmarks that print side-by-side ratios",
        "export": "export a PyTorch policy or a LeRobot checkpoint into a bundle (needs the export extra)",
        "lower": "add a program for a device from the bundle's portable .pt2",
        "quantize": "post-training INT8 of a bundle, with an accuracy gate (export extra)",
        "check": "load a bundle, prove parity, measure latency",
        "serve": "run the policy server daemon (systemd Type=notify aware)",
        "infer": "send one observation to the running daemon (a .npz, or random inputs) and print its chunk",
        "keys": "make a CURVE key pair for the server or a client",
        "control": "start/stop motion, e-stop, release, status of the daemon's arm",
        "camera": "publish camera frames (V4L2/UVC or synthetic) to the control loop",
        "replay": "summarise a flight recording and draw it to a PNG",
        "teleop": "drive the daemon's arm from a leader arm (the operator's station)",
        "bundle": "manage the bundles a daemon serves",
        "status": "ask the running daemon: policy, engine, CPUs, clients, latency, arm",
        "motors": "talk to the servo bus: scan, read, simulate",
        "dataset": "recorded datasets (LeRobot v3.0 format)",
    }
    assert actions("bench") == {
        "engine": "eager PyTorch vs each engine on the same inputs and threads",
        "serve": "served round trip vs in-process inference vs bare ZeroMQ floor",
        "canary": "cost of a canary check and the worst delay it adds to a real request",
        "soak": "the daemon's RSS, file descriptors and canary over minutes of back-to-back infers",
        "loop": "control-loop tick jitter and starvation on simulated servos while inference runs",
        "teleop": "leader move -> follower goal write latency over loopback, the station's lead fixed and measured",
        "bus": "time a sync-read + sync-write cycle of 6 servos over a pty",
        "record": "recording's cost per codec, one and two cameras, side by side",
    }
    assert options() == [
        ("--version", "==SUPPRESS==", None, None, False, None, "show program's version number and exit"),
        (
            "--log-level",
            "INFO",
            None,
            ["DEBUG", "INFO", "WARNING", "ERROR"],
            False,
            None,
            "logging threshold (default: INFO)",
        ),
    ]
    assert options("bench") == []
    assert defaults("bench", "bus") == {"command": "bench", "bench": "bus", "json": False, "cycles": 500}


def test_the_handlers_status_is_the_exit_status_and_info_the_default_level(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []

    def handler(args: argparse.Namespace) -> int:
        seen.append(args)
        return 7

    monkeypatch.setattr(runtime.commands.status, "_status", handler)
    assert main(["status"]) == 7
    assert (seen[0].command, seen[0].log_level) == ("status", "INFO")
    assert logging.getLogger().level == logging.INFO
    assert main(["--log-level", "DEBUG", "status"]) == 7
    assert logging.getLogger().level == logging.DEBUG
    assert main(["--log-level", "WARNING", "status"]) == 7
    assert logging.getLogger().level == logging.WARNING


@pytest.mark.parametrize(
    "argv",
    [
        [],  # a command is required
        ["bench"],  # and a benchmark after bench
        ["--log-level", "TRACE", "status"],
        ["--log-level", "info", "status"],
        ["nosuch"],
    ],
)
def test_a_bad_command_line_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "usage: lerobot-runtime" in capsys.readouterr().err


def test_version_prints_the_packages_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == "lerobot-runtime 0.1.0\n"


def test_the_help_names_the_program_and_what_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split()) + " "
    assert out.startswith(
        "usage: lerobot-runtime [-h] [--version] [--log-level {DEBUG,INFO,WARNING,ERROR}] COMMAND ..."
    )
    assert " On-robot inference service for LeRobot-style arms. " in out
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "usage: lerobot-runtime bench [-h] BENCH ..." in " ".join(capsys.readouterr().out.split())


def test_a_refusal_is_one_logged_line_and_its_kinds_status(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _failing_with(monkeypatch, ConfigError("engine.threads: expected\n   1..64, got 0\n"))
    assert main(["status"]) == 78
    assert _errors(caplog) == [("runtime.cli", logging.ERROR, "engine.threads: expected | 1..64, got 0")]
    caplog.clear()
    _failing_with(monkeypatch, ParityError("parity failed"))
    assert main(["status"]) == 65
    assert _errors(caplog) == [("runtime.cli", logging.ERROR, "parity failed")]


def test_ctrl_c_exits_130_without_a_word(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    _failing_with(monkeypatch, KeyboardInterrupt())
    assert main(["status"]) == 130
    assert _errors(caplog) == []


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (RuntimeError("boom\n  at the end\n"), "status failed: RuntimeError: boom | at the end"),
        (ValueError(""), "status failed: ValueError: -"),
        (
            MemoryError(),
            "status failed: MemoryError: -; the process ran out of memory or threads "
            "(check the unit's MemoryMax= and TasksMax=)",
        ),
        (
            RuntimeError("can't start new thread"),
            "status failed: RuntimeError: can't start new thread; the process ran out of memory or threads "
            "(check the unit's MemoryMax= and TasksMax=)",
        ),
        (OSError("no new thread here"), "status failed: OSError: no new thread here"),
    ],
)
def test_an_unexpected_exception_is_one_line_and_status_1(
    exc: Exception, line: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _failing_with(monkeypatch, exc)
    assert main(["status"]) == 1
    assert _errors(caplog) == [("runtime.cli", logging.ERROR, line)]
