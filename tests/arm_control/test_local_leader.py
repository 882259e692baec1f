"""A leader on the robot's own computer, read by the daemon: in the loop's joint order, one read per
tick of a ticker at the loop's period (a stand-in the test steps), each pose put with the next number,
a failing read counted and logged once per run of failures, and the thread's start and stop."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest

from drivers.errors import BusError, ReplyTimeoutError
from runtime.arm_control import local_leader as local_module
from runtime.arm_control.local_leader import LocalLeader


class Leader:
    """Returns (or raises) the scripted readings in turn, then the last one forever."""

    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.ordered: list[tuple[str, ...]] = []
        self.closed = 0
        self.reads = 0

    def order(self, names: Any) -> None:
        self.ordered.append(tuple(names))

    def read(self) -> np.ndarray:
        self.reads += 1
        item = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[no-any-return]

    def close(self) -> None:
        self.closed += 1


class Teleop:
    def __init__(self) -> None:
        self.puts: list[tuple[int, np.ndarray, float]] = []

    def put(self, seq: int, positions: np.ndarray, now: float) -> bool:
        self.puts.append((seq, positions, now))
        return True


def loop() -> Any:
    return SimpleNamespace(names=("shoulder", "elbow"), period=0.125, teleop=Teleop())


class Ticker:
    made: ClassVar[list[Ticker]] = []

    def __init__(self, period: float) -> None:
        self.period = period
        self.started = 0
        self.waits = 0
        Ticker.made.append(self)

    def start(self) -> float:
        self.started += 1
        return 0.0

    def wait(self) -> tuple[int, float, float]:
        self.waits += 1
        time.sleep(0.001)  # on the test's own thread this is nothing; on the leader's thread, a tick
        return self.waits, 0.0, 0.0


class Stop:
    """The stop signal, set after ``n`` passes of the read loop."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.asked = 0

    def is_set(self) -> bool:
        self.asked += 1
        return self.asked > self.n

    def set(self) -> None:
        self.n = 0


@pytest.fixture(autouse=True)
def ticker(monkeypatch: pytest.MonkeyPatch) -> None:
    Ticker.made = []
    monkeypatch.setattr(local_module, "Ticker", Ticker)


def test_the_leader_reads_in_the_loops_joint_order_on_a_daemon_thread() -> None:
    leader = Leader([np.zeros(2)])
    ll = LocalLeader(leader, loop(), "leader on /dev/ttyACM1")  # type: ignore[arg-type]
    assert leader.ordered == [("shoulder", "elbow")]
    assert ll.who == "leader on /dev/ttyACM1" and (ll.reads, ll.failures) == (0, 0)
    assert ll._thread.name == "local-leader" and ll._thread.daemon and not ll._thread.is_alive()


def test_each_tick_puts_the_pose_with_the_next_number_and_failures_are_counted_not_numbered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b, c = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0])
    glitch = ReplyTimeoutError("no reply from servo 2", servo_id=2)
    leader = Leader([a, glitch, BusError("bus gone"), b, c])
    lp = loop()
    ll = LocalLeader(leader, lp, "bench")  # type: ignore[arg-type]
    ll._stop = Stop(5)  # type: ignore[assignment]
    before = time.monotonic()
    with caplog.at_level(logging.INFO, logger="runtime.arm_control.local_leader"):
        ll._run()
    after = time.monotonic()
    [t] = Ticker.made
    assert t.period == 0.125 and t.started == 1 and t.waits == 5
    assert [(seq, pos) for seq, pos, _ in lp.teleop.puts] == [(1, a), (2, b), (3, c)]
    stamps = [now for _, _, now in lp.teleop.puts]
    assert before <= stamps[0] <= stamps[1] <= stamps[2] <= after
    assert (ll.reads, ll.failures) == (3, 2)
    # a run of failures is logged once, and its end once
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "local leader (bench): read failed: no reply from servo 2; the deadman holds the arm"),
        (logging.INFO, "local leader (bench): reading again"),
    ]


def test_a_leader_failing_from_the_start_is_logged_once_and_puts_nothing(caplog: pytest.LogCaptureFixture) -> None:
    leader = Leader([BusError("port closed")])
    lp = loop()
    ll = LocalLeader(leader, lp, "bench")  # type: ignore[arg-type]
    ll._stop = Stop(3)  # type: ignore[assignment]
    with caplog.at_level(logging.INFO, logger="runtime.arm_control.local_leader"):
        ll._run()
    assert lp.teleop.puts == [] and (ll.reads, ll.failures) == (0, 3)
    assert [r.getMessage() for r in caplog.records] == [
        "local leader (bench): read failed: port closed; the deadman holds the arm"
    ]


def test_start_reads_on_its_own_thread_and_stop_ends_it_and_closes_the_leader() -> None:
    leader = Leader([np.array([1.0, 2.0])])
    lp = loop()
    ll = LocalLeader(leader, lp, "bench")  # type: ignore[arg-type]
    ll.start()
    done = threading.Event()
    for _ in range(2000):  # up to a few seconds on a loaded machine; not a timing assertion
        if ll.reads >= 3:
            done.set()
            break
        time.sleep(0.002)
    ll.stop()
    assert done.is_set()
    assert not ll._thread.is_alive() and leader.closed == 1
    assert [seq for seq, _, _ in lp.teleop.puts] == list(range(1, ll.reads + 1))


def test_stop_before_start_closes_the_leader() -> None:
    leader = Leader([np.zeros(2)])
    ll = LocalLeader(leader, loop(), "bench")  # type: ignore[arg-type]
    ll.stop()
    assert leader.closed == 1 and leader.reads == 0
