"""The drivers are the lowest layer: nothing under drivers/ imports runtime (the daemon, engines...),
so the arm's side can be used, tested and later run on its own."""

from __future__ import annotations

import ast
from pathlib import Path

DRIVERS = Path(__file__).resolve().parents[2] / "drivers"


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def test_drivers_import_nothing_of_runtime() -> None:
    files = sorted(DRIVERS.rglob("*.py"))
    assert len(files) > 10  # the package, not an empty folder
    upward = [
        f"{f.relative_to(DRIVERS.parent)}:{line} imports {name}"
        for f in files
        for line, name in _imports(f)
        if name == "runtime" or name.startswith("runtime.")
    ]
    assert upward == []
