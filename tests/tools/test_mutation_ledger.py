"""The mutation ledger (:mod:`tools.mutation_ledger`): what a run records, which run becomes the score,
the survivors left without a verdict, and the documents rendered from the records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tools import mutation_ledger as ml
from tools.mutation import Scope

SCOPES = {
    "one": Scope(("runtime/one.py",), ("tests/test_one.py",)),
    "two": Scope(("runtime/two.py",), ("tests/test_two.py",), ("runtime.two.x_f*",)),
}
STATS: dict[str, object] = {
    "killed": 90,
    "timeout": 2,
    "survived": 6,
    "no_tests": 2,
    "suspicious": 0,
    "segfault": 0,
    "skipped": 0,
    "total": 100,
    "seconds": 42,
    "survivors": ["runtime.one.x_f__mutmut_3", "runtime.one.x_g__mutmut_1"],
}


def _record(ledger: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return ml.record_run(ledger, "one", STATS, when="2026-12-07", revision="abc1234", machine="a CPU", **kw)


def test_a_run_of_the_working_tree_on_the_scopes_tests_is_recorded_and_becomes_its_score() -> None:
    ledger: dict[str, Any] = {}
    run = _record(ledger)
    assert run == {
        "when": "2026-12-07",
        "revision": "abc1234",
        "machine": "a CPU",
        "killed": 90,
        "timeout": 2,
        "survived": 6,
        "no_tests": 2,
        "suspicious": 0,
        "segfault": 0,
        "skipped": 0,
        "total": 100,
        "score": 92.0,  # (90 + 2) / (90 + 2 + 6 + 2)
        "seconds": 42,
        "survivors": ["runtime.one.x_f__mutmut_3", "runtime.one.x_g__mutmut_1"],
    }
    assert ledger["scopes"]["one"]["runs"] == [run]
    assert ledger["scopes"]["one"]["score"] == {"percent": 92.0, "mutants": 100, "complete": True, "run": "2026-12-07"}


def test_a_run_of_another_revision_or_other_tests_or_that_ran_nothing_is_recorded_beside_the_score() -> None:
    ledger: dict[str, Any] = {"scopes": {"one": {"score": {"percent": 50.0, "mutants": 10}}}}
    assert _record(ledger, rev="HEAD~3")["rev"] == "HEAD~3"
    assert _record(ledger, tests=["tests/test_x.py"])["tests"] == ["tests/test_x.py"]
    nothing = ml.record_run(ledger, "one", {"not_run": "no mutant"}, when="d", revision="r", machine="m")
    assert nothing == {"when": "d", "revision": "r", "machine": "m", "not_run": "no mutant"}
    assert ledger["scopes"]["one"]["score"] == {"percent": 50.0, "mutants": 10}
    assert len(ledger["scopes"]["one"]["runs"]) == 3


def test_the_survivors_without_a_verdict_are_those_of_the_last_scored_run_no_verdict_names() -> None:
    entry: dict[str, Any] = {
        "survivors": [{"verdict": "equivalent", "text": "a default", "mutants": ["runtime.one.x_g__mutmut_1"]}],
        "runs": [
            {"survivors": ["runtime.one.x_old__mutmut_1"]},
            {"survivors": ["runtime.one.x_f__mutmut_3", "runtime.one.x_g__mutmut_1"]},
            {"survivors": ["runtime.one.x_h__mutmut_9"], "tests": ["t"]},  # not the scope's own tests
            {"not_run": "no mutant"},
        ],
    }
    assert ml.unexamined(entry) == ["runtime.one.x_f__mutmut_3"]
    assert ml.unexamined({}) == []


def test_the_ledger_renders_every_scope_with_its_score_verdicts_and_runs() -> None:
    ledger: dict[str, Any] = {
        "scopes": {
            "one": {
                "modules": "`runtime/one.py`",
                "measured": "**92.0 %** by hand",
                "survivors": [
                    {"verdict": "not yet examined", "text": "two in `f`"},
                    {"verdict": "equivalent", "text": "a default", "mutants": ["runtime.one.x_g__mutmut_1"]},
                ],
            },
            "gone": {"score": {"percent": 83.9, "mutants": 192, "of_scope": 569, "complete": False}},
        },
        "notes": [{"title": "Bugs found", "text": "one\ntwo"}],
    }
    _record(ledger)
    text = ml.render_ledger(ledger, SCOPES)
    assert text.startswith("# Mutation ledger\n")
    assert "| [one](#one) | 92.0 % | 100 |\n| [two](#two) | not measured | - |\n" in text
    assert "| [gone](#gone) | partial: 83.9 % | 192 of 569 |\n" in text
    one = text[text.index("## one") : text.index("## two")]
    assert one.splitlines()[2:7] == [
        "**92.0 %** of 100 mutants",
        "",
        "- mutates now: `runtime/one.py`",
        "- runs now: `tests/test_one.py`",
        "- mutated when measured: `runtime/one.py`",
    ]
    # verdicts in their order: equivalent before not yet examined
    equivalent = "Equivalent survivors (no test can tell them apart):\n\n- a default (`runtime.one.x_g__mutmut_1`)\n"
    assert one.index(equivalent) < one.index("Survivors not yet examined:\n\n- two in `f`\n")
    assert "| 2026-12-07 | abc1234 | a CPU | 90 | 2 | 6 | 2 | 92.0 % | 42 |" in one
    assert one.rstrip().endswith("Survivors of the last run without a verdict (1):\n\n- `runtime.one.x_f__mutmut_3`")
    two = text[text.index("## two") : text.index("## gone")]
    assert "- mutates now: `runtime/two.py` (only `runtime.two.x_f*`)" in two
    assert "- no longer a scope of `tools/mutation.py`" in text[text.index("## gone") :]
    assert text.endswith("### Bugs found\n\none\ntwo\n")


def test_the_score_table_sums_the_scores_and_names_those_below_90() -> None:
    ledger: dict[str, Any] = {
        "scopes": {
            "one": {"score": {"percent": 100.0, "mutants": 100}},
            "two": {"score": {"percent": 80.0, "mutants": 300, "of_scope": 500, "complete": False}},
        }
    }
    scopes = {**SCOPES, "three": Scope(("runtime/three.py",), ("tests/test_three.py",))}
    block = ml.render_scores(ledger, scopes)
    assert block.splitlines() == [
        ml.BEGIN,
        "",
        "2 scopes scored, 400 mutants: 85.0 % of them killed (each scope's last score, weighted by its mutants). "
        "1 scopes at 100 %, 0 more at 95 % or more, 0 at 90 % to 95 %; below 90 %: `two` (partial: 80.0 %). "
        "Not run whole: `two` (300 of 500 mutants). Not measured yet: `three`.",
        "",
        "| scope | score | scope | score | scope | score |",
        "|---|---|---|---|---|---|",
        "| [one](mutation-ledger.md#one) | 100 % | [two](mutation-ledger.md#two) | partial: 80.0 % | "
        "[three](mutation-ledger.md#three) | not measured |",
        "",
        ml.END,
    ]


def test_the_documents_are_written_and_only_the_score_block_of_testing_md_is_replaced(tmp_path: Path) -> None:
    testing = tmp_path / "testing.md"
    testing.write_text(f"# Testing\n\nbefore\n\n{ml.BEGIN}\nold\n{ml.END}\n\nafter\n")
    ledger_md = tmp_path / "ledger.md"
    ledger: dict[str, Any] = {"scopes": {"one": {"score": {"percent": 100.0, "mutants": 1}}}}
    ml.write_docs(ledger, SCOPES, ledger_md, testing)
    assert ledger_md.read_text() == ml.render_ledger(ledger, SCOPES)
    assert testing.read_text() == f"# Testing\n\nbefore\n\n{ml.render_scores(ledger, SCOPES)}\n\nafter\n"
    testing.write_text("no block")
    with pytest.raises(ValueError, match="no <!-- mutation-scores"):
        ml.write_docs(ledger, SCOPES, ledger_md, testing)


def test_a_scopes_run_is_recorded_and_the_documents_rendered_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tools.mutation

    for name, path in (("LEDGER", "ledger.json"), ("LEDGER_MD", "ledger.md"), ("TESTING_MD", "testing.md")):
        monkeypatch.setattr(ml, name, tmp_path / path)
    ml.save({"scopes": {}})
    (tmp_path / "testing.md").write_text(f"{ml.BEGIN}\n{ml.END}\n")
    tools.mutation.record("parity", dict(STATS), None, None)
    run = ml.load()["scopes"]["parity"]["runs"][0]
    assert run["revision"] and run["machine"].count(", ") == 2 and run["score"] == 92.0
    assert "| [parity](#parity) | 92.0 % | 100 |" in (tmp_path / "ledger.md").read_text()
    assert "[parity](mutation-ledger.md#parity) | 92.0 %" in (tmp_path / "testing.md").read_text()
    (tmp_path / "ledger.md").write_text("stale")
    assert tools.mutation.main(["--ledger"]) == 0
    assert (tmp_path / "ledger.md").read_text().startswith("# Mutation ledger")


def test_the_ledger_and_the_scores_in_testing_md_are_written_from_the_checkouts_records() -> None:
    from tools.mutation import SCOPES as scopes

    ledger = ml.load()
    assert set(ledger["scopes"]) >= set(scopes)  # every scope has its record
    again = "run: python tools/mutation.py --ledger"
    assert ml.LEDGER_MD.read_text() == ml.render_ledger(ledger, scopes), again
    testing = ml.TESTING_MD.read_text()
    assert ml.replace_block(testing, ml.render_scores(ledger, scopes)) == testing, again
