"""The mutation ledger: each scope's score, what was measured and when, and what its survivors are.

``docs/mutation-ledger.json`` holds the records. Each run of a scope (``tools/mutation.py``) appends
what mutmut counted and the names of the mutants that survived, and a run of the working tree on the
scope's own tests becomes the scope's score. What a survivor is (equivalent, accepted, unreachable,
not yet examined) is a verdict written by hand in the JSON, naming the mutants it covers where they
are known. From the records the tool renders ``docs/mutation-ledger.md`` (every scope: its score,
history, tests and survivors; the survivors of its last run that have no verdict yet) and the score
table in ``docs/testing.md`` between :data:`BEGIN` and :data:`END`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from tools.mutation import Scope

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "docs" / "mutation-ledger.json"
LEDGER_MD = ROOT / "docs" / "mutation-ledger.md"
TESTING_MD = ROOT / "docs" / "testing.md"
BEGIN = "<!-- mutation-scores: written by tools/mutation.py from docs/mutation-ledger.json -->"
END = "<!-- /mutation-scores -->"

COUNTS = ("killed", "timeout", "survived", "no_tests", "suspicious", "segfault", "skipped", "total")
#: the verdicts a survivor entry may carry, in the order the ledger lists them, with their headings
VERDICTS = {
    "equivalent": "Equivalent survivors (no test can tell them apart)",
    "accepted": "Accepted survivors (a difference, not worth a test: why is given)",
    "unreachable": "Unreachable by design",
    "not reachable by mutmut": "Not reachable by mutmut's method",
    "not yet examined": "Survivors not yet examined",
}

Ledger = dict[str, Any]


def load(path: Path | None = None) -> Ledger:
    ledger: Ledger = json.loads((path or LEDGER).read_text())
    return ledger


def save(ledger: Ledger, path: Path | None = None) -> None:
    (path or LEDGER).write_text(json.dumps(ledger, indent=1, ensure_ascii=False) + "\n")


def score_of(stats: Mapping[str, object]) -> tuple[float, int]:
    """(percent, mutants scored): killed and timed out over killed, timed out, survived and no tests."""
    killed = int(str(stats.get("killed", 0))) + int(str(stats.get("timeout", 0)))
    tested = killed + int(str(stats.get("survived", 0))) + int(str(stats.get("no_tests", 0)))
    return (100.0 * killed / tested if tested else 100.0), tested


def record_run(
    ledger: Ledger,
    scope: str,
    stats: Mapping[str, object],
    *,
    when: str,
    revision: str,
    machine: str,
    rev: str | None = None,
    tests: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Append one run of ``scope`` (mutmut's counts, its survivors) to the ledger and return it. A run
    of the working tree (``rev`` None) on the scope's own tests (``tests`` None) that scored mutants
    becomes the scope's score; a ``--rev`` or ``--tests`` run is recorded beside it."""
    entry = ledger.setdefault("scopes", {}).setdefault(scope, {})
    run: dict[str, Any] = {"when": when, "revision": revision, "machine": machine}
    if rev is not None:
        run["rev"] = rev
    if tests is not None:
        run["tests"] = list(tests)
    entry.setdefault("runs", []).append(run)
    if "not_run" in stats:
        run["not_run"] = str(stats["not_run"])
        return run
    run.update({k: int(str(stats[k])) for k in COUNTS if k in stats})
    percent, mutants = score_of(stats)
    run["score"] = round(percent, 1)
    run["seconds"] = stats.get("seconds")
    run["survivors"] = [str(m) for m in cast(Sequence[object], stats.get("survivors") or [])]
    if rev is None and tests is None:
        entry["score"] = {"percent": run["score"], "mutants": mutants, "complete": True, "run": when}
    return run


def unexamined(entry: Mapping[str, Any]) -> list[str]:
    """The survivors of the scope's last scored run that no verdict names.

    A verdict entry is ``{"verdict": one of VERDICTS, "text": what the mutants are and why,
    "mutants": [mutmut's names, where known]}``."""
    runs = [r for r in entry.get("runs", []) if "survivors" in r and "rev" not in r and "tests" not in r]
    if not runs:
        return []
    named = {m for s in entry.get("survivors", []) for m in s.get("mutants", [])}
    return [m for m in runs[-1]["survivors"] if m not in named]


# --- rendering -------------------------------------------------------------------------------------------


def _percent(score: Mapping[str, Any] | None) -> str:
    if not score:
        return "not measured"
    text = f"{score['percent']:.1f} %".replace("100.0 %", "100 %")
    return text if score.get("complete", True) else f"partial: {text}"


def _mutants(score: Mapping[str, Any] | None) -> str:
    if not score:
        return "-"
    if score.get("of_scope"):
        return f"{score['mutants']} of {score['of_scope']}"
    return str(score["mutants"])


def _names(scopes: Mapping[str, Scope], ledger: Ledger) -> list[str]:
    """Every scope the tool defines, in its order, then any the ledger still holds that it no longer does."""
    return [*scopes, *(n for n in ledger.get("scopes", {}) if n not in scopes)]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_ledger(ledger: Ledger, scopes: Mapping[str, Scope]) -> str:
    """``docs/mutation-ledger.md``: the score table, then every scope's record."""
    entries = ledger.get("scopes", {})
    out = [
        "# Mutation ledger",
        "",
        "Written by `tools/mutation.py` from [mutation-ledger.json](mutation-ledger.json); do not edit it by",
        "hand. A run of a scope records itself (its counts and the mutants that survived); what a survivor",
        "is, a verdict, is written in the JSON (`survivors`, naming the mutants it covers where they are",
        "known), then `python tools/mutation.py --ledger` renders this file and the score table of",
        "[testing](testing.md#mutation-testing) again. Score = killed (timeouts included) / (killed +",
        "survived + no tests).",
        "",
        "| scope | score | mutants |",
        "|---|---|---|",
    ]
    for name in _names(scopes, ledger):
        score = entries.get(name, {}).get("score")
        out.append(f"| [{name}](#{name}) | {_percent(score)} | {_mutants(score)} |")
    for name in _names(scopes, ledger):
        out += ["", f"## {name}", ""]
        out += _scope_section(name, entries.get(name, {}), scopes.get(name))
    notes = ledger.get("notes", [])
    if notes:
        out += ["", "## Across scopes"]
        for note in notes:
            out += ["", f"### {note['title']}", "", *note["text"].split("\n")]
    return "\n".join(out) + "\n"


def _scope_section(name: str, entry: Mapping[str, Any], scope: Scope | None) -> list[str]:
    out: list[str] = []
    score = entry.get("score")
    out.append(f"**{_percent(score)}**" + (f" of {_mutants(score)} mutants" if score else ""))
    out.append("")
    if scope is None:
        out.append("- no longer a scope of `tools/mutation.py`")
    else:
        only = f" (only {', '.join(f'`{f}`' for f in scope.functions)})" if scope.functions else ""
        out.append(f"- mutates now: {', '.join(f'`{m}`' for m in scope.modules)}{only}")
        out.append(f"- runs now: {', '.join(f'`{t}`' for t in scope.tests)}")
    for key, label in (
        ("modules", "mutated when measured"),
        ("machine", "measured on"),
        ("before", "before"),
        ("measured", "measured"),
        ("tests", "tests and notes"),
    ):
        if entry.get(key):
            out.append(f"- {label}: {entry[key]}")
    for remark in entry.get("remarks", []):
        out += ["", remark]
    for verdict, heading in VERDICTS.items():
        survivors = [s for s in entry.get("survivors", []) if s["verdict"] == verdict]
        if survivors:
            out += ["", f"{heading}:", ""]
        for s in survivors:
            named = f" ({', '.join(f'`{m}`' for m in s['mutants'])})" if s.get("mutants") else ""
            out.append(f"- {s['text']}{named}")
    runs = entry.get("runs", [])
    if runs:
        out += [
            "",
            "Runs recorded by the tool:",
            "",
            "| when | revision | machine | killed | timed out | survived | no tests | score | seconds |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in runs:
            what = r["revision"] + (f" (`--rev {r['rev']}`)" if "rev" in r else "")
            what += " (`--tests`)" if "tests" in r else ""
            if "not_run" in r:
                why = _cell(r["not_run"])
                out.append(f"| {r['when']} | {what} | {_cell(r['machine'])} | not run: {why} |" + " |" * 5)
                continue
            counts = " | ".join(str(r.get(k, 0)) for k in ("killed", "timeout", "survived", "no_tests"))
            out.append(f"| {r['when']} | {what} | {_cell(r['machine'])} | {counts} | {r['score']} % | {r['seconds']} |")
        left = unexamined(entry)
        if left:
            out += ["", f"Survivors of the last run without a verdict ({len(left)}):", ""]
            out += [f"- `{m}`" for m in left]
    return out


def render_scores(ledger: Ledger, scopes: Mapping[str, Scope]) -> str:
    """The block of ``docs/testing.md`` between :data:`BEGIN` and :data:`END`: the sums, then every
    scope's score three to a row."""
    entries = ledger.get("scopes", {})
    names = _names(scopes, ledger)
    scored = {n: entries[n]["score"] for n in names if entries.get(n, {}).get("score")}
    mutants = sum(s["mutants"] for s in scored.values())
    killed = sum(s["percent"] * s["mutants"] / 100 for s in scored.values())
    full = [n for n, s in scored.items() if s["percent"] >= 99.95]
    high = [n for n, s in scored.items() if 95 <= s["percent"] < 99.95]
    mid = [n for n, s in scored.items() if 90 <= s["percent"] < 95]
    low = sorted((n for n, s in scored.items() if s["percent"] < 90), key=lambda n: scored[n]["percent"])
    partial = [n for n, s in scored.items() if not s.get("complete", True)]
    missing = [n for n in names if n not in scored]

    def listed(ns: list[str]) -> str:
        return ", ".join(f"`{n}` ({_percent(scored[n])})" for n in ns)

    not_whole = ", ".join(f"`{n}` ({_mutants(scored[n])} mutants)" for n in partial)

    lines = [
        BEGIN,
        "",
        f"{len(scored)} scopes scored, {mutants} mutants: {100 * killed / mutants:.1f} % of them killed "
        f"(each scope's last score, weighted by its mutants). {len(full)} scopes at 100 %, {len(high)} more at "
        f"95 % or more, {len(mid)} at 90 % to 95 %; below 90 %: {listed(low) or 'none'}."
        + (f" Not run whole: {not_whole}." if partial else "")
        + (f" Not measured yet: {', '.join(f'`{n}`' for n in missing)}." if missing else ""),
        "",
        "| scope | score | scope | score | scope | score |",
        "|---|---|---|---|---|---|",
    ]
    cells = [f"[{n}](mutation-ledger.md#{n}) | {_percent(entries.get(n, {}).get('score'))}" for n in names]
    for i in range(0, len(cells), 3):
        row = cells[i : i + 3] + [" | "] * (3 - len(cells[i : i + 3]))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", END]
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """``text`` with what lies between :data:`BEGIN` and :data:`END` (the markers included) replaced."""
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ValueError(f"no {BEGIN} ... {END} block to replace")
    return pattern.sub(lambda _: block, text, count=1)


def write_docs(
    ledger: Ledger, scopes: Mapping[str, Scope], ledger_md: Path | None = None, testing_md: Path | None = None
) -> None:
    """Render the ledger (:data:`LEDGER_MD`) and the score table of :data:`TESTING_MD` from the records."""
    testing_md = testing_md or TESTING_MD
    (ledger_md or LEDGER_MD).write_text(render_ledger(ledger, scopes))
    testing_md.write_text(replace_block(testing_md.read_text(), render_scores(ledger, scopes)))
