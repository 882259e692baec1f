"""``lerobot-runtime dataset check`` (a recorded dataset against the LeRobot v3.0 format) and
``bench record`` (what recording costs the control loop)."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    dataset = commands.add_parser("dataset", help="recorded datasets (LeRobot v3.0 format)")
    sub = dataset.add_subparsers(dest="dataset_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="check every file of a dataset against the format")
    check.add_argument("root", metavar="DIR", help="the dataset folder (holds meta/info.json)")
    check.set_defaults(func=_check)

    b = bench.add_parser("record", help="recording's cost per codec, one and two cameras, side by side")
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.add_argument("--cameras", default="1,2", help="camera counts to record, comma-separated (default 1,2)")
    b.add_argument(
        "--codecs", default="libsvtav1,libx264", help="video encoders, comma-separated (default libsvtav1,libx264)"
    )
    b.add_argument("--height", type=int, default=480, help="frame height in pixels (default 480)")
    b.add_argument("--width", type=int, default=640, help="frame width in pixels (default 640)")
    b.add_argument("--fps", type=int, default=30, help="control rate in Hz (default 30)")
    b.add_argument("--seconds", type=float, default=6.0, help="recorded loop length per row (default 6)")
    b.set_defaults(func=_bench_record)


def _check(args: argparse.Namespace) -> int:
    from runtime.recording.check import check_dataset

    report = check_dataset(args.root)
    if report.ok:
        cameras = ", ".join(report.cameras) or "none"
        print(f"{report.root}: OK, {report.episodes} episodes, {report.frames} frames, cameras: {cameras}")
        return 0
    print(f"{report.root}: {len(report.problems)} problems")
    for problem in report.problems:
        print(f"  {problem}")
    return 1


def _bench_record(args: argparse.Namespace) -> int:
    import json

    from runtime.bench.record import as_dict, format_table, run_bench

    result = run_bench(
        codecs=[c.strip() for c in args.codecs.split(",") if c.strip()],
        cameras=[int(n) for n in args.cameras.split(",") if n.strip()],
        height=args.height,
        width=args.width,
        fps=args.fps,
        seconds=args.seconds,
    )
    print(json.dumps(as_dict(result), indent=2) if args.json else format_table(result))
    return 0
