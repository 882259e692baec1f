"""How long a fresh process takes to be ready with a bundle, and to its first chunk, phase by phase.

``python -m runtime.bench.start BUNDLE [--engine E] [--cpus 1] [--threads N] [--whole-gate]`` loads the
bundle as the daemon's inference worker does: ``load_engine`` staged (ready once the first
``engine.ready_runs`` parity replays passed), the tokenizer of a language policy, then the rest of the
gate, then the first chunk. ``--whole-gate`` loads it with the whole gate and the warm-up before ready
instead. It prints one JSON line: each phase in ms, the resident memory and whether torch was imported.
``bench engine`` runs both forms in fresh processes, side by side, as its cold-start rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def measure(
    bundle: str, engine: str, cpus: tuple[int, ...], threads: int, whole_gate: bool, launched_at: float = 0.0
) -> dict[str, Any]:
    """The phases of one start in this process (call it first thing in a fresh one). ``launched_at``: the
    ``time.time()`` at which the parent started this process (0: unknown), for the interpreter's own start."""
    entered = time.time()
    interpreter_ms = (entered - launched_at) * 1e3 if launched_at else 0.0  # Python itself, to this call
    t = time.perf_counter()
    import psutil

    from runtime.engine.config import EngineConfig
    from runtime.engine.loader import LoadReport, load_engine

    import_ms = (time.perf_counter() - t) * 1e3
    config = EngineConfig(
        bundle=bundle,
        engine=engine,  # type: ignore[arg-type]
        devices=("CPU",),
        cpus=cpus,
        control_cpu=0 if 0 not in cpus else max(cpus) + 1,
        threads=threads,
        accept_lower_arithmetic=True,  # what each engine costs to start, whatever arithmetic this CPU gives it
    )
    report = LoadReport()
    loaded = load_engine(config, report=report, staged=not whole_gate)
    tokenizer_ms = 0.0
    if loaded.manifest.language is not None:  # the server loads it before it says it is ready
        from runtime.server.tasks import TaskEncoder

        t = time.perf_counter()
        TaskEncoder(loaded.manifest, loaded.info.bundle)
        tokenizer_ms = (time.perf_counter() - t) * 1e3
    ready_ms = interpreter_ms + import_ms + report.timing_ms["ready"] + tokenizer_ms
    t = time.perf_counter()
    gate = loaded.pending_gate
    before = gate.passed if gate is not None else config.parity_runs
    result = gate.finish() if gate is not None else report.parity
    gate_rest_ms = (time.perf_counter() - t) * 1e3
    assert result is not None
    case = loaded.test_case
    assert case is not None
    t = time.perf_counter()
    loaded.infer({k: v.copy() for k, v in case.inputs.items()})
    first_infer_ms = (time.perf_counter() - t) * 1e3
    rss_mb = round(psutil.Process().memory_info().rss / 2**20, 1)
    info = loaded.info.to_json()
    loaded.close()
    timing = report.timing_ms
    return {
        "engine": info["engine"],
        "precision": info["precision"],
        "threads": info["threads"],
        "cpus": info["cpus"],
        "staged": gate is not None,
        "parity_ok": result.ok,
        "replays": config.parity_runs,
        "replays_before_ready": before,
        "ms": {
            "interpreter": interpreter_ms,
            "import": import_ms,
            "open": timing["open"],
            "compile": timing["compile"],
            "replays_before_ready": timing["parity"],
            "warmup": timing["warmup"],
            "tokenizer": tokenizer_ms,
            "ready": ready_ms,
            "replays_after_ready": gate_rest_ms,
            "first_chunk": ready_ms + gate_rest_ms + first_infer_ms,
        },
        "rss_mb": rss_mb,
        "torch_imported": "torch" in sys.modules,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.bench.start", description=__doc__.split("\n")[0])
    parser.add_argument("bundle")
    parser.add_argument("--engine", choices=["openvino", "executorch"], default="openvino")
    parser.add_argument("--cpus", default="", help="inference CPUs, comma-separated (default: all but CPU 0)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--whole-gate", action="store_true", help="every replay and the warm-up before ready")
    parser.add_argument("--launched-at", type=float, default=0.0, help="the parent's time.time() at the launch")
    args = parser.parse_args(argv)
    try:
        cpus = tuple(int(c) for c in args.cpus.split(",") if c.strip())
    except ValueError:
        parser.error(f"--cpus: expected CPU numbers separated by commas, got {args.cpus!r}")
    print(json.dumps(measure(args.bundle, args.engine, cpus, args.threads, args.whole_gate, args.launched_at)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
