"""Time the hypervisor took from each CPU (``steal`` in ``/proc/stat``), sampled through a run.

On a virtual machine, a vCPU the host deschedules stops, whatever its threads' priority: a real-time
loop then wakes late, and nothing inside the guest can prevent it. Sampling the steal counter beside
a timing benchmark tells such a moment from a stall of the software under test: the worst writes are
reported with the steal their CPU saw around them. ``/proc/stat`` counts in USER_HZ ticks (10 ms), so
a window of a few ticks is the finest this can resolve.
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
