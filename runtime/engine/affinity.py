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
from collections.abc import Callable

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


def thread_cpu(tid: int) -> int | None:
    """The CPU thread ``tid`` of this process last ran on (``/proc/self/task/TID/stat`` field 39).

    This is where the thread really ran, which an affinity mask read back does not prove.
    None when the thread is gone.
    """
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: split after its closing parenthesis.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[39 - 3])


def thread_cpu_time(tid: int) -> int | None:
    """User + system clock ticks thread ``tid`` has run (fields 14 and 15), None when it is gone."""
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[14 - 3]) + int(fields[15 - 3])
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
