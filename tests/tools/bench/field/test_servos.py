"""The field bench's simulated servos (:mod:`tools.bench.field.servos`): every write stamped with the
moment its bytes arrived, however long handling each servo takes."""

from __future__ import annotations

import time

from drivers.calibration import load_calibration
from drivers.feetech.bus import FeetechBus
from tools.bench.field.config import calibration_path
from tools.bench.field.servos import ArrivalStampedSimulator


def test_every_servo_of_a_sync_write_carries_the_time_its_bytes_arrived() -> None:
    cal = load_calibration(calibration_path())
    sim = ArrivalStampedSimulator(cal).start()
    bus = FeetechBus(sim.port, cal)
    try:
        bus.connect()
        slow = sim.servo(1)
        original = slow.write

        def slow_write(address: int, data: bytes) -> None:
            time.sleep(0.05)  # handling one servo takes long: the later servos are handled later
            original(address, data)

        slow.write = slow_write  # type: ignore[method-assign]
        before = time.monotonic()
        bus.write_goals(bus.read_positions())
        time.sleep(0.2)
        stamps = {i: s.goal_log[-1][0] for i, s in sim.servos.items()}
        slow.write = original  # type: ignore[method-assign]
    finally:
        bus.disconnect()
        sim.stop()
    assert len(set(stamps.values())) == 1  # one arrival, whatever each servo's handling took
    assert before <= stamps[6] < before + 0.05
