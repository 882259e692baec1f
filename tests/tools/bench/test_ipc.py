"""``python -m tools.bench.ipc``: its options, the smallest run it takes, and what it prints."""

from __future__ import annotations

import pytest

import tools.bench.ipc
from tests.commands.parsers import options
from tools.bench.ipc import build_parser, main


def test_the_options() -> None:
    assert options(root=build_parser()) == [
        ("--messages", 2000, int, None, False, None, "messages per transport and size (default 2000)"),
        ("--json", False, None, None, False, None, "print the result as JSON"),
    ]


def test_it_runs_the_messages_asked_from_10_on_and_prints_a_table_or_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs: list[int] = []
    monkeypatch.setattr(tools.bench.ipc, "run_ipc_bench", lambda n: runs.append(n) or {"seqpacket_us": 12})
    monkeypatch.setattr(tools.bench.ipc, "format_table", lambda result: f"table {result}")
    assert main([]) == 0
    assert main(["--messages", "10", "--json"]) == 0
    assert runs == [2000, 10]
    assert capsys.readouterr().out == "table {'seqpacket_us': 12}\n{\n  \"seqpacket_us\": 12\n}\n"


def test_fewer_than_10_messages_are_refused_saying_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tools.bench.ipc, "run_ipc_bench", lambda n: pytest.fail("not to be run"))
    with pytest.raises(SystemExit) as exit_:
        main(["--messages", "9"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "python -m tools.bench.ipc: error: --messages: expected at least 10, got 9"
    )


def test_the_bench_runs_and_reports_every_transport_for_both_messages() -> None:
    r = tools.bench.ipc.run_ipc_bench(10)
    assert r["messages"] == 10 and r["bytes"]["tick"] > 0 and r["bytes"]["chunk"] > r["bytes"]["tick"]
    for label in ("tick", "chunk"):
        assert set(r[label]) == {"seqpacket", "zmq", "shm"}
        assert all(m["round_trip_us"]["p50"] > 0 for m in r[label].values())
    assert tools.bench.ipc.format_table(r).splitlines()[1].startswith("message")
