"""Where two (or more) OpenVINO programs spend their time, layer type by layer type, side by side.

    python -m tools.perf_compare A.pte B.xml [--case test_case.npz] [--runs 10] [--cpu 1] [--json OUT]

Each program is a ``.pte`` (its OpenVINO delegate blob is read out without torch and imported) or an
OpenVINO IR ``.xml`` (compiled with the plugin's defaults, as the bench's INT8 peer is). All are
loaded with ``PERF_COUNT`` on one inference thread, pinned to one CPU, and run in turns on the same
inputs (a bundle's test case), so a busy machine slows them alike. For each program the table gives,
per layer type and runtime precision of the compiled model's execution graph, how many nodes there
are and the sum of their median times; ``--json`` writes every node (name, type, precision, the
layers it was made of, median ms) for a closer look.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np


def load(core: Any, path: Path, props: dict[str, Any]) -> Any:
    """The compiled model of ``path``: a ``.pte``'s delegate blob imported, or an IR compiled."""
    if path.suffix == ".pte":
        from runtime.bundle.pte import parse_program

        method = parse_program(path.read_bytes(), str(path))["forward"]
        if len(method.delegates) != 1:
            raise SystemExit(f"{path}: {len(method.delegates)} delegates; expected one OpenVINO blob")
        return core.import_model(bytes(method.delegates[0].payload), "CPU", props)
    if path.suffix == ".xml":
        return core.compile_model(str(path), "CPU", props)
    raise SystemExit(f"{path}: expected a .pte program or an OpenVINO IR .xml")


def case_inputs(case: Path) -> list[np.ndarray]:
    """The test case's inputs (``input/<name>`` arrays) in the order they were written."""
    with np.load(case, allow_pickle=False) as z:
        return [z[k] for k in z.files if k.startswith("input/")]


def check_inputs(path: Path, compiled: Any, inputs: list[np.ndarray]) -> None:
    import openvino as ov

    fits = len(compiled.inputs) == len(inputs) and all(
        i.get_partial_shape().compatible(ov.PartialShape(list(a.shape))) and i.get_element_type().to_dtype() == a.dtype
        for i, a in zip(compiled.inputs, inputs, strict=False)
    )
    if not fits:
        want = [f"{i.get_element_type().to_dtype()}{i.get_partial_shape()}" for i in compiled.inputs]
        got = [f"{a.dtype}{list(a.shape)}" for a in inputs]
        raise SystemExit(f"{path}: takes inputs {want}, the test case has {got}")


def node_table(compiled: Any, times: dict[str, list[float]]) -> list[dict[str, Any]]:
    """Every node of the execution graph with its layer type, runtime precision and median time."""
    rows = []
    for op in compiled.get_runtime_model().get_ops():
        info = op.get_rt_info()

        def rt(key: str, info: Any = info) -> str:
            return str(info[key].astype(str)) if key in info else ""

        name = op.get_friendly_name()
        rows.append(
            {
                "name": name,
                "layer_type": rt("layerType"),
                "precision": rt("runtimePrecision"),
                "primitive": rt("primitiveType"),
                "original_layers": rt("originalLayersNames"),
                "ms": float(np.median(times[name])) if times.get(name) else 0.0,
            }
        )
    return rows


def profile(paths: list[Path], case: Path, runs: int, props: dict[str, Any]) -> list[dict[str, Any]]:
    """Load every program, then run them in turns ``runs`` times; per program its nodes and wall times."""
    import openvino as ov

    core = ov.Core()
    inputs = case_inputs(case)
    loaded: list[tuple[Path, Any, Any, dict[str, list[float]], list[float]]] = []
    for path in paths:
        compiled = load(core, path, props)
        check_inputs(path, compiled, inputs)
        request = compiled.create_infer_request()
        for _ in range(2):  # warm-up
            request.infer(inputs)
        loaded.append((path, compiled, request, defaultdict(list), []))
    for _ in range(runs):
        for _path, _compiled, request, times, walls in loaded:
            t = time.perf_counter()
            request.infer(inputs)
            walls.append((time.perf_counter() - t) * 1e3)
            for p in request.profiling_info:
                times[p.node_name].append(p.real_time.total_seconds() * 1e3)
    return [
        {"program": str(path), "wall_ms": walls, "nodes": node_table(compiled, times)}
        for path, compiled, _request, times, walls in loaded
    ]


def layer_type_table(results: list[dict[str, Any]], min_ms: float = 0.05) -> str:
    """Per (layer type, precision): nodes and summed median ms of each program, the slowest first."""
    sums: list[dict[tuple[str, str], list[float]]] = []
    for r in results:
        acc: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
        for n in r["nodes"]:
            cell = acc[(n["layer_type"], n["precision"])]
            cell[0] += 1
            cell[1] += n["ms"]
        sums.append(acc)
    keys = sorted({k for s in sums for k in s}, key=lambda k: -max(s[k][1] for s in sums if k in s))
    width = 20
    names = [Path(r["program"]).parent.name + "/" + Path(r["program"]).name for r in results]
    lines = [f"{'layer type':18s} {'precision':9s}" + "".join(f"{n[-width:]:>{width + 2}s}" for n in names)]
    for k in keys:
        if all(s.get(k, (0, 0.0))[1] < min_ms for s in sums):
            continue
        cells = "".join(f"{int(s[k][0]):>6d} {s[k][1]:>9.2f} ms  " if k in s else f"{'-':>{width + 2}s}" for s in sums)
        lines.append(f"{k[0]:18s} {k[1]:9s}{cells}")
    total = "".join(f"{sum(c[1] for c in s.values()):>16.2f} ms  " for s in sums)
    wall = "".join(f"{float(np.median(r['wall_ms'])):>16.2f} ms  " for r in results)
    lines += [f"{'sum of nodes':28s}{total}", f"{'wall median':28s}{wall}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.perf_compare", description=__doc__.split("\n\n")[0])
    p.add_argument("programs", nargs="+", type=Path, help=".pte programs or OpenVINO IR .xml files")
    p.add_argument("--case", type=Path, help="inputs: a bundle's test_case.npz (default: beside the first program)")
    p.add_argument("--runs", type=int, default=10, help="rounds, every program once per round (default 10)")
    p.add_argument("--cpu", type=int, default=1, help="the CPU the inference thread is pinned to (default 1)")
    p.add_argument("--props", default="{}", help="extra compile/import properties, as JSON")
    p.add_argument("--json", type=Path, help="write every node of every program here")
    args = p.parse_args(argv)
    case = args.case or args.programs[0].parent / "test_case.npz"
    os.sched_setaffinity(0, {args.cpu})  # before OpenVINO loads: its CPU plugin honours the affinity
    props = {
        "PERF_COUNT": True,
        "INFERENCE_NUM_THREADS": 1,
        "PERFORMANCE_HINT": "LATENCY",
        "ENABLE_CPU_PINNING": False,
        **json.loads(args.props),
    }
    results = profile(args.programs, case, args.runs, props)
    print(layer_type_table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
