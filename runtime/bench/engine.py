"""``lerobot-runtime bench engine``: eager PyTorch vs f32, bf16 and INT8 programs on both engines.

Timings are interleaved (one call of each candidate per round) so load on a shared machine hits them
alike; the numbers that matter are the ratios, not the absolute milliseconds. Cold start is measured
in a fresh process per engine (:mod:`runtime.bench.start`), phase by phase, staged as the daemon starts
and with the whole gate before ready; it also reports whether torch was imported on that path.
"""

from __future__ import annotations

import contextlib
import functools
import gc
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

from runtime.bench.machine import cpu_summary
from runtime.bench.stats import summarize
from runtime.bundle.bundle import Bundle
from runtime.engine.affinity import inference_cpus, pin_current_thread
from runtime.errors import BundleError

log = logging.getLogger(__name__)


def cold_start(
    bundle: Path, cpus: tuple[int, ...], threads: int, engine: str = "openvino", whole_gate: bool = False
) -> dict[str, Any]:
    """Start ``bundle`` with ``engine`` in a fresh process (:mod:`runtime.bench.start`): each phase to ready
    and to the first chunk, resident memory, torch or not. ``whole_gate``: every parity replay before
    ready, as the daemon started before it ran the last ones after."""
    cmd = [sys.executable, "-m", "runtime.bench.start", str(bundle), "--engine", engine]
    if cpus:
        cmd += ["--cpus", ",".join(map(str, cpus))]
    if threads:
        cmd += ["--threads", str(threads)]
    if whole_gate:
        cmd.append("--whole-gate")
    t = time.perf_counter()
    out = subprocess.run([*cmd, "--launched-at", repr(time.time())], capture_output=True, text=True, check=False)
    wall = (time.perf_counter() - t) * 1e3
    if out.returncode != 0:
        return {"error": out.stderr.strip()[-2000:] or out.stdout.strip()}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_wall_ms"] = wall
    return result


def _kept_bundle(path: Path, precision: str) -> Bundle | None:
    """The bundle a previous ``--bundles`` run left at ``path``, or None when there is none yet.

    A bundle there is verified whole (a half-written or altered one is refused, not timed) and must
    be the precision asked: INT8 is a quantized bundle, f32 and bf16 programs lowered for that precision.
    """
    if not (path / "manifest.json").is_file():
        return None
    bundle = Bundle.open(path, verify_all=True)
    manifest = bundle.manifest
    got = "int8" if manifest.quantization else ",".join(sorted({e.precision for e in manifest.programs.values()}))
    if got != precision:
        raise BundleError(f"{path}: expected the bench's {precision} bundle, got a {got} one")
    return bundle


def _synthetic_observations(case_inputs: dict[str, np.ndarray], directory: Path, n: int) -> Path:
    """Observations shaped like the test case (frames and states perturbed around it), for calibration."""
    rng = np.random.default_rng(1)
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        obs = {}
        for k, v in case_inputs.items():
            if v.dtype == np.uint8:
                obs[k] = np.clip(v.astype(np.int16) + rng.integers(-40, 41, v.shape), 0, 255).astype(np.uint8)
            elif v.dtype.kind in "iub":  # a task's token ids and mask: ids perturbed are no text
                obs[k] = v
            else:
                obs[k] = (v + rng.normal(0, 0.3, v.shape) * (np.abs(v) + 1)).astype(v.dtype)
        np.savez(directory / f"obs_{i:04d}.npz", **obs)  # type: ignore[arg-type]
    return directory


def run_engine_bench(
    factory: str = "runtime.policies.act:make_act_policy",
    *,
    lerobot: str = "",
    vlm_dir: str | None = None,
    calibration: str = "",
    calibration_size: int = 32,
    precisions: tuple[str, ...] = ("f32", "bf16", "int8"),
    runs: int = 20,
    cpus: tuple[int, ...] = (),
    control_cpu: int = 0,
    threads: int = 0,
    peer: bool = True,
    bundles_dir: str = "",
    one_at_a_time: bool = False,
) -> dict[str, Any]:
    """Eager PyTorch f32 against f32, bf16 and INT8 programs on both engines, interleaved, one process.

    With ``one_at_a_time`` only one precision's two engines are loaded at once: each precision is timed
    interleaved with eager, then its engines are closed before the next are loaded (a default-size
    SmolVLA's programs, 2 GB each, do not all fit in memory beside the eager model). Each row's
    ``speedup_vs_eager`` is then against eager's median in its own group (``eager_median_ms``).

    With ``peer`` (and int8 among ``precisions``), one more row: the best INT8 peer, OpenVINO with
    NNCF straight from PyTorch (``openvino.convert_model`` + ``nncf.quantize``, transformer preset)
    on the same calibration observations, compiled with the plugin's defaults on the same threads.
    Each row's ``error`` is its largest action error against eager f32 in the bundle's parity units
    (normalised action units for a LeRobot checkpoint), ``max_abs_err`` the same in absolute units.

    With ``bundles_dir`` the programs are built into ``bundles_dir/<precision>`` and a precision whose
    bundle is already there (a complete, valid one, lowered for that precision) is opened, not built
    again: a default-size SmolVLA lowers for about half an hour per precision. The result's
    ``reused`` names them; their rows are still timed and compared against this run's eager model.
    """
    import torch

    from runtime.engine.config import EngineChoice, EngineConfig, PrecisionChoice
    from runtime.engine.loader import LoadReport, load_engine
    from runtime.engine.parity import compare
    from runtime.export.export import export_bundle
    from runtime.export.quantize import DEFAULT_MAX_ERROR, quantize_bundle
    from runtime.export.trace import load_factory

    cpu_set = inference_cpus(cpus, control_cpu)
    pin_current_thread(cpu_set)
    n_threads = threads or len(cpu_set)
    torch.set_num_threads(n_threads)

    kwargs: dict[str, Any] = {"policy_name": "bench"}
    if lerobot:
        from runtime.export.lerobot import lerobot_export_plan

        make, kwargs = lerobot_export_plan(lerobot, vlm_dir=vlm_dir)
    else:
        make = load_factory(factory)
    model, example = make()
    model = model.eval()
    reused: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lerobot-runtime-bench-") as scratch:
        root = Path(bundles_dir or scratch)

        def build(precision: str, make_bundle: Callable[[Path], Bundle]) -> Bundle:
            kept = _kept_bundle(root / precision, precision)
            if kept is None:
                return make_bundle(root / precision)
            reused.append(precision)
            return kept

        t = time.perf_counter()
        bundles = {"f32": build("f32", lambda out: export_bundle(lambda: (model, example), out, **kwargs))}
        export_s = None if "f32" in reused else time.perf_counter() - t  # a kept bundle was only opened
        case = bundles["f32"].test_case()
        reference = case.outputs
        inputs_np = case.inputs
        inputs_t = tuple(torch.from_numpy(inputs_np[k]) for k in inputs_np)
        batched = bundles["f32"].manifest.model_batch == 1 and not lerobot
        if "bf16" in precisions:
            bundles["bf16"] = build(
                "bf16", lambda out: export_bundle(lambda: (model, example), out, precision="bf16", **kwargs)
            )
        quant: dict[str, Any] = {}
        if "int8" in precisions:
            source = calibration or str(_synthetic_observations(inputs_np, Path(scratch) / "calib", calibration_size))
            t = time.perf_counter()
            # the bench reports the error; the bound that quantize applies by default is recorded beside it
            bundles["int8"] = build(
                "int8", lambda out: quantize_bundle(bundles["f32"].path, source, out, max_error=float("inf"))
            )
            gate = dict(bundles["int8"].manifest.quantization["gate"])
            quant = {
                "calibration": calibration or f"synthetic: {calibration_size} observations around the test case",
                "quantize_s": None if "int8" in reused else time.perf_counter() - t,
                "held_out_max_error": gate["max_error"],
                "held_out_mean_error": gate["mean_error"],
                "default_bound": DEFAULT_MAX_ERROR,
                "within_default_bound": gate["max_error"] <= DEFAULT_MAX_ERROR,
            }

        def eager() -> dict[str, np.ndarray]:
            with torch.inference_mode():
                out = model(*(x.unsqueeze(0) for x in inputs_t)) if batched else model(*inputs_t)
                return {"action": (out[0] if batched else out).numpy()}

        Candidate = tuple[str, Callable[[], dict[str, np.ndarray]], str]
        refused: dict[str, str] = {}  # row -> why its engine refused the bundle

        def engines_for(precision: str, bundle: Bundle) -> tuple[list[Candidate], list[Any]]:
            # int8: the program's own choice (its float layers at the CPU's fastest precision)
            hint: PrecisionChoice = "auto" if precision == "int8" else precision  # type: ignore[assignment]
            found: list[Candidate] = []
            opened = []
            kinds: tuple[EngineChoice, ...] = ("openvino", "executorch")
            for kind in kinds:
                try:
                    engine = load_engine(
                        EngineConfig(
                            bundle=str(bundle.path),
                            engine=kind,
                            precision=hint if kind == "openvino" else "auto",
                            cpus=tuple(cpu_set),
                            threads=n_threads,
                            allow_parity_failure=True,
                            # the bench shows what each engine computes, bf16 defaults included
                            accept_lower_arithmetic=True,
                            warmup_runs=2,
                        ),
                        report=LoadReport(),
                    )
                except BundleError as e:  # an engine that refuses this bundle is a row of its own, said
                    refused[f"{kind}_{precision}"] = str(e)
                    continue
                opened.append(engine)
                ran = f"{engine.info.precision} (arithmetic {engine.info.arithmetic})"
                found.append((f"{kind}_{precision}", functools.partial(engine.infer, inputs_np), ran))
            return found, opened

        # all precisions' engines timed together, or one precision's at a time (each group interleaved
        # with eager and closed before the next is loaded: programs that do not all fit in memory at once)
        groups = [[p] for p in bundles] if one_at_a_time else [list(bundles)]
        eager_row: Candidate = ("eager_pytorch_f32", eager, "f32")
        order: list[tuple[str, str]] = [(eager_row[0], eager_row[2])]  # (row, what it ran); no engine kept
        times: dict[str, list[float]] = {eager_row[0]: []}
        outputs: dict[str, dict[str, np.ndarray]] = {}
        eager_median: dict[str, float] = {}  # per candidate: eager's median in the same group
        for group in groups:
            candidates: list[Candidate] = [eager_row]
            opened: list[Any] = []
            found: list[Candidate] = []
            engines: list[Any] = []
            try:
                for precision in group:
                    found, engines = engines_for(precision, bundles[precision])
                    candidates += found
                    opened += engines
                if "int8" in group and peer:
                    run_peer, peer_ran = nncf_peer(bundles["f32"], source, n_threads)
                    candidates.append(("peer_openvino_nncf_int8", run_peer, peer_ran))
                for _, fn, _ in candidates:  # warm every candidate once more after all are loaded
                    fn()
                group_eager: list[float] = []
                for name, _, _ in candidates[1:]:
                    times[name] = []
                for _ in range(runs):
                    for name, fn, _ in candidates:
                        t = time.perf_counter()
                        outputs[name] = fn()
                        (group_eager if name == eager_row[0] else times[name]).append((time.perf_counter() - t) * 1e3)
            finally:
                for e in opened:
                    e.close()
                del opened, found, engines
                gc.collect()
            times[eager_row[0]] += group_eager
            for name, _, ran in candidates[1:]:
                eager_median[name] = summarize(group_eager)["median"]
                order.append((name, ran))
            del candidates
            gc.collect()
        eager_median[eager_row[0]] = summarize(times[eager_row[0]])["median"]
        rows = []
        for name, ran_precision in order:
            lat = summarize(times[name])
            median, p90 = lat["median"], lat["p90"]
            rel = compare(outputs[name], reference, float("inf"), case.scale, case.scale_source)
            rows.append(
                {
                    "name": name,
                    "precision": ran_precision,
                    "median_ms": median,
                    "p90_ms": p90,
                    "speedup_vs_eager": eager_median[name] / median,
                    "eager_median_ms": eager_median[name],
                    "error": rel.max_abs_err,
                    "error_units": case.scale_source,
                    "max_abs_err": compare(outputs[name], reference, float("inf")).max_abs_err,
                }
            )
        f32 = bundles["f32"].path
        # the start as the daemon makes it, beside the whole gate before ready, one fresh process each
        cs = {
            f"{e}{' whole gate' if whole else ''}": cold_start(f32, tuple(cpu_set), n_threads, e, whole)
            for e in ("openvino", "executorch")
            for whole in (True, False)
        }
        sizes = {p: sum(f.stat().st_size for f in b.path.iterdir()) / 1e6 for p, b in bundles.items()}
    return {
        "source": lerobot or factory,
        "threads": n_threads,
        "cpus": cpu_set,
        "runs": runs,
        "export_s": export_s,
        "reused": reused,
        "engines_held": "one precision at a time" if one_at_a_time else "all at once",
        "bundle_mb": sizes,
        "rows": rows,
        "refused": refused,
        "int8": quant,
        "cold_start": cs,
        "machine": {"cpu_count": os.cpu_count(), "cpu_flags": cpu_summary()["cpu_flags"]},
    }


def nncf_peer(f32: Any, calibration: str, threads: int) -> tuple[Callable[[], dict[str, np.ndarray]], str]:
    """The INT8 peer: OpenVINO + NNCF straight from PyTorch, calibrated on the observations that
    ``quantize`` calibrates on (the same split), run on the bundle's test-case inputs."""
    import nncf
    import openvino as ov
    import torch

    from runtime.engine.precision import executed_precision
    from runtime.export.quantize import load_observations

    manifest = f32.manifest
    names = [s.name for s in manifest.inputs]
    observations = load_observations(calibration, manifest)
    calib = observations[: -max(1, round(len(observations) * 0.25))]  # quantize's default hold-out

    def feed(obs: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [obs[n] for n in names]

    # from the bundle's own torch.export program: the graph the bundle was lowered from (tracing a
    # LeRobot policy with TorchScript, convert_model's other path, fails its sanity checks)
    assert manifest.portable_program is not None, "an exported f32 bundle keeps its portable program"
    exported = torch.export.load(str(f32.path / manifest.portable_program.file))
    with torch.no_grad():
        converted = ov.convert_model(exported)
    dataset = nncf.Dataset(calib, feed)
    options: dict[str, Any] = {"model_type": nncf.ModelType.TRANSFORMER, "subset_size": len(calib)}
    # NNCF prints its progress; stdout belongs to the command's result (--json)
    with contextlib.redirect_stdout(sys.stderr):
        try:
            quantized = nncf.quantize(converted, dataset, **options)
        except TypeError as e:
            # as in quantize: NNCF's bias correction fails on layers fed unbatched 1-D tensors
            log.warning("peer: NNCF bias correction failed (%s); quantising without it", e)
            from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters

            advanced = AdvancedQuantizationParameters(disable_bias_correction=True)
            quantized = nncf.quantize(converted, dataset, advanced_parameters=advanced, **options)
    compiled = ov.Core().compile_model(
        quantized, "CPU", {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": False}
    )
    request = compiled.create_infer_request()
    inputs = feed(f32.test_case().inputs)
    name = manifest.action_output
    index = [o.name for o in manifest.outputs].index(name)

    def run() -> dict[str, np.ndarray]:
        return {name: np.array(request.infer(inputs, share_inputs=True)[index], copy=True)}

    return run, f"int8 (arithmetic {executed_precision(compiled)})"
