"""``lerobot-runtime bench ipc``: the arm process's link against the other ways it could go."""

from __future__ import annotations

import argparse
import json


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    b = bench.add_parser(
        "ipc", help="the arm process's link (SOCK_SEQPACKET) beside ZeroMQ ipc and shared memory, side by side"
    )
    b.add_argument("--messages", type=int, default=2000, help="messages per transport and size (default 2000)")
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.set_defaults(func=_bench_ipc)


def _bench_ipc(args: argparse.Namespace) -> int:
    from runtime.bench.ipc import format_table, run_ipc_bench

    if args.messages < 10:
        raise SystemExit(f"bench ipc --messages: expected at least 10, got {args.messages}")
    result = run_ipc_bench(args.messages)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0
