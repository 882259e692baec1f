"""The flight recorder: the last N seconds of control ticks, kept in memory, written on a fault.

Rows live in preallocated arrays (a ring), so recording a tick allocates nothing. ``snapshot()``
copies the ring in time order under a lock the control thread holds only while it writes one row;
``dump()`` writes that copy as a ``.npz`` (plain arrays, no pickle) that ``lerobot-runtime replay``
reads back.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runtime.control.mode import Mode

MODES = tuple(m.value for m in Mode)  # a recording's mode codes index this (written in its meta)
MODE_CODE = {m: i for i, m in enumerate(Mode)}


class FlightRecorder:
    def __init__(self, joints: Sequence[str], rate_hz: float, seconds: float) -> None:
        self.joints = tuple(joints)
        self.rate_hz = rate_hz
        n = len(self.joints)
        self.capacity = max(2, round(seconds * rate_hz))
        c = self.capacity
        self.t = np.zeros(c)
        self.tick = np.zeros(c, dtype=np.int64)
        self.mode = np.zeros(c, dtype=np.int8)
        self.present = np.full((c, n), np.nan)
        self.goal = np.full((c, n), np.nan)  # NaN: nothing written this tick
        self.requested = np.full((c, n), np.nan)  # before the envelope; NaN: no action due
        self.clamps = np.zeros((c, n), dtype=np.int8)  # safety bits per joint
        self.queue_depth = np.zeros(c, dtype=np.int32)
        self.latency_ticks = np.full(c, np.nan)
        self.late_ms = np.zeros(c)
        # when this tick's sync write completed, ms after its deadline, and the period since the
        # previous tick's write minus the control period (NaN: nothing written, or not measured)
        self.write_ms = np.full(c, np.nan)
        self.write_err_ms = np.full(c, np.nan)
        self._next = 0
        self.rows = 0
        self._lock = threading.Lock()

    def record(
        self,
        t: float,
        tick: int,
        mode: int,
        present: np.ndarray | None,
        goal: np.ndarray | None,
        requested: np.ndarray | None,
        clamps: np.ndarray | None,
        queue_depth: int,
        latency_ticks: float,
        late_ms: float,
        write_ms: float = np.nan,
        write_err_ms: float = np.nan,
    ) -> None:
        with self._lock:
            i = self._next
            self.t[i], self.tick[i], self.mode[i] = t, tick, mode
            if present is None:
                self.present[i] = np.nan
            else:
                self.present[i] = present
            if goal is None:
                self.goal[i] = np.nan
            else:
                self.goal[i] = goal
            if requested is None:
                self.requested[i] = np.nan
            else:
                self.requested[i] = requested
            if clamps is None:
                self.clamps[i] = 0
            else:
                self.clamps[i] = clamps
            self.queue_depth[i], self.latency_ticks[i], self.late_ms[i] = queue_depth, latency_ticks, late_ms
            self.write_ms[i], self.write_err_ms[i] = write_ms, write_err_ms
            self._next = (i + 1) % self.capacity
            self.rows = min(self.rows + 1, self.capacity)

    def snapshot(self) -> dict[str, np.ndarray]:
        """Every recorded row, oldest first."""
        with self._lock:
            if self.rows < self.capacity:
                order = np.arange(self.rows)
            else:
                order = (np.arange(self.capacity) + self._next) % self.capacity
            return {
                "t": self.t[order].copy(),
                "tick": self.tick[order].copy(),
                "mode": self.mode[order].copy(),
                "present": self.present[order].copy(),
                "goal": self.goal[order].copy(),
                "requested": self.requested[order].copy(),
                "clamps": self.clamps[order].copy(),
                "queue_depth": self.queue_depth[order].copy(),
                "latency_ticks": self.latency_ticks[order].copy(),
                "late_ms": self.late_ms[order].copy(),
                "write_ms": self.write_ms[order].copy(),
                "write_err_ms": self.write_err_ms[order].copy(),
            }

    def recent_late_ms(self, n: int) -> np.ndarray:
        with self._lock:
            k = min(n, self.rows)
            idx = (self._next - 1 - np.arange(k)) % self.capacity
            late: np.ndarray = self.late_ms[idx].copy()
            return late

    def dump(self, directory: Path, reason: str, extra: dict[str, Any] | None = None) -> Path:
        """Write the ring to ``directory/flight-<time>-<reason>.npz``; returns the path."""
        directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        slug = "".join(c if c.isalnum() else "-" for c in reason.lower())[:40].strip("-") or "request"
        path = directory / f"flight-{stamp}-{slug}.npz"
        n = 1
        while path.exists():
            n += 1
            path = directory / f"flight-{stamp}-{slug}-{n}.npz"
        meta = {
            "reason": reason,
            "joints": list(self.joints),
            "rate_hz": self.rate_hz,
            "modes": list(MODES),
            "written_at_monotonic": time.monotonic(),
            **(extra or {}),
        }
        data = self.snapshot()
        tmp = path.with_suffix(".tmp.npz")
        np.savez_compressed(tmp, meta=np.array(json.dumps(meta)), **data)  # type: ignore[arg-type]
        tmp.replace(path)
        return path


def load_flight(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read a recorder dump: (meta, arrays)."""
    with np.load(path, allow_pickle=False) as f:
        meta = json.loads(str(f["meta"]))
        arrays = {k: f[k] for k in f.files if k != "meta"}
    return meta, arrays
