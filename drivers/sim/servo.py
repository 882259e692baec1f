"""One simulated servo: a control table in memory, a position that follows its goal, and faults."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from drivers.sim.dialect import Dialect
from drivers.sim.memory import MEMORY_SIZE

# Bit values for Faults.error_bits, in each vendor's own encoding.
FEETECH_OVERLOAD = 0x20
FEETECH_OVERHEAT = 0x04
FEETECH_VOLTAGE = 0x01
DYNAMIXEL_OVERLOAD = 0x20
DYNAMIXEL_OVERHEAT = 0x04
DYNAMIXEL_VOLTAGE = 0x01

FIRMWARE_VERSION = 46  # what an XL330 of 2024 reports; only echoed in ping replies
# Goals (and torque writes) kept per servo; older entries fall off. What reads them (tests, bench
# teleop) looks at seconds of writes; an entry costs ~115 B, so the 6 servos of a demo arm left on
# hold about 1.4 MB (100,000 kept 69 MB, and a daemon on the sim arm grew 1.2 MB a minute for 55 min).
LOG_LENGTH = 2048  # 68 s of goals at 30 Hz


@dataclass
class Faults:
    """Faults to inject. Counters count packets this servo would answer; -1 means 'until cleared'."""

    no_reply: int = 0
    bad_checksum: int = 0
    short_reply: int = 0
    ignore_writes: int = 0  # sync/plain writes this servo does not hear (as if garbled on the wire)
    error_bits: int = 0  # persistent hardware error bits (vendor encoding), until cleared
    delay_s: float = 0.0  # every reply is late by this much

    @staticmethod
    def take(count: int) -> tuple[bool, int]:
        if count == 0:
            return False, 0
        return True, count if count < 0 else count - 1


class SimServo:
    def __init__(
        self,
        servo_id: int,
        dialect: Dialect,
        *,
        position: int | None = None,
        homing_offset: int = 0,
        speed_steps_s: float = 3000.0,
        clock: Callable[[], float],
    ) -> None:
        self.id = servo_id
        self.dialect = dialect
        self.faults = Faults()
        #: every goal this servo heard, as (clock time, raw ticks as received, before its own limits):
        #: what tests assert safety on ("the servo never received the bad goal")
        self.goal_log: deque[tuple[float, int]] = deque(maxlen=LOG_LENGTH)
        #: every Torque_Enable write, as (clock time, value)
        self.torque_log: deque[tuple[float, int]] = deque(maxlen=LOG_LENGTH)
        self.speed = speed_steps_s
        self._clock = clock
        self._t = clock()
        self.mem = bytearray(MEMORY_SIZE)
        self._reg = dialect.table
        top = dialect.resolution - 1
        self._set("Model_Number", dialect.model_number)
        if "Firmware_Version" in self._reg:
            self._set("Firmware_Version", FIRMWARE_VERSION)
        self._set("ID", servo_id)
        self._set("Min_Position_Limit", 0)
        self._set("Max_Position_Limit", top)
        self._set("Homing_Offset", homing_offset)
        self._set(dialect.voltage_register, dialect.voltage_raw)
        self._set("Present_Temperature", 31)
        self.position = float(position if position is not None else dialect.resolution // 2)
        self.velocity = 0.0
        self._set("Goal_Position", round(self.position))
        self._refresh()

    # memory helpers
    def _set(self, name: str, value: int) -> None:
        reg = self._reg[name]
        self.mem[reg.address : reg.address + reg.size] = reg.pack(value)

    def get(self, name: str) -> int:
        """A named field of the control table, decoded (signed where the datasheet says so)."""
        return self._reg[name].unpack(self.mem)

    @property
    def goal(self) -> int:
        return self.get("Goal_Position")

    @property
    def torque(self) -> bool:
        return bool(self.get("Torque_Enable"))

    def _limits(self) -> tuple[int, int]:
        return self.get("Min_Position_Limit"), self.get("Max_Position_Limit")

    def step(self) -> None:
        """Advance the physics to now: move toward the goal at the speed limit while torque is on."""
        now = self._clock()
        dt, self._t = max(0.0, now - self._t), now
        if self.torque and dt > 0:
            diff = self.goal - self.position
            move = max(-self.speed * dt, min(self.speed * dt, diff))
            self.position += move
            self.velocity = move / dt
        else:
            self.velocity = 0.0
        self._refresh()

    def _refresh(self) -> None:
        lo, hi = self._limits()
        self.position = min(float(hi), max(float(lo), self.position))
        self._set("Present_Position", round(self.position))
        units = round(self.velocity / self.dialect.velocity_steps_per_unit)
        self._set("Present_Velocity", units)
        load = min(1000, round(abs(self.velocity) / self.speed * 300)) if self.speed else 0
        self._set(self.dialect.load_register, load if self.velocity >= 0 else -load)
        self._set("Moving", int(abs(self.velocity) > 0))
        if self.dialect.alert_flag is not None:
            self._set("Hardware_Error_Status", self.faults.error_bits)

    def status_error(self) -> int:
        if not self.faults.error_bits:
            return 0
        return self.dialect.alert_flag if self.dialect.alert_flag is not None else self.faults.error_bits

    def ping_params(self) -> bytes:
        """Dynamixel's ping reply: model number (2 bytes) and firmware version."""
        return self.read(self._reg["Model_Number"].address, 2) + bytes([self.get("Firmware_Version")])

    def read(self, address: int, size: int) -> bytes:
        self.step()
        return bytes(self.mem[address : address + size])

    def write(self, address: int, data: bytes) -> None:
        self.step()
        homing = self._reg["Homing_Offset"]
        old_offset = self.get("Homing_Offset")
        self.mem[address : address + len(data)] = data
        if address <= homing.address < address + len(data):
            # The reported frame moves with the offset, the shaft does not.
            self.position += self.dialect.homing_sign * (self.get("Homing_Offset") - old_offset)
        torque = self._reg["Torque_Enable"]
        if address <= torque.address < address + len(data):
            self.torque_log.append((self._t, self.get("Torque_Enable")))
        goal = self._reg["Goal_Position"]
        if address <= goal.address < address + len(data):
            self.goal_log.append((self._t, self.goal))
            lo, hi = self._limits()
            self._set("Goal_Position", min(hi, max(lo, self.goal)))
        self._refresh()
