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
from runtime.errors import BundleError, ConfigError, LerobotRuntimeError, ParityError
from runtime.log import one_line, setup_logging

log = logging.getLogger(__name__)

# Exit statuses (sysexits.h): the unit's RestartPreventExitStatus= lists the ones a restart cannot fix.
EXIT_FAILURE = 1  # anything unexpected (out of memory, no threads left...): a restart may help
EXIT_ERROR = 2  # a refusal with a clear reason that a restart may fix (arm absent, endpoint busy)
EXIT_DATAERR = 65  # the bundle is damaged or fails its parity gate
EXIT_CONFIG = 78  # the configuration is invalid


def exit_status(exc: LerobotRuntimeError) -> int:
    if isinstance(exc, ConfigError):
        return EXIT_CONFIG
    if isinstance(exc, (BundleError, ParityError)):
        return EXIT_DATAERR
    return EXIT_ERROR


COMMAND_MODULES = (
    "runtime.commands.engine",  # export, lower, check, bench engine
    "runtime.commands.serve",  # serve, keys, bench serve, canary, soak
    "runtime.commands.control",  # control, camera, replay, bench loop
    "runtime.commands.teleop",  # teleop, bench teleop
    "runtime.commands.bundle",  # bundle install
    "runtime.commands.status",  # status
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
        log.error("%s", one_line(str(exc)))
        return exit_status(exc)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # MemoryError, "can't start new thread", a bug: one line, not a traceback
        hint = ""
        if isinstance(exc, MemoryError) or "can't start new thread" in str(exc):
            hint = "; the process ran out of memory or threads (check the unit's MemoryMax= and TasksMax=)"
        log.error("%s failed: %s: %s%s", args.command, type(exc).__name__, one_line(str(exc)) or "-", hint)
        log.debug("where it failed", exc_info=True)
        return EXIT_FAILURE
    return status


if __name__ == "__main__":
    sys.exit(main())
