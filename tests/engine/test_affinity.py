"""Inference's CPU set, pinning, and what procfs says a thread ran on: stand-in affinity calls and a
procfs tree the test writes under its own temporary directory (plus the real ones where harmless)."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pytest

from runtime.engine import affinity
from runtime.errors import ConfigError


def fake_allowed(monkeypatch: pytest.MonkeyPatch, cpus: set[int]) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(cpus))


# --- the CPU set -----------------------------------------------------------------------------------


def test_allowed_cpus_are_this_process_affinity_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def getaffinity(pid: int) -> set[int]:
        asked.append(pid)
        return {7, 2, 5}

    monkeypatch.setattr(os, "sched_getaffinity", getaffinity)
    assert affinity.allowed_cpus() == [2, 5, 7]
    assert asked == [0]


def test_the_real_allowed_cpus() -> None:
    assert affinity.allowed_cpus() == sorted(os.sched_getaffinity(0))


def test_requested_cpus_are_used_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_allowed(monkeypatch, {0, 1, 2, 3})
    assert affinity.inference_cpus((3, 1), control_cpu=1) == [1, 3]  # the request wins, control CPU or not


def test_requested_cpus_not_allowed_are_refused_by_number(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_allowed(monkeypatch, {0, 1, 2, 3})
    with pytest.raises(ConfigError) as info:
        affinity.inference_cpus((9, 2, 5), control_cpu=0)
    assert str(info.value) == "engine.cpus: CPU(s) [5, 9] are not available to this process (allowed: [0, 1, 2, 3])"


def test_without_a_request_every_allowed_cpu_but_the_control_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_allowed(monkeypatch, {3, 0, 2, 1})
    assert affinity.inference_cpus((), control_cpu=2) == [0, 1, 3]
    assert affinity.inference_cpus((), control_cpu=0) == [1, 2, 3]


def test_a_control_cpu_outside_the_allowed_set_leaves_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_allowed(monkeypatch, {4, 5})
    assert affinity.inference_cpus((), control_cpu=0) == [4, 5]


def test_on_one_cpu_inference_shares_the_control_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_allowed(monkeypatch, {3})
    assert affinity.inference_cpus((), control_cpu=3) == [3]


def test_pinning_sets_the_calling_thread_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, list[int]]] = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: calls.append((pid, cpus)))
    affinity.pin_current_thread([1, 3])
    assert calls == [(0, [1, 3])]


def test_pinning_for_real_to_the_set_this_thread_has() -> None:
    mine = sorted(os.sched_getaffinity(0))
    affinity.pin_current_thread(mine)
    assert sorted(os.sched_getaffinity(0)) == mine


# --- procfs: stat and status -----------------------------------------------------------------------


def write_stat(proc: Path, pid: str, tid: int, comm: str, cpu: int, utime: int, stime: int) -> None:
    """A proc(5) stat line: field n (from 3 on) is 1000 + n, but for utime, stime and processor."""
    fields = ["S"] + [str(1000 + n) for n in range(4, 53)]
    fields[14 - 3] = str(utime)
    fields[15 - 3] = str(stime)
    fields[39 - 3] = str(cpu)
    where = proc / pid / "task" / str(tid)
    where.mkdir(parents=True)
    (where / "stat").write_bytes(f"{tid} ({comm}) {' '.join(fields)}\n".encode())


def test_the_cpu_a_thread_last_ran_on_is_field_39(tmp_path: Path) -> None:
    write_stat(tmp_path, "412", 415, "python3", cpu=3, utime=70, stime=9)
    assert affinity.thread_cpu(415, 412, proc=tmp_path) == 3


def test_cpu_time_is_user_plus_system_ticks(tmp_path: Path) -> None:
    write_stat(tmp_path, "412", 415, "python3", cpu=3, utime=70, stime=9)
    assert affinity.thread_cpu_time(415, 412, proc=tmp_path) == 79


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields(tmp_path: Path) -> None:
    write_stat(tmp_path, "self", 7, "inference (ov) 2) x", cpu=1, utime=5, stime=6)
    assert affinity.thread_cpu(7, proc=tmp_path) == 1
    assert affinity.thread_cpu_time(7, proc=tmp_path) == 11


def test_a_thread_gone_has_no_cpu_and_no_time(tmp_path: Path) -> None:
    write_stat(tmp_path, "self", 7, "python3", cpu=1, utime=5, stime=6)
    assert affinity.thread_cpu(8, proc=tmp_path) is None
    assert affinity.thread_cpu_time(8, proc=tmp_path) is None
    assert affinity.thread_cpu(7, 99, proc=tmp_path) is None


def test_the_real_thread_cpu_and_time() -> None:
    tid = threading.get_native_id()
    assert affinity.thread_cpu(tid) in os.sched_getaffinity(0)
    assert affinity.thread_cpu(tid, os.getpid()) in os.sched_getaffinity(0)
    ticks = affinity.thread_cpu_time(tid)
    assert isinstance(ticks, int) and ticks >= 0
    assert affinity.thread_cpu(2**22 + 1) is None  # beyond pid_max: no such thread


def write_status(proc: Path, pid: str, tid: int, text: str) -> None:
    where = proc / pid / "task" / str(tid)
    where.mkdir(parents=True)
    (where / "status").write_text(text)


STATUS = "Name:\tpython3\nCpus_allowed:\t1a7\nCpus_allowed_list:\t{}\nMems_allowed_list:\t0\n"


@pytest.mark.parametrize(
    ("listed", "cpus"),
    [("0", {0}), ("3", {3}), ("0-1", {0, 1}), ("0-2,5,7-8", {0, 1, 2, 5, 7, 8}), ("10-12", {10, 11, 12})],
)
def test_the_allowed_list_is_read_with_its_ranges(tmp_path: Path, listed: str, cpus: set[int]) -> None:
    write_status(tmp_path, "self", 9, STATUS.format(listed))
    assert affinity.thread_cpus_allowed(9, proc=tmp_path) == cpus


def test_the_allowed_list_of_another_process(tmp_path: Path) -> None:
    write_status(tmp_path, "412", 9, STATUS.format("1"))
    assert affinity.thread_cpus_allowed(9, 412, proc=tmp_path) == {1}


def test_a_status_without_the_list_or_a_thread_gone_is_none(tmp_path: Path) -> None:
    write_status(tmp_path, "self", 9, "Name:\tpython3\nCpus_allowed:\t3\n")
    assert affinity.thread_cpus_allowed(9, proc=tmp_path) is None
    assert affinity.thread_cpus_allowed(10, proc=tmp_path) is None


def test_the_real_allowed_list_is_the_affinity() -> None:
    tid = threading.get_native_id()
    assert affinity.thread_cpus_allowed(tid) == os.sched_getaffinity(0)
    assert affinity.thread_cpus_allowed(2**22 + 1) is None


# --- every thread of the process while an engine loads ---------------------------------------------


class Masks:
    """Stand-in affinity calls over threads 1, 2, 3: 2 ends before it is read, 3 before it is moved."""

    def __init__(self) -> None:
        self.masks = {1: {0, 1}, 2: {0}, 3: {1}}
        self.sets: list[tuple[int, set[int]]] = []
        self.fail_restore = False

    def get(self, tid: int) -> set[int]:
        if tid == 2:
            raise ProcessLookupError(3, "No such process")
        return set(self.masks[tid])

    def set(self, tid: int, cpus: object) -> None:
        if tid == 3 or (self.fail_restore and tid == 1 and cpus != [5]):
            raise ProcessLookupError(3, "No such process")
        self.sets.append((tid, set(cpus)))  # type: ignore[call-overload]
        self.masks[tid] = set(cpus)  # type: ignore[call-overload]


@pytest.fixture
def masks(monkeypatch: pytest.MonkeyPatch) -> Masks:
    m = Masks()
    monkeypatch.setattr(affinity, "_threads", lambda: [1, 2, 3])
    monkeypatch.setattr(os, "sched_getaffinity", m.get)
    monkeypatch.setattr(os, "sched_setaffinity", m.set)
    return m


def test_every_thread_is_moved_while_loading_and_given_its_set_back(masks: Masks) -> None:
    with affinity.process_on([5]):
        assert masks.sets == [(1, {5})]
        assert masks.masks[1] == {5}
    assert masks.sets == [(1, {5}), (1, {0, 1})]  # thread 3 was never moved: nothing to give back


def test_the_sets_are_given_back_when_loading_fails(masks: Masks) -> None:
    with pytest.raises(RuntimeError, match="compile failed"), affinity.process_on([5]):
        raise RuntimeError("compile failed")
    assert masks.masks[1] == {0, 1}


def test_a_thread_that_ended_before_its_set_is_given_back_is_skipped(masks: Masks) -> None:
    masks.fail_restore = True
    with affinity.process_on([5]):
        pass
    assert masks.sets == [(1, {5})]


def test_the_threads_are_this_process_tasks() -> None:
    threads = affinity._threads()
    assert threading.get_native_id() in threads and os.getpid() in threads
    assert sorted(threads) == sorted(int(t) for t in os.listdir("/proc/self/task"))


def test_a_real_load_on_this_process_set_keeps_each_thread_set() -> None:
    before = os.sched_getaffinity(0)
    with affinity.process_on(sorted(before)):
        assert os.sched_getaffinity(0) == before
    assert os.sched_getaffinity(0) == before


# --- where the calling thread runs now -------------------------------------------------------------


def test_the_current_cpu_is_one_this_thread_may_run_on() -> None:
    assert affinity.current_cpu() in os.sched_getaffinity(0)


def test_the_current_cpu_comes_from_sched_getcpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(affinity, "_sched_getcpu", lambda: 6)
    assert affinity.current_cpu() == 6


def test_without_sched_getcpu_the_current_cpu_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(affinity, "_sched_getcpu", None)
    assert affinity.current_cpu() == -1


def test_sched_getcpu_is_libc_returning_an_int() -> None:
    fn = affinity._libc_sched_getcpu()
    assert fn is not None
    assert getattr(fn, "restype", None) is ctypes.c_int and getattr(fn, "argtypes", None) == []
    assert fn() in os.sched_getaffinity(0)


def test_a_libc_without_sched_getcpu_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[tuple[object, dict[str, object]]] = []

    class NoGetcpu:
        pass

    def cdll(name: object, **kw: object) -> object:
        opened.append((name, kw))
        return NoGetcpu()

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    assert affinity._libc_sched_getcpu() is None
    assert opened == [(None, {"use_errno": True})]


def test_a_libc_that_cannot_be_opened_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    def cdll(name: object, **kw: object) -> object:
        raise OSError("no libc")

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    assert affinity._libc_sched_getcpu() is None
