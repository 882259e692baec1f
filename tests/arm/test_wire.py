"""The link between the daemon and the arm process: what crosses it arrives whole and equal, a full
link drops instead of blocking, and a peer's death is seen at the next receive, however it died."""

from __future__ import annotations

import math
import select
import signal
import subprocess
import sys
import time
from collections import Counter

import msgpack
import numpy as np
import pytest

from drivers.bus import JointState
from runtime.arm.wire import Link, LinkClosed, pack_array, pack_snapshot, unpack_array, unpack_snapshot
from runtime.control.latch import Latch
from runtime.control.mode import Mode
from runtime.control.snapshot import Snapshot


def test_a_snapshot_crosses_the_link_equal_field_for_field() -> None:
    state = {"shoulder_pan": JointState(12.5, 2190, 13.0, -4, 17, 12.1, 41)}
    snap = Snapshot(
        tick=4321,
        at=12.25,
        next_due=12.283,
        mode=Mode.TELEOP,
        latch=Latch(7, "requested by the station", 11.5),
        latches_taken=7,
        present=np.array([1.5, -2.25, 3.0]),
        state=state,
        arm_error="",
        queue_depth=42,
        dropped_actions=3,
        overruns=1,
        counters=Counter({"ticks": 4321, "writes": 4000}),
        safety={"limit": 2, "step": 0},
        last_latency_ticks=4.0,
        latencies_measured=9,
        teleop_phase="handover",
        teleop_last_seq=88,
        intervention=True,
        cpu_seen={0: 4321},
        scheduling="SCHED_FIFO 50",
        native_id=1234,
        last_write_at=12.251,
        last_write_error_ms=0.125,
        write_periods=3999,
        writes_off=2,
    )
    wire = msgpack.unpackb(msgpack.packb(pack_snapshot(snap), use_bin_type=True), raw=False, strict_map_key=False)
    back = unpack_snapshot(wire)
    for field in Snapshot.__slots__:
        a, b = getattr(snap, field), getattr(back, field)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b, field
    assert back.mode is Mode.TELEOP and back.source == snap.source
    assert math.isnan(unpack_snapshot(pack_snapshot(Snapshot())).last_latency_ticks)


@pytest.mark.parametrize("dtype", ["float32", "float64", "uint8"])
def test_arrays_keep_dtype_shape_and_values(dtype: str) -> None:
    a = (np.arange(24).reshape(2, 3, 4) * 1.5).astype(dtype)
    b = unpack_array(msgpack.unpackb(msgpack.packb(pack_array(a)), raw=False))
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(a, b)
    b[0, 0, 0] = 99  # a copy the receiver owns, not a view of the message buffer


def test_a_full_link_drops_and_counts_instead_of_blocking() -> None:
    link, other = Link.pair()
    try:
        payload = {"t": "tick", "pad": b"x" * 60_000}
        t0 = time.monotonic()
        sent = 0
        while link.send(payload):
            sent += 1
            assert time.monotonic() - t0 < 5, "send kept succeeding: the peer's buffer never filled"
        assert link.dropped == 1 and sent > 0
        assert time.monotonic() - t0 < 5  # never waited for the reader
        received = Link(other)
        got = list(received.receive())
        assert len(got) == sent and all(m["pad"] == payload["pad"] for m in got)
        assert link.send(payload)  # room again once the peer read
    finally:
        link.close()
        other.close()


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSEGV", "exit"])
def test_the_peers_death_is_end_of_file_at_once(how: str) -> None:
    link, child = Link.pair()
    code = {
        "SIGKILL": "import time; time.sleep(60)",
        "SIGSEGV": "import ctypes, time; time.sleep(0.2); ctypes.string_at(0)",
        "exit": "import os, time; time.sleep(0.2); os._exit(3)",
    }[how]
    proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(child.fileno(),))
    child.close()
    try:
        assert list(link.receive()) == []  # nothing yet, and no wait
        if how == "SIGKILL":
            time.sleep(0.2)
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        poller = select.poll()
        poller.register(link.fileno(), select.POLLIN)
        assert poller.poll(1000), "the link did not become readable when its peer died"
        with pytest.raises(LinkClosed):
            list(link.receive())
        assert link.closed and not link.send({"t": "gate"})
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        link.close()
