"""The link between the daemon and the arm's process: one Unix SOCK_SEQPACKET socket pair, msgpack.

Each message is one datagram (the kernel keeps the boundaries, so there is no framing to get wrong)
holding one msgpack map whose ``t`` names its kind. Arrays travel as raw bytes with dtype and shape.
Both ends send without blocking: a full socket buffer means the other side has stopped reading, and
the sender drops what it cannot send (counted) rather than wait, which matters most for the arm's
process, whose tick must never wait on the daemon. A peer that dies closes its end: the survivor's
next receive returns end-of-file at once, without a heartbeat, however the peer died (SIGKILL,
a native crash, an exit).

Why this and not shared memory or ZeroMQ (``tools/bench/ipc.py`` measures the three side by side): the link
carries commands, e-stops and chunks that must arrive whole, once and in order, which a socket gives
and a shared-memory slot would have to be taught; the end-of-file on a peer's death is the fault
detector; and unlike a ZeroMQ socket it adds no I/O thread to the arm's process.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np

from drivers.bus import JointState
from runtime.control.latch import Latch
from runtime.control.mode import Mode
from runtime.control.snapshot import Snapshot

#: the largest message either side sends (a chunk of 100 x 14 float32 is 5.6 KB; a status map ~4 KB)
MAX_MESSAGE = 1 << 20
SOCKET_BUFFER = 4 << 20


class LinkClosed(Exception):
    """The other end of the link is gone."""


class Link:
    """One end of the socket pair. ``send`` never blocks; ``receive`` drains what has arrived."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            # the kernel's cap (net.core.wmem_max) applies; the default still works
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        sock.setblocking(False)
        self.closed = False
        #: messages not sent because the other side had stopped reading
        self.dropped = 0

    @classmethod
    def pair(cls) -> tuple[Link, socket.socket]:
        """This end, and the other end's socket (to hand to the child process)."""
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        return cls(a), b

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: dict[str, Any]) -> bool:
        """Send one message; False when it was dropped (buffer full) or the link is closed."""
        sent = self._send(msgpack.packb(message, use_bin_type=True))
        if sent is None:
            self.dropped += 1
        return bool(sent)

    def send_last(self, message: dict[str, Any], timeout_s: float = 2.0) -> bool:
        """Send a process's last word (its goodbye, why it could not start), waiting up to ``timeout_s``
        for room rather than dropping it as a tick's message is: nothing comes after it to wait for, and
        the peer reads what it says (whether the arm was let go with its torque off). False, counted as
        one drop, when the peer read nothing in that time; False at once when the link is closed."""
        data = msgpack.packb(message, use_bin_type=True)
        deadline = time.monotonic() + timeout_s
        while (sent := self._send(data)) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                self.dropped += 1
                return False
            # writable once the peer has read: a datagram socket's queue is a number of messages
            # (net.unix.max_dgram_qlen, 10 by default), not only bytes
            select.select([], [self.sock], [], min(left, 0.05))
        return sent

    def _send(self, data: bytes) -> bool | None:
        """True when sent, None when there was no room, False when the link is closed."""
        if self.closed:
            return False
        try:
            self.sock.send(data)
        except BlockingIOError:
            return None
        except OSError as e:
            if e.errno in (errno.EPIPE, errno.ECONNRESET, errno.EBADF, errno.ENOTCONN):
                self.closed = True
                return False
            raise
        return True

    def receive(self) -> Iterator[dict[str, Any]]:
        """Every message that has arrived, without waiting; raises :class:`LinkClosed` at end-of-file."""
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.ECONNRESET, errno.EBADF, errno.ENOTCONN):
                    self.closed = True
                    raise LinkClosed(str(e)) from None
                raise
            if not data:
                self.closed = True
                raise LinkClosed("the other end closed the link")
            message = msgpack.unpackb(data, raw=False, strict_map_key=False)
            if isinstance(message, dict):
                yield message

    def close(self) -> None:
        """Close this end, dropping first what the peer sent and this end never read: a Unix socket
        closed with unread messages resets its peer, whose next receive then fails at once and loses
        what this end said last (the arm's goodbye, with whether its torque is off)."""
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RD)  # from here the peer's sends fail rather than queue
            self.sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                while self.sock.recv(MAX_MESSAGE):
                    pass
        with contextlib.suppress(OSError):
            self.sock.close()


# --- values ------------------------------------------------------------------------------------


def pack_array(a: np.ndarray) -> list[Any]:
    a = np.ascontiguousarray(a)
    return [a.dtype.str, list(a.shape), a.tobytes()]


def unpack_array(v: list[Any]) -> np.ndarray:
    dtype, shape, data = v
    return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape).copy()


def pack_latch(latch: Latch | None) -> list[Any] | None:
    return None if latch is None else [latch.id, latch.reason, latch.requested_at]


def unpack_latch(v: list[Any] | None) -> Latch | None:
    return None if v is None else Latch(int(v[0]), str(v[1]), float(v[2]))


_STATE_FIELDS = ("position", "raw_position", "goal", "velocity_raw", "load_raw", "voltage_v", "temperature_c")


def pack_snapshot(s: Snapshot) -> dict[str, Any]:
    return {
        "tick": s.tick,
        "at": s.at,
        "next_due": s.next_due,
        "mode": s.mode.value,
        "latch": pack_latch(s.latch),
        "latches_taken": s.latches_taken,
        "present": None if s.present is None else [float(x) for x in s.present],
        "state": {n: [getattr(j, f) for f in _STATE_FIELDS] for n, j in s.state.items()},
        "arm_error": s.arm_error,
        "queue_depth": s.queue_depth,
        "dropped_actions": s.dropped_actions,
        "overruns": s.overruns,
        "counters": dict(s.counters),
        "safety": dict(s.safety),
        "last_latency_ticks": s.last_latency_ticks,
        "latencies_measured": s.latencies_measured,
        "teleop_phase": s.teleop_phase,
        "teleop_last_seq": s.teleop_last_seq,
        "intervention": s.intervention,
        "cpu_seen": dict(s.cpu_seen),
        "scheduling": s.scheduling,
        "native_id": s.native_id,
        "last_write_at": s.last_write_at,
        "last_write_error_ms": s.last_write_error_ms,
        "write_periods": s.write_periods,
        "writes_off": s.writes_off,
    }


def unpack_snapshot(d: dict[str, Any]) -> Snapshot:
    from collections import Counter

    present = d["present"]
    return Snapshot(
        tick=d["tick"],
        at=d["at"],
        next_due=d["next_due"],
        mode=Mode(d["mode"]),
        latch=unpack_latch(d["latch"]),
        latches_taken=d["latches_taken"],
        present=None if present is None else np.array(present, dtype=np.float64),
        state={n: JointState(*v) for n, v in d["state"].items()},
        arm_error=d["arm_error"],
        queue_depth=d["queue_depth"],
        dropped_actions=d["dropped_actions"],
        overruns=d["overruns"],
        counters=Counter(d["counters"]),
        safety=d["safety"],
        last_latency_ticks=d["last_latency_ticks"],
        latencies_measured=d["latencies_measured"],
        teleop_phase=d["teleop_phase"],
        teleop_last_seq=d["teleop_last_seq"],
        intervention=d["intervention"],
        cpu_seen={int(k): v for k, v in d["cpu_seen"].items()},
        scheduling=d["scheduling"],
        native_id=d["native_id"],
        last_write_at=d["last_write_at"],
        last_write_error_ms=d["last_write_error_ms"],
        write_periods=d["write_periods"],
        writes_off=d["writes_off"],
    )
