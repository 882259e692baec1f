"""``lerobot-runtime bench engine``: eager PyTorch vs each engine, same inputs, same threads, one run.

Timings are interleaved (one call of each candidate per round) so load on a shared machine hits them
alike; the numbers that matter are the ratios, not the absolute milliseconds. Cold start is measured
in a fresh process (``lerobot-runtime check --engine openvino``), which also reports whether torch
was imported on that path.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from runtime.bench.stats import summarize
from runtime.engine.affinity import inference_cpus, pin_current_thread

log = logging.getLogger(__name__)


def cold_start(bundle: Path, cpus: tuple[int, ...], threads: int, engine: str = "openvino") -> dict[str, Any]:
    """Load ``bundle`` with ``engine`` in a fresh process: time to ready, resident memory, torch or not."""
    cmd = [
        sys.executable,
        "-m",
        "runtime",
        "--log-level",
        "WARNING",
        "check",
        str(bundle),
        "--engine",
        engine,
        "--runs",
        "3",
        "--json",
    ]
    if cpus:
        cmd += ["--cpus", ",".join(map(str, cpus))]
    if threads:
        cmd += ["--threads", str(threads)]
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = (time.perf_counter() - t) * 1e3
    if out.returncode != 0:
        return {"error": out.stderr.strip()[-2000:] or out.stdout.strip()}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "ready_ms": result["timing_ms"]["ready"],
        "load_ms": result["timing_ms"]["load"],
        "parity_ms": result["timing_ms"]["parity"],
        "warmup_ms": result["timing_ms"]["warmup"],
        "process_wall_ms": wall,
        "rss_mb": result["rss_mb"],
        "torch_imported": result["torch_imported"],
    }


def run_engine_bench(
    factory: str, *, runs: int = 20, cpus: tuple[int, ...] = (), control_cpu: int = 0, threads: int = 0
) -> dict[str, Any]:
    import torch

    from runtime.bundle.export import export_bundle, load_factory
    from runtime.engine.config import EngineChoice, EngineConfig, PrecisionChoice
    from runtime.engine.loader import LoadReport, load_engine
    from runtime.engine.parity import compare

    cpu_set = inference_cpus(cpus, control_cpu)
    pin_current_thread(cpu_set)
    n_threads = threads or len(cpu_set)
    torch.set_num_threads(n_threads)

    model, example = load_factory(factory)()
    model = model.eval()
    with tempfile.TemporaryDirectory(prefix="lerobot-runtime-bench-") as tmp:
        t = time.perf_counter()
        bundle = export_bundle(lambda: (model, example), Path(tmp) / "bundle", policy_name="bench")
        export_s = time.perf_counter() - t
        case = bundle.test_case()
        reference = case.outputs
        inputs_np = case.inputs
        inputs_t = tuple(torch.from_numpy(inputs_np[k]) for k in example)

        def eager() -> dict[str, np.ndarray]:
            with torch.inference_mode():
                return {"action": model(*inputs_t).numpy()}

        candidates: list[tuple[str, Callable[[], dict[str, np.ndarray]], str]] = [("eager_pytorch_f32", eager, "f32")]
        engines = []
        variants: tuple[tuple[str, EngineChoice, PrecisionChoice], ...] = (
            ("openvino_f32", "openvino", "f32"),
            ("openvino_bf16", "openvino", "bf16"),
            ("executorch_default", "executorch", "auto"),
        )
        for name, kind, precision in variants:
            report = LoadReport()
            engine = load_engine(
                EngineConfig(
                    bundle=str(bundle.path),
                    engine=kind,
                    precision=precision,
                    cpus=tuple(cpu_set),
                    threads=n_threads,
                    allow_parity_failure=True,
                    warmup_runs=2,
                ),
                report=report,
            )
            engines.append(engine)
            candidates.append((name, functools.partial(engine.infer, inputs_np), engine.info.precision))

        for _, fn, _ in candidates:  # warm every candidate once more after all are loaded
            fn()
        times: dict[str, list[float]] = {name: [] for name, _, _ in candidates}
        outputs: dict[str, dict[str, np.ndarray]] = {}
        for _ in range(runs):
            for name, fn, _ in candidates:
                t = time.perf_counter()
                outputs[name] = fn()
                times[name].append((time.perf_counter() - t) * 1e3)
        eager_median = summarize(times["eager_pytorch_f32"])["median"]
        rows = []
        for name, _, ran_precision in candidates:
            lat = summarize(times[name])
            median, p90 = lat["median"], lat["p90"]
            err = compare(outputs[name], reference, float("inf")).max_abs_err
            rows.append(
                {
                    "name": name,
                    "precision": ran_precision,
                    "median_ms": median,
                    "p90_ms": p90,
                    "speedup_vs_eager": eager_median / median,
                    "max_abs_err": err,
                }
            )
        for e in engines:
            e.close()
        cs = {e: cold_start(bundle.path, tuple(cpu_set), n_threads, e) for e in ("openvino", "executorch")}
        bundle_mb = sum(f.stat().st_size for f in bundle.path.iterdir()) / 1e6
    return {
        "factory": factory,
        "threads": n_threads,
        "cpus": cpu_set,
        "runs": runs,
        "export_s": export_s,
        "bundle_mb": bundle_mb,
        "rows": rows,
        "cold_start": cs,
        "machine": {"cpu_count": os.cpu_count()},
    }
