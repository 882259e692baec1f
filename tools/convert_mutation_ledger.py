"""One-off: the hand-kept mutation ledger of ``docs/testing.md`` into ``docs/mutation-ledger.json``.

The per-scope table (what each scope mutated, the score before, what was measured, the tests) and the
accepted survivors (each with its verdict and why), the lifecycle's open survivors and the notes
across scopes are carried over word for word; each scope's score is its last measured figure (the
last bold one of its row). Run once, from the checkout's root: ``python -m tools.convert_mutation_ledger``.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "docs" / "testing.md"
OUT = ROOT / "docs" / "mutation-ledger.json"
HEADER = "| Scope (modules) | Before (main at the start of this work) | After (measured) | Notes |"
EPYC = "AMD EPYC (AVX2), 2 cores shared with other jobs, load average about 7 (or as the figures say)"
XEON = (
    "Intel Xeon (Sapphire Rapids: avx2 avx512f avx512_bf16 avx512_vnni amx_bf16 amx_int8), 2 cores, "
    "under the load the figures state"
)
FIRST_ON_XEON = "sim-wire"  # "the scopes from sim-wire on were measured on an Intel Xeon"
# items of the accepted survivors that name a module rather than a scope
MODULE_SCOPES = {"drivers/dynamixel/protocol.py": "driver-protocol", "drivers/feetech/tables.py": "driver-vendors"}


def _cells(line: str) -> list[str]:
    out, cur, tick = [], "", False
    for ch in line.strip()[1:-1]:
        if ch == "`":
            tick = not tick
        if ch == "|" and not tick:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def _scope_name(text: str) -> str:
    return text.strip().replace(" ", "-")


def _score(measured: str) -> dict[str, Any]:
    """The last bold figure of a row's measured cell, and the mutants it is of."""
    last = list(re.finditer(r"\*\*([^*]+)\*\*", measured))[-1]
    percent = float(re.findall(r"([\d.]+) %", last.group(1))[0])
    after = re.match(r"\s*\(([^)]*)\)", measured[last.end() :])
    paren = after.group(1) if after else ""
    of = re.search(r"\bof (?:the )?(\d+)", paren)
    counts = [int(n) for n in re.findall(r"(\d+) (?:killed|timed out|survived|reached by no test)", paren)]
    if of:
        mutants = int(of.group(1))
    elif len(counts) >= 2:
        mutants = sum(counts)
    else:
        mutants = int(re.findall(r"\bof (?:the )?(\d+)", measured[: last.start()])[-1])
    score: dict[str, Any] = {"percent": percent, "mutants": mutants, "complete": "partial" not in last.group(1)}
    if whole := re.search(r"of the scope's (\d+)", paren):
        score["of_scope"] = int(whole.group(1))
    return score


def _rows(lines: list[str]) -> list[dict[str, Any]]:
    start = lines.index(HEADER)
    rows = []
    machine = EPYC
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        head, before, measured, tests = _cells(line)
        m = re.match(r"([a-z0-9 -]+?)\s*(?:\((.*)\))?$", head, re.S)
        assert m is not None, head
        name = _scope_name(m.group(1))
        machine = XEON if name == FIRST_ON_XEON else machine
        rows.append(
            {
                "name": name,
                "modules": (m.group(2) or "").strip(),
                "machine": machine,
                "score": _score(measured),
                "before": before,
                "measured": measured,
                "tests": tests,
            }
        )
    return rows


def _survivors(text: str) -> tuple[list[tuple[str, dict[str, Any]]], list[str]]:
    """(scope, survivor entry) for each item of the accepted survivors; the items that name no scope."""
    section_verdict = {
        "Equivalent (no test can tell them apart):": "equivalent",
        "Not reachable by mutmut's method:": "not reachable by mutmut",
        "Accepted:": "accepted",
    }
    items: list[list[str]] = []
    verdict = ""
    for line in text.split("\n")[1:]:
        if not line.strip():
            continue
        if not line.startswith(("- ", "  ")):
            verdict = section_verdict[line.strip()]
        elif line.startswith("- "):
            items.append([verdict, line[2:]])
        else:
            items[-1][1] += " " + line.strip()
    out: list[tuple[str, dict[str, Any]]] = []
    loose: list[str] = []
    for verdict, item in items:
        first = re.match(r"`([^`]+)`", item)
        if first is None:  # "Parametrised test data computed at collection time does the same; ..."
            loose.append(item)
            continue
        if first.group(1) in MODULE_SCOPES:
            out.append((MODULE_SCOPES[first.group(1)], {"verdict": verdict, "text": item}))
            continue
        m = re.match(r"`([^`]+)`((?:, [a-z ]+)?(?: ?\([^)]*\))?):\s*(.*)$", item, re.S)
        assert m is not None, item
        label, qualifier, rest = m.group(1), m.group(2).strip(), m.group(3)
        if qualifier.startswith(", accepted"):
            verdict, qualifier = "accepted", qualifier[len(", accepted") :].strip()
        elif qualifier.startswith(", unreachable by design"):
            verdict, qualifier = "unreachable", qualifier[len(", unreachable by design") :].strip()
        elif qualifier.startswith(", "):  # ", of the part run (31)"
            qualifier = qualifier[2:]
        out.append((_scope_name(label), {"verdict": verdict, "text": f"{qualifier} {rest}".strip()}))
    return out, loose


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def convert(source: str, commit: str) -> dict[str, Any]:
    lines = source.split("\n")
    whole = source.index("### The whole tree: what is scoped, what is not yet")
    lifecycle = source.index("### Lifecycle: what is left")
    accepted = source.index("### Accepted survivors")
    scopes: dict[str, Any] = {}
    for row in _rows(lines):
        name = row.pop("name")
        row["score"]["converted"] = f"docs/testing.md at {commit}"
        scopes[name] = {**row, "survivors": [], "runs": []}
    survivors, loose = _survivors(source[accepted:])
    for scope, entry in survivors:
        scopes[scope]["survivors"].append(entry)
    # the lifecycle's own section: what is left of its survivors, the equivalent and the unexamined
    intro, *rest = _paragraphs(source[lifecycle:accepted].split("\n", 1)[1])
    scopes["lifecycle"]["remarks"] = [re.sub(r"\s*\n\s*", " ", intro)]
    for item in re.split(r"\n- ", "\n" + "\n".join(rest))[1:]:
        item = re.sub(r"\s*\n\s*", " ", item.strip())
        verdict = "not yet examined" if "not yet examined" in item else "equivalent"
        scopes["lifecycle"]["survivors"].append({"verdict": verdict, "text": item})
    # what the rows' notes leave unexamined, as survivors without a verdict yet
    open_notes = {
        "validation": "the 6 survivors in `check_finite`'s message and index arithmetic (from the notes above)",
        "codec": "the 17 survivors new after the rebase, in `_observation`, `_parse_infer` and `hello`'s history "
        "fields (from the figures above)",
        "driver-protocol": "11 of the 34: frame bounds, `header_index`, 2 in `Register.encode` (from the notes above)",
    }
    for scope, text in open_notes.items():
        scopes[scope]["survivors"].append({"verdict": "not yet examined", "text": text})
    paragraphs = _paragraphs(source[whole:lifecycle].split("\n", 1)[1])
    below_90 = paragraphs.pop()  # "Below 90 %: ...": the ledger's score table says it now, for every scope
    assert below_90.startswith("Below 90 %"), below_90
    unscoped = "\n\n".join(p for p in paragraphs if p.startswith(("Every module", "- starting")))
    notes = [
        {"title": "Bugs the runs found", "text": "\n\n".join(paragraphs[:3])},
        {"title": "Scoped once their tests needed no export", "text": paragraphs[3]},
        {"title": "What is not scoped", "text": unscoped},
        {"title": "Not reachable by mutmut's method", "text": "\n\n".join(f"- {i}" for i in loose)},
    ]
    return {
        "about": "The mutation ledger: written by tools/mutation.py (each scope's runs), verdicts by hand; "
        "rendered into docs/mutation-ledger.md and the score table of docs/testing.md. Converted from the "
        f"hand-kept ledger of docs/testing.md at {commit}.",
        "scopes": scopes,
        "notes": notes,
    }


def main() -> int:
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%h", "--", "docs/testing.md"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ledger = convert(SOURCE.read_text(), commit)
    OUT.write_text(json.dumps(ledger, indent=1, ensure_ascii=False) + "\n")
    print(f"{OUT}: {len(ledger['scopes'])} scopes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
