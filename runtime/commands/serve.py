"""``lerobot-runtime serve``, ``keys`` and ``bench serve``."""

from __future__ import annotations

import argparse
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    serve = commands.add_parser("serve", help="run the policy server daemon (systemd Type=notify aware)")
    serve.add_argument(
        "--config", metavar="FILE", help="daemon TOML config (default: built-in defaults, demo bundle)"
    )
    serve.set_defaults(func=_serve)

    keys = commands.add_parser("keys", help="make a CURVE key pair for the server or a client")
    keys.add_argument(
        "--out", required=True, metavar="DIR", help="folder to write NAME.key and NAME.key_secret"
    )
    keys.add_argument("--name", default="client", help="key file base name (default: client)")
    keys.set_defaults(func=_keys)

    b = bench.add_parser("serve", help="served round trip vs in-process inference vs bare ZeroMQ floor")
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.add_argument("--bundle", metavar="DIR", help="bundle to serve (default: the built-in ACT-size bundle)")
    b.add_argument(
        "--synthetic",
        action="store_true",
        help="use an ACT-size OpenVINO model built in code instead of a bundle",
    )
    b.add_argument("--requests", type=int, default=300, help="measured requests per transport (default 300)")
    b.set_defaults(func=_bench_serve)


def _serve(args: argparse.Namespace) -> int:
    from runtime.config import load_config
    from runtime.daemon import Daemon

    return Daemon(load_config(args.config)).run()


def _keys(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    import zmq.auth

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    public, secret = zmq.auth.create_certificates(out, args.name)
    os.chmod(secret, 0o600)
    print(f"public key: {public}\nsecret key: {secret}")
    print("give the public .key file to the other side; keep the .key_secret file private")
    return 0


def _load_bench_engine(args: argparse.Namespace) -> tuple[Any, list[float] | None]:
    """Load on a helper thread (load_engine pins its thread) and measure in-process there too."""
    from runtime.server.bench import observation_for

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            if args.synthetic:
                from runtime.server.synthetic import ACT, SyntheticEngine

                engine: Any = SyntheticEngine(ACT)
            else:
                from runtime.engine.config import EngineConfig
                from runtime.engine.loader import load_engine

                bundle = args.bundle
                if not bundle:
                    from runtime.bundle.demo import ensure_bundle

                    bundle = str(ensure_bundle("act"))
                engine = load_engine(EngineConfig(bundle=bundle, devices=("CPU",)))
            import time

            obs = observation_for(engine)
            for _ in range(30):
                engine.infer(obs)
            times = []
            for _ in range(args.requests):
                t0 = time.perf_counter()
                engine.infer(obs)
                times.append((time.perf_counter() - t0) * 1e3)
            box["engine"], box["times"] = engine, times
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=work, name="bench-load")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["engine"], box["times"]


def _bench_serve(args: argparse.Namespace) -> int:
    import json

    from runtime.server.bench import format_table, run_bench

    engine, times = _load_bench_engine(args)
    try:
        result = run_bench(engine, n=args.requests, inprocess=lambda: times)
    finally:
        engine.close()
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0
