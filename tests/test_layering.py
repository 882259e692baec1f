"""The packages follow the processes and the layers: the arm-side core (``runtime.control``,
``runtime.arm``) reaches nothing of the daemon's side, and no two packages of ``runtime`` import each
other, directly or round a longer circle.

Read from the source (every ``import``, also those inside functions), so a lazy import cannot hide
an upward edge; what the arm process loads when it runs is held by ``tests/arm/test_faults.py``.
``tests/drivers/test_layering.py`` holds the layer below: drivers import nothing of runtime.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARM_SIDE = ("runtime.control", "runtime.arm")
# what the arm side must never reach: the daemon's packages and the libraries of the policy's side
DAEMON_SIDE = ("runtime.server", "runtime.protocol", "runtime.arm_control", "runtime.daemon", "runtime.commands")
LIBRARIES = ("zmq", "openvino", "executorch", "torch", "nncf")
# teleop's configuration is data the loop reads; the rest of the package (the station, the leader
# reader, the terminal) is the operator's side
TELEOP_DATA = "runtime.teleop.config"


def _modules() -> dict[str, Path]:
    found = {}
    for path in [*ROOT.glob("runtime/**/*.py"), *ROOT.glob("drivers/**/*.py")]:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return names


def _owner(name: str, modules: Mapping[str, Path]) -> str:
    """The module of ours ``name`` is or lies in (``runtime.x.y.Name`` -> ``runtime.x.y``); "" if none."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def _within(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def reached(start: Iterable[str], modules: Mapping[str, Path]) -> dict[str, str]:
    """Every name reached from ``start`` through our modules' imports: name -> the module importing it."""
    seen: dict[str, str] = {}
    stack = [(m, "") for m in start]
    while stack:
        module, by = stack.pop()
        if module in seen:
            continue
        seen[module] = by
        for name in _imports(modules[module]):
            owner = _owner(name, modules)
            if owner:
                stack.append((owner, module))
            else:
                seen.setdefault(name, module)
    return seen


def package(module: str) -> str:
    """The sibling a module belongs to: ``runtime.engine.loader`` -> ``runtime.engine``; drivers is one."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "runtime" and len(parts) > 1 else parts[0]


def circles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                found.append(sorted([v, *group]))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def package_edges(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for name in _imports(path):
            owner = _owner(name, modules)
            if owner and package(owner) != package(module):
                edges[package(module)].add(package(owner))
    return edges


def test_the_arm_side_reaches_nothing_of_the_daemon_side() -> None:
    modules = _modules()
    start = [m for m in modules if _within(m, ARM_SIDE)]
    assert {"runtime.control.controller", "runtime.control.loop", "runtime.arm.process"} <= set(start)
    seen = reached(start, modules)
    assert "drivers.bus" in seen and TELEOP_DATA in seen  # the walk follows imports out of the package
    upward = sorted(
        f"{name} (imported by {by})"
        for name, by in seen.items()
        if _within(name, (*DAEMON_SIDE, *LIBRARIES)) or (_within(name, ("runtime.teleop",)) and name != TELEOP_DATA)
    )
    assert upward == []


def test_no_two_packages_import_each_other() -> None:
    edges = package_edges(_modules())
    assert {"runtime.engine", "runtime.bundle"} <= edges["runtime.export"]  # the graph is the real one
    assert circles(edges) == []


def test_a_circle_round_three_packages_is_found() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
