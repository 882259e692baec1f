"""``python -m tools.bench.ipc``: the arm process's link, measured against the other ways it could go.

Three transports between two processes, each carrying what the arm process sends every tick (a packed
snapshot, about 0.8 KB of msgpack) and what it receives (a chunk of 100 x 6 float32):

- ``seqpacket``: a Unix SOCK_SEQPACKET socket pair, msgpack datagrams (what the link uses);
- ``zmq``: a ZeroMQ PAIR socket over ``ipc://``, msgpack frames;
- ``shm``: a shared-memory slot (``multiprocessing.shared_memory``) guarded by a sequence counter
  (a seqlock: the writer makes the counter odd, copies, makes it even; the reader retries a torn read).

Reported per transport: the sender's cost per message and the receiver's cost per take (what a tick
pays, in microseconds, p50/p99), and the round trip to an echoing peer that waits on the transport
(shared memory has nothing to wait on: its peer spins, which costs a whole CPU, so its round trip is a
lower bound no real tick would see). All three run in one invocation, side by side.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import select
import socket
import struct
import time
from collections.abc import Sequence
from multiprocessing import shared_memory
from typing import Any

import msgpack
import numpy as np

from runtime.arm.codec import encode
from runtime.arm.messages import Chunk, Tick
from runtime.bench.stats import pcts
from runtime.control.snapshot import Snapshot

SLOT = 1 << 16


def _payloads() -> tuple[bytes, bytes]:
    from collections import Counter

    from drivers.bus import JointState

    names = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
    snap = Snapshot(
        tick=123456,
        at=1.0,
        next_due=1.033,
        present=np.zeros(6),
        state={n: JointState(1.0, 2048, 1.0, 0, 0, 12.0, 40) for n in names},
        counters=Counter({k: 1000 for k in ("ticks", "writes", "chunks", "requests", "observations", "starts")}),
        safety={"limit": 0, "step": 0, "accel": 0, "nonfinite": 0, "refused_chunks": 0},
        cpu_seen={0: 123456},
        scheduling="SCHED_FIFO 50",
    )
    return encode(Tick(snap)), encode(Chunk(1, np.zeros((100, 6), np.float32)))


# --- peers (in their own process) -----------------------------------------------------------------


def _echo_socket(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    while True:
        data = sock.recv(SLOT)
        if not data or data == b"stop":
            return
        msgpack.unpackb(data, raw=False, strict_map_key=False)
        sock.send(data)


def _echo_zmq(endpoint: str) -> None:
    import zmq

    ctx = zmq.Context()
    s = ctx.socket(zmq.PAIR)
    s.connect(endpoint)
    while True:
        data = s.recv()
        if data == b"stop":
            break
        msgpack.unpackb(data, raw=False, strict_map_key=False)
        s.send(data)
    s.close(0)
    ctx.term()


def _echo_shm(a_name: str, b_name: str) -> None:
    a = shared_memory.SharedMemory(a_name)
    b = shared_memory.SharedMemory(b_name)
    seen = 0
    try:
        while True:
            got = _shm_read(a.buf, seen)
            if got is None:
                continue  # spin: nothing to wait on
            seen, data = got
            if data == b"stop":
                return
            msgpack.unpackb(data, raw=False, strict_map_key=False)
            _shm_write(b.buf, seen, data)
    finally:
        a.close()
        b.close()


# --- the shared-memory slot ------------------------------------------------------------------------


def _shm_write(buf: Any, seq: int, data: bytes) -> None:
    struct.pack_into("<Q", buf, 0, 2 * seq - 1)  # odd: being written
    struct.pack_into("<I", buf, 8, len(data))
    buf[12 : 12 + len(data)] = data
    struct.pack_into("<Q", buf, 0, 2 * seq)


def _shm_read(buf: Any, seen: int) -> tuple[int, bytes] | None:
    while True:
        (s1,) = struct.unpack_from("<Q", buf, 0)
        if s1 % 2 or s1 // 2 <= seen:
            return None
        (n,) = struct.unpack_from("<I", buf, 8)
        data = bytes(buf[12 : 12 + n])
        (s2,) = struct.unpack_from("<Q", buf, 0)
        if s1 == s2:
            return s1 // 2, data


# --- the measurements -------------------------------------------------------------------------------


def _measure(send: Any, wait: Any, take: Any, message: bytes, n: int) -> dict[str, Any]:
    """``wait`` blocks until the reply can be taken (the sockets' poll; nothing for shared memory);
    ``take`` takes it without waiting, or returns None: its cost is what a tick would pay."""
    send_us: list[float] = []
    take_us: list[float] = []
    rtt_us: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        send(message)
        t1 = time.perf_counter()
        wait()
        while True:
            t2 = time.perf_counter()
            data = take()
            t3 = time.perf_counter()
            if data is not None:
                break
        send_us.append((t1 - t0) * 1e6)
        take_us.append((t3 - t2) * 1e6)
        rtt_us.append((t3 - t0) * 1e6)
        msgpack.unpackb(data, raw=False, strict_map_key=False)
    return {"send_us": pcts(send_us), "take_us": pcts(take_us), "round_trip_us": pcts(rtt_us)}


def _seqpacket(message: bytes, n: int) -> dict[str, Any]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    peer = mp.get_context("fork").Process(target=_echo_socket, args=(b.fileno(),))
    peer.start()
    b.close()
    poller = select.poll()
    poller.register(a.fileno(), select.POLLIN)

    def take() -> bytes | None:
        try:
            return a.recv(SLOT, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None

    try:
        return _measure(a.send, lambda: poller.poll(1000), take, message, n)
    finally:
        a.send(b"stop")
        peer.join(5)
        a.close()


def _zmq(message: bytes, n: int, workdir: str) -> dict[str, Any]:
    import zmq

    endpoint = f"ipc://{workdir}/bench-ipc.sock"
    ctx = zmq.Context()
    s = ctx.socket(zmq.PAIR)
    s.bind(endpoint)
    peer = mp.get_context("fork").Process(target=_echo_zmq, args=(endpoint,))
    peer.start()

    def take() -> bytes | None:
        try:
            data: bytes = s.recv(zmq.NOBLOCK)
            return data
        except zmq.Again:
            return None

    try:
        return _measure(s.send, lambda: s.poll(1000), take, message, n)
    finally:
        s.send(b"stop")
        peer.join(5)
        s.close(0)
        ctx.term()


def _shm(message: bytes, n: int) -> dict[str, Any]:
    a = shared_memory.SharedMemory(create=True, size=SLOT)
    b = shared_memory.SharedMemory(create=True, size=SLOT)
    for shm in (a, b):
        assert shm.buf is not None
        shm.buf[:16] = bytes(16)
    peer = mp.get_context("fork").Process(target=_echo_shm, args=(a.name, b.name))
    peer.start()
    state = {"seq": 0, "seen": 0}

    def send(data: bytes) -> None:
        state["seq"] += 1
        _shm_write(a.buf, state["seq"], data)

    def take() -> bytes | None:
        got = _shm_read(b.buf, state["seen"])
        if got is None:
            return None
        state["seen"] = got[0]
        return got[1]

    try:
        return _measure(send, lambda: None, take, message, n)
    finally:
        send(b"stop")
        peer.join(5)
        for shm in (a, b):
            shm.close()
            shm.unlink()


def run_ipc_bench(n: int = 2000) -> dict[str, Any]:
    import tempfile

    from runtime.bench.machine import cpu_line

    tick, chunk = _payloads()
    out: dict[str, Any] = {
        "cpu": cpu_line(),
        "cpus": len(os.sched_getaffinity(0)),
        "messages": n,
        "bytes": {"tick": len(tick), "chunk": len(chunk)},
    }
    with tempfile.TemporaryDirectory(prefix="lrt-ipc-") as workdir:
        for label, message in (("tick", tick), ("chunk", chunk)):
            out[label] = {
                "seqpacket": _seqpacket(message, n),
                "zmq": _zmq(message, n, workdir),
                "shm": _shm(message, n),
            }
    return out


def format_table(r: dict[str, Any]) -> str:
    lines = [
        f"CPU: {r['cpu']} ({r['cpus']} CPUs); {r['messages']} messages per row; "
        f"tick {r['bytes']['tick']} B, chunk {r['bytes']['chunk']} B",
        f"{'message':<7} {'transport':<10} {'send us p50/p99':>16} {'take us p50/p99':>16} "
        f"{'round trip us p50/p99':>22} {'x seqpacket p50':>16}",
    ]
    for label in ("tick", "chunk"):
        base = r[label]["seqpacket"]["round_trip_us"]["p50"]
        for name, m in r[label].items():
            s, t, rt = m["send_us"], m["take_us"], m["round_trip_us"]
            lines.append(
                f"{label:<7} {name:<10} {s['p50']:>7.1f}/{s['p99']:<8.1f} {t['p50']:>7.1f}/{t['p99']:<8.1f} "
                f"{rt['p50']:>10.1f}/{rt['p99']:<11.1f} {rt['p50'] / base:>16.2f}"
            )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench.ipc",
        description="the arm process's link (SOCK_SEQPACKET) beside ZeroMQ ipc and shared memory, side by side",
    )
    p.add_argument("--messages", type=int, default=2000, help="messages per transport and size (default 2000)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.messages < 10:
        parser.error(f"--messages: expected at least 10, got {args.messages}")
    result = run_ipc_bench(args.messages)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
