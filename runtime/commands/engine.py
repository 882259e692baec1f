"""CLI: ``export``, ``lower``, ``check`` and ``bench engine``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
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


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser("export", help="export a PyTorch policy into a bundle (needs the export extra)")
    p.add_argument(
        "--factory",
        required=True,
        metavar="FILE.py:FUNC",
        help="FUNC() returns (torch.nn.Module, dict of named example input tensors)",
    )
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--device", default="CPU", choices=["CPU", "GPU", "NPU"])
    p.add_argument("--precision", default="f32", choices=["f32", "f16", "bf16"])
    p.add_argument("--name", help="policy name (default: the factory function's name)")
    p.add_argument("--action-names", help="comma-separated joint names (default: SO-101 joints for 6-dim actions)")
    p.add_argument("--control-rate-hz", type=float, default=30.0)
    p.set_defaults(func=cmd_export)

    p = commands.add_parser("lower", help="add a program for a device from the bundle's portable .pt2")
    p.add_argument("bundle", metavar="BUNDLE")
    p.add_argument("--device", required=True, choices=["CPU", "GPU", "NPU"])
    p.add_argument("--precision", choices=["f32", "f16", "bf16"])
    p.set_defaults(func=cmd_lower)

    p = commands.add_parser("check", help="load a bundle, prove parity, measure latency")
    p.add_argument(
        "bundle", metavar="BUNDLE", nargs="?", default="", help="bundle directory (default: the built-in demo bundle)"
    )
    _add_engine_options(p)
    p.add_argument("--runs", type=int, default=30, help="timed inferences after warm-up (default 30)")
    p.add_argument(
        "--parity-runs", type=int, default=16, help="replays of the test case, each checked (default 16)"
    )
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
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--cpus", type=parse_cpu_list, default=(), metavar="LIST")
    p.add_argument("--control-cpu", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench_engine)


def cmd_export(args: argparse.Namespace) -> int:
    from runtime.bundle.export import export_bundle

    names = tuple(n.strip() for n in args.action_names.split(",")) if args.action_names else None
    bundle = export_bundle(
        args.factory,
        args.out,
        device=args.device,
        precision=args.precision,
        policy_name=args.name,
        action_names=names,
        control_rate_hz=args.control_rate_hz,
    )
    print(bundle.path)
    return 0


def cmd_lower(args: argparse.Namespace) -> int:
    from runtime.bundle.export import lower_bundle

    lower_bundle(args.bundle, args.device, precision=args.precision)
    return 0


def check_bundle(args: argparse.Namespace) -> dict[str, Any]:
    import psutil

    from runtime.bench.stats import summarize
    from runtime.bundle.bundle import Bundle
    from runtime.engine.config import EngineConfig
    from runtime.engine.loader import LoadReport, load_engine, resolve_bundle_path

    config = EngineConfig(
        bundle=args.bundle,
        engine=args.engine,
        devices=args.device,
        precision=args.precision,
        cpus=args.cpus,
        control_cpu=args.control_cpu,
        threads=args.threads,
        parity_runs=args.parity_runs,
        allow_parity_failure=True,
    )
    path = resolve_bundle_path(config)
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
            f"({result['precision']}, {result['threads']} threads on CPUs {result['cpus']})\n"
            f"  parity: {'ok' if p['ok'] else 'FAILED'}, max abs error {p['max_abs_err']:.3g} "
            f"(tolerance {p['tolerance']:.3g}, {p['runs']} replays)\n"
            f"  latency: median {lat['median']:.2f} ms, p90 {lat['p90']:.2f} ms over {lat['runs']} runs\n"
            f"  ready in {result['timing_ms']['ready']:.0f} ms; resident memory {result['rss_mb']:.0f} MiB; "
            f"torch imported: {result['torch_imported']}"
        )
    return 0 if result["ok"] else 1


def cmd_bench_engine(args: argparse.Namespace) -> int:
    from runtime.bench.engine import run_engine_bench

    result = run_engine_bench(
        args.factory, runs=args.runs, cpus=args.cpus, control_cpu=args.control_cpu, threads=args.threads
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for row in result["rows"]:
            print(
                f"{row['name']:<22} median {row['median_ms']:8.2f} ms  p90 {row['p90_ms']:8.2f} ms  "
                f"x{row['speedup_vs_eager']:.2f} vs eager  parity {row['max_abs_err']:.2g} ({row['precision']})"
            )
        cs = result["cold_start"]
        if "error" in cs:
            print(f"cold start (openvino engine, fresh process): failed: {cs['error']}")
        else:
            print(
                f"cold start (openvino engine, fresh process): ready in {cs['ready_ms']:.0f} ms, "
                f"process wall {cs['process_wall_ms']:.0f} ms, torch imported: {cs['torch_imported']}"
            )
    return 0
