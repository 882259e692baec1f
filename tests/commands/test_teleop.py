"""``lerobot-runtime teleop`` and ``bench teleop`` in process: the options, the lead's bound, which leader
is opened with what, the station's refusal (exit 1), and that the station and the leader are closed
however the session ends; the client, leader, station and terminal are stand-ins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import runtime.bench.teleop
import runtime.client
import runtime.commands.teleop
import runtime.teleop.leader
import runtime.teleop.station
import runtime.teleop.terminal
from runtime.cli import build_parser, main
from runtime.protocol.errors import SessionHeldError
from tests.commands.parsers import defaults, handler, options


class Leader:
    def __init__(self, calls: list[Any], *made: Any) -> None:
        self.calls = calls
        calls.append(made)

    def wander(self) -> None:
        self.calls.append("wander")

    def close(self) -> None:
        self.calls.append("leader closed")


class Station:
    calls: list[Any]
    open_fails: BaseException | None = None
    run_stops: BaseException | None = None

    def __init__(self, client: Any, leader: Any, *, who: str, task: str, lead_ms: float, fixed_lead: bool) -> None:
        self.calls.append(
            ("station", client.endpoint, client.timeout_s, type(leader).__name__, who, task, lead_ms, fixed_lead)
        )

    def open(self) -> None:
        self.calls.append("open")
        if self.open_fails is not None:
            raise self.open_fails

    def run(self, keys: Any, show: Any, *, max_steps: int) -> None:
        self.calls.append(("run", keys, type(show).__name__, max_steps))
        if self.run_stops is not None:
            raise self.run_stops

    def close(self) -> None:
        self.calls.append("station closed")


class Client:
    def __init__(self, endpoint: str, timeout_s: float) -> None:
        self.endpoint, self.timeout_s = endpoint, timeout_s

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        Station.calls.append("client closed")


class Show:
    def done(self) -> None:
        Station.calls.append("show done")


class Keys:
    def __enter__(self) -> str:
        Station.calls.append("raw keys")
        return "keys"

    def __exit__(self, *exc: object) -> None:
        Station.calls.append("keys restored")


@pytest.fixture
def station(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Any]:
    calls: list[Any] = []
    Station.calls, Station.open_fails, Station.run_stops = calls, None, None
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path))
    monkeypatch.setenv("LEROBOT_RUNTIME_DATA", str(tmp_path / "share"))
    monkeypatch.setattr(runtime.client, "PolicyClient", Client)
    monkeypatch.setattr(runtime.teleop.station, "Station", Station)
    monkeypatch.setattr(runtime.teleop.terminal, "status_printer", Show)
    monkeypatch.setattr(runtime.teleop.terminal, "raw_keys", Keys)

    class SimLeader(Leader):
        @classmethod
        def start(cls, calibration: str, protocol: str) -> SimLeader:
            return cls(calls, "sim", calibration, protocol)

    class LeaderArm(Leader):
        @classmethod
        def open(cls, port: str, calibration: str, protocol: str) -> LeaderArm:
            return cls(calls, "port", port, calibration, protocol)

    monkeypatch.setattr(runtime.teleop.leader, "SimLeader", SimLeader)
    monkeypatch.setattr(runtime.teleop.leader, "LeaderArm", LeaderArm)
    return calls


def test_the_options() -> None:
    root = build_parser()
    assert options("teleop", root=root) == [
        ("--leader-port", None, None, None, False, "PORT", "the leader arm's serial port (/dev/ttyACM1)"),
        ("--leader-sim", False, None, None, False, None, "a simulated leader that moves by itself (demo)"),
        (
            "--connect",
            "ipc://policy.sock",
            None,
            None,
            False,
            "ENDPOINT",
            "the daemon's endpoint (default ipc://policy.sock in the runtime directory)",
        ),
        ("--protocol", "feetech", None, ["feetech", "dynamixel"], False, None, "the leader's servos"),
        (
            "--calibration",
            None,
            None,
            None,
            False,
            "FILE",
            "the leader's calibration, TOML or LeRobot JSON (default: the simulated SO-101's)",
        ),
        ("--who", "", None, None, False, None, "your name, for the daemon's log and other stations' refusals"),
        ("--task", "teleop", None, None, False, None, "the task text of recorded episodes"),
        ("--timeout-s", 0.5, float, None, False, "S", "reply timeout in seconds (default 0.5)"),
        (
            "--lead-ms",
            8.0,
            float,
            None,
            False,
            "MS",
            "read the leader and send this long before the loop's tick until the trips are measured (default 8); "
            "then the lead follows what they take",
        ),
        ("--fixed-lead", False, None, None, False, None, "keep --lead-ms instead of leading by the measured trips"),
        ("--steps", 0, int, None, False, None, "stop after this many targets (0: until q)"),
    ]
    assert options("bench", "teleop", root=root) == [
        ("--seconds", 10.0, float, None, False, None, "measured seconds per lead (default 10)"),
        ("--rate", 30.0, float, None, False, None, "control rate, Hz (default 30)"),
        ("--json", False, None, None, False, None, "print the result as JSON"),
    ]
    assert defaults("teleop", "--leader-sim", root=root)["leader_port"] is None
    assert handler("teleop", "--leader-port", "p", root=root) is runtime.commands.teleop._teleop
    assert handler("bench", "teleop", root=root) is runtime.commands.teleop._bench_teleop


@pytest.mark.parametrize(
    "argv",
    [["teleop"], ["teleop", "--leader-sim", "--leader-port", "/dev/x"], ["teleop", "--leader-sim", "--protocol", "x"]],
)
def test_a_leader_is_needed_one_way_only(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2


def test_a_simulated_leader_wanders_and_the_station_runs_until_quit_then_everything_closes(
    station: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["teleop", "--leader-sim"]) == 0
    assert station == [
        ("sim", f"{tmp_path}/share/configs/calibration/so101_sim.toml", "feetech"),
        "wander",
        ("station", f"ipc://{tmp_path}/policy.sock", 0.5, "SimLeader", "", "teleop", 8.0, False),
        "open",
        "raw keys",
        ("run", "keys", "Show", 0),
        "keys restored",
        "show done",
        "station closed",
        "client closed",
        "leader closed",
    ]
    assert capsys.readouterr() == (
        "",
        "keys: t take over, h hand back, e/space e-stop, r record, s save, d discard, q quit\n",
    )


def test_a_leader_on_a_port_is_opened_with_its_calibration_and_the_options_reach_the_station(
    station: list[Any],
) -> None:
    argv = ["--leader-port", "/dev/ttyACM1", "--calibration", "lead.toml", "--protocol", "dynamixel"]
    more = ["--connect", "tcp://10.0.0.2:5555", "--who", "ann", "--task", "fold", "--timeout-s", "2"]
    assert main(["teleop", *argv, *more, "--lead-ms", "20", "--fixed-lead", "--steps", "40"]) == 0
    assert station[:2] == [
        ("port", "/dev/ttyACM1", "lead.toml", "dynamixel"),
        ("station", "tcp://10.0.0.2:5555", 2.0, "LeaderArm", "ann", "fold", 20.0, True),
    ]
    assert station[4] == ("run", "keys", "Show", 40)
    assert main(["teleop", "--leader-sim", "--calibration", "mine.toml"]) == 0
    assert station[10] == ("sim", "mine.toml", "feetech")


def test_a_leader_on_a_port_needs_its_calibration(station: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["teleop", "--leader-port", "/dev/ttyACM1"]) == 2
    assert station == []
    assert capsys.readouterr() == (
        "",
        "teleop: --calibration FILE is needed with --leader-port (the leader's own calibration)\n",
    )


@pytest.mark.parametrize("lead", ["0", "100"])
def test_the_lead_is_taken_from_0_to_100_ms(lead: str, station: list[Any]) -> None:
    assert main(["teleop", "--leader-sim", "--lead-ms", lead]) == 0
    assert station[2][-2:] == (float(lead), False)


@pytest.mark.parametrize(("lead", "said"), [("-0.5", "-0.5"), ("100.5", "100.5"), ("1e3", "1000")])
def test_a_lead_outside_0_to_100_ms_is_refused_before_anything_opens(
    lead: str, said: str, station: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["teleop", "--leader-sim", "--lead-ms", lead]) == 2
    assert station == []
    assert capsys.readouterr() == ("", f"teleop: --lead-ms: expected 0..100 ms, got {said}\n")


def test_a_station_the_daemon_refuses_is_exit_1_and_the_leader_is_closed(
    station: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    Station.open_fails = SessionHeldError("the arm is held by bo's station")
    assert main(["teleop", "--leader-sim"]) == 1
    assert station[3:] == ["open", "client closed", "leader closed"]
    assert capsys.readouterr() == ("", "teleop refused [session_held]: the arm is held by bo's station\n")


def test_ctrl_c_ends_the_session_with_exit_0_and_a_failure_still_closes_everything(station: list[Any]) -> None:
    Station.run_stops = KeyboardInterrupt()
    assert main(["teleop", "--leader-sim"]) == 0
    assert station[-4:] == ["show done", "station closed", "client closed", "leader closed"]
    station.clear()
    Station.run_stops = RuntimeError("bus gone")
    assert main(["teleop", "--leader-sim"]) == 1
    assert station[-4:] == ["show done", "station closed", "client closed", "leader closed"]


def test_bench_teleop_hands_over_its_options_and_prints_the_bench_lines_or_the_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs: list[dict[str, Any]] = []
    result = {"rate_hz": 30.0, "leads": {}, "p99_measured_over_fixed": None}

    def run(**kw: Any) -> dict[str, Any]:
        runs.append(kw)
        return result

    monkeypatch.setattr(runtime.bench.teleop, "run_teleop_bench", run)
    monkeypatch.setattr(runtime.bench.teleop, "lines", lambda r: ["line one", f"line two {r['rate_hz']:g}"])
    assert main(["bench", "teleop"]) == 0
    assert main(["bench", "teleop", "--seconds", "2", "--rate", "100"]) == 0
    assert main(["bench", "teleop", "--json"]) == 0
    assert runs == [
        {"seconds": 10.0, "rate_hz": 30.0},
        {"seconds": 2.0, "rate_hz": 100.0},
        {"seconds": 10.0, "rate_hz": 30.0},
    ]
    out = capsys.readouterr().out.split("\n", 4)
    assert out[:4] == ["line one", "line two 30", "line one", "line two 30"]
    assert json.loads(out[4]) == result and out[4].startswith('{\n  "rate_hz": 30.0,\n')
