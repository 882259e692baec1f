"""``lerobot-runtime bench engine``: eager PyTorch vs f32, bf16 and INT8 programs on both engines.

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


def _synthetic_observations(case_inputs: dict[str, np.ndarray], directory: Path, n: int) -> Path:
    """Observations shaped like the test case (frames and states perturbed around it), for calibration."""
    rng = np.random.default_rng(1)
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        obs = {}
        for k, v in case_inputs.items():
            if v.dtype == np.uint8:
                obs[k] = np.clip(v.astype(np.int16) + rng.integers(-40, 41, v.shape), 0, 255).astype(np.uint8)
            else:
                obs[k] = (v + rng.normal(0, 0.3, v.shape) * (np.abs(v) + 1)).astype(v.dtype)
        np.savez(directory / f"obs_{i:04d}.npz", **obs)  # type: ignore[arg-type]
    return directory


def run_engine_bench(
    factory: str = "runtime.policies.act:make_act_policy",
    *,
    lerobot: str = "",
    calibration: str = "",
    calibration_size: int = 32,
    precisions: tuple[str, ...] = ("f32", "bf16", "int8"),
    runs: int = 20,
    cpus: tuple[int, ...] = (),
    control_cpu: int = 0,
    threads: int = 0,
) -> dict[str, Any]:
    """Eager PyTorch f32 against f32, bf16 and INT8 programs on both engines, interleaved, one process.

    Each row's ``error`` is its largest action error against eager f32 in the bundle's parity units
    (normalised action units for a LeRobot checkpoint), ``max_abs_err`` the same in absolute units.
    """
    import torch

    from runtime.bundle.export import export_bundle, load_factory
    from runtime.bundle.quantize import DEFAULT_MAX_ERROR, quantize_bundle
    from runtime.engine.config import EngineChoice, EngineConfig, PrecisionChoice
    from runtime.engine.loader import LoadReport, load_engine
    from runtime.engine.parity import compare

    cpu_set = inference_cpus(cpus, control_cpu)
    pin_current_thread(cpu_set)
    n_threads = threads or len(cpu_set)
    torch.set_num_threads(n_threads)

    kwargs: dict[str, Any] = {"policy_name": "bench"}
    if lerobot:
        from runtime.bundle.lerobot import lerobot_export_plan

        make, kwargs = lerobot_export_plan(lerobot)
    else:
        make = load_factory(factory)
    model, example = make()
    model = model.eval()
    with tempfile.TemporaryDirectory(prefix="lerobot-runtime-bench-") as tmp:
        t = time.perf_counter()
        bundles = {"f32": export_bundle(lambda: (model, example), Path(tmp) / "f32", **kwargs)}
        export_s = time.perf_counter() - t
        case = bundles["f32"].test_case()
        reference = case.outputs
        inputs_np = case.inputs
        inputs_t = tuple(torch.from_numpy(inputs_np[k]) for k in inputs_np)
        batched = bundles["f32"].manifest.model_batch == 1 and not lerobot
        if "bf16" in precisions:
            bundles["bf16"] = export_bundle(lambda: (model, example), Path(tmp) / "bf16", precision="bf16", **kwargs)
        quant: dict[str, Any] = {}
        if "int8" in precisions:
            source = calibration or str(_synthetic_observations(inputs_np, Path(tmp) / "calib", calibration_size))
            t = time.perf_counter()
            # the bench reports the error; the bound that quantize applies by default is recorded beside it
            bundles["int8"] = quantize_bundle(bundles["f32"].path, source, Path(tmp) / "int8", max_error=float("inf"))
            gate = dict(bundles["int8"].manifest.quantization["gate"])
            quant = {
                "calibration": calibration or f"synthetic: {calibration_size} observations around the test case",
                "quantize_s": time.perf_counter() - t,
                "held_out_max_error": gate["max_error"],
                "held_out_mean_error": gate["mean_error"],
                "default_bound": DEFAULT_MAX_ERROR,
                "within_default_bound": gate["max_error"] <= DEFAULT_MAX_ERROR,
            }

        def eager() -> dict[str, np.ndarray]:
            with torch.inference_mode():
                out = model(*(x.unsqueeze(0) for x in inputs_t)) if batched else model(*inputs_t)
                return {"action": (out[0] if batched else out).numpy()}

        candidates: list[tuple[str, Callable[[], dict[str, np.ndarray]], str]] = [("eager_pytorch_f32", eager, "f32")]
        engines = []
        for precision, bundle in bundles.items():
            hint: PrecisionChoice = "f32" if precision == "int8" else precision  # type: ignore[assignment]
            kinds: tuple[EngineChoice, ...] = ("openvino", "executorch")
            for kind in kinds:
                report = LoadReport()
                engine = load_engine(
                    EngineConfig(
                        bundle=str(bundle.path),
                        engine=kind,
                        precision=hint if kind == "openvino" else "auto",
                        cpus=tuple(cpu_set),
                        threads=n_threads,
                        allow_parity_failure=True,
                        warmup_runs=2,
                    ),
                    report=report,
                )
                engines.append(engine)
                ran = f"{engine.info.precision} (arithmetic {engine.info.arithmetic})"
                candidates.append((f"{kind}_{precision}", functools.partial(engine.infer, inputs_np), ran))

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
            rel = compare(outputs[name], reference, float("inf"), case.scale, case.scale_source)
            rows.append(
                {
                    "name": name,
                    "precision": ran_precision,
                    "median_ms": median,
                    "p90_ms": p90,
                    "speedup_vs_eager": eager_median / median,
                    "error": rel.max_abs_err,
                    "error_units": case.scale_source,
                    "max_abs_err": compare(outputs[name], reference, float("inf")).max_abs_err,
                }
            )
        for e in engines:
            e.close()
        f32 = bundles["f32"].path
        cs = {e: cold_start(f32, tuple(cpu_set), n_threads, e) for e in ("openvino", "executorch")}
        sizes = {p: sum(f.stat().st_size for f in b.path.iterdir()) / 1e6 for p, b in bundles.items()}
    return {
        "source": lerobot or factory,
        "threads": n_threads,
        "cpus": cpu_set,
        "runs": runs,
        "export_s": export_s,
        "bundle_mb": sizes,
        "rows": rows,
        "int8": quant,
        "cold_start": cs,
        "machine": {"cpu_count": os.cpu_count(), "cpu_flags": cpu_flags()},
    }


def cpu_flags() -> list[str]:
    """The CPU features that decide bf16 and INT8 speed (AVX-512, VNNI, BF16, AMX), from /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    keep = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_bf16", "amx_int8", "amx_tile")
    return [f for f in flags if f in keep]
