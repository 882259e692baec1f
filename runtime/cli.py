"""The ``lerobot-runtime`` command line.

Each command family lives in its own module with a ``register(commands, bench)`` function that adds
its sub-parsers (``commands``) and its benchmarks (under ``lerobot-runtime bench``). Handlers take the
parsed arguments and return the process exit status; heavy imports (torch, openvino) happen inside
handlers so ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from runtime import __version__
from runtime.errors import LerobotRuntimeError
from runtime.log import setup_logging

log = logging.getLogger(__name__)

COMMAND_MODULES = (
    "runtime.commands.engine",  # export, lower, check, bench engine
    "runtime.commands.serve",  # serve, keys, bench serve
    "runtime.commands.control",  # control, camera, replay, bench loop
    "drivers.cli",  # motors scan/read, bench bus
    "runtime.commands.dataset",  # dataset check
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lerobot-runtime",
        description="On-robot inference service for LeRobot-style arms.",
    )
    parser.add_argument("--version", action="version", version=f"lerobot-runtime {__version__}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging threshold (default: INFO)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    bench_parser = commands.add_parser("bench", help="benchmarks that print side-by-side ratios")
    bench = bench_parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(commands, bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    try:
        status: int = args.func(args)
    except LerobotRuntimeError as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
