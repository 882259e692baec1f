"""The leader arm: opened torque off on the vendor's bus (a stand-in bus), closed again if that fails;
read in the follower's joint order or refused naming the missing joints; the simulated leader's hand
(raw ticks under the simulator's lock), its wandering operator on a clock the test moves, and one real
simulated leader on its own pty, Feetech and Dynamixel."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, cast

import numpy as np
import pytest

from drivers.calibration import Calibration, JointCalibration, load_calibration
from drivers.vendors import bus_class
from runtime.errors import ConfigError
from runtime.teleop import leader as leader_module
from runtime.teleop.leader import LeaderArm, SimLeader

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = ROOT / "configs" / "calibration" / "so101_sim.toml"


class Bus:
    """A servo bus that logs what it is asked; ``fail_torque`` is raised by ``disable_torque``."""

    made: ClassVar[list[Bus]] = []

    def __init__(
        self, port: str = "", calibration: Any = None, joints: tuple[str, ...] = ("pan", "lift", "grip")
    ) -> None:
        self.port = port
        self.calibration = calibration
        self.joints = joints
        self.log: list[str] = []
        self.fail_torque: BaseException | None = None
        self.positions = {"pan": 1.0, "lift": -2.5, "grip": 40.0}
        Bus.made.append(self)

    def connect(self) -> None:
        self.log.append("connect")

    def disable_torque(self) -> None:
        self.log.append("torque off")
        if self.fail_torque is not None:
            raise self.fail_torque

    def disconnect(self) -> None:
        self.log.append("disconnect")

    def read_positions(self) -> dict[str, float]:
        self.log.append("read")
        return dict(self.positions)


@pytest.fixture
def vendors(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``bus_class`` answering the stand-in bus; the list holds the protocols asked for."""
    asked: list[str] = []
    Bus.made = []

    def bus_class(protocol: str) -> type[Bus]:
        asked.append(protocol)
        return Bus

    monkeypatch.setattr(leader_module, "bus_class", bus_class)
    return asked


def small_calibration() -> Calibration:
    """361 ticks a turn around 180: a joint's raw ticks are its degrees plus 180."""
    return Calibration(
        {
            "pan": JointCalibration(id=1, range_min=0, range_max=360, resolution=361),
            "lift": JointCalibration(id=2, range_min=0, range_max=360, resolution=361),
        }
    )


# --- LeaderArm ------------------------------------------------------------------------------


def test_open_connects_the_vendors_bus_and_turns_torque_off(vendors: list[str]) -> None:
    cal = small_calibration()
    arm = LeaderArm.open("/dev/ttyACM1", cal)
    assert vendors == ["feetech"]
    [bus] = Bus.made
    assert arm.bus is cast(Any, bus) and bus.port == "/dev/ttyACM1" and bus.calibration is cal
    assert bus.log == ["connect", "torque off"]
    assert arm.joints == ("pan", "lift", "grip")
    LeaderArm.open("/dev/ttyUSB0", cal, "dynamixel")
    assert vendors == ["feetech", "dynamixel"]


def test_open_reads_a_calibration_file_given_by_path(vendors: list[str]) -> None:
    LeaderArm.open("/dev/ttyACM1", CALIBRATION)
    LeaderArm.open("/dev/ttyACM1", str(CALIBRATION))
    expected = load_calibration(CALIBRATION)
    for bus in Bus.made:
        assert isinstance(bus.calibration, Calibration) and bus.calibration.joints == expected.joints


@pytest.mark.parametrize("error", [OSError("bus gone"), KeyboardInterrupt()])
def test_a_leader_whose_torque_cannot_go_off_is_disconnected_and_the_error_raised(
    vendors: list[str], monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    class Failing(Bus):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.fail_torque = error

    monkeypatch.setattr(leader_module, "bus_class", lambda protocol: Failing)
    with pytest.raises(type(error)):
        LeaderArm.open("/dev/ttyACM1", small_calibration())
    [bus] = Bus.made
    assert bus.log == ["connect", "torque off", "disconnect"]


def test_positions_come_in_the_followers_joint_order_as_float64() -> None:
    bus = Bus()
    arm: Any = LeaderArm(bus)  # type: ignore[arg-type]
    assert arm.joints == ("pan", "lift", "grip")
    arm.order(["grip", "pan"])  # the follower has fewer joints, in another order
    assert arm.joints == ("grip", "pan")
    out = arm.read()
    assert out.dtype == np.float64 and out.tolist() == [40.0, 1.0]
    bus.positions["grip"] = 41  # a whole number from the bus is read as float64 too
    out = arm.read()
    assert out.dtype == np.float64 and out.tolist() == [41.0, 1.0]


def test_a_leader_missing_a_follower_joint_is_refused_naming_them_all() -> None:
    arm = LeaderArm(Bus())  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as err:
        arm.order(["pan", "wrist", "lift", "gripper"])
    assert str(err.value) == (
        "the leader has no joint(s) wrist, gripper (its calibration names pan, lift, grip); "
        "give the leader a calibration with the follower's joint names"
    )
    assert arm.joints == ("pan", "lift", "grip")


def test_close_disconnects_the_bus() -> None:
    bus = Bus()
    LeaderArm(bus).close()  # type: ignore[arg-type]
    assert bus.log == ["disconnect"]


# --- SimLeader with a stand-in simulator ----------------------------------------------------


class Servo:
    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self._position = 0.0
        self.writes: list[tuple[float, bool]] = []

    @property
    def position(self) -> float:
        return self._position

    @position.setter
    def position(self, value: float) -> None:
        self.writes.append((value, self._lock.locked()))
        self._position = value


class Simulator:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.servos = {1: Servo(self._lock), 2: Servo(self._lock)}

    def servo(self, servo_id: int) -> Servo:
        return self.servos[servo_id]


def sim_leader() -> tuple[SimLeader, Any]:
    bus = Bus(joints=("pan", "lift"))
    bus.positions = {"pan": 10.0, "lift": -20.0}
    arm = SimpleNamespace(bus=bus, simulator=Simulator(), closed=0)
    arm.close = lambda: setattr(arm, "closed", arm.closed + 1)
    return SimLeader(arm, small_calibration()), arm  # type: ignore[arg-type]


def test_move_to_puts_the_joints_raw_ticks_into_the_simulator_under_its_lock() -> None:
    leader, arm = sim_leader()
    leader.move_to({"pan": 10.0, "lift": -180.5})  # the last beyond the range: clamped to tick 0
    assert arm.simulator.servos[1].writes == [(190.0, True)]
    assert arm.simulator.servos[2].writes == [(0.0, True)]
    assert type(arm.simulator.servos[1].writes[0][0]) is float


class Stop:
    """The wander thread's stop signal: each wait moves the test's clock 2 s; set after ``n`` waits."""

    def __init__(self, clock: list[float], n: int) -> None:
        self.clock = clock
        self.n = n
        self.timeouts: list[float] = []
        self.was_set = False

    def wait(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        self.clock[0] += 2.0
        return len(self.timeouts) > self.n

    def set(self) -> None:
        self.was_set = True


def wander(monkeypatch: pytest.MonkeyPatch, **kw: float) -> list[dict[str, float]]:
    clock = [50.0]
    monkeypatch.setattr(leader_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    leader, arm = sim_leader()
    stop = Stop(clock, 3)
    leader._stop = stop  # type: ignore[assignment]
    poses: list[dict[str, float]] = []
    leader.move_to = poses.append  # type: ignore[method-assign, assignment]
    leader.wander(**kw)
    assert leader._wander is not None
    assert leader._wander.name == "sim-leader" and leader._wander.daemon
    leader._wander.join(5)
    assert not leader._wander.is_alive()
    assert stop.timeouts == [0.01] * 4
    leader.close()
    assert stop.was_set and arm.closed == 1
    return poses


def test_the_wandering_operator_moves_each_joint_on_a_sine_around_where_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2 s a wait, an 8 s period: a quarter turn each time; the second joint 0.7 rad ahead
    poses = wander(monkeypatch)
    assert len(poses) == 3
    assert [p["pan"] for p in poses] == pytest.approx([25.0, 10.0, -5.0], abs=1e-9)
    assert [p["lift"] for p in poses] == pytest.approx(
        [-20.0 + 15 * math.cos(0.7), -20.0 - 15 * math.sin(0.7), -20.0 - 15 * math.cos(0.7)], abs=1e-9
    )


def test_the_wandering_operator_takes_its_amplitude_and_period(monkeypatch: pytest.MonkeyPatch) -> None:
    poses = wander(monkeypatch, amplitude_deg=4.0, period_s=16.0)  # an eighth of a turn each 2 s
    assert [p["pan"] for p in poses] == pytest.approx([10.0 + 4 * math.sqrt(0.5), 14.0, 10.0 + 4 * math.sqrt(0.5)])


def test_close_without_wandering_closes_the_arm() -> None:
    leader, arm = sim_leader()
    leader.close()
    assert arm.closed == 1


class SimArm:
    """Stands in for the simulated arm: records how it was started."""

    started: ClassVar[list[tuple[Calibration, str]]] = []

    def __init__(self) -> None:
        self.bus = Bus()
        self.simulator = Simulator()

    @classmethod
    def start(cls, calibration: Calibration, *, protocol: str = "?") -> SimArm:
        cls.started.append((calibration, protocol))
        return cls()


def test_a_simulated_leader_is_feetech_unless_told_and_takes_a_calibration_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    SimArm.started = []
    monkeypatch.setattr(leader_module, "SimArm", SimArm)
    cal = small_calibration()
    leader = SimLeader.start(cal)
    assert SimArm.started == [(cal, "feetech")] and leader.calibration is cal
    assert leader.bus.log == ["torque off"]  # type: ignore[attr-defined]
    SimLeader.start(cal, "dynamixel")
    assert SimArm.started[-1] == (cal, "dynamixel")


# --- one real simulated leader --------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["feetech", "dynamixel"])
def test_a_simulated_leader_starts_torque_off_and_follows_the_hand(protocol: str) -> None:
    leader = SimLeader.start(CALIBRATION, protocol)  # type: ignore[arg-type]
    try:
        assert type(leader.arm.bus) is bus_class(protocol)
        assert isinstance(leader.calibration, Calibration)
        sim = leader.arm.simulator
        for servo_id in range(1, 7):
            assert [v for _, v in sim.servo(servo_id).torque_log][-1:] == [0]  # written off
        leader.move_to({"shoulder_pan": 20.0, "elbow_flex": -15.0})
        pose = dict(zip(leader.joints, leader.read().tolist(), strict=True))
        step = 360 / 4096
        assert abs(pose["shoulder_pan"] - 20.0) <= step and abs(pose["elbow_flex"] + 15.0) <= step
        assert abs(pose["shoulder_lift"]) <= step  # untouched: at the middle of its range
    finally:
        leader.close()
