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
import os
from collections.abc import Iterator


@contextlib.contextmanager
def keep_scheduling() -> Iterator[None]:
    """Whatever the body does to the calling thread's scheduling class and priority is undone."""
    policy = os.sched_getscheduler(0)
    param = os.sched_getparam(0)
    try:
        yield
    finally:
        if (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) != (policy, param.sched_priority):
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, policy, param)


def normal_scheduling() -> int:
    """Every real-time thread of this process back to SCHED_OTHER; how many were changed."""
    changed = 0
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            if os.sched_getscheduler(int(tid)) in (os.SCHED_FIFO, os.SCHED_RR):
                os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
                changed += 1
    return changed
