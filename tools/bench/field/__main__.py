"""``python -m tools.bench.field``: the command line of the field workload bench (run from a checkout)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from tools.bench.field.config import FIELD_BUNDLE


def build_parser() -> argparse.ArgumentParser:
    b = argparse.ArgumentParser(
        prog="python -m tools.bench.field",
        description="the daemon under the whole field workload (2 cameras, teleop, recording, infers), "
        "judged at the servos",
    )
    b.add_argument("--seconds", type=float, default=60.0, help="measured seconds (default 60)")
    b.add_argument(
        "--bundle",
        metavar="DIR",
        help=f"bundle to serve (default: a two-camera 480x640 LeRobot ACT, exported once into the bundle store "
        f"as {FIELD_BUNDLE})",
    )
    b.add_argument("--demo", action="store_true", help="serve the small demo bundle (one 96x128 camera)")
    b.add_argument(
        "--kill",
        nargs="?",
        const="station",
        choices=["station", "policy"],
        help="then SIGKILL the daemon while the station (default) or the policy drives; report what the servos got",
    )
    b.add_argument(
        "--floor-seconds",
        type=float,
        default=10.0,
        metavar="S",
        help="how long the simulator's floor is measured beside the daemon (default 10; 0: not)",
    )
    b.add_argument("--codec", default="auto", help="[recording] codec (default auto)")
    b.add_argument(
        "--encoder-delay-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="make every encoder sleep this long per frame: one too slow to keep up (default 0)",
    )
    b.add_argument(
        "--no-pty-boost",
        dest="pty_boost",
        action="store_false",
        help="leave the kernel's pty workers at SCHED_OTHER (by default they run at SCHED_FIFO 1 for the "
        "run, as no worker stands between a USB serial write and the wire)",
    )
    b.add_argument("--keep", metavar="DIR", help="copy the run's files here (config, logs, servo logs, dataset)")
    b.add_argument("--json", action="store_true", help="print the report as JSON")
    return b


def main(argv: Sequence[str] | None = None) -> int:
    from runtime.log import setup_logging
    from tools.bench.field.run import Settings, run_field_bench
    from tools.bench.field.table import format_table

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        Settings(
            seconds=args.seconds,
            floor_s=args.floor_seconds,
            codec=args.codec,
            kill=args.kill,
            encoder_delay_ms=args.encoder_delay_ms,
        )
    except ValueError as e:
        parser.error(str(e))
    setup_logging("INFO")
    result = run_field_bench(
        seconds=args.seconds,
        bundle=args.bundle,
        demo=args.demo,
        kill=args.kill,
        floor_s=args.floor_seconds,
        codec=args.codec,
        keep=args.keep,
        encoder_delay_ms=args.encoder_delay_ms,
        pty_boost=args.pty_boost,
    )
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
