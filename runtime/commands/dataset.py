"""``lerobot-runtime dataset check``: a recorded dataset against the LeRobot v3.0 format."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    dataset = commands.add_parser("dataset", help="recorded datasets (LeRobot v3.0 format)")
    sub = dataset.add_subparsers(dest="dataset_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="check every file of a dataset against the format")
    check.add_argument("root", metavar="DIR", help="the dataset folder (holds meta/info.json)")
    check.set_defaults(func=_check)


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
