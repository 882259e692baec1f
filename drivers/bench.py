"""``lerobot-runtime bench bus``: one sync-read + sync-write cycle of 6 servos over a pty.

Measured times are next to the time the same bytes would take on a real 1 Mbaud bus (10 bits per
byte on the wire: start, 8 data, stop). A pty has no baud rate, so the measured figure is the
driver's own cost (Python, syscalls, the simulator thread) and the wire figure is the floor a real
bus adds; servo return delay and USB-serial latency come on top on hardware.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Literal

from drivers.calibration import Calibration
from drivers.sim.simulator import ServoSimulator
from drivers.vendors import bus_class

TICK_MS = 1000 / 30
# how long a cycle waits for the simulator's replies: the bench times cycles, it does not test the
# bus's give-up time, and a simulator thread on a loaded machine may take tens of ms to answer
REPLY_TIMEOUT_MS = 500
BITS_PER_BYTE = 10
PTY_NOTE = (
    "measured over a pseudo-terminal, which has no baud rate: the times are the driver's and the "
    "simulator's own cost; wire_ms is what the same bytes take on a 1 Mbaud bus (10 bits/byte)"
)


@dataclass(frozen=True)
class BusBench:
    protocol: str
    servos: int
    cycles: int
    state_block_bytes: int
    median_ms: float
    p90_ms: float
    p99_ms: float
    wire_bytes: int
    wire_ms_1mbaud: float
    cycles_per_tick_median: float
    cycles_per_tick_p99: float
    cycles_per_tick_wire: float


def _percentile(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, round(q * (len(sorted_ms) - 1)))]


def bench_protocol(
    protocol: Literal["feetech", "dynamixel"], *, servos: int = 6, cycles: int = 500, warmup: int = 20
) -> BusBench:
    ids = list(range(1, servos + 1))
    with ServoSimulator(protocol, ids) as sim:
        bus = bus_class(protocol)(sim.port, Calibration.uncalibrated(ids), timeout_ms=REPLY_TIMEOUT_MS)
        with bus:
            bus.enable_torque()
            goals = [{n: 5.0 for n in bus.joints}, {n: -5.0 for n in bus.joints}]
            samples: list[float] = []
            for i in range(warmup + cycles):
                t0 = time.perf_counter_ns()
                bus.read_state()
                bus.write_goals(goals[i % 2])
                if i >= warmup:
                    samples.append((time.perf_counter_ns() - t0) / 1e6)
            codec = bus.codec
            block = bus._block_size
            goal = bus.spec.table["Goal_Position"]
            wire = (
                len(codec.sync_read(ids, bus._block_address, block))
                + servos * codec.status_size(block)
                + len(codec.sync_write(goal.address, goal.size, [(i, bytes(goal.size)) for i in ids]))
            )
    samples.sort()
    median = statistics.median(samples)
    p99 = _percentile(samples, 0.99)
    wire_ms = wire * BITS_PER_BYTE / 1_000_000 * 1000
    return BusBench(
        protocol=protocol,
        servos=servos,
        cycles=cycles,
        state_block_bytes=block,
        median_ms=round(median, 4),
        p90_ms=round(_percentile(samples, 0.90), 4),
        p99_ms=round(p99, 4),
        wire_bytes=wire,
        wire_ms_1mbaud=round(wire_ms, 4),
        cycles_per_tick_median=round(TICK_MS / median, 1),
        cycles_per_tick_p99=round(TICK_MS / p99, 1),
        cycles_per_tick_wire=round(TICK_MS / wire_ms, 1),
    )


def run(cycles: int = 500) -> dict[str, object]:
    results = [asdict(bench_protocol(p, cycles=cycles)) for p in ("feetech", "dynamixel")]
    return {"tick_ms": round(TICK_MS, 3), "note": PTY_NOTE, "results": results}


def format_table(report: dict[str, object]) -> str:
    rows = report["results"]
    assert isinstance(rows, list)
    lines = [
        "bus cycle = sync read (goal..temperature block) + sync write goals, 6 servos",
        f"{'protocol':<10} {'median':>8} {'p90':>8} {'p99':>8} {'wire@1M':>8} {'bytes':>6} "
        f"{'fit/tick':>9} {'fit(p99)':>9} {'fit(wire)':>9}",
    ]
    for r in rows:
        lines.append(
            f"{r['protocol']:<10} {r['median_ms']:>6.3f}ms {r['p90_ms']:>6.3f}ms {r['p99_ms']:>6.3f}ms "
            f"{r['wire_ms_1mbaud']:>6.3f}ms {r['wire_bytes']:>6} {r['cycles_per_tick_median']:>9} "
            f"{r['cycles_per_tick_p99']:>9} {r['cycles_per_tick_wire']:>9}"
        )
    lines.append(f"30 Hz tick = {report['tick_ms']} ms. Note: {report['note']}.")
    return "\n".join(lines)
