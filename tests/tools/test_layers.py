"""The installed packages never import the checkout's tools: ``runtime`` and ``drivers`` ship in the
wheel, ``tools`` does not, so an import of it from either would fail on the robot."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_runtime_and_drivers_import_nothing_from_tools() -> None:
    files = [p for package in ("runtime", "drivers") for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 100
    found = {
        f"{p.relative_to(ROOT)}: {name}"
        for p in files
        for name in _imported(p)
        if name == "tools" or name.startswith("tools.")
    }
    assert found == set()


def test_importlib_names_in_the_command_line_are_packages_that_ship() -> None:
    from runtime.cli import COMMAND_MODULES

    assert all(m.split(".")[0] in ("runtime", "drivers") for m in COMMAND_MODULES)
