"""``lerobot-runtime teleop`` (the operator's station) and ``bench teleop``."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from runtime.teleop.config import LEAD_MS

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "ipc://policy.sock"


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    t = commands.add_parser("teleop", help="drive the daemon's arm from a leader arm (the operator's station)")
    leader = t.add_mutually_exclusive_group(required=True)
    leader.add_argument("--leader-port", metavar="PORT", help="the leader arm's serial port (/dev/ttyACM1)")
    leader.add_argument("--leader-sim", action="store_true", help="a simulated leader that moves by itself (demo)")
    t.add_argument(
        "--connect",
        default=DEFAULT_ENDPOINT,
        metavar="ENDPOINT",
        help=f"the daemon's endpoint (default {DEFAULT_ENDPOINT} in the runtime directory)",
    )
    t.add_argument("--protocol", choices=["feetech", "dynamixel"], default="feetech", help="the leader's servos")
    t.add_argument(
        "--calibration",
        metavar="FILE",
        help="the leader's calibration, TOML or LeRobot JSON (default: the simulated SO-101's)",
    )
    t.add_argument("--who", default="", help="your name, for the daemon's log and other stations' refusals")
    t.add_argument("--task", default="teleop", help="the task text of recorded episodes")
    t.add_argument("--timeout-s", type=float, default=0.5, metavar="S", help="reply timeout in seconds (default 0.5)")
    t.add_argument(
        "--lead-ms",
        type=float,
        default=LEAD_MS,
        metavar="MS",
        help=f"read the leader and send this long before the loop's tick until the trips are measured "
        f"(default {LEAD_MS:g}); then the lead follows what they take",
    )
    t.add_argument(
        "--fixed-lead",
        action="store_true",
        help="keep --lead-ms instead of leading by the measured trips",
    )
    t.add_argument("--steps", type=int, default=0, help="stop after this many targets (0: until q)")
    t.set_defaults(func=_teleop)

    b = bench.add_parser(
        "teleop", help="leader move -> follower goal write latency over loopback, the station's lead fixed and measured"
    )
    b.add_argument("--seconds", type=float, default=10.0, help="measured seconds per lead (default 10)")
    b.add_argument("--rate", type=float, default=30.0, help="control rate, Hz (default 30)")
    b.add_argument("--json", action="store_true", help="print the result as JSON")
    b.set_defaults(func=_bench_teleop)


def _teleop(args: argparse.Namespace) -> int:
    from runtime.client import PolicyClient
    from runtime.paths import data_root
    from runtime.protocol.errors import ServerError
    from runtime.server.endpoints import resolve_endpoint
    from runtime.teleop.leader import LeaderArm, SimLeader
    from runtime.teleop.station import HELP, Station
    from runtime.teleop.terminal import raw_keys, status_printer

    if not 0 <= args.lead_ms <= 100:
        print(f"teleop: --lead-ms: expected 0..100 ms, got {args.lead_ms:g}", file=sys.stderr)
        return 2
    calibration = args.calibration or str(data_root() / "configs" / "calibration" / "so101_sim.toml")
    if args.leader_sim:
        sim = SimLeader.start(calibration, args.protocol)
        sim.wander()
        leader: LeaderArm = sim
    else:
        if not args.calibration:
            print(
                "teleop: --calibration FILE is needed with --leader-port (the leader's own calibration)",
                file=sys.stderr,
            )
            return 2
        leader = LeaderArm.open(args.leader_port, calibration, args.protocol)
    try:
        with PolicyClient(resolve_endpoint(args.connect), timeout_s=args.timeout_s) as client:
            station = Station(
                client, leader, who=args.who, task=args.task, lead_ms=args.lead_ms, fixed_lead=args.fixed_lead
            )
            try:
                station.open()
            except ServerError as e:
                print(f"teleop refused [{e.code}]: {e.message}", file=sys.stderr)
                return 1
            print(HELP, file=sys.stderr)
            show = status_printer()
            try:
                with raw_keys() as keys:
                    station.run(keys, show, max_steps=args.steps)
            except KeyboardInterrupt:
                pass
            finally:
                show.done()
                station.close()
    finally:
        leader.close()
    return 0


def _bench_teleop(args: argparse.Namespace) -> int:
    from runtime.bench.teleop import lines, run_teleop_bench

    result = run_teleop_bench(seconds=args.seconds, rate_hz=args.rate)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(lines(result)))
    return 0
