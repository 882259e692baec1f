"""``lerobot-runtime bench ipc``: its options, the smallest run it takes, and what it prints."""

from __future__ import annotations

import pytest

import runtime.bench.ipc
from runtime.cli import main
from tests.commands.parsers import options


def test_the_options() -> None:
    assert options("bench", "ipc") == [
        ("--messages", 2000, int, None, False, None, "messages per transport and size (default 2000)"),
        ("--json", False, None, None, False, None, "print the result as JSON"),
    ]


def test_it_runs_the_messages_asked_from_10_on_and_prints_a_table_or_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs: list[int] = []
    monkeypatch.setattr(runtime.bench.ipc, "run_ipc_bench", lambda n: runs.append(n) or {"seqpacket_us": 12})
    monkeypatch.setattr(runtime.bench.ipc, "format_table", lambda result: f"table {result}")
    assert main(["bench", "ipc"]) == 0
    assert main(["bench", "ipc", "--messages", "10", "--json"]) == 0
    assert runs == [2000, 10]
    assert capsys.readouterr().out == "table {'seqpacket_us': 12}\n{\n  \"seqpacket_us\": 12\n}\n"


def test_fewer_than_10_messages_are_refused_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime.bench.ipc, "run_ipc_bench", lambda n: pytest.fail("not to be run"))
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "ipc", "--messages", "9"])
    assert exit_.value.code == "bench ipc --messages: expected at least 10, got 9"
