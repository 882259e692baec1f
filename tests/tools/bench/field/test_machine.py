"""The machine beside the field bench (:mod:`tools.bench.field.machine`): hypervisor steal read from
``/proc/stat`` and differenced between samples, and the kernel's pty workers raised for a run and
restored after (a procfs tree the test writes)."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from tools.bench.field import machine
from tools.bench.field.machine import PtyWorkerBoost, StealSampler, read_steal


def test_steal_is_the_eighth_field_of_each_cpus_line() -> None:
    text = (
        "cpu  10 0 5 100 0 0 0 9 0 0\n"  # the total: not a CPU
        "cpu0 1 2 3 4 5 6 7 8 9 10\n"
        "cpu12 1 2 3 4 5 6 7 33\n"
        "cpu3 1 2 3 4 5 6 7\n"  # an old kernel without steal
        "cpux 1 2 3 4 5 6 7 8\n"
        "intr 1 2 3 4 5 6 7 8\n"
    )
    assert read_steal(text) == {0: 8, 12: 33, 3: 0}


def test_steal_between_two_moments_is_taken_from_the_samples_around_them(tmp_path: Any) -> None:
    sampler = StealSampler(path=tmp_path / "stat")
    sampler.times = [1.0, 2.0, 3.0, 4.0]
    sampler.samples = [{0: 10, 1: 0}, {0: 12, 1: 0}, {0: 17, 1: 5}, {0: 30}]
    tick_ms = machine.TICK_S * 1e3
    assert sampler.ms(0, 2.0, 3.0) == round(5 * tick_ms, 1)  # samples at exactly t0 and t1
    assert sampler.ms(0, 1.5, 2.5) == round(7 * tick_ms, 1)  # the one before t0, the one after t1
    assert sampler.ms(0, 0.0, 9.0) == round(20 * tick_ms, 1)  # clamped to the first and the last
    assert sampler.ms(1, 2.0, 3.0) == round(5 * tick_ms, 1)
    assert sampler.ms(1, 2.0, 4.0) is None  # the last sample has no CPU 1
    assert sampler.ms(5, 1.0, 2.0) is None
    assert sampler.report([0, 1], 2.0, 3.0) == {
        "per_cpu_ms": {"0": round(5 * tick_ms, 1), "1": round(5 * tick_ms, 1)},
        "resolution_ms": round(tick_ms, 1),
    }


def test_steal_is_read_per_cpu_and_differenced_between_samples(tmp_path: Any) -> None:
    text = "cpu  1 2 3 4 5 6 7 90 0 0\ncpu0 1 2 3 4 5 6 7 40 0 0\ncpu1 1 2 3 4 5 6 7 50 0 0\nintr 5\n"
    assert read_steal(text) == {0: 40, 1: 50}
    sampler = StealSampler(path=tmp_path / "stat")
    sampler.times = [1.0, 2.0, 3.0]
    sampler.samples = [{0: 40}, {0: 41}, {0: 45}]
    tick_ms = 1000 / __import__("os").sysconf("SC_CLK_TCK")
    assert sampler.ms(0, 1.5, 2.5) == pytest.approx(5 * tick_ms)  # from the sample before to the one after
    assert sampler.ms(0, 2.0, 2.0) == 0.0
    assert sampler.ms(1, 1.0, 3.0) is None
    assert StealSampler(path=tmp_path / "none").ms(0, 0.0, 1.0) is None
    (tmp_path / "stat").write_text(text)
    sampler = StealSampler(every_s=0.01, path=tmp_path / "stat").start()
    time.sleep(0.05)
    sampler.stop()
    assert len(sampler.times) >= 2 and sampler.samples[0] == {0: 40, 1: 50}
    assert sampler.report([0, 1], sampler.times[0], sampler.times[-1])["per_cpu_ms"] == {"0": 0.0, "1": 0.0}


def test_pty_workers_are_raised_as_they_appear_and_restored_after(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "proc"

    def thread(pid: int, comm: str) -> None:
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")

    thread(10, "kworker/u8:1-events_unbound")
    thread(11, "kworker/0:1-mm_percpu_wq")  # bound to a CPU: not a pty's worker
    thread(12, "python")
    (proc / "self").mkdir()
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(
        "tools.bench.field.machine.os.sched_setscheduler",
        lambda pid, policy, param: calls.append((pid, policy, param.sched_priority)),
    )
    boost = PtyWorkerBoost(every_s=0.01, proc=proc).start()
    assert calls == [(10, os.SCHED_FIFO, 1)]
    thread(13, "kworker/u8:2")
    deadline = time.monotonic() + 2.0
    while (13, os.SCHED_FIFO, 1) not in calls and time.monotonic() < deadline:
        time.sleep(0.01)
    boost.stop()
    assert calls[-2:] == [(10, os.SCHED_OTHER, 0), (13, os.SCHED_OTHER, 0)]
    assert boost.describe() == "SCHED_FIFO 1 (2 kworker/u threads, restored after)"


def test_pty_workers_left_alone_without_the_right_say_so(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "5").mkdir()
    (tmp_path / "5" / "comm").write_text("kworker/u8:0\n")

    def refuse(pid: int, policy: int, param: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr("tools.bench.field.machine.os.sched_setscheduler", refuse)
    boost = PtyWorkerBoost(proc=tmp_path).start()
    boost.stop()
    assert boost.describe() == "refused (Operation not permitted: needs CAP_SYS_NICE)" and not boost.boosted
