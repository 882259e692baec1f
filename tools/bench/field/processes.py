"""The supervisor of ``bench field``: every process it starts, watched and stopped however it ends.

:class:`Processes` starts each child so that it dies with the bench (even by SIGKILL), runs it from
this checkout (the children import this checkout's ``runtime``, ``drivers`` and ``tools``, wherever
the bench was started from), notes the daemon's descendants while they run, reports how the kernel
schedules their threads, and stops them all at the end: politely first, then SIGKILL, then the
daemon's process group. :class:`LineReader` reads a child's output a line at a time without ever
hanging on a silent child; :func:`signals_raise` makes SIGTERM and SIGHUP end the bench as Ctrl-C does.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 30.0
#: what the bench hands the children it talks to (the servo simulators, the station): both ends of
#: unbuffered pipes
PIPES: dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "bufsize": 0}
#: the checkout this file is in: tools/bench/field/processes.py
CHECKOUT = Path(__file__).resolve().parents[3]

POLICIES = {os.SCHED_OTHER: "SCHED_OTHER", os.SCHED_FIFO: "SCHED_FIFO", os.SCHED_RR: "SCHED_RR"}
RESET_ON_FORK = getattr(os, "SCHED_RESET_ON_FORK", 0)  # a flag in the policy a thread reports
if hasattr(os, "SCHED_BATCH"):
    POLICIES[os.SCHED_BATCH] = "SCHED_BATCH"
if hasattr(os, "SCHED_IDLE"):
    POLICIES[os.SCHED_IDLE] = "SCHED_IDLE"


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the bench dies, even by SIGKILL."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def checkout_env() -> dict[str, str]:
    """This process's environment with the checkout first on ``PYTHONPATH``: ``python -m runtime``,
    ``python -m tools...`` in a child run this checkout's code, whatever the child's working directory."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{CHECKOUT}{os.pathsep}{path}" if path else str(CHECKOUT)}


class Processes:
    """Every process the bench starts, and the daemon's children (seen while it runs), stopped at the
    end however the bench ends: politely first, then SIGKILL, then the daemon's process group."""

    def __init__(self) -> None:
        self.started: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.daemon: subprocess.Popen[bytes] | None = None
        self._children: dict[int, Any] = {}  # pid -> psutil.Process, the daemon's descendants

    def start(self, name: str, args: list[str], *, daemon: bool = False, **kwargs: Any) -> subprocess.Popen[bytes]:
        # the daemon leads a process group of its own: its children (encoders, an arm process) are in it
        kwargs.setdefault("env", checkout_env())
        proc = subprocess.Popen(args, preexec_fn=_die_with_parent, start_new_session=daemon, **kwargs)
        self.started.append((name, proc))
        if daemon:
            self.daemon = proc
        return proc

    def watch(self) -> None:
        """Note the daemon's descendants now (after a kill they are orphans, no longer found by walking)."""
        import psutil

        if self.daemon is None or self.daemon.poll() is not None:
            return
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.daemon.pid).children(recursive=True):
                self._children.setdefault(child.pid, child)

    def scheduling(self) -> list[dict[str, Any]]:
        """How every thread of the daemon and its descendants is scheduled, per process: what the
        kernel says (``sched_getscheduler``), not what the code asked for."""
        import psutil

        if self.daemon is None or self.daemon.poll() is not None:
            return []
        out = []
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.daemon.pid)
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error, OSError):
                    policies: Counter[str] = Counter()
                    for t in p.threads():
                        with contextlib.suppress(OSError):
                            policy = os.sched_getscheduler(t.id) & ~RESET_ON_FORK
                            name = POLICIES.get(policy, str(policy))
                            if policy in (os.SCHED_FIFO, os.SCHED_RR):
                                name += f" {os.sched_getparam(t.id).sched_priority}"
                            policies[name] += 1
                    main = POLICIES.get(os.sched_getscheduler(p.pid) & ~RESET_ON_FORK, "?")
                    if main in ("SCHED_FIFO", "SCHED_RR"):
                        main += f" {os.sched_getparam(p.pid).sched_priority}"
                    what = " ".join(p.cmdline()[1:])[:80] or p.name()
                    out.append({"pid": p.pid, "process": what, "main_thread": main, "threads": dict(policies)})
        return out

    def children_alive(self) -> list[str]:
        """The daemon's descendants seen so far that still run, as ``name (pid)``."""
        import psutil

        alive = []
        for pid, p in sorted(self._children.items()):
            with contextlib.suppress(psutil.Error):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{' '.join(p.cmdline()[1:4]) or p.name()} ({pid})")
        return alive

    def stop_all(self) -> None:
        import psutil

        for name, proc in reversed(self.started):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the daemon's shutdown makes the arm safe
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("bench field: %s (PID %d) did not stop; killing it", name, proc.pid)
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self.daemon is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.daemon.pid, signal.SIGKILL)
        left = []
        for p in self._children.values():
            with contextlib.suppress(psutil.Error):
                if p.is_running():
                    p.kill()
                    left.append(p)
        psutil.wait_procs(left, timeout=5)


class LineReader:
    """Lines from a child's unbuffered pipe, each waited for with a timeout (a silent child never hangs us)."""

    def __init__(self, stream: Any) -> None:
        self.fd = stream.fileno()
        self._buf = b""
        self.closed = False

    def line(self, timeout_s: float) -> str | None:
        """The next line (without its newline); None at the timeout or at end of file."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                return None
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.closed = True
                if self._buf:  # the last line had no newline
                    text, self._buf = self._buf, b""
                    return text.decode(errors="replace")
                return None
            self._buf += chunk
        text, _, self._buf = self._buf.partition(b"\n")
        return text.decode(errors="replace")


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP end the bench as Ctrl-C does, so its cleanup runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(sig: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(sig).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
