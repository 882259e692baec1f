"""``lerobot-runtime motors ...`` and ``lerobot-runtime bench bus``.

Heavy work (pyserial, simulators) happens inside the handlers so ``--help`` stays instant.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import threading

log = logging.getLogger(__name__)


def parse_ids(text: str) -> list[int]:
    """``1-6``, ``1..6`` or ``1,2,5`` -> a list of ids."""
    ids: list[int] = []
    try:
        for part in text.replace("..", "-").split(","):
            part = part.strip()
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                ids.extend(range(lo, hi + 1))
            elif part:
                ids.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ids like 1-6 or 1,2,3, got {text!r}") from None
    bad = [i for i in ids if not 0 <= i <= 252]
    if bad or not ids:
        raise argparse.ArgumentTypeError(f"servo ids must be within 0..252, got {text!r}")
    return ids


def _add_bus_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", required=True, help="serial port, e.g. /dev/ttyACM0 (or a sim pty path)")
    p.add_argument("--protocol", choices=["feetech", "dynamixel"], default="feetech")
    p.add_argument("--baud", type=int, default=1_000_000, help="baud rate (default 1000000)")
    p.add_argument("--timeout-ms", type=int, default=20, help="reply timeout per transaction")


def register(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    motors = commands.add_parser("motors", help="talk to the servo bus: scan, read, simulate")
    sub = motors.add_subparsers(dest="motors_command", metavar="ACTION", required=True)

    p = sub.add_parser("scan", help="list the servos that answer a ping (id, model number)")
    _add_bus_args(p)
    p.add_argument("--ids", type=parse_ids, default=list(range(0, 253)), help="ids to ping (default 0-252)")
    p.set_defaults(func=_scan)

    p = sub.add_parser("read", help="print present positions in degrees (percent for the gripper)")
    _add_bus_args(p)
    p.add_argument("--calibration", help="calibration TOML or LeRobot JSON (default: raw full range)")
    p.add_argument("--ids", type=parse_ids, default=list(range(1, 7)), help="ids without a calibration")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_read)

    p = sub.add_parser("sim", help="start a simulated arm on a pty and print its path (Ctrl-C stops)")
    p.add_argument("--protocol", choices=["feetech", "dynamixel"], default="feetech")
    p.add_argument("--ids", type=parse_ids, default=list(range(1, 7)))
    p.add_argument("--calibration", help="seed homing offsets and positions from this calibration")
    p.add_argument("--link", help="path of the port symlink to create (default: a temporary one)")
    p.set_defaults(func=_sim)

    b = bench.add_parser("bus", help="time a sync-read + sync-write cycle of 6 servos over a pty")
    b.add_argument("--json", action="store_true", help="print JSON")
    b.add_argument("--cycles", type=int, default=500)
    b.set_defaults(func=_bench)


def _open(args: argparse.Namespace, calibration: object) -> object:
    from drivers.vendors import bus_class

    return bus_class(args.protocol)(
        args.port,
        calibration,  # type: ignore[arg-type]
        baud=args.baud,
        timeout_ms=args.timeout_ms,
        on_calibration_mismatch="ignore",
        disable_torque_on_disconnect=False,  # reading must not change the arm's state
    )


def _scan(args: argparse.Namespace) -> int:
    from drivers.calibration import Calibration
    from drivers.vendors import bus_class

    bus = bus_class(args.protocol)(args.port, Calibration({}), baud=args.baud, timeout_ms=args.timeout_ms)
    with bus:
        found = bus.scan(args.ids, timeout_ms=max(2, args.timeout_ms // 2))
    names = bus.spec.model_names
    if not found:
        print(f"no servos answered on {args.port} at {args.baud} baud ({args.protocol})")
        return 1
    print(f"{'id':>4}  {'model':>6}  name")
    for servo_id, model in found.items():
        print(f"{servo_id:>4}  {model:>6}  {names.get(model, 'unknown')}")
    return 0


def _read(args: argparse.Namespace) -> int:
    from drivers.bus import SerialServoBus
    from drivers.calibration import Calibration, load_calibration

    cal = load_calibration(args.calibration) if args.calibration else Calibration.uncalibrated(args.ids)
    bus = _open(args, cal)
    assert isinstance(bus, SerialServoBus)
    with bus:
        state = bus.read_state()
    if args.json:
        print(json.dumps({n: {"position": s.position, "raw": s.raw_position} for n, s in state.items()}))
        return 0
    print(f"{'joint':<15} {'id':>3} {'raw':>6} {'position':>10}  {'temp':>5} {'volts':>6}")
    for name, s in state.items():
        unit = "%" if cal.joints[name].mode == "percent" else "deg"
        print(
            f"{name:<15} {cal.joints[name].id:>3} {s.raw_position:>6} {s.position:>8.2f}{unit:<3}"
            f"{s.temperature_c:>4}C {s.voltage_v:>5.1f}V"
        )
    return 0


def _sim(args: argparse.Namespace) -> int:
    from drivers.calibration import load_calibration
    from drivers.sim.simulator import ServoSimulator

    ids, positions, offsets = args.ids, None, None
    if args.calibration:
        cal = load_calibration(args.calibration)
        ids = [j.id for j in cal.joints.values()]
        positions = {j.id: round(j.mid) for j in cal.joints.values()}
        offsets = {j.id: j.homing_offset for j in cal.joints.values()}
    sim = ServoSimulator(args.protocol, ids, positions=positions, homing_offsets=offsets, link=args.link)
    # SIGTERM (systemd, kill) stops it as cleanly as Ctrl-C: the port symlink is removed.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with sim:
        print(sim.port, flush=True)
        print(
            f"simulated {args.protocol} servos {ids}; try: lerobot-runtime motors scan --port {sim.port} "
            f"--protocol {args.protocol} --ids 0-20   (Ctrl-C to stop)",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


def _bench(args: argparse.Namespace) -> int:
    from drivers import bench as bus_bench

    report = bus_bench.run(cycles=args.cycles)
    print(json.dumps(report, indent=2) if args.json else bus_bench.format_table(report))
    return 0
