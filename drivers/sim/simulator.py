"""A chain of simulated servos answering real protocol packets on a pseudo-terminal.

The driver opens :attr:`ServoSimulator.port` with pyserial exactly as it would open
``/dev/ttyACM0``. That path is a symlink to the pty slave (like ``/dev/serial/by-id/...`` to a
``ttyACM`` node), so :meth:`unplug` / :meth:`replug` can make the port vanish and come back under
the same name while the pty behind it is a new one.

One background thread serves the bus; it reads whatever arrives, frames packets with the servo-side
framing of :mod:`drivers.sim.wire` (written apart from the drivers' codecs and checked against the
vendors' SDKs), lets each addressed servo answer in id order, and sleeps for injected slow replies.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import tempfile
import threading
import time
import tty
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from drivers.sim.dialect import DIALECTS
from drivers.sim.servo import Faults, SimServo
from drivers.sim.wire import GARBLED, Request

log = logging.getLogger(__name__)

PING, READ, WRITE, SYNC_READ, SYNC_WRITE = 0x01, 0x02, 0x03, 0x82, 0x83


class ServoSimulator:
    def __init__(
        self,
        protocol: Literal["feetech", "dynamixel"] = "feetech",
        ids: Iterable[int] = range(1, 7),
        *,
        positions: Mapping[int, int] | None = None,
        homing_offsets: Mapping[int, int] | None = None,
        speed_steps_s: float = 3000.0,
        link: str | Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dialect = DIALECTS[protocol]
        self.wire = self.dialect.wire
        positions = positions or {}
        homing_offsets = homing_offsets or {}
        self.servos: dict[int, SimServo] = {
            i: SimServo(
                i,
                self.dialect,
                position=positions.get(i),
                homing_offset=homing_offsets.get(i, 0),
                speed_steps_s=speed_steps_s,
                clock=clock,
            )
            for i in ids
        }
        self._own_dir: tempfile.TemporaryDirectory[str] | None = None
        if link is None:
            self._own_dir = tempfile.TemporaryDirectory(prefix="lerobot-sim-")
            link = Path(self._own_dir.name) / f"tty{protocol}"
        self.port = str(link)
        #: instruction packets received, by instruction code (and "garbled" for unframeable bytes)
        self.received: Counter[int | str] = Counter()
        self._master = -1
        self._slave = -1
        self._plugged = False
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._calls: queue.Queue[tuple[Callable[[], None], threading.Event]] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        self._plug()
        self._thread = threading.Thread(target=self._serve, name=f"sim-{self.dialect.name}", daemon=True)
        self._thread.start()
        log.info("simulated %s arm (ids %s) on %s", self.dialect.name, list(self.servos), self.port)
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            os.write(self._wake_w, b"x")
            self._thread.join(timeout=5)
            self._thread = None
        self._unplug()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1
        if self._own_dir is not None:
            self._own_dir.cleanup()
            self._own_dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def servo(self, servo_id: int) -> SimServo:
        return self.servos[servo_id]

    def faults(self, servo_id: int) -> Faults:
        return self.servos[servo_id].faults

    def step(self) -> None:
        """Advance every servo's physics to the clock's now."""
        with self._lock:
            for s in self.servos.values():
                s.step()

    # ---- unplug / replug -------------------------------------------------------------------

    def unplug(self) -> None:
        """The USB cable is pulled: the pty closes and the port path disappears."""
        self._in_thread(self._unplug)

    def replug(self) -> None:
        """The cable is back: a new pty appears under the same port path."""
        self._in_thread(self._plug)

    @property
    def plugged(self) -> bool:
        return self._plugged

    def _in_thread(self, fn: Callable[[], None]) -> None:
        if self._thread is None or threading.current_thread() is self._thread:
            fn()
            return
        done = threading.Event()
        self._calls.put((fn, done))
        os.write(self._wake_w, b"c")
        if not done.wait(timeout=5):
            raise RuntimeError("simulator thread did not answer")

    def _plug(self) -> None:
        if self._plugged:
            return
        master, slave = os.openpty()
        tty.setraw(slave)
        # Keep our own slave fd open: a pty master reads EIO while no slave is open.
        self._master, self._slave = master, slave
        tmp = f"{self.port}.new"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(os.ttyname(slave), tmp)
        os.replace(tmp, self.port)
        self._plugged = True

    def _unplug(self) -> None:
        if not self._plugged:
            return
        self._plugged = False
        if os.path.lexists(self.port):
            os.unlink(self.port)
        for fd in (self._master, self._slave):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._master = self._slave = -1

    # ---- serving ---------------------------------------------------------------------------

    def _serve(self) -> None:
        buf = bytearray()
        while not self._stop.is_set():
            fds = [self._wake_r] + ([self._master] if self._plugged else [])
            try:
                ready, _, _ = select.select(fds, [], [], 0.5)
            except (OSError, ValueError):
                continue
            if self._wake_r in ready:
                os.read(self._wake_r, 64)
                while not self._calls.empty():
                    fn, done = self._calls.get()
                    try:
                        fn()
                    finally:
                        done.set()
                buf.clear()
                continue
            if not self._plugged or self._master not in ready:
                continue
            try:
                chunk = os.read(self._master, 4096)
            except OSError:
                continue
            buf += chunk
            self._drain(buf)

    def _drain(self, buf: bytearray) -> None:
        while buf:
            request = self.wire.take(buf)
            if request is None:
                return
            if not isinstance(request, Request):
                # A real servo silently drops a packet it cannot frame or whose checksum is wrong.
                self.received[GARBLED] += 1
                continue
            self.received[request.instruction] += 1
            with self._lock:
                self._handle(request)

    def _reply(self, servo: SimServo, params: bytes) -> None:
        f = servo.faults
        skip, f.no_reply = Faults.take(f.no_reply)
        if skip:
            return
        packet = self.wire.status(servo.id, servo.status_error(), params)
        corrupt, f.bad_checksum = Faults.take(f.bad_checksum)
        if corrupt:
            packet = packet[:-1] + bytes(((packet[-1] + 1) & 0xFF,))
        cut, f.short_reply = Faults.take(f.short_reply)
        if cut:
            packet = packet[:-2]
        if f.delay_s:
            # Half-duplex bus: if the host starts a new packet before a late reply goes out, the
            # two collide and the reply is lost. Waiting on the master also keeps the sim responsive.
            ready, _, _ = select.select([self._master], [], [], f.delay_s)
            if ready:
                self.received["collisions"] += 1
                return
        if self._plugged:
            with contextlib.suppress(OSError):
                os.write(self._master, packet)

    def _handle(self, ins: Request) -> None:
        d = self.dialect
        bcast = self.wire.broadcast_id
        if ins.instruction == SYNC_WRITE and ins.servo_id == bcast:
            address, items = d.split_sync_write(ins.params)
            for servo_id, data in items:
                servo = self.servos.get(servo_id)
                if servo is None:
                    continue
                ignore, servo.faults.ignore_writes = Faults.take(servo.faults.ignore_writes)
                if not ignore:
                    servo.write(address, data)
            return
        if ins.instruction == SYNC_READ and ins.servo_id == bcast:
            address, size, ids = d.split_sync_read(ins.params)
            for servo_id in ids:
                servo = self.servos.get(servo_id)
                if servo is not None:
                    self._reply(servo, servo.read(address, size))
            return
        targets = list(self.servos.values()) if ins.servo_id == bcast else [self.servos.get(ins.servo_id)]
        for servo in targets:
            if servo is None:
                continue
            if ins.instruction == PING:
                params = servo.ping_params() if d.ping_reply_params else b""
                self._reply(servo, params)
            elif ins.instruction == READ:
                address, size = d.split_read(ins.params)
                self._reply(servo, servo.read(address, size))
            elif ins.instruction == WRITE:
                address, data = d.split_write(ins.params)
                ignore, servo.faults.ignore_writes = Faults.take(servo.faults.ignore_writes)
                if ignore:
                    continue
                servo.write(address, data)
                if ins.servo_id != bcast:
                    self._reply(servo, b"")
