"""The motors and bench bus commands option by option: ids, defaults, what each prints, what reaches the bus.

Scans and reads go to the simulator on a pty through the real CLI entry point; the bus class is
wrapped to see the arguments it gets. ``motors sim`` runs with a stand-in simulator and an event
that "gets" Ctrl-C at once; ``bench bus`` on the simulator with a clock the test sets, so every
figure of the report is known.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

import drivers.vendors
from drivers import bench
from drivers.bus import SerialServoBus
from drivers.calibration import load_calibration
from drivers.cli import _bench, _read, _scan, _sim, parse_ids
from drivers.sim.simulator import ServoSimulator
from runtime.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
SO101 = REPO / "configs/calibration/so101_sim.toml"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


# --- ids -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("1-3", [1, 2, 3]),
        ("1..3", [1, 2, 3]),
        ("1,2,5", [1, 2, 5]),
        (" 1 , 4-5 ,", [1, 4, 5]),
        ("0", [0]),
        ("252", [252]),
        ("250-252", [250, 251, 252]),
        ("7-7", [7]),
    ],
)
def test_ids_in_each_form(text: str, ids: list[int]) -> None:
    assert parse_ids(text) == ids


@pytest.mark.parametrize("text", ["a", "1-b", "1-", "1-2-3", "x,1"])
def test_ids_that_are_not_numbers_are_refused_saying_what_was_expected(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as err:
        parse_ids(text)
    assert str(err.value) == f"expected ids like 1-6 or 1,2,3, got {text!r}"
    assert err.value.__cause__ is None


@pytest.mark.parametrize("text", ["253", "1,253", "250-253", "", ",", "5-3"])
def test_ids_outside_0_to_252_or_none_at_all_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as err:
        parse_ids(text)
    assert str(err.value) == f"servo ids must be within 0..252, got {text!r}"


# --- defaults ------------------------------------------------------------------------------------


def test_the_commands_defaults() -> None:
    parser = build_parser()
    scan = parser.parse_args(["motors", "scan", "--port", "/dev/x"])
    assert (scan.port, scan.protocol, scan.baud, scan.timeout_ms) == ("/dev/x", "feetech", 1_000_000, 20)
    assert scan.ids == list(range(0, 253)) and scan.func is _scan
    read = parser.parse_args(["motors", "read", "--port", "/dev/x"])
    assert (read.ids, read.calibration, read.json, read.func) == ([1, 2, 3, 4, 5, 6], None, False, _read)
    assert (read.protocol, read.baud, read.timeout_ms) == ("feetech", 1_000_000, 20)
    sim = parser.parse_args(["motors", "sim"])
    assert (sim.protocol, sim.ids, sim.calibration, sim.link, sim.func) == (
        "feetech",
        [1, 2, 3, 4, 5, 6],
        None,
        None,
        _sim,
    )
    bus = parser.parse_args(["bench", "bus"])
    assert (bus.json, bus.cycles, bus.func) == (False, 500, _bench)


def test_the_commands_options_are_parsed() -> None:
    read = ["motors", "read", "--port", "p", "--protocol", "dynamixel", "--baud", "57600", "--timeout-ms", "7"]
    args = build_parser().parse_args([*read, "--ids", "2-3", "--json", "--calibration", "c.toml"])
    assert (args.protocol, args.baud, args.timeout_ms, args.ids, args.json, args.calibration) == (
        "dynamixel",
        57600,
        7,
        [2, 3],
        True,
        "c.toml",
    )
    sim = build_parser().parse_args(["motors", "sim", "--protocol", "dynamixel", "--ids", "4", "--link", "/tmp/l"])
    assert (sim.protocol, sim.ids, sim.link) == ("dynamixel", [4], "/tmp/l")
    assert build_parser().parse_args(["bench", "bus", "--json", "--cycles", "9"]).cycles == 9
    for action in ("scan", "read"):
        args = build_parser().parse_args(["motors", action, "--port", "p", "--protocol", "feetech"])
        assert (args.protocol, args.motors_command) == ("feetech", action)
    assert build_parser().parse_args(["motors", "sim", "--protocol", "feetech"]).protocol == "feetech"


@pytest.mark.parametrize(
    "argv",
    [
        ["motors", "scan"],  # --port is required
        ["motors", "read"],
        ["motors", "scan", "--port", "p", "--protocol", "herkulex"],
        ["motors", "read", "--port", "p", "--protocol", "Feetech"],
        ["motors", "sim", "--protocol", "herkulex"],
        ["motors", "scan", "--port", "p", "--ids", "300"],
        ["motors"],  # an action is required
    ],
)
def test_a_bad_command_line_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2


def test_each_option_says_what_it_is_for(capsys: pytest.CaptureFixture[str]) -> None:
    def help_of(*argv: str) -> str:
        with pytest.raises(SystemExit):
            build_parser().parse_args([*argv, "--help"])
        # whole words: each text stands between spaces in the help, the option or command name before it
        return " " + " ".join(capsys.readouterr().out.split()) + " "

    motors = help_of("motors")
    for text in (
        "list the servos that answer a ping (id, model number)",
        "print present positions in degrees (percent for the gripper)",
        "start a simulated arm on a pty and print its path (Ctrl-C stops)",
    ):
        assert f" {text} " in motors
    scan = help_of("motors", "scan")
    for text in (
        "serial port, e.g. /dev/ttyACM0 (or a sim pty path)",
        "baud rate (default 1000000)",
        "reply timeout per transaction",
        "ids to ping (default 0-252)",
    ):
        assert f" {text} " in scan
    read = help_of("motors", "read")
    for text in (
        "calibration TOML or LeRobot JSON (default: raw full range)",
        "ids without a calibration",
        "print JSON instead of a table",
    ):
        assert f" {text} " in read
    sim = help_of("motors", "sim")
    for text in (
        "seed homing offsets and positions from this calibration",
        "path of the port symlink to create (default: a temporary one)",
    ):
        assert f" {text} " in sim
    assert " bus time a sync-read + sync-write cycle of 6 servos over a pty " in help_of("bench")
    assert " --json print JSON " in help_of("bench", "bus")
    assert " motors talk to the servo bus: scan, read, simulate " in help_of()
    assert " motors [-h] ACTION ... " in motors  # the usage line names the action to give


# --- scan and read -----------------------------------------------------------------------------


@pytest.fixture
def bus_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every bus the commands open: its constructor's arguments, and the timeout scan was asked for (the
    ping itself waits at least 100 ms, so a simulator on a loaded machine answers in time)."""
    calls: list[dict[str, Any]] = []
    real = drivers.vendors.bus_class

    def wrapped(protocol: Any) -> type[SerialServoBus]:
        base = real(protocol)

        class Recorded(base):  # type: ignore[valid-type,misc]
            def __init__(self, port: str, calibration: Any, **kw: Any) -> None:
                calls.append({"port": port, "calibration": calibration, **kw})
                super().__init__(port, calibration, **kw)

            def scan(self, ids: Any = range(0, 253), *, timeout_ms: float = 10) -> dict[int, int]:
                calls[-1]["scan"] = (list(ids), timeout_ms)
                return super().scan(ids, timeout_ms=max(timeout_ms, 100))

        return Recorded

    monkeypatch.setattr(drivers.vendors, "bus_class", wrapped)
    return calls


def test_scan_prints_each_servo_found_with_its_model(
    bus_calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    with ServoSimulator("feetech", [1, 4]) as sim:
        assert main(["motors", "scan", "--port", sim.port, "--ids", "0-5"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "  id   model  name",
        "   1     777  sts3215",
        "   4     777  sts3215",
    ]
    (call,) = bus_calls
    assert call["port"] == sim.port and call["baud"] == 1_000_000 and call["timeout_ms"] == 20
    assert dict(call["calibration"].joints) == {}
    assert call["scan"] == ([0, 1, 2, 3, 4, 5], 10)  # half the transaction timeout per ping


@pytest.mark.parametrize(("timeout_ms", "per_ping"), [(3, 2), (4, 2), (5, 2), (6, 3), (21, 10)])
def test_scan_pings_with_half_the_timeout_and_at_least_2_ms(
    bus_calls: list[dict[str, Any]], timeout_ms: int, per_ping: int
) -> None:
    with ServoSimulator("dynamixel", [2]) as sim:
        argv = ["motors", "scan", "--port", sim.port, "--protocol", "dynamixel", "--ids", "2"]
        assert main([*argv, "--timeout-ms", str(timeout_ms), "--baud", "57600"]) == 0
    assert bus_calls[0]["scan"] == ([2], per_ping)
    assert (bus_calls[0]["baud"], bus_calls[0]["timeout_ms"]) == (57600, timeout_ms)


def test_scan_names_a_model_it_does_not_know_unknown(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    feetech = drivers.vendors.bus_class("feetech")
    monkeypatch.setattr(feetech, "spec", dataclasses.replace(feetech.spec, model_names={}))
    with ServoSimulator("feetech", [3]) as sim:
        assert main(["motors", "scan", "--port", sim.port, "--ids", "3"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "   3     777  unknown"


def test_scan_finding_nothing_says_where_it_looked_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    with ServoSimulator("feetech", [7]) as sim:
        assert main(["motors", "scan", "--port", sim.port, "--ids", "1-3", "--baud", "115200"]) == 1
    assert capsys.readouterr().out == f"no servos answered on {sim.port} at 115200 baud (feetech)\n"


def test_read_prints_a_row_per_joint_and_leaves_the_arm_as_it_was(
    bus_calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    with ServoSimulator("feetech", [1, 2]) as sim:
        assert main(["motors", "read", "--port", sim.port, "--ids", "1-2", "--timeout-ms", "30"]) == 0
    # raw 2048 on an uncalibrated 0..4095 range: half a tick above its middle (360 / 4095 degrees a tick)
    assert capsys.readouterr().out.splitlines() == [
        "joint            id    raw   position   temp  volts",
        "id1               1   2048     0.04deg  31C  12.0V",
        "id2               2   2048     0.04deg  31C  12.0V",
    ]
    (call,) = bus_calls
    assert (call["baud"], call["timeout_ms"]) == (1_000_000, 30)
    # reading must not change the arm's state: no torque off at disconnect, no calibration refused
    assert call["disable_torque_on_disconnect"] is False
    assert call["on_calibration_mismatch"] == "ignore"
    assert list(call["calibration"].joints) == ["id1", "id2"]


def test_read_as_json_gives_each_joints_position_and_raw_value(capsys: pytest.CaptureFixture[str]) -> None:
    with ServoSimulator("dynamixel", [3]) as sim:
        assert main(["motors", "read", "--port", sim.port, "--protocol", "dynamixel", "--ids", "3", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == {"id3": {"position": pytest.approx(360 * 0.5 / 4095), "raw": 2048}}
    assert out.count("\n") == 1


def test_read_with_a_calibration_names_its_joints_and_the_gripper_in_percent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cal = load_calibration(SO101)
    with ServoSimulator("feetech", range(1, 7)) as sim:
        assert main(["motors", "read", "--port", sim.port, "--calibration", str(SO101), "--ids", "1"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == list(cal.joints)  # the file's joints, not --ids
    assert [int(r.split()[1]) for r in rows] == [j.id for j in cal.joints.values()]
    units = {r.split()[0]: r[35:38] for r in rows}
    assert units == {name: ("%  " if j.mode == "percent" else "deg") for name, j in cal.joints.items()}
    assert units["gripper"] == "%  "


# --- sim -----------------------------------------------------------------------------------------


class StandInSimulator:
    made: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, protocol: str, ids: Any, **kw: Any) -> None:
        self.port = "/tmp/sim-port"
        StandInSimulator.made.append({"protocol": protocol, "ids": list(ids), **kw})
        self.entered = self.exited = False

    def __enter__(self) -> StandInSimulator:
        StandInSimulator.made[-1]["entered"] = True
        return self

    def __exit__(self, *exc: object) -> None:
        StandInSimulator.made[-1]["exited"] = exc[0] is None  # Ctrl-C does not leave the with block


@pytest.fixture
def sim_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    import drivers.cli as cli
    import drivers.sim.simulator

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    StandInSimulator.made = []
    monkeypatch.setattr(drivers.sim.simulator, "ServoSimulator", StandInSimulator)
    monkeypatch.setattr(cli, "threading", SimpleNamespace(Event=lambda: SimpleNamespace(wait=ctrl_c)))
    before = signal.getsignal(signal.SIGTERM)
    yield StandInSimulator.made
    signal.signal(signal.SIGTERM, before)


def test_sim_prints_its_port_and_how_to_scan_it_and_stops_on_ctrl_c_or_sigterm(
    sim_run: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["motors", "sim", "--protocol", "dynamixel", "--ids", "2-3", "--link", "/tmp/arm"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "/tmp/sim-port",
        "simulated dynamixel servos [2, 3]; try: lerobot-runtime motors scan --port /tmp/sim-port "
        "--protocol dynamixel --ids 0-20   (Ctrl-C to stop)",
    ]
    assert sim_run == [
        {
            "protocol": "dynamixel",
            "ids": [2, 3],
            "positions": None,
            "homing_offsets": None,
            "link": "/tmp/arm",
            "entered": True,
            "exited": True,
        }
    ]
    assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler  # SIGTERM stops it like Ctrl-C


class Stdout:
    """sys.stdout for a reader on a pipe: what had been written at each flush."""

    def __init__(self) -> None:
        self.text = ""
        self.flushed: list[str] = []

    def write(self, s: str) -> int:
        self.text += s
        return len(s)

    def flush(self) -> None:
        self.flushed.append(self.text)


def test_sim_flushes_each_line_so_a_script_reading_the_port_gets_it_at_once(
    sim_run: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = Stdout()
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["motors", "sim", "--ids", "1"]) == 0
    first, second = out.text.splitlines(keepends=True)
    assert first == "/tmp/sim-port\n"
    assert first in out.flushed and first + second in out.flushed


def test_sim_seeded_from_a_calibration_takes_its_ids_middles_and_offsets(
    sim_run: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    cal = load_calibration(SO101)
    assert main(["motors", "sim", "--ids", "9", "--calibration", str(SO101)]) == 0
    (made,) = sim_run
    assert made["ids"] == [1, 2, 3, 4, 5, 6]
    assert made["positions"] == {j.id: round(j.mid) for j in cal.joints.values()}
    assert made["homing_offsets"] == {j.id: j.homing_offset for j in cal.joints.values()}
    assert made["homing_offsets"][1] == -1470 and made["positions"][1] == round((758 + 3292) / 2)
    assert "simulated feetech servos [1, 2, 3, 4, 5, 6]" in capsys.readouterr().out


# --- bench bus -------------------------------------------------------------------------------


REPORT: dict[str, object] = {
    "tick_ms": 33.333,
    "note": "a note",
    "results": [
        {
            "protocol": "feetech",
            "median_ms": 0.5,
            "p90_ms": 0.61234,
            "p99_ms": 1.0,
            "wire_ms_1mbaud": 2.08,
            "wire_bytes": 208,
            "cycles_per_tick_median": 66.7,
            "cycles_per_tick_p99": 33.3,
            "cycles_per_tick_wire": 16.0,
        }
    ],
}

TABLE = [
    "bus cycle = sync read (goal..temperature block) + sync write goals, 6 servos",
    "protocol     median      p90      p99  wire@1M  bytes  fit/tick  fit(p99) fit(wire)",
    "feetech     0.500ms  0.612ms  1.000ms  2.080ms    208      66.7      33.3      16.0",
    "30 Hz tick = 33.333 ms. Note: a note.",
]


def test_the_bench_table_lines_up_each_figure() -> None:
    assert bench.format_table(REPORT).splitlines() == TABLE


@pytest.mark.parametrize("as_json", [True, False])
def test_bench_bus_prints_the_report_as_json_or_a_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    asked: list[int] = []
    monkeypatch.setattr(bench, "run", lambda cycles: asked.append(cycles) or REPORT)
    assert main(["bench", "bus", "--cycles", "12", *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    assert asked == [12]
    assert out == (json.dumps(REPORT, indent=2) if as_json else "\n".join(TABLE)) + "\n"


def test_percentiles_of_the_cycle_times_are_the_nearest_rank() -> None:
    eleven = [float(v) for v in range(11)]
    assert bench._percentile(eleven, 0.9) == 9.0
    assert bench._percentile(eleven, 0.99) == 10.0  # round(9.9)
    assert bench._percentile(eleven, 0.94) == 9.0  # round(9.4)
    assert bench._percentile(eleven, 1.0) == 10.0
    assert bench._percentile([3.0], 0.99) == 3.0


def test_a_bench_cycle_is_timed_from_its_read_to_the_end_of_its_write_after_the_warmup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 3 warm-up cycles read the clock once each; then each of 10 cycles takes 1..10 ms, shuffled
    durations = [4, 9, 1, 10, 2, 8, 3, 7, 5, 6]
    stamps = [0, 0, 0]
    t = 1_000_000_000
    for d in durations:
        stamps += [t, t + d * 1_000_000]
        t += 50_000_000
    ticks = iter(stamps)
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter_ns=lambda: next(ticks)))
    result = bench.bench_protocol("feetech", cycles=10, warmup=3)
    assert next(ticks, None) is None  # every stamp used: no cycle more, none less
    assert dataclasses.asdict(result) == {
        "protocol": "feetech",
        "servos": 6,
        "cycles": 10,
        "state_block_bytes": 22,
        "median_ms": 5.5,
        "p90_ms": 9.0,  # index round(0.9 * 9) = 8 of 1..10
        "p99_ms": 10.0,
        # sync read of 6 ids (14 bytes), 6 replies of the 22-byte block (28 each), sync write of 6 goals (26)
        "wire_bytes": 14 + 6 * 28 + 26,
        "wire_ms_1mbaud": 2.08,  # 10 bits a byte at 1 Mbaud
        "cycles_per_tick_median": round(1000 / 30 / 5.5, 1),
        "cycles_per_tick_p99": round(1000 / 30 / 10.0, 1),
        "cycles_per_tick_wire": round(1000 / 30 / 2.08, 1),
    }


def test_the_bench_figures_keep_four_decimals_and_its_p99_is_not_the_slowest_cycle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 101 cycles of 10.123456, 20.123456, ... 1010.123456 ms, shuffled, after 2 warm-up cycles
    durations_ns = [k * 10_000_000 + 123_456 for k in range(1, 102)]
    random.Random(5).shuffle(durations_ns)
    stamps = [0, 0]
    for i, d in enumerate(durations_ns):
        start = 10**12 + i * 2 * 10**9
        stamps += [start, start + d]
    ticks = iter(stamps)
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter_ns=lambda: next(ticks)))
    result = bench.bench_protocol("feetech", cycles=101, warmup=2)
    assert next(ticks, None) is None
    assert (result.median_ms, result.p90_ms, result.p99_ms) == (510.1235, 910.1235, 1000.1235)  # ranks 50, 90, 99
    assert result.cycles_per_tick_median == round(1000 / 30 / 510.123456, 1)
    assert result.cycles_per_tick_p99 == round(1000 / 30 / 1000.123456, 1)


def test_a_bench_cycle_reads_the_state_and_writes_alternating_goals(monkeypatch: pytest.MonkeyPatch) -> None:
    feetech = drivers.vendors.bus_class("feetech")
    writes: list[dict[str, float]] = []
    reads: list[int] = []
    real_write, real_read = feetech.write_goals, feetech.read_state
    monkeypatch.setattr(
        feetech, "write_goals", lambda self, goals: (writes.append(dict(goals)), real_write(self, goals))[1]
    )
    monkeypatch.setattr(feetech, "read_state", lambda self: (reads.append(1), real_read(self))[1])
    result = bench.bench_protocol("feetech", servos=2, cycles=3, warmup=1)
    assert writes == [
        {"id1": 5.0, "id2": 5.0},
        {"id1": -5.0, "id2": -5.0},
        {"id1": 5.0, "id2": 5.0},
        {"id1": -5.0, "id2": -5.0},
    ]
    assert len(reads) == 4
    assert (result.servos, result.cycles) == (2, 3)
    assert result.wire_bytes == 10 + 2 * 28 + 14  # sync read of 2 ids, 2 replies, sync write of 2 goals
    assert result.wire_ms_1mbaud == 0.8 and result.cycles_per_tick_wire == 41.7  # 33.333 ms / 0.8 ms


def test_a_bench_cycle_waits_half_a_second_for_the_simulators_replies(monkeypatch: pytest.MonkeyPatch) -> None:
    feetech = drivers.vendors.bus_class("feetech")
    timeouts: list[float] = []
    real_init = feetech.__init__

    def init(self: Any, port: str, calibration: Any, **kw: Any) -> None:
        timeouts.append(kw["timeout_ms"])
        real_init(self, port, calibration, **kw)

    monkeypatch.setattr(feetech, "__init__", init)
    bench.bench_protocol("feetech", servos=1, cycles=1, warmup=0)
    assert timeouts == [500]


def test_the_bench_simulates_as_many_servos_as_it_times() -> None:
    result = bench.bench_protocol("feetech", servos=8, cycles=1, warmup=0)
    assert (result.servos, result.wire_bytes) == (8, (8 + 8) + 8 * 28 + (8 + 8 * 3))
    assert result.cycles_per_tick_wire == round(1000 / 30 / 2.72, 1)


def test_bench_run_measures_both_protocols_with_the_cycles_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, int]] = []

    def fake(protocol: str, *, cycles: int) -> Any:
        asked.append((protocol, cycles))
        return SimpleNamespace(protocol=protocol)

    monkeypatch.setattr(bench, "bench_protocol", fake)
    monkeypatch.setattr(bench, "asdict", lambda r: {"protocol": r.protocol})
    report = bench.run(cycles=7)
    assert asked == [("feetech", 7), ("dynamixel", 7)]
    assert report == {
        "tick_ms": 33.333,
        "note": bench.PTY_NOTE,
        "results": [{"protocol": "feetech"}, {"protocol": "dynamixel"}],
    }
    asked.clear()
    bench.run()
    assert asked == [("feetech", 500), ("dynamixel", 500)]
    assert "no baud rate" in bench.PTY_NOTE and "10 bits/byte" in bench.PTY_NOTE
