"""What the control loop publishes each tick: a frozen :class:`Snapshot`, read by everyone else.

The daemon, the ``control.*`` and ``teleop.*`` handlers, status, the arm monitor, metrics and the
benches read the newest snapshot (through a :class:`~runtime.control.handoff.Latest`) instead of the
loop's own attributes, so they never see a tick half done and the loop never waits for them. It is
also the seam where the loop will leave for a process of its own: a snapshot is plain values.

Fields that are containers are copies (or, like ``state`` and ``present``, objects the loop replaces
each read and never changes afterwards); readers must not change them either.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from drivers.bus import JointState
from runtime.control.latch import Latch
from runtime.control.mode import Mode, Source, source_of


@dataclass(frozen=True, slots=True)
class Snapshot:
    #: the tick this was published at (0 before the first), when it ran and when the next is due
    tick: int = 0
    at: float = 0.0
    next_due: float = 0.0
    mode: Mode = Mode.IDLE
    #: the e-stop in effect (requests not yet taken are the loop's :attr:`estop`)
    latch: Latch | None = None
    #: the newest latch id the loop has taken (a latch taken and released within a tick counts too)
    latches_taken: int = 0
    #: joint positions of the last good read, in the policy's action order; None before one
    present: np.ndarray | None = None
    state: Mapping[str, JointState] = field(default_factory=dict)
    arm_error: str = ""
    queue_depth: int = 0
    dropped_actions: int = 0
    overruns: int = 0
    counters: Counter[str] = field(default_factory=Counter)
    safety: Mapping[str, int] = field(default_factory=dict)
    last_latency_ticks: float = float("nan")
    #: chunks whose latency was measured so far (the loop's ``latencies(since)`` reads them)
    latencies_measured: int = 0
    teleop_phase: str = ""
    teleop_last_seq: int = -1
    #: teleop targets that landed after the tick they reached the daemon in time for
    teleop_late: int = 0
    intervention: bool = False
    #: ticks per CPU the loop thread ran on
    cpu_seen: Mapping[int, int] = field(default_factory=dict)
    scheduling: str = ""
    native_id: int = 0
    #: the last sync write's completion (loop clock; 0.0 before one) and its period error in ms
    last_write_at: float = 0.0
    last_write_error_ms: float = float("nan")
    #: write periods measured since the start (writes on consecutive ticks), and those > 5 ms off
    write_periods: int = 0
    writes_off: int = 0

    def stalled_for(self, now: float, period: float) -> float:
        """Seconds since this tick beyond five periods (0 while ticking normally, or before a tick)."""
        if self.at == 0.0:
            return 0.0
        late = now - self.at
        return late if late > 5 * period else 0.0

    @property
    def source(self) -> Source:
        return source_of(self.mode)

    @property
    def estop_reason(self) -> str | None:
        return self.latch.reason if self.latch is not None else None
