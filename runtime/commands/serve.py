"""``lerobot-runtime serve``, ``infer``, ``keys``, ``bench serve``, ``bench canary`` and ``bench soak``."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.engine.base import Engine

log = logging.getLogger(__name__)


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve = commands.add_parser("serve", help="run the policy server daemon (systemd Type=notify aware)")
    serve.add_argument(
        "--config", metavar="FILE", help="daemon TOML config (default: built-in defaults, demo bundle)"
    )
    serve.set_defaults(func=_serve)

    infer = commands.add_parser(
        "infer", help="send one observation to the running daemon (a .npz, or random inputs) and print its chunk"
    )
    infer.add_argument(
        "--connect", metavar="ENDPOINT", help="the daemon's endpoint (default: from --config, else the defaults)"
    )
    infer.add_argument("--config", metavar="FILE", help="the daemon's config, to find its endpoint")
    infer.add_argument(
        "--observation",
        metavar="FILE.npz",
        help="arrays named as hello's inputs (default: random ones of their shapes and dtypes, seeded)",
    )
    infer.add_argument(
        "--task", help="the instruction, for a language policy (SmolVLA): needed there, refused elsewhere"
    )
    infer.add_argument(
        "--prefix",
        metavar="FILE.npy",
        help="real-time chunking: the previous chunk's actions not yet executed, [steps, joints] in the action's "
        "units (a .npy, or an .npz holding 'prefix'); refused by a policy without it",
    )
    infer.add_argument(
        "--delay", type=int, help="real-time chunking: steps of the prefix the robot executes meanwhile (default 0)"
    )
    infer.add_argument("--reset", action="store_true", help="the observation starts a new episode")
    infer.add_argument("--timeout-s", type=float, default=30.0, help="how long to wait for the chunk (default 30)")
    infer.add_argument("--json", action="store_true", help="print the chunk and timing as JSON")
    infer.set_defaults(func=_infer)

    keys = commands.add_parser("keys", help="make a CURVE key pair for the server or a client")
    keys.add_argument(
        "--out", required=True, metavar="DIR", help="folder to write NAME.key and NAME.key_secret"
    )
    keys.add_argument("--name", default="client", help="key file base name (default: client)")
    keys.add_argument(
        "--force",
        action="store_true",
        help="replace an existing key pair (every client that trusted the old public key is locked out)",
    )
    keys.set_defaults(func=_keys)

    b = bench.add_parser("serve", help="served round trip vs in-process inference vs bare ZeroMQ floor")
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.add_argument(
        "--bundle",
        metavar="DIR",
        help="bundle to serve (default: an OpenVINO model built in code with ACT-size inputs and outputs)",
    )
    b.add_argument(
        "--act", action="store_true", help="serve the built-in ACT-size bundle (exported on first use)"
    )
    b.add_argument("--control-cpu", type=int, default=0, help="CPU of the client process (default 0)")
    b.add_argument("--requests", type=int, default=300, help="measured requests per transport (default 300)")
    b.set_defaults(func=_bench_serve)

    c = bench.add_parser("canary", help="cost of a canary check and the worst delay it adds to a real request")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    c.add_argument("--bundle", metavar="DIR", help="bundle to serve (default: the ACT-size model built in code)")
    c.add_argument("--act", action="store_true", help="serve the built-in ACT-size bundle (exported on first use)")
    c.add_argument("--control-cpu", type=int, default=0, help="CPU of the client (default 0)")
    c.add_argument("--requests", type=int, default=300, help="measured requests per run (default 300)")
    c.add_argument("--checks", type=int, default=100, help="timed checks for the cost per check (default 100)")
    c.set_defaults(func=_bench_canary)

    s = bench.add_parser(
        "soak", help="the daemon's RSS, file descriptors and canary over minutes of back-to-back infers"
    )
    s.add_argument("--minutes", type=float, default=10.0, help="how long the load runs (default 10)")
    s.add_argument(
        "--bundle",
        default="",
        metavar="DIR",
        help="serve this bundle, a synthetic camera per image input (default: the demo bundle)",
    )
    s.add_argument("--interval", type=float, default=5.0, metavar="S", help="seconds between samples (default 5)")
    s.add_argument(
        "--malloc-arena-max",
        type=int,
        default=0,
        metavar="N",
        help="start the daemon with MALLOC_ARENA_MAX=N (glibc; default: unset)",
    )
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=_bench_soak)


def _serve(args: argparse.Namespace) -> int:
    from runtime.config import load_config
    from runtime.daemon import Daemon

    return Daemon(load_config(args.config), config_path=args.config).run()


def _infer(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    import numpy as np

    from runtime.client import PolicyClient
    from runtime.commands.status import DEFAULT_CONFIG
    from runtime.config import load_config
    from runtime.protocol.errors import ServerError
    from runtime.status import status_endpoint

    endpoint = args.connect
    if not endpoint:
        path = args.config or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None)
        endpoint = status_endpoint(load_config(path))
    try:
        with PolicyClient(endpoint, timeout_s=args.timeout_s) as client:
            info = client.hello()
            if args.observation:
                with np.load(args.observation) as f:
                    observation = {name: f[name] for name in f.files}
            else:
                rng = np.random.default_rng(0)
                observation = {
                    t.name: (
                        rng.integers(0, 256, t.shape, dtype=np.uint8)
                        if t.dtype == "uint8"
                        else rng.standard_normal(t.shape).astype(t.dtype)
                    )
                    for t in info.inputs
                }
            if info.takes_task and args.task is None:
                log.error('%s is a language policy: pass --task "..." (the instruction it follows)', info.policy_name)
                return 2
            prefix = None
            if args.prefix:
                loaded = np.load(args.prefix, allow_pickle=False)
                if isinstance(loaded, np.lib.npyio.NpzFile):
                    with loaded:
                        prefix = loaded["prefix"]
                else:
                    prefix = loaded
            chunk = client.infer(observation, reset=args.reset, task=args.task, prefix=prefix, delay=args.delay)
    except ServerError as e:
        log.error("the daemon refused the observation: %s", e)
        return 1
    except (TimeoutError, OSError) as e:
        log.error("no daemon answers at %s (%s): is it running?", endpoint, e)
        return 2
    timing = {"queue": chunk.timing.queue_ms, "infer": chunk.timing.infer_ms, "round_trip": chunk.round_trip_ms}
    if args.json:
        out = {
            "policy": info.policy_name,
            "task": args.task,
            "action_names": list(info.action_names),
            "actions": chunk.actions.tolist(),
            "timing_ms": timing,
        }
        print(json.dumps(out, indent=2))
    else:
        steps, dim = chunk.actions.shape
        print(f"{info.policy_name}: {steps} x {dim} in {timing['round_trip']:.1f} ms (infer {timing['infer']:.1f})")
        first = zip(info.action_names, chunk.actions[0], strict=True)
        print("  first step: " + ", ".join(f"{n}={v:.3f}" for n, v in first))
    return 0


def _keys(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    import zmq.auth

    from runtime.errors import ConfigError

    out = Path(args.out)
    public, secret = out / f"{args.name}.key", out / f"{args.name}.key_secret"
    existing = [str(p) for p in (public, secret) if p.exists()]
    if existing and not args.force:
        raise ConfigError(
            f"keys: {' and '.join(existing)} already exist; replacing a server's secret locks out every client "
            "that trusts its public key. Choose another --name or --out, or pass --force"
        )
    try:
        out.mkdir(parents=True, exist_ok=True, mode=0o700)
        public_file, secret_file = zmq.auth.create_certificates(out, args.name)
        os.chmod(secret_file, 0o600)
    except OSError as e:
        raise ConfigError(f"keys: cannot write the key pair into --out {out}: {e.strerror or e}") from e
    print(f"public key: {public_file}\nsecret key: {secret_file}")
    print("give the public .key file to the other side; keep the .key_secret file private")
    return 0


def _bench_serve(args: argparse.Namespace) -> int:
    import json

    from runtime.bench.serve import format_table, run_bench

    result = run_bench(_engine_maker(args), n=args.requests, control_cpu=args.control_cpu)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


def _bench_canary(args: argparse.Namespace) -> int:
    import json

    from runtime.bench.canary import format_table, run_bench

    result = run_bench(_engine_maker(args), requests=args.requests, checks=args.checks, control_cpu=args.control_cpu)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


def _bench_soak(args: argparse.Namespace) -> int:
    import json

    from runtime.bench.soak import format_table, run_soak_bench

    result = run_soak_bench(
        minutes=args.minutes, interval_s=args.interval, malloc_arena_max=args.malloc_arena_max, bundle=args.bundle
    )
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


def _engine_maker(args: argparse.Namespace) -> Callable[[], Engine]:
    """``--bundle``/``--act``: a bundle through the loader (parity gate, test case); else the ACT-size
    model built in code, with a test case recomputed in numpy."""
    from runtime.bundle.bundle import TestCase
    from runtime.server.synthetic import ACT, ACTION, SyntheticEngine, example_observation, reference_actions

    case: TestCase | None = None
    if not (args.bundle or args.act):
        # Computed here, not in make_engine: that runs on the pinned inference thread, where numpy's
        # multi-threaded BLAS would spin its threads on the one CPU it is left.
        obs = example_observation(ACT)
        case = TestCase(obs, {ACTION: reference_actions(ACT, obs)}, {"f32": 1e-4})

    def make_engine() -> Engine:
        if case is None:
            from runtime.engine.config import EngineConfig
            from runtime.engine.loader import load_engine

            bundle = args.bundle
            if not bundle:
                from runtime.export.demo import ensure_bundle

                bundle = str(ensure_bundle("act"))
            return load_engine(EngineConfig(bundle=bundle, devices=("CPU",), control_cpu=args.control_cpu))
        engine = SyntheticEngine(ACT)
        engine.test_case = case
        return engine

    return make_engine
