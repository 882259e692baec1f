"""The servo bus interface the control loop uses, and the logic both vendors share.

:class:`ServoBus` is the typing.Protocol the daemon codes against. :class:`SerialServoBus`
implements everything that is the same for Feetech and Dynamixel: the bounded retry loop,
exact-length reads, fault checks, sync read/write bookkeeping, calibration, torque handling and
reconnecting. A vendor subclass only supplies its codec, register table and a few hooks.

Fault model:

* transport errors (no reply, short or garbled packet, bad checksum) are retried up to ``retries``
  extra times, then re-raised with the attempt count;
* servo faults (error bits in a status packet) raise :class:`ServoFaultError` at once, never retried;
* a vanished port raises :class:`PortGoneError`; the bus stays logically connected and the *next*
  call tries to reopen the same path once (``reconnect()`` does it explicitly).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, NoReturn, Protocol, Self

from drivers.calibration import Calibration, JointCalibration
from drivers.errors import (
    BusError,
    CalibrationError,
    GarbledPacketError,
    NotConnectedError,
    PortGoneError,
    ReplyTimeoutError,
    ServoFaultError,
    StaleGoalError,
    TransportError,
    UnknownJointError,
)
from drivers.packets import PacketCodec, Status
from drivers.port import PORT_ERRORS, PortOpener, SerialPort, open_serial
from drivers.registers import Register, RegisterTable

log = logging.getLogger(__name__)

DRAIN_READS = 8  # at most this many reads of DRAIN_BYTES, each ending at the port's timeout when quiet
DRAIN_BYTES = 4096

CalibrationPolicy = Literal["check", "write", "ignore"]


@dataclass(frozen=True, slots=True)
class JointState:
    """One joint's present values from a single sync read.

    ``position`` and ``goal`` are in degrees (percent for a gripper); ``velocity_raw`` and
    ``load_raw`` are in the servo's own units (Feetech: steps/s and 0.1 % of max torque;
    Dynamixel: 0.229 rpm and mA-ish current units).
    """

    position: float
    raw_position: int
    goal: float
    velocity_raw: int
    load_raw: int
    voltage_v: float
    temperature_c: int


class ServoBus(Protocol):
    """What the control loop needs from an arm's servo bus."""

    @property
    def joints(self) -> tuple[str, ...]: ...
    @property
    def is_connected(self) -> bool: ...
    def connect(self) -> None: ...
    def disconnect(self) -> None: ...
    def reconnect(self) -> None: ...
    def ping(self, servo_id: int) -> int | None: ...
    def scan(self, ids: Sequence[int] = ...) -> dict[int, int]: ...
    def read_register(self, joint: str, name: str) -> int: ...
    def write_register(self, joint: str, name: str, value: int) -> None: ...
    def read_state(self) -> dict[str, JointState]: ...
    def read_positions(self) -> dict[str, float]: ...
    def write_goals(self, goals: Mapping[str, float]) -> dict[str, float]: ...
    def enable_torque(self) -> None: ...
    def torque_on(self) -> None: ...
    def disable_torque(self) -> None: ...


@dataclass(frozen=True)
class VendorSpec:
    """The register names a vendor uses for the fields the shared code needs."""

    codec: PacketCodec
    table: RegisterTable
    ping_params: int  # parameter bytes in a ping reply
    load: str
    voltage: str
    voltage_unit_v: float
    model_names: Mapping[int, str]


class GoalTypeError(BusError, TypeError):
    """A goal that is not a number."""


class GoalValueError(BusError, ValueError):
    """A goal that is a number but not a finite one."""


class SerialServoBus:
    """A chain of servos on one serial port. Subclasses: FeetechBus, DynamixelBus."""

    spec: VendorSpec

    def __init__(
        self,
        port: str,
        calibration: Calibration,
        *,
        baud: int = 1_000_000,
        timeout_ms: int = 20,
        retries: int = 2,
        disable_torque_on_disconnect: bool = True,
        verify_goals: bool = False,
        on_calibration_mismatch: CalibrationPolicy = "check",
        opener: PortOpener = open_serial,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.port = port
        self.calibration = calibration
        self.baud = baud
        self.timeout_s = timeout_ms / 1000
        self.retries = retries
        self.disable_torque_on_disconnect = disable_torque_on_disconnect
        self.verify_goals = verify_goals
        self.on_calibration_mismatch: CalibrationPolicy = on_calibration_mismatch
        self._opener = opener
        self._port: SerialPort | None = None
        self._connected = False
        self._close_hooks: list[Callable[[], None]] = []
        self._cal: dict[str, JointCalibration] = dict(calibration.joints)
        self._names = tuple(self._cal)
        self._ids = tuple(j.id for j in self._cal.values())
        self._goals_raw: dict[str, int] = {}
        self._clamped: set[str] = set()
        #: attempts the last transaction took (1 = first try succeeded); handy in logs and tests
        self.last_attempts = 0

        t = self.spec.table
        self._goal = t["Goal_Position"]
        self._position = t["Present_Position"]
        self._velocity = t["Present_Velocity"]
        self._load = t[self.spec.load]
        self._voltage = t[self.spec.voltage]
        self._temperature = t["Present_Temperature"]
        fields = (self._goal, self._position, self._velocity, self._load, self._voltage, self._temperature)
        # One contiguous block from Goal_Position to Present_Temperature: every value the loop
        # needs (and the goal read-back) in a single sync read.
        self._block_address = min(r.address for r in fields)
        self._block_size = max(r.address + r.size for r in fields) - self._block_address

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def joints(self) -> tuple[str, ...]:
        return self._names

    @property
    def is_connected(self) -> bool:
        return self._connected

    @property
    def codec(self) -> PacketCodec:
        return self.spec.codec

    def add_close_hook(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` after the port is closed by :meth:`disconnect` (e.g. stop a simulator)."""
        self._close_hooks.append(hook)

    def connect(self) -> None:
        """Open the port, check every calibrated servo answers, apply the calibration policy."""
        if self._connected:
            return
        self._open_port()
        self._connected = True
        try:
            missing = [f"{n} (id {self._cal[n].id})" for n in self._names if self.ping(self._cal[n].id) is None]
            if missing:
                raise BusError(
                    f"no reply on {self.port} from {', '.join(missing)}; check power, wiring, "
                    f"baud rate {self.baud} and ids (try: lerobot-runtime motors scan --port {self.port})"
                )
            self._apply_calibration_policy()
            if self._names:
                self._goals_raw = {n: s.raw_goal for n, s in self._read_raw_block().items()}
        except BaseException:
            self._close_port()
            self._connected = False
            raise
        log.info("connected %s on %s: %s", type(self).__name__, self.port, ", ".join(self._names) or "no joints")

    def disconnect(self) -> None:
        """Disable torque (unless configured not to) and close the port; always closes, in a finally.

        The close hooks run either way: what the bus was handed to own (a simulator) is released even
        when it never connected."""
        if not self._connected:
            self._run_close_hooks()
            return
        try:
            if self.disable_torque_on_disconnect and self._names:
                self.disable_torque()
        finally:
            self._close_port()
            self._connected = False
            self._run_close_hooks()
            log.info("disconnected %s", self.port)

    def _run_close_hooks(self) -> None:
        for hook in self._close_hooks:
            try:
                hook()
            except Exception as e:
                log.warning("close hook %r failed: %s", hook, e)

    close = disconnect

    def reconnect(self) -> None:
        """Close and reopen the port (after a USB unplug the path may come back)."""
        if not self._connected:
            raise NotConnectedError(f"{self.port}: reconnect() needs a connected bus; call connect()")
        self._close_port()
        self._open_port()
        log.info("reopened %s", self.port)

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.disconnect()

    def _open_port(self) -> None:
        self._port = self._opener(self.port, self.baud, self.timeout_s)

    def _close_port(self) -> None:
        port, self._port = self._port, None
        if port is not None:
            try:
                port.close()
            except PORT_ERRORS as e:
                log.debug("closing %s: %s", self.port, e)

    def _ensure_port(self) -> SerialPort:
        if not self._connected:
            raise NotConnectedError(f"bus on {self.port} is not connected; call connect() first")
        if self._port is None:
            # Automatic reconnect: one try per call, so a control loop recovers by itself once the
            # USB cable is back, and fails fast (PortGoneError) while it is not.
            self._open_port()
            log.info("port %s is back; reopened", self.port)
        assert self._port is not None
        return self._port

    def _port_gone(self, e: BaseException) -> PortGoneError:
        self._close_port()
        log.error("serial port %s vanished: %s", self.port, e)
        return PortGoneError(
            f"serial port {self.port} vanished ({e}); the next call reopens it when it is back",
            port=self.port,
        )

    # ---- transactions ----------------------------------------------------------------------

    def _joint_name(self, servo_id: int) -> str | None:
        return self.calibration.name_of(servo_id)

    def _calib(self, joint: str) -> JointCalibration:
        try:
            return self._cal[joint]
        except KeyError:
            raise UnknownJointError(
                f"unknown joint {joint!r}; this bus has {', '.join(self._names) or 'no joints'}"
            ) from None

    def _register(self, name: str) -> Register:
        try:
            return self.spec.table[name]
        except KeyError:
            raise BusError(
                f"unknown {self.codec.name} register {name!r}; known: {', '.join(sorted(self.spec.table))}"
            ) from None

    def _send(self, packet: bytes) -> None:
        port = self._ensure_port()
        try:
            # Drop anything left from an earlier timed-out exchange so it cannot pass for our reply.
            port.reset_input_buffer()
            port.write(packet)
        except PORT_ERRORS as e:  # serial.SerialException is an OSError too
            if _is_write_timeout(e):
                raise ReplyTimeoutError(f"write to {self.port} timed out") from e
            raise self._port_gone(e) from e

    def _read_exact(self, n: int) -> bytes:
        port = self._ensure_port()
        try:
            data: bytes = port.read(n)
        except PORT_ERRORS as e:
            raise self._port_gone(e) from e
        return data

    def _drain(self) -> None:
        """Read until the line is quiet (bounded): a reply from the wrong servo is a late reply to an
        earlier exchange, and more of it may still be on its way, after the flush the next send does."""
        port = self._ensure_port()
        try:
            for _ in range(DRAIN_READS):
                if not port.read(DRAIN_BYTES):
                    return
        except PORT_ERRORS as e:
            raise self._port_gone(e) from e

    def _receive(self, ids: Sequence[int], n_params: int) -> list[Status]:
        codec = self.codec
        unit = codec.status_size(n_params)
        hs = codec.header_size
        # One read for the whole reply train in the usual case; exact length, bounded by the timeout.
        buf = bytearray(self._read_exact(unit * len(ids)))
        if len(buf) < unit * len(ids):
            self._raise_short(buf, ids, unit)
        statuses: list[Status] = []
        offset = 0
        for servo_id in ids:
            # Byte stuffing (Dynamixel) can make a packet longer than the minimum: top up exactly.
            self._fill(buf, offset + hs, ids, unit)
            end = offset + hs + codec.body_length(bytes(buf[offset : offset + hs]))
            self._fill(buf, end, ids, unit)
            status = codec.decode_status(bytes(buf[offset:end]))
            if status.servo_id != servo_id:
                raise GarbledPacketError(
                    f"expected a reply from id {servo_id}, got one from id {status.servo_id}",
                    servo_id=servo_id,
                )
            if len(status.params) != n_params:
                raise GarbledPacketError(
                    f"reply from id {servo_id} has {len(status.params)} data bytes, expected {n_params}",
                    servo_id=servo_id,
                )
            statuses.append(status)
            offset = end
        return statuses

    def _fill(self, buf: bytearray, size: int, ids: Sequence[int], unit: int) -> None:
        if len(buf) < size:
            need = size - len(buf)
            more = self._read_exact(need)
            buf += more
            if len(more) < need:
                self._raise_short(buf, ids, unit)

    def _raise_short(self, buf: bytes | bytearray, ids: Sequence[int], unit: int) -> NoReturn:
        # Walk the complete packets that did arrive: the first expected id whose reply is not
        # where it should be is the servo that stayed silent (later servos may still answer).
        codec, hs = self.codec, self.codec.header_size
        offset, culprit = 0, ids[-1]
        for servo_id in ids:
            try:
                end = offset + hs + codec.body_length(bytes(buf[offset : offset + hs]))
                if end > len(buf) or codec.decode_status(bytes(buf[offset:end])).servo_id != servo_id:
                    culprit = servo_id
                    break
            except TransportError:
                culprit = servo_id
                break
            offset = end
        name = self._joint_name(culprit)
        who = f"joint {name!r} (id {culprit})" if name else f"id {culprit}"
        if offset == len(buf) or (len(buf) - offset) % unit == 0:
            raise ReplyTimeoutError(f"no reply from {who} within {self.timeout_s * 1000:.0f} ms", servo_id=culprit)
        raise GarbledPacketError(
            f"short or garbled reply from {who}: {len(buf)} bytes arrived in all", servo_id=culprit
        )

    def _transact(
        self,
        packet: bytes,
        reply_ids: Sequence[int],
        n_params: int,
        *,
        what: str,
        check_faults: bool = True,
        retries: int | None = None,
    ) -> list[Status]:
        """Send ``packet`` and read one status per id in ``reply_ids``, retrying transport errors."""
        attempts = self.retries + 1 if retries is None else retries + 1
        last: TransportError | None = None
        for attempt in range(1, attempts + 1):
            self.last_attempts = attempt
            try:
                self._send(packet)
                statuses = self._receive(reply_ids, n_params) if reply_ids else []
                for status in statuses:
                    self._check_transport_status(status)
            except TransportError as e:
                last = e
                if attempt < attempts:
                    log.warning("%s on %s: %s (attempt %d/%d), retrying", what, self.port, e, attempt, attempts)
                    if isinstance(e, GarbledPacketError):
                        self._drain()
                continue
            if check_faults:
                self._check_faults(statuses)
            return statuses
        assert last is not None
        raise type(last)(
            f"{what} on {self.port} failed after {attempts} attempt(s): {last}",
            servo_id=last.servo_id,
            attempts=attempts,
        ) from last

    def _check_transport_status(self, status: Status) -> None:
        """Hook: a status whose error byte means 'your packet arrived damaged' (retryable)."""

    def _check_faults(self, statuses: Sequence[Status]) -> None:
        for status in statuses:
            if status.error:
                bits = self._fault_bits(status)
                raise ServoFaultError(self._joint_name(status.servo_id), status.servo_id, bits, status.error)

    def _fault_bits(self, status: Status) -> tuple[str, ...]:
        raise NotImplementedError

    # ---- single-servo operations -----------------------------------------------------------

    def ping(self, servo_id: int) -> int | None:
        """Model number of ``servo_id``, or ``None`` when nothing answers (after the retries)."""
        try:
            statuses = self._transact(
                self.codec.ping(servo_id),
                (servo_id,),
                self.spec.ping_params,
                what=f"ping id {servo_id}",
                check_faults=False,
            )
            return self._model_number(servo_id, statuses[0])
        except TransportError:
            return None

    def _model_number(self, servo_id: int, status: Status) -> int:
        raise NotImplementedError

    def scan(self, ids: Sequence[int] = range(0, 253), *, timeout_ms: float = 10) -> dict[int, int]:
        """Ping each id once with a short timeout; ``{id: model number}`` of those that answered."""
        port = self._ensure_port()
        saved, saved_retries = port.timeout, self.retries
        port.timeout, self.retries = timeout_ms / 1000, 0
        found: dict[int, int] = {}
        try:
            for servo_id in ids:
                model = self.ping(servo_id)
                if model is not None:
                    found[servo_id] = model
        finally:
            self.retries = saved_retries
            if self._port is not None:
                self._port.timeout = saved
        return found

    def read_id(self, servo_id: int, name: str) -> int:
        reg = self._register(name)
        status = self._transact(
            self.codec.read(servo_id, reg.address, reg.size),
            (servo_id,),
            reg.size,
            what=f"read {name} of id {servo_id}",
        )[0]
        return reg.from_bytes(status.params)

    def write_id(self, servo_id: int, name: str, value: int) -> None:
        reg = self._register(name)
        if reg.access == "R":
            raise BusError(f"register {name} is read-only")
        try:
            data = reg.to_bytes(value)
        except ValueError as e:
            raise BusError(f"cannot write {value!r} to {name}: {e}") from e
        self._transact(
            self.codec.write(servo_id, reg.address, data),
            (servo_id,),
            0,
            what=f"write {name} of id {servo_id}",
        )

    def read_register(self, joint: str, name: str) -> int:
        return self.read_id(self._calib(joint).id, name)

    def write_register(self, joint: str, name: str, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise GoalTypeError(f"register value for {joint}.{name} must be an int, got {value!r}")
        self.write_id(self._calib(joint).id, name, value)

    # ---- calibration -----------------------------------------------------------------------

    def _write_eeprom(self, servo_id: int, name: str, value: int) -> None:
        """Hook: vendors that lock EEPROM override this to unlock around the write."""
        self.write_id(servo_id, name, value)

    def _apply_calibration_policy(self) -> None:
        if self.on_calibration_mismatch == "ignore":
            return
        mismatched: list[str] = []
        for name in self._names:
            cal = self._cal[name]
            stored = self.read_id(cal.id, "Homing_Offset")
            if stored == cal.homing_offset:
                continue
            if self.on_calibration_mismatch == "write":
                log.warning(
                    "joint %s: writing homing offset %d over %d (from %s)",
                    name,
                    cal.homing_offset,
                    stored,
                    self.calibration.source,
                )
                self._write_eeprom(cal.id, "Homing_Offset", cal.homing_offset)
            else:
                mismatched.append(f"{name}: servo has {stored}, file has {cal.homing_offset}")
        if mismatched:
            raise CalibrationError(
                f"homing offsets on {self.port} differ from {self.calibration.source}: "
                f"{'; '.join(mismatched)}. "
                'Recalibrate, or set on_calibration_mismatch = "write" to store the file\'s values'
            )

    # ---- the control-loop path -------------------------------------------------------------

    @dataclass(frozen=True, slots=True)
    class _Raw:
        raw_goal: int
        raw_position: int
        velocity: int
        load: int
        voltage: int
        temperature: int

    def _read_raw_block(self) -> dict[str, SerialServoBus._Raw]:
        statuses = self._transact(
            self.codec.sync_read(self._ids, self._block_address, self._block_size),
            self._ids,
            self._block_size,
            what="sync read state",
        )
        base = self._block_address
        g, p, v, ld, vo, t = (
            self._goal,
            self._position,
            self._velocity,
            self._load,
            self._voltage,
            self._temperature,
        )
        out: dict[str, SerialServoBus._Raw] = {}
        for name, st in zip(self._names, statuses, strict=True):
            d = st.params
            out[name] = SerialServoBus._Raw(
                g.from_bytes(d, g.address - base),
                p.from_bytes(d, p.address - base),
                v.from_bytes(d, v.address - base),
                ld.from_bytes(d, ld.address - base),
                vo.from_bytes(d, vo.address - base),
                t.from_bytes(d, t.address - base),
            )
        return out

    def read_state(self) -> dict[str, JointState]:
        """Position, goal, velocity, load, voltage and temperature of every joint: one sync read."""
        unit = self.spec.voltage_unit_v
        out: dict[str, JointState] = {}
        for name, r in self._read_raw_block().items():
            cal = self._cal[name]
            out[name] = JointState(
                cal.to_user(r.raw_position),
                r.raw_position,
                cal.to_user(r.raw_goal),
                r.velocity,
                r.load,
                r.voltage * unit,
                r.temperature,
            )
        return out

    def read_positions(self) -> dict[str, float]:
        """Present positions in degrees (percent for the gripper), one sync read."""
        reg = self._position
        statuses = self._transact(
            self.codec.sync_read(self._ids, reg.address, reg.size),
            self._ids,
            reg.size,
            what="sync read positions",
        )
        return {
            name: self._cal[name].to_user(reg.from_bytes(st.params))
            for name, st in zip(self._names, statuses, strict=True)
        }

    @property
    def goals(self) -> dict[str, float]:
        """The goals last written successfully (user units)."""
        return {n: self._cal[n].to_user(r) for n, r in self._goals_raw.items()}

    def _goals_to_raw(self, goals: Mapping[str, float]) -> dict[str, int]:
        if not isinstance(goals, Mapping):
            raise GoalTypeError(f"goals must be a mapping of joint name to number, got {type(goals).__name__}")
        raw = dict(self._goals_raw)
        for name, value in goals.items():
            cal = self._calib(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise GoalTypeError(f"goal for joint {name!r} must be a number, got {type(value).__name__} {value!r}")
            if not math.isfinite(value):
                raise GoalValueError(f"goal for joint {name!r} must be finite, got {value!r}")
            ticks, clamped = cal.to_raw(float(value))
            if clamped:
                lo, hi = cal.user_range
                # Log when a joint starts being clamped; a policy that keeps pushing past the limit
                # would otherwise write the same line at every tick.
                level = logging.DEBUG if name in self._clamped else logging.WARNING
                log.log(
                    level,
                    "goal for %s clamped: %.2f -> %.2f (calibrated range %.2f..%.2f)",
                    name,
                    value,
                    cal.to_user(ticks),
                    lo,
                    hi,
                )
                self._clamped.add(name)
            else:
                self._clamped.discard(name)
            raw[name] = ticks
        missing = [n for n in self._names if n not in raw]
        if missing:
            raise GoalValueError(f"no goal known yet for {', '.join(missing)}; connect() first")
        return raw

    def write_goals(self, goals: Mapping[str, float]) -> dict[str, float]:
        """Set goal positions (degrees; percent for the gripper) in one sync write to all joints.

        Joints absent from ``goals`` keep their last goal, and it is re-sent with the others, so a
        retry always carries the complete set. Goals outside the calibrated range are clamped (and
        logged). With ``verify_goals`` the goals are read back in one sync read and the whole set
        re-sent on a mismatch. Returns the goals actually commanded.
        """
        raw = self._goals_to_raw(goals)
        reg = self._goal
        packet = self.codec.sync_write(
            reg.address, reg.size, [(self._cal[n].id, reg.to_bytes(raw[n])) for n in self._names]
        )
        if not self.verify_goals:
            self._transact(packet, (), 0, what="sync write goals")
        else:
            self._write_verified(packet, raw)
        self._goals_raw = raw
        return {n: self._cal[n].to_user(r) for n, r in raw.items()}

    def _write_verified(self, packet: bytes, raw: Mapping[str, int]) -> None:
        attempts = self.retries + 1
        stale: list[str] = []
        for attempt in range(1, attempts + 1):
            self._transact(packet, (), 0, what="sync write goals")
            back = self._read_raw_block()
            stale = [n for n in self._names if back[n].raw_goal != raw[n]]
            if not stale:
                self.last_attempts = attempt
                return
            if attempt < attempts:
                log.warning(
                    "goal read-back stale for %s (attempt %d/%d); re-sending all goals",
                    ", ".join(stale),
                    attempt,
                    attempts,
                )
        raise StaleGoalError(
            f"goals for {', '.join(stale)} did not stick after {attempts} full sync writes", attempts=attempts
        )

    # ---- torque ----------------------------------------------------------------------------

    def enable_torque(self) -> None:
        """Hold every joint where it is now (goal := present position), then switch torque on (for a
        caller with no goal of its own: the benches; the control loop writes its hold and uses
        :meth:`torque_on`)."""
        present = self._read_raw_block()
        hold = {n: present[n].raw_position for n in self._names}
        reg = self._goal
        self._transact(
            self.codec.sync_write(
                reg.address, reg.size, [(self._cal[n].id, reg.to_bytes(hold[n])) for n in self._names]
            ),
            (),
            0,
            what="sync write hold goals",
        )
        self._goals_raw = hold
        self.torque_on()

    def torque_on(self) -> None:
        """Switch torque on on every joint, writing no goal: each servo holds the goal it has, so the
        caller writes the one to hold first."""
        for name in self._names:
            self.write_id(self._cal[name].id, "Torque_Enable", 1)

    def disable_torque(self) -> None:
        """Torque off on every joint; tries them all before raising the first error."""
        first: BaseException | None = None
        for name in self._names:
            try:
                self.write_id(self._cal[name].id, "Torque_Enable", 0)
            except BusError as e:
                log.error("torque off failed for %s: %s", name, e)
                if isinstance(e, PortGoneError):
                    raise
                first = first or e
        if first is not None:
            raise first


def _is_write_timeout(e: BaseException) -> bool:
    try:
        import serial
    except ImportError:  # pragma: no cover - pyserial is a dependency
        return False
    return isinstance(e, serial.SerialTimeoutException)
