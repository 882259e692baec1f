"""Pinning inference to its CPU set, apart from the control-loop CPU.

OpenVINO's CPU plugin sizes its thread pool from the calling thread's affinity, and threads inherit
the affinity of the thread that creates them. Pinning the loading thread before the model is compiled
therefore governs the ExecuTorch path too, which cannot pass INFERENCE_NUM_THREADS (1.5.1).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from runtime.errors import ConfigError

log = logging.getLogger(__name__)


def allowed_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def inference_cpus(requested: tuple[int, ...], control_cpu: int) -> list[int]:
    """The CPU set inference may use: ``requested`` if given, else every allowed CPU but the control CPU."""
    allowed = allowed_cpus()
    if requested:
        bad = sorted(set(requested) - set(allowed))
        if bad:
            raise ConfigError(f"engine.cpus: CPU(s) {bad} are not available to this process (allowed: {allowed})")
        return sorted(requested)
    rest = [c for c in allowed if c != control_cpu]
    # On a one-CPU machine inference has to share the control CPU.
    return rest or allowed


def pin_current_thread(cpus: list[int]) -> None:
    """Pin the calling thread (and the threads it will start) to ``cpus``."""
    os.sched_setaffinity(0, cpus)
    log.debug("pinned thread %d to CPUs %s", threading.get_native_id(), cpus)


def _stat_field(tid: int, pid: int | str, *numbers: int, proc: str | os.PathLike[str]) -> list[int] | None:
    """Fields of ``/proc/PID/task/TID/stat`` by their 1-based number in proc(5); None when the thread is gone.

    ``proc``: where procfs is mounted (a test's own tree).
    """
    try:
        with open(os.path.join(proc, str(pid), "task", str(tid), "stat"), "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: split after its closing parenthesis (field 3 on).
    fields = stat[stat.rindex(b")") + 2 :].split()
    return [int(fields[n - 3]) for n in numbers]


def thread_cpu(tid: int, pid: int | str = "self", *, proc: str | os.PathLike[str] = "/proc") -> int | None:
    """The CPU thread ``tid`` of process ``pid`` last ran on (field 39, ``processor``).

    This is where the thread really ran, which an affinity mask read back does not prove.
    """
    fields = _stat_field(tid, pid, 39, proc=proc)
    return None if fields is None else fields[0]


def thread_cpu_time(tid: int, pid: int | str = "self", *, proc: str | os.PathLike[str] = "/proc") -> int | None:
    """User + system clock ticks thread ``tid`` has run (fields 14 and 15)."""
    fields = _stat_field(tid, pid, 14, 15, proc=proc)
    return None if fields is None else sum(fields)


@contextmanager
def process_on(cpus: list[int]) -> Iterator[None]:
    """Keep every thread of this process on ``cpus`` while an engine loads, then give each its set back.

    OpenVINO's CPU streams executor runs each inference in a TBB arena that binds the inferring thread
    (through hwloc) to the process's CPU set as it was when the arena was set up, whatever that
    thread was pinned to: measured with ENABLE_CPU_PINNING off, the worker pinned to ``1`` read ``0-1``
    during every inference, and hwloc takes the process's set as the union of all its threads' sets
    (numpy's OpenBLAS threads included). With every thread on the inference CPUs while the engine
    loads, that set is theirs, and the control CPU stays out of inference for the process's life.
    """
    before: dict[int, set[int]] = {}
    for tid in _threads():
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
        except OSError:  # the thread ended meanwhile
            before.pop(tid, None)
    try:
        yield
    finally:
        for tid, mask in before.items():
            with suppress(OSError):
                os.sched_setaffinity(tid, mask)


def _threads() -> list[int]:
    return [int(t) for t in os.listdir("/proc/self/task")]


def thread_cpus_allowed(
    tid: int, pid: int | str = "self", *, proc: str | os.PathLike[str] = "/proc"
) -> set[int] | None:
    """Thread ``tid``'s CPU affinity as the kernel has it now (``Cpus_allowed_list``), None when gone."""
    try:
        with open(os.path.join(proc, str(pid), "task", str(tid), "status")) as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    out: set[int] = set()
                    for part in line.split(":", 1)[1].strip().split(","):
                        lo, _, hi = part.partition("-")
                        out.update(range(int(lo), int(hi or lo) + 1))
                    return out
    except OSError:
        return None
    return None


def _libc_sched_getcpu() -> Callable[[], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = []
    return fn


_sched_getcpu = _libc_sched_getcpu()


def current_cpu() -> int:
    """The CPU the calling thread runs on right now (-1 if unknown): where inference really ran,
    which with OpenVINO's CPU pinning is not what the affinity mask says."""
    return int(_sched_getcpu()) if _sched_getcpu is not None else -1
