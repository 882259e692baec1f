"""Scheduling classes that a library changes behind the daemon's back, put back.

SVT-AV1 (``libsvtav1``) raises the thread that opens an encoder, and the threads it starts, to
SCHED_FIFO 99 whenever the process may (root, or a ``LimitRTPRIO=`` of 99). Every thread and process
started afterwards from such a thread inherits it, and FIFO 99 runs ahead of the control loop's own
priority. :func:`keep_scheduling` restores the calling thread after an encoder is probed;
:func:`normal_scheduling` returns every thread of this process to SCHED_OTHER (the encoder processes
after opening a codec, the arm process at start, before its loop asks for its own priority).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator


@contextlib.contextmanager
def keep_scheduling() -> Iterator[None]:
    """Whatever the body does to the calling thread's scheduling class and priority is undone, and
    threads it started that are still there (a codec's pool) are returned to SCHED_OTHER."""
    policy = os.sched_getscheduler(0)
    param = os.sched_getparam(0)
    before = set(os.listdir("/proc/self/task"))
    try:
        yield
    finally:
        # through pthread_setschedparam, not the sched_setscheduler system call: the C library keeps
        # its own copy of the thread's class (set by the codec through it) and gives that copy to every
        # thread this one starts from now on
        _pthread_setschedparam(policy, param.sched_priority)
        for tid in set(os.listdir("/proc/self/task")) - before:
            _normal(int(tid))


class _SchedParam(ctypes.Structure):
    _fields_ = [("sched_priority", ctypes.c_int)]


def _pthread_setschedparam(policy: int, priority: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.pthread_self.restype = ctypes.c_ulong
    libc.pthread_setschedparam.argtypes = [ctypes.c_ulong, ctypes.c_int, ctypes.POINTER(_SchedParam)]
    err = libc.pthread_setschedparam(libc.pthread_self(), policy, ctypes.byref(_SchedParam(priority)))
    if err:  # not allowed: leave at least the kernel's view right
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, policy, os.sched_param(priority))


def normal_scheduling() -> int:
    """Every real-time thread of this process back to SCHED_OTHER; how many were changed."""
    return sum(_normal(int(tid)) for tid in os.listdir("/proc/self/task"))


def _normal(tid: int) -> bool:
    with contextlib.suppress(OSError):  # the thread may have ended since it was listed
        if os.sched_getscheduler(tid) in (os.SCHED_FIFO, os.SCHED_RR):
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            return True
    return False
