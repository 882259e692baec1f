"""The link between the daemon and the arm process: what crosses it arrives whole and equal, a full
link drops instead of blocking, and a peer's death is seen at the next receive, however it died."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from runtime.arm.messages import ARM_MESSAGES, DAEMON_MESSAGES, Chunk, Gate, StatusMap
from runtime.arm.wire import Link, LinkClosed


def test_a_message_crosses_the_link_equal() -> None:
    link, other = Link.pair(ARM_MESSAGES)
    peer = Link(other, DAEMON_MESSAGES)
    try:
        actions = np.arange(6, dtype=np.float32).reshape(2, 3)
        assert link.send(Chunk(4, actions=actions))
        [got] = list(peer.receive())
        assert isinstance(got, Chunk) and got.id == 4 and got.error is None
        assert got.actions is not None and got.actions.dtype == np.float32
        np.testing.assert_array_equal(got.actions, actions)
    finally:
        link.close()
        peer.close()


def test_a_full_link_drops_and_counts_instead_of_blocking() -> None:
    link, other = Link.pair(DAEMON_MESSAGES)
    try:
        payload = StatusMap({"pad": b"x" * 60_000})
        t0 = time.monotonic()
        sent = 0
        while link.send(payload):
            sent += 1
            assert time.monotonic() - t0 < 5, "send kept succeeding: the peer's buffer never filled"
        assert link.dropped == 1 and sent > 0
        assert time.monotonic() - t0 < 5  # never waited for the reader
        received = Link(other, ARM_MESSAGES)
        got = list(received.receive())
        assert len(got) == sent and all(isinstance(m, StatusMap) and m.status["pad"] == b"x" * 60_000 for m in got)
        assert link.send(payload)  # room again once the peer read
    finally:
        link.close()
        other.close()


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSEGV", "exit"])
def test_the_peers_death_is_end_of_file_at_once(how: str) -> None:
    link, child = Link.pair(ARM_MESSAGES)
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
        assert link.closed and not link.send(Gate())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        link.close()
