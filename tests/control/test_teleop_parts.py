"""The teleop parts on their own: request parsing and its errors, the ``[teleop]`` checks, the
hand-over, the session rules, and the station's keys and timing without a terminal or a daemon."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest

from runtime.arm_control.teleop_session import NoSession, SessionHeld, TeleopSessions
from runtime.control.target import Handover, TeleopTarget
from runtime.errors import ConfigError
from runtime.protocol import codec
from runtime.protocol.errors import BadRequestError, NoSessionError, SessionHeldError
from runtime.protocol.messages import TeleopRequest
from runtime.teleop.config import TeleopConfig
from runtime.teleop.station import Station

LIMIT = 1 << 20


def decode(kind: str, body: dict[str, Any]) -> Any:
    return codec.decode_request([msgpack.packb({"v": 1, "id": 3, "kind": kind, "body": body})], LIMIT)


def test_a_target_round_trips() -> None:
    frames = codec.encode_request("teleop.target", 9, body={"session": "ab", "seq": 4, "positions": [1.5, -2, 0.0]})
    req = codec.decode_request(frames, LIMIT)
    assert req == TeleopRequest(9, "teleop.target", session="ab", seq=4, positions=(1.5, -2.0, 0.0))


@pytest.mark.parametrize(
    ("kind", "body", "field", "says"),
    [
        ("teleop.target", {"session": "ab", "seq": 1}, "body.positions", "nothing"),
        ("teleop.target", {"session": "ab", "seq": -1, "positions": [0.0]}, "body.seq", "-1"),
        ("teleop.target", {"session": "ab", "seq": True, "positions": [0.0]}, "body.seq", "True"),
        ("teleop.target", {"session": "ab", "seq": 1, "positions": [0.0, float("nan")]}, "body.positions[1]", "nan"),
        ("teleop.target", {"session": "ab", "seq": 1, "positions": [0.0, "x"]}, "body.positions[1]", "'x'"),
        ("teleop.target", {"session": "ab", "seq": 1, "positions": []}, "body.positions", "[]"),
        ("teleop.take_over", {}, "body.session", "nothing"),
        ("teleop.take_over", {"session": "ab", "who": "me"}, "body.who", "who"),
        ("teleop.episode_start", {"session": "ab", "task": " "}, "body.task", "' '"),
        ("teleop.open", {"who": 5}, "body.who", "5"),
    ],
)
def test_bad_teleop_requests_name_the_field(kind: str, body: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(BadRequestError) as err:
        decode(kind, body)
    assert err.value.field == field and says in str(err.value), str(err.value)
    assert err.value.request_id == 3


def test_teleop_config_names_the_bad_key() -> None:
    with pytest.raises(ConfigError, match=r"teleop\.handover: .*'jump'"):
        TeleopConfig(handover="jump")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"teleop\.deadman_ms: .*0"):
        TeleopConfig(deadman_ms=0)
    with pytest.raises(ConfigError, match=r"teleop\.session_timeout_ms"):
        TeleopConfig(deadman_ms=500, session_timeout_ms=100)
    with pytest.raises(ConfigError, match=r"teleop\.leader_calibration"):
        TeleopConfig(leader_port="/dev/ttyACM1")


def test_move_handover_approaches_at_the_set_speed_then_tracks() -> None:
    t = Handover(TeleopConfig(handover_speed_deg_s=30.0), period_s=0.1)  # 3 per tick
    t.begin()
    last = np.zeros(2)
    target = np.array([10.0, -4.0])
    goals = []
    for _ in range(6):
        last = t.goal(target, last, last)
        goals.append(last.copy())
    assert np.abs(np.diff(np.vstack([np.zeros(2), *goals]), axis=0)).max() <= 3.0 + 1e-9
    assert t.phase == "tracking" and np.array_equal(goals[-1], target)


def test_wait_handover_holds_until_the_leader_is_close() -> None:
    t = Handover(TeleopConfig(handover="wait", handover_tolerance_deg=2.0), period_s=0.1)
    t.begin()
    held = np.array([0.0])
    assert t.goal(np.array([5.0]), held, held) is held and t.phase == "handover"
    assert t.goal(np.array([1.5]), held, held)[0] == 1.5 and t.phase == "tracking"


def test_targets_out_of_order_are_dropped_and_stale_ones_trip_the_deadman() -> None:
    t = TeleopTarget(1, TeleopConfig(deadman_ms=100))
    assert t.put(5, np.array([1.0]), now=10.0)
    assert not t.put(4, np.array([2.0]), now=10.01) and t.out_of_order == 1
    target = t.fresh(10.05)
    assert target is not None and target.seq == 5
    assert t.fresh(10.11) is None


def test_one_session_at_a_time_and_losing_it() -> None:
    s = TeleopSessions(timeout_s=1.0)
    alice = s.open("alice", 0.0)
    with pytest.raises(SessionHeld, match="held by alice"):
        s.open("bob", 0.5)
    with pytest.raises(NoSession, match="held by alice"):
        s.check("not-it", 0.6)
    s.check(alice.token, 0.9)
    assert s.expire(1.5) is None  # heard at 0.9
    lost = s.expire(2.0)
    assert lost is not None and lost.who == "alice" and s.current is None
    assert s.open("bob", 2.1).who == "bob"


class FakeClient:
    """Answers like the daemon's handler; records the calls."""

    def __init__(self, refuse: set[str] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.refuse = refuse or set()

    def teleop(self, command: str, **body: Any) -> tuple[dict[str, Any], float]:
        self.calls.append((command, body))
        if command in self.refuse:
            raise (SessionHeldError if command == "open" else NoSessionError)(f"{command} refused: held by bob")
        if command == "open":
            return {"session": "tok", "rate_hz": 50.0, "joints": ["a", "b"], "mode": "idle"}, 1.0
        return {"mode": "teleop", "phase": "tracking", "estop": "", "clamps": 2, "next_tick_ms": 10.0}, 2.0

    def control(self, command: str, **body: Any) -> dict[str, Any]:
        self.calls.append((f"control.{command}", body))
        return {}


class FakeLeader:
    joints = ("a", "b")

    def read(self) -> np.ndarray:
        return np.array([1.0, 2.0])

    def close(self) -> None:
        pass


def test_station_keys_map_to_requests() -> None:
    client = FakeClient()
    station = Station(client, FakeLeader(), who="alice", task="pick")  # type: ignore[arg-type]
    station.open()
    for key in "thrsde?":
        station.key(key)
    kinds = [c for c, _ in client.calls]
    assert kinds == [
        "open",
        "take_over",
        "hand_back",
        "episode_start",
        "episode_stop",
        "episode_discard",
        "control.estop",
    ]
    assert client.calls[3][1] == {"session": "tok", "task": "pick"}
    assert station.key("q") == "quit" and station.quit


def test_station_status_line_and_phase_lock() -> None:
    client = FakeClient()
    station = Station(client, FakeLeader(), lead_ms=4.0)  # type: ignore[arg-type]
    station.open()
    station.step()
    assert client.calls[-1] == ("target", {"session": "tok", "seq": 1, "positions": [1.0, 2.0]})
    line = station.status.line()
    assert "teleop (tracking)" in line and "clamps 2" in line and "no e-stop" in line
    # the loop ticks about 10 ms after the reply: the next send lands 4 ms before a tick, half a period away
    now = station._loop_tick_at - 0.010  # type: ignore[operator]
    at = station.next_send_at(now)
    period = 1 / 50
    assert at - now >= period / 2 - 1e-9
    offset = (station._loop_tick_at - station.lead_s - at) / period  # type: ignore[operator]
    assert offset == pytest.approx(round(offset), abs=1e-6)


def test_a_refused_station_says_who_holds_the_arm() -> None:
    station = Station(FakeClient(refuse={"open"}), FakeLeader())  # type: ignore[arg-type]
    station.step()  # not open: tries to open, and shows why not
    assert "held by bob" in station.status.message and not station.session


def test_raw_keys_reads_one_key_at_a_time_and_restores_the_terminal() -> None:
    import os
    import termios
    import time

    from runtime.teleop.terminal import raw_keys

    master, slave = os.openpty()
    try:
        with open(slave, encoding="utf-8", closefd=False) as tty_in:
            before = termios.tcgetattr(slave)
            with raw_keys(tty_in) as keys:
                assert keys() is None  # nothing pending: returns at once
                os.write(master, b"t")  # no Enter: cbreak mode delivers it
                end = time.monotonic() + 2
                got = None
                while got is None and time.monotonic() < end:
                    got = keys()
                assert got == "t"
            assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.parametrize("lead", ["-1", "150", "nan"])
def test_teleop_refuses_a_lead_outside_0_to_100_ms(lead: str, capsys: pytest.CaptureFixture[str]) -> None:
    from runtime.cli import main

    assert main(["teleop", "--leader-sim", "--lead-ms", lead]) == 2
    assert f"teleop: --lead-ms: expected 0..100 ms, got {float(lead):g}" in capsys.readouterr().err


def test_a_station_leads_the_loops_tick_by_8_ms_unless_told() -> None:
    from runtime.teleop.config import LEAD_MS

    assert LEAD_MS == 8.0
    station = Station(None, FakeLeader())  # type: ignore[arg-type]
    assert station.lead_s == pytest.approx(0.008)
