"""CLI: ``export``, ``lower``, ``check`` and ``bench engine``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from runtime.errors import ConfigError, LerobotRuntimeError

log = logging.getLogger(__name__)


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``"1-3,5"`` -> (1, 2, 3, 5)."""
    cpus: list[int] = []
    try:
        for part in filter(None, (p.strip() for p in text.split(","))):
            lo, _, hi = part.partition("-")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a CPU list like 1-3,5, got {text!r}") from None
    return tuple(cpus)


def parse_devices(text: str) -> tuple[str, ...]:
    devices = tuple(d.strip().upper() for d in text.split(",") if d.strip())
    bad = [d for d in devices if d not in ("CPU", "GPU", "NPU")]
    if bad or not devices:
        raise argparse.ArgumentTypeError(f"expected devices among CPU, GPU, NPU (comma-separated), got {text!r}")
    return devices


def _add_engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=["auto", "openvino", "executorch"], default="auto")
    p.add_argument(
        "--device",
        type=parse_devices,
        default=("NPU", "GPU", "CPU"),
        metavar="LIST",
        help="device preference list, e.g. NPU,GPU,CPU (default)",
    )
    p.add_argument(
        "--precision",
        choices=["auto", "f32", "f16", "bf16"],
        default="auto",
        help="INFERENCE_PRECISION_HINT (auto: the precision the program was lowered with)",
    )
    p.add_argument(
        "--cpus",
        type=parse_cpu_list,
        default=(),
        metavar="LIST",
        help="inference CPU set, e.g. 1-3 (default: all but the control CPU)",
    )
    p.add_argument("--control-cpu", type=int, default=0, help="CPU kept for the control loop (default 0)")
    p.add_argument("--threads", type=int, default=0, help="inference threads (default: one per inference CPU)")
    p.add_argument(
        "--accept-lower-arithmetic",
        action="store_true",
        help="let the executorch engine run a program below its precision where the device defaults lower "
        "(an f32 program at bf16 on a CPU with native bf16), held to that tolerance",
    )


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "export", help="export a PyTorch policy or a LeRobot checkpoint into a bundle (needs the export extra)"
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--factory",
        metavar="FILE.py:FUNC",
        help="FUNC() returns (torch.nn.Module, dict of named example input tensors)",
    )
    what.add_argument(
        "--lerobot",
        metavar="CHECKPOINT_DIR",
        help="a LeRobot checkpoint directory (config.json, model.safetensors, policy_*processor files)",
    )
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--device", default="CPU", choices=["CPU", "GPU", "NPU"])
    p.add_argument("--precision", default="f32", choices=["f32", "f16", "bf16"])
    p.add_argument("--name", help="policy name (default: the factory function's name, or lerobot_<type>)")
    p.add_argument(
        "--action-names",
        help="comma-separated joint names (default: from the checkpoint, else SO-101 joints for a 6-dim factory)",
    )
    p.add_argument(
        "--image-inputs",
        help="comma-separated names of the camera inputs (default: uint8 HxWxC inputs "
        "and inputs whose name contains 'image')",
    )
    p.add_argument("--n-action-steps", type=int, help="--lerobot: steps of each chunk to serve (default: the config's)")
    p.add_argument(
        "--vlm-dir",
        metavar="DIR",
        help="--lerobot SmolVLA: the local directory of its VLM (config, processor, tokenizer; the weights too "
        "when the checkpoint says load_vlm_weights), instead of the checkpoint's vlm_model_name "
        "(a directory, or a model in the local Hugging Face cache; never downloaded)",
    )
    p.add_argument(
        "--rtc",
        action="store_true",
        help="--lerobot SmolVLA: real-time chunking (the program takes the previous chunk's leftover and "
        "guides the flow towards it, LeRobot's RTC; on by itself when the checkpoint's rtc_config enables it)",
    )
    p.add_argument(
        "--lerobot-python",
        metavar="PYTHON",
        help="--lerobot: a Python with the LeRobot release that wrote the checkpoint, which traces it (default: "
        "this Python, $LEROBOT_RUNTIME_LEROBOT_PYTHON or .venv-lerobot-<release> beside the checkout, whichever "
        "has that release)",
    )
    p.add_argument(
        "--tolerance",
        metavar="PREC=ERR,...",
        help="parity tolerance per precision, in the test case's units (normalised action units for "
        "LeRobot checkpoints), e.g. f32=1e-4,bf16=0.05; the f32 one is measured at export when not given",
    )
    p.add_argument("--control-rate-hz", type=float, default=30.0)
    p.set_defaults(func=cmd_export)

    p = commands.add_parser("lower", help="add a program for a device from the bundle's portable .pt2")
    p.add_argument("bundle", metavar="BUNDLE")
    p.add_argument("--device", required=True, choices=["CPU", "GPU", "NPU"])
    p.add_argument("--precision", choices=["f32", "f16", "bf16"])
    p.set_defaults(func=cmd_lower)

    p = commands.add_parser("quantize", help="post-training INT8 of a bundle, with an accuracy gate (export extra)")
    p.add_argument("bundle", metavar="BUNDLE", help="an f32 bundle with its portable program (model.pt2)")
    p.add_argument(
        "--calibration",
        required=True,
        metavar="DIR",
        help="recorded observations: a LeRobot dataset (v3.0, a local directory), or a directory of .npz files, "
        "one observation each, arrays named as the inputs",
    )
    p.add_argument(
        "--calibration-frames",
        type=int,
        default=256,
        metavar="N",
        help="frames sampled evenly from a LeRobot dataset (default 256)",
    )
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument(
        "--max-error",
        type=float,
        default=None,
        help="largest INT8-vs-f32 action error on held-out observations, in normalised action units (default 0.2)",
    )
    p.add_argument("--held-out", type=float, default=0.25, help="fraction of observations held out (default 0.25)")
    p.set_defaults(func=cmd_quantize)

    p = commands.add_parser("check", help="load a bundle, prove parity, measure latency")
    p.add_argument(
        "bundle", metavar="BUNDLE", nargs="?", default="", help="bundle directory (default: the built-in demo bundle)"
    )
    _add_engine_options(p)
    p.add_argument("--runs", type=int, default=30, help="timed inferences after warm-up (default 30)")
    p.add_argument("--parity-runs", type=int, default=16, help="replays of the test case, each checked (default 16)")
    p.add_argument("--allow-parity-failure", action="store_true")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_check)

    p = bench.add_parser("engine", help="eager PyTorch vs each engine on the same inputs and threads")
    p.add_argument(
        "--factory",
        default="runtime.policies.act:make_act_policy",
        metavar="FILE.py:FUNC",
        help="model factory (default: the ACT-size model)",
    )
    p.add_argument("--lerobot", default="", metavar="CHECKPOINT_DIR", help="bench a LeRobot checkpoint instead")
    p.add_argument("--vlm-dir", default=None, metavar="DIR", help="--lerobot SmolVLA: its VLM's local directory")
    p.add_argument(
        "--calibration",
        default="",
        metavar="DIR",
        help="recorded observations for the INT8 rows (default: synthetic ones around the test case)",
    )
    p.add_argument(
        "--precisions", default="f32,bf16,int8", help="comma-separated rows to build (default f32,bf16,int8)"
    )
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--cpus", type=parse_cpu_list, default=(), metavar="LIST")
    p.add_argument("--control-cpu", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument(
        "--no-peer",
        action="store_true",
        help="leave out the peer row (OpenVINO + NNCF INT8 straight from PyTorch, same calibration)",
    )
    p.add_argument(
        "--bundles",
        default="",
        metavar="DIR",
        help="build the programs into DIR/<precision> and reuse those a previous run left there",
    )
    p.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="load one precision's engines at a time, each timed against eager, then closed "
        "(for programs that do not all fit in memory at once)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench_engine)


def _names(text: str | None) -> tuple[str, ...] | None:
    return tuple(n.strip() for n in text.split(",") if n.strip()) if text else None


def cmd_export(args: argparse.Namespace) -> int:
    from runtime.export.export import export_bundle, parse_tolerance

    tolerance = parse_tolerance(args.tolerance) if args.tolerance else None
    if args.lerobot:
        from runtime.export.lerobot import export_lerobot

        if args.image_inputs:
            raise ConfigError("--image-inputs: a LeRobot checkpoint names its cameras itself (VISUAL features)")
        bundle = export_lerobot(
            args.lerobot,
            args.out,
            device=args.device,
            precision=args.precision,
            n_action_steps=args.n_action_steps,
            action_names=_names(args.action_names),
            control_rate_hz=args.control_rate_hz,
            tolerance=tolerance,
            policy_name=args.name,
            vlm_dir=args.vlm_dir,
            rtc=args.rtc,
            lerobot_python=args.lerobot_python,
        )
    else:
        if args.lerobot_python:
            raise ConfigError("--lerobot-python applies to --lerobot checkpoints")
        if args.vlm_dir:
            raise ConfigError("--vlm-dir applies to --lerobot SmolVLA checkpoints")
        if args.rtc:
            raise ConfigError("--rtc applies to --lerobot SmolVLA checkpoints")
        if args.n_action_steps:
            raise ConfigError("--n-action-steps applies to --lerobot checkpoints; a factory's model sets its chunk")
        bundle = export_bundle(
            args.factory,
            args.out,
            device=args.device,
            precision=args.precision,
            policy_name=args.name,
            action_names=_names(args.action_names),
            control_rate_hz=args.control_rate_hz,
            image_inputs=_names(args.image_inputs),
            tolerance=tolerance,
        )
    print(bundle.path)
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    from runtime.export.quantize import DEFAULT_MAX_ERROR, gate_summary, quantize_bundle

    bundle = quantize_bundle(
        args.bundle,
        args.calibration,
        args.out,
        max_error=DEFAULT_MAX_ERROR if args.max_error is None else args.max_error,
        held_out_fraction=args.held_out,
        calibration_frames=args.calibration_frames,
    )
    print(f"{bundle.path}\n  {gate_summary(bundle.manifest.quantization)}")
    return 0


def cmd_lower(args: argparse.Namespace) -> int:
    from runtime.export.export import lower_bundle

    lower_bundle(args.bundle, args.device, precision=args.precision)
    return 0


def check_bundle(args: argparse.Namespace) -> dict[str, Any]:
    import psutil

    from runtime.bench.stats import summarize
    from runtime.bundle.bundle import Bundle
    from runtime.engine.config import EngineConfig
    from runtime.engine.loader import LoadReport, load_engine
    from runtime.export.demo import with_bundle

    asked = EngineConfig(
        bundle=args.bundle,
        engine=args.engine,
        devices=args.device,
        precision=args.precision,
        cpus=args.cpus,
        control_cpu=args.control_cpu,
        threads=args.threads,
        parity_runs=args.parity_runs,
        allow_parity_failure=True,
        accept_lower_arithmetic=args.accept_lower_arithmetic,
    )
    config = with_bundle(asked)  # no bundle named: the built-in demo bundle
    path = Path(config.bundle)
    bundle = Bundle.open(path, verify_all=True)
    report = LoadReport()
    engine = load_engine(config, report=report)
    inputs = bundle.test_case().inputs
    times = []
    for _ in range(max(1, args.runs)):
        t = time.perf_counter()
        engine.infer(inputs)
        times.append((time.perf_counter() - t) * 1e3)
    rss_mb = round(psutil.Process().memory_info().rss / 2**20, 1)  # with the engine loaded
    engine.close()
    parity = report.parity
    assert parity is not None
    return {
        "ok": parity.ok or args.allow_parity_failure,
        "bundle": str(path),
        "policy": engine.manifest.policy_name,
        **{k: v for k, v in engine.info.to_json().items() if k not in ("bundle",)},
        "engine_reason": report.engine_reason,
        "skipped_devices": list(report.skipped_devices),
        "parity": parity.to_json(),
        "latency_ms": {**summarize(times), "runs": len(times)},
        "timing_ms": report.timing_ms,
        "rss_mb": rss_mb,
        "torch_imported": "torch" in sys.modules,
        "program_precision": bundle.manifest.programs[engine.info.device].precision,
        "quantization": dict(bundle.manifest.quantization),
        "tolerance": _tolerance_json(bundle.manifest, engine),
        "source": {k: v for k, v in bundle.manifest.source.items() if k in ("kind", "written_by", "stack")},
    }


def _tolerance_json(manifest: Any, engine: Any) -> dict[str, Any]:
    """The tolerance that held this engine's outputs, where it came from and the spread measured at export."""
    from runtime.engine.loader import case_precision

    precision = case_precision(engine)
    basis = manifest.test_case.basis.get(precision)
    return {
        "precision": precision,
        "value": manifest.test_case.tolerance.get(precision),
        "how": basis.how if basis is not None else "default",
        "basis": basis.to_json() if basis is not None else None,
        "said": manifest.test_case.describe_tolerance(precision),
    }


def cmd_check(args: argparse.Namespace) -> int:
    try:
        result = check_bundle(args)
    except (LerobotRuntimeError, ConfigError) as e:
        if not args.json:
            raise
        print(json.dumps({"ok": False, "error": str(e), "error_type": type(e).__name__}))
        return 2
    if args.json:
        print(json.dumps(result))
    else:
        p = result["parity"]
        lat = result["latency_ms"]
        print(
            f"{result['bundle']}: policy {result['policy']} on {result['device']} via {result['engine']} "
            f"({result['precision']}: program {result['program_precision']}, arithmetic {result['arithmetic']}; "
            f"{result['threads']} threads on CPUs {result['cpus']})\n"
            f"  parity: {'ok' if p['ok'] else 'FAILED'}, max abs error {p['max_abs_err']:.3g} "
            f"in {_units(p.get('units', 'absolute'))} "
            f"(tolerance {p['tolerance']:.3g}, {p['runs']} replays)\n"
            f"  tolerance ({result['tolerance']['precision']}): {result['tolerance']['said']}\n"
            f"  latency: median {lat['median']:.2f} ms, p90 {lat['p90']:.2f} ms over {lat['runs']} runs\n"
            f"  ready in {result['timing_ms']['ready']:.0f} ms; resident memory {result['rss_mb']:.0f} MiB; "
            f"torch imported: {result['torch_imported']}"
        )
        if result["quantization"]:
            from runtime.export.quantize import gate_summary

            print(f"  program: int8; {gate_summary(result['quantization'])}")
    return 0 if result["ok"] else 1


def cmd_bench_engine(args: argparse.Namespace) -> int:
    from runtime.bench.engine import run_engine_bench

    precisions = tuple(p.strip() for p in args.precisions.split(",") if p.strip())
    bad = [p for p in precisions if p not in ("f32", "bf16", "int8")]
    if bad or "f32" not in precisions:
        raise ConfigError(f"--precisions: expected f32 plus any of bf16, int8, got {args.precisions!r}")
    result = run_engine_bench(
        args.factory,
        lerobot=args.lerobot,
        vlm_dir=args.vlm_dir,
        calibration=args.calibration,
        precisions=precisions,
        runs=args.runs,
        cpus=args.cpus,
        control_cpu=args.control_cpu,
        threads=args.threads,
        peer=not args.no_peer,
        bundles_dir=args.bundles,
        one_at_a_time=args.one_at_a_time,
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"CPU flags: {' '.join(result['machine']['cpu_flags']) or 'none of AVX2/AVX-512/VNNI/BF16/AMX'}")
        for row in result["rows"]:
            print(
                f"{row['name']:<24} median {row['median_ms']:8.2f} ms  p90 {row['p90_ms']:8.2f} ms  "
                f"x{row['speedup_vs_eager']:.2f} vs eager  error {row['error']:.2g} ({row['precision']})"
            )
        for name, reason in result["refused"].items():
            print(f"{name:<24} refused: {reason}")
        print(f"errors in units of {result['rows'][0]['error_units']}")
        for name, cs in result["cold_start"].items():  # one fresh process each
            print(cold_start_line(name, cs))
    return 0


def cold_start_line(name: str, cs: dict[str, Any]) -> str:
    """One cold-start row of ``bench engine``: ready and first chunk, and where the time went."""
    if "error" in cs:
        return f"cold start ({name}, fresh process): failed: {cs['error']}"
    ms = cs["ms"]
    phases = ", ".join(
        f"{label} {ms[key]:.0f}"
        for key, label in (
            ("interpreter", "interpreter"),
            ("import", "imports"),
            ("open", "bundle open"),
            ("compile", "compile"),
            ("replays_before_ready", f"{cs['replays_before_ready']} replays"),
            ("warmup", "warm-up"),
            ("tokenizer", "tokenizer"),
        )
        if key != "tokenizer" or ms[key]
    )
    after = cs["replays"] - cs["replays_before_ready"]
    return (
        f"cold start ({name}, fresh process): ready in {ms['ready']:.0f} ms ({phases}); first chunk at "
        f"{ms['first_chunk']:.0f} ms ({after} replays after ready {ms['replays_after_ready']:.0f}); "
        f"parity {'ok' if cs['parity_ok'] else 'FAILED'}; {cs['rss_mb']:.0f} MiB; torch imported: "
        f"{cs['torch_imported']}"
    )


def _units(units: str) -> str:
    """'absolute units', or the test case's scale as it names itself ('action std (normalised units)')."""
    return "absolute units" if units == "absolute" else f"units of {units}"
