"""The machine beside ``bench field``: the time the hypervisor took from each CPU, the kernel's
pseudo-terminal workers, and the machine's load.

- :class:`StealSampler`: on a virtual machine, a vCPU the host deschedules stops, whatever its
  threads' priority: a real-time loop then wakes late, and nothing inside the guest can prevent it.
  Sampling ``steal`` in ``/proc/stat`` through a run tells such moments from stalls of the software
  under test: the worst writes are reported with the steal their CPU saw around them. ``/proc/stat``
  counts in USER_HZ ticks (10 ms), the finest this can resolve.
- :class:`PtyWorkerBoost`: the kernel threads that carry a pseudo-terminal's bytes, raised for the run
  so the simulated servos hear a write when hardware would.
- :func:`loadavg`: the other work on the machine, at the start and the end of the measured seconds.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

STAT = Path("/proc/stat")
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def read_steal(text: str) -> dict[int, int]:
    """Each CPU's steal counter (USER_HZ ticks) from the text of ``/proc/stat``."""
    steal: dict[int, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit():
            fields = rest.split()
            # user nice system idle iowait irq softirq steal ...
            steal[int(name[3:])] = int(fields[7]) if len(fields) > 7 else 0
    return steal


class StealSampler:
    """A daemon thread that reads every CPU's steal counter each ``every_s`` until :meth:`stop`."""

    def __init__(self, every_s: float = 0.02, path: Path = STAT) -> None:
        self.every_s = every_s
        self.path = path
        self.times: list[float] = []
        self.samples: list[dict[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steal-sampler", daemon=True)

    def start(self) -> StealSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1.0)

    def _run(self) -> None:
        while True:
            try:
                text = self.path.read_text()
            except OSError:
                return  # not Linux, or no procfs: nothing to report
            self.times.append(time.monotonic())
            self.samples.append(read_steal(text))
            if self._stop.wait(self.every_s):
                return

    def ms(self, cpu: int, t0: float, t1: float) -> float | None:
        """Steal on ``cpu`` between the last sample at or before ``t0`` and the first at or after ``t1``."""
        if not self.times:
            return None
        times = np.asarray(self.times)
        i = max(0, int(np.searchsorted(times, t0, side="right")) - 1)
        j = min(len(times) - 1, int(np.searchsorted(times, t1, side="left")))
        a, b = self.samples[i].get(cpu), self.samples[j].get(cpu)
        if a is None or b is None:
            return None
        return round((b - a) * TICK_S * 1e3, 1)

    def report(self, cpus: list[int], t0: float, t1: float) -> dict[str, Any]:
        return {"per_cpu_ms": {str(c): self.ms(c, t0, t1) for c in cpus}, "resolution_ms": round(TICK_S * 1e3, 1)}


class PtyWorkerBoost:
    """The kernel's unbound worker threads (``kworker/u*``) at ``SCHED_FIFO`` 1 while a bench runs.

    A pseudo-terminal hands the bytes written on one side to the other on such a worker
    (``flush_to_ldisc``), which runs at SCHED_OTHER: on a loaded machine it waits behind every busy
    process, and the simulated servos hear a write that left on time milliseconds late (6.6 ms
    measured). A USB serial adapter submits the write from the writer's own system call, with no
    worker between, so this brings the simulator closer to what hardware hears. FIFO 1 is the lowest
    real-time priority: below the loop and the simulator. Workers started later are boosted as they
    appear (checked every ``every_s``); :meth:`stop` returns every one still there to SCHED_OTHER."""

    def __init__(self, every_s: float = 0.5, proc: Path = Path("/proc")) -> None:
        self.every_s = every_s
        self.proc = proc
        self.boosted: set[int] = set()
        self.refused = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pty-worker-boost", daemon=True)

    def workers(self) -> list[int]:
        pids = []
        for entry in self.proc.iterdir():
            if entry.name.isdigit():
                try:
                    if (entry / "comm").read_text().startswith("kworker/u"):
                        pids.append(int(entry.name))
                except OSError:
                    continue  # gone meanwhile
        return pids

    def boost_new(self) -> None:
        for pid in self.workers():
            if pid in self.boosted:
                continue
            try:
                os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(1))
            except PermissionError as e:
                self.refused = f"refused ({e.strerror}: needs CAP_SYS_NICE)"
                return
            except OSError:
                continue  # gone meanwhile
            self.boosted.add(pid)

    def start(self) -> PtyWorkerBoost:
        self.boost_new()
        if not self.refused:
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.boost_new()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        for pid in sorted(self.boosted):
            try:
                os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
            except OSError:
                continue  # gone: nothing to restore

    def describe(self) -> str:
        return self.refused or f"SCHED_FIFO 1 ({len(self.boosted)} kworker/u threads, restored after)"


def loadavg() -> float | None:
    """The 1-minute load average (None where ``/proc/loadavg`` cannot be read)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
