"""``lerobot-runtime control``, ``camera``, ``replay`` and ``bench loop``."""

from __future__ import annotations

import argparse
import json
import logging
import sys

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "ipc://policy.sock"
COMMANDS = ("start", "stop", "estop", "release", "status", "dump", "teleop")


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    c = commands.add_parser("control", help="start/stop motion, e-stop, release, status of the daemon's arm")
    c.add_argument("control_command", choices=COMMANDS)
    c.add_argument(
        "--connect",
        default=DEFAULT_ENDPOINT,
        metavar="ENDPOINT",
        help=f"the daemon's endpoint (default {DEFAULT_ENDPOINT} in the runtime directory)",
    )
    c.add_argument("--who", default="", help="your name, for the daemon's log")
    c.add_argument("--reason", default="", help="with estop: why (logged and shown in status)")
    c.add_argument(
        "--task", default="", help="with start: the instruction a language policy (SmolVLA) follows from now on"
    )
    c.add_argument(
        "--latch",
        type=int,
        metavar="N",
        help="with release: the e-stop latch to release (default: the one control status shows now; "
        "an e-stop after that still wins)",
    )
    c.add_argument("--timeout-s", type=float, default=2.0, metavar="S", help="reply timeout in seconds (default 2)")
    c.add_argument("--json", action="store_true", help="print the reply as JSON")
    c.set_defaults(func=_control)

    cam = commands.add_parser("camera", help="publish camera frames (V4L2/UVC or synthetic) to the control loop")
    src = cam.add_mutually_exclusive_group()
    src.add_argument("--device", metavar="DEV", help="a V4L2 device (/dev/video0) or index (needs the camera extra)")
    src.add_argument("--synthetic", action="store_true", help="a moving test pattern (the default)")
    cam.add_argument("--input", default="observation.images.front", help="the policy input the frames fill")
    cam.add_argument(
        "--endpoint",
        default="ipc://camera-front.sock",
        help="where to publish (PUB; relative ipc paths live in the runtime directory)",
    )
    cam.add_argument("--fps", type=float, default=30.0)
    cam.add_argument("--width", type=int, default=128)
    cam.add_argument("--height", type=int, default=96)
    cam.add_argument("--frames", type=int, default=0, help="stop after this many frames (0: run until Ctrl-C)")
    cam.set_defaults(func=_camera)

    r = commands.add_parser("replay", help="summarise a flight recording and draw it to a PNG")
    r.add_argument("file", metavar="FILE", help="a flight-*.npz from the state directory")
    r.add_argument("--png", metavar="OUT", help="where to draw it (default: FILE with .png)")
    r.add_argument("--no-png", action="store_true", help="summary only")
    r.add_argument("--json", action="store_true", help="print the summary as JSON")
    r.set_defaults(func=_replay)

    b = bench.add_parser(
        "loop", help="control-loop tick jitter and starvation on simulated servos while inference runs"
    )
    b.add_argument("--bundle", metavar="DIR", help="bundle to run (default: the built-in ACT-size bundle)")
    b.add_argument("--demo", action="store_true", help="use the small demo bundle instead of the ACT-size one")
    b.add_argument("--seconds", type=float, default=10.0, help="measured seconds per case (default 10)")
    b.add_argument("--rates", default="30,100", help="control rates to run, Hz (default 30,100)")
    b.add_argument("--steps", default="100,10", help="n_action_steps values to run (default 100,10)")
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.set_defaults(func=_bench_loop)


def _control(args: argparse.Namespace) -> int:
    from runtime.client import PolicyClient
    from runtime.protocol.errors import ServerError
    from runtime.server.endpoints import resolve_endpoint

    endpoint = resolve_endpoint(args.connect)
    with PolicyClient(endpoint, timeout_s=args.timeout_s) as client:
        try:
            latch = args.latch
            if args.control_command == "release" and latch is None:
                # The latch the operator sees now; the daemon refuses the release if another came since.
                estop = client.control("status")["estop"]
                if not estop["latched"]:
                    print("control release refused: no e-stop is latched", file=sys.stderr)
                    return 1
                latch = int(estop["latch"])
                print(f"control release: releasing e-stop latch {latch} ({estop['reason']})")
            body = client.control(args.control_command, who=args.who, reason=args.reason, latch=latch, task=args.task)
        except ServerError as e:
            print(f"control {args.control_command} refused [{e.code}]: {e.message}", file=sys.stderr)
            return 1
    if args.control_command == "status":
        from runtime.arm_control.report import format_control_status

        print(json.dumps(body, indent=2) if args.json else format_control_status(body))
    elif args.json:
        print(json.dumps(body))
    else:
        print(f"control {args.control_command}: " + ", ".join(f"{k} {v}" for k, v in body.items()))
    return 0


def _camera(args: argparse.Namespace) -> int:
    from runtime.producers.camera import CameraPublisher, FrameSource, OpenCVSource, SyntheticSource

    source: FrameSource = (
        OpenCVSource(args.device, args.width, args.height, args.fps)
        if args.device
        else SyntheticSource(args.width, args.height)
    )
    pub = CameraPublisher(source, args.input, args.endpoint, args.fps)
    log.info(
        "camera: publishing %s (%dx%d at %g fps) on %s",
        args.device or "a synthetic pattern",
        args.width,
        args.height,
        args.fps,
        pub.endpoint,
    )
    try:
        pub.run(args.frames or None)
    except KeyboardInterrupt:
        pass
    finally:
        pub.close()
    return 0


def _replay(args: argparse.Namespace) -> int:
    from pathlib import Path

    from runtime.control.replay import draw, format_summary, summarize

    summary = summarize(args.file)
    if not args.no_png:
        out = draw(args.file, args.png or Path(args.file).with_suffix(".png"))
        summary["png"] = str(out)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    if "png" in summary and not args.json:
        print(f"drawn to {summary['png']}")
    return 0


def _bench_loop(args: argparse.Namespace) -> int:
    from runtime.bench.loop import format_table, run_loop_bench

    rates = [float(r) for r in args.rates.split(",") if r]
    steps = [int(s) for s in args.steps.split(",") if s]
    result = run_loop_bench(bundle=args.bundle, demo=args.demo, seconds=args.seconds, rates=rates, steps=steps)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0
