"""``bench field``: the servo-side stamps and log analysis, and the whole harness end to end on the demo
bundle (one camera, seconds of run), leaving no process behind. Behaviour only: timing targets are
never asserted here (the machine is shared and noisy)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from drivers.calibration import load_calibration
from drivers.feetech.bus import FeetechBus
from runtime.bench.field_servos import (
    ArrivalStampedSimulator,
    ServoLog,
    after_kill,
    calibration_path,
    teleop_latency,
    worst_writes,
    write_periods,
)
from runtime.bench.machine import PtyWorkerBoost, StealSampler, read_steal

PERIOD = 1 / 30


def _log(writes: list[tuple[float, list[int]]], torque: list[tuple[float, int]] | None = None) -> ServoLog:
    goals = {i + 1: np.array([[t, g[i]] for t, g in writes], dtype=np.float64).reshape(-1, 2) for i in range(6)}
    torques = {i + 1: np.array(torque or [], dtype=np.float64).reshape(-1, 2) for i in range(6)}
    return ServoLog("SCHED_FIFO 40", goals, torques)


def test_write_periods_count_missing_writes_apart_from_late_ones() -> None:
    stamps = np.arange(10) * PERIOD
    stamps[4] += 0.006  # one write 6 ms late: two periods 6 ms off
    stamps = np.delete(stamps, [7, 8])  # two writes missing
    r = write_periods(stamps, PERIOD)
    assert r["writes"] == 8 and r["missing_periods"] == 2
    assert r["periods"] == 6 and r["off_5ms"] == 2
    assert r["period_error_ms"]["max"] == pytest.approx(6.0, abs=1e-6)
    assert r["max_gap_ms"] == pytest.approx(3000 / 30, abs=1e-3)


def test_worst_writes_name_the_tick_the_loop_stamped_and_the_steal_around_it() -> None:
    stamps = np.arange(20) * PERIOD
    stamps[10] += 0.004  # 4 ms late: +4 then -4
    stamps[15] += 0.002
    # the flight recording: each tick woke at t (late_ms after its deadline) and wrote write_ms after it
    late = np.full(20, 0.1)
    write = np.full(20, 0.3)
    write[10] = 4.3
    flight = {"t": stamps - 0.0002 + late / 1e3 - write / 1e3 + 0.0002, "late_ms": late, "write_ms": write}
    seen: list[tuple[float, float]] = []

    def steal(a: float, b: float) -> float:
        seen.append((a, b))
        return 7.0

    rows = worst_writes(stamps, PERIOD, (0.0, 1.0), flight, steal, n=3)
    assert [r["period_error_ms"] for r in rows] == pytest.approx([4.0, -4.0, 2.0], abs=1e-6)
    assert rows[0]["at_s"] == pytest.approx(stamps[10], abs=1e-3)
    assert rows[0]["loop_write_after_deadline_ms"] == pytest.approx(4.3) and rows[0]["loop_woke_late_ms"] == 0.1
    assert rows[0]["arrived_after_loop_stamp_ms"] == pytest.approx(0.0, abs=1e-6)
    assert rows[0]["steal_ms_around"] == 7.0
    assert seen[0] == pytest.approx((stamps[10] - 2 * PERIOD, stamps[10] + PERIOD))
    assert worst_writes(stamps, PERIOD, (0.0, 1.0), None, None, n=1) == [
        {"at_s": pytest.approx(stamps[10], abs=1e-3), "period_error_ms": pytest.approx(4.0, abs=1e-6)}
    ]


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
        "runtime.bench.machine.os.sched_setscheduler",
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

    monkeypatch.setattr("runtime.bench.machine.os.sched_setscheduler", refuse)
    boost = PtyWorkerBoost(proc=tmp_path).start()
    boost.stop()
    assert boost.describe() == "refused (Operation not permitted: needs CAP_SYS_NICE)" and not boost.boosted


def test_teleop_latency_takes_the_first_target_and_the_first_write_that_carry_the_move() -> None:
    moves = [(1.0, 1.0), (2.0, 0.0)]
    sends = [(0.99, 0.0), (1.01, 1.0), (1.04, 1.0), (2.02, 0.0)]
    times = np.array([1.0, 1.0333, 1.0666, 2.0, 2.0333])
    values = np.array([0.0, 1.0, 1.0, 1.0, 0.0])
    r = teleop_latency(times, values, moves, sends, 0.05)
    assert r["measured"] == 2 and r["missed"] == 0
    assert r["send_to_write_ms"]["p50"] == pytest.approx((23.3 + 13.3) / 2, abs=0.1)
    assert r["move_to_write_ms"]["max"] == pytest.approx(33.3, abs=0.1)
    assert teleop_latency(times, values, [(3.0, 5.0)], sends, 0.05)["missed"] == 1


def test_after_kill_says_when_nothing_was_written() -> None:
    r = after_kill(_log([(0.0, [2000] * 6), (PERIOD, [2001] * 6)]), 0.05, PERIOD, {3: 2200})
    assert r["verdict"] == "no write after the kill" and r["writes_after"] == 0 and r["first"] is None


def test_after_kill_classes_hold_then_rest_then_torque_off() -> None:
    before = [(0.0, [2000] * 6), (PERIOD, [2001] * 6)]
    hold = [(2 * PERIOD, [2001] * 6)]
    rest = [(3 * PERIOD + k * PERIOD, [2001, 2001, 2010 + 10 * k, 2001, 2001, 2001]) for k in range(3)]
    still = [(6 * PERIOD, [2001, 2001, 2031, 2001, 2001, 2001])]  # the present pose held, a tick off the goal
    r = after_kill(_log(before + hold + rest + still, [(0.5, 0)]), 1.5 * PERIOD, PERIOD, {3: 2030})
    assert r["first"]["is_hold"] and r["first"]["at_next_tick"]
    assert [(run["kind"], run["writes"]) for run in r["runs"]] == [("hold", 1), ("rest", 3), ("still", 1)]
    assert r["rest_reached"] and r["torque_off_after_ms"] == pytest.approx((0.5 - 1.5 * PERIOD) * 1e3, abs=0.1)
    assert r["verdict"] == "hold x1, then rest x3, then still x1, then torque off at 450 ms"


def test_after_kill_names_a_write_that_is_neither_hold_rest_nor_still() -> None:
    writes = [(0.0, [2000] * 6), (PERIOD, [2100] * 6)]
    r = after_kill(_log(writes), 0.5 * PERIOD, PERIOD, {3: 2030})
    assert not r["first"]["is_hold"] and r["first"]["max_diff_from_last_goal_ticks"] == 100
    assert r["verdict"] == "other x1"


def test_every_servo_of_a_sync_write_carries_the_time_its_bytes_arrived() -> None:
    cal = load_calibration(calibration_path())
    sim = ArrivalStampedSimulator(cal).start()
    bus = FeetechBus(sim.port, cal)
    try:
        bus.connect()
        slow = sim.servo(1)
        original = slow.write

        def slow_write(address: int, data: bytes) -> None:
            time.sleep(0.05)  # handling one servo takes long: the later servos are handled later
            original(address, data)

        slow.write = slow_write  # type: ignore[method-assign]
        before = time.monotonic()
        bus.write_goals(bus.read_positions())
        time.sleep(0.2)
        stamps = {i: s.goal_log[-1][0] for i, s in sim.servos.items()}
        slow.write = original  # type: ignore[method-assign]
    finally:
        bus.disconnect()
        sim.stop()
    assert len(set(stamps.values())) == 1  # one arrival, whatever each servo's handling took
    assert before <= stamps[6] < before + 0.05


@pytest.fixture
def no_new_processes() -> Iterator[None]:
    # children the test process had before (multiprocessing's resource tracker, once any test used it)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    assert [p for p in psutil.Process().children(recursive=True) if p.pid not in before] == []


def _run(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    from runtime.cli import main

    # x264: SVT-AV1 (what "auto" tries first) raises the thread that opens it to SCHED_FIFO 99 when it
    # can, and the daemon's processes inherit that; a test keeps off the shared machine's real-time CPU
    args = [
        "bench",
        "field",
        "--demo",
        "--seconds",
        "3",
        "--floor-seconds",
        "1",
        "--codec",
        "libx264",
        "--json",
        *extra,
    ]
    assert main(args) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def _assert_the_workload_ran(r: dict[str, Any]) -> None:
    assert r["cpu_flags"] == sorted(r["cpu_flags"]) and r["cpus"] >= 1
    assert r["engine"]["engine"] == "openvino"
    assert r["daemon_scheduling"] and all(p["threads"] for p in r["daemon_scheduling"])
    assert isinstance(r["daemon_realtime_threads"], list)
    # what must hold however loaded the machine is: goals were written and seen from both sides
    s, d, a = r["servos"], r["daemon"], r["agreement"]
    assert s["writes"] > 0 and s["periods"] >= 0 and s["missing_periods"] >= 0 and s["off_5ms"] <= s["periods"]
    assert d["ticks"] > 0 and d["writes"] > 0 and d["status_jitter_ms"]["p99"] is not None
    assert "flight_periods" in d  # the flight recording of the run came back from control dump
    assert a["matched_writes"] > 0
    assert r["scheduling"]["servo_simulator"].startswith(("SCHED_FIFO", "SCHED_OTHER"))
    assert r["floor"] is not None and r["floor"]["at_servos"]["writes"] > 0
    t = r["teleop"]
    assert t["moves"] > 0 and t["measured"] + t["missed"] == t["moves"]
    assert t["measured"] == 0 or t["send_to_write_ms"]["p50"] > 0
    assert t["targets_sent"] > 0 and t["episode_start"] == "episode start"
    rec = r["recording"]
    assert rec["episodes_written"] == 1 and rec["frames_written"] > 0
    assert list(rec["per_camera"]) == ["observation.images.front"]
    assert rec["per_camera"]["observation.images.front"]["stream_frames_received"] > 0
    assert rec["dataset_check"]["ok"] and rec["dataset_check"]["episodes"] == 1
    assert r["load"]["infers_in_window"] > 0 and r["load"]["server_errors_in_window"] == {}
    assert len(r["worst_writes"]) <= 5 and all("period_error_ms" in w for w in r["worst_writes"])
    assert set(r["steal"]["per_cpu_ms"]) == {str(c) for c in sorted(os.sched_getaffinity(0))}


def test_bench_field_runs_the_workload_and_stops_the_daemon_gracefully(
    capsys: pytest.CaptureFixture[str], no_new_processes: None
) -> None:
    r = _run(capsys)
    _assert_the_workload_ran(r)
    assert r["load"]["infer_client"]["replies"] > 0
    assert r["daemon_exit_status"] == 0 and r["daemon_children_left_behind"] == []
    assert "kill" not in r


def test_bench_field_kill_reports_what_the_servos_got_after_it(
    capsys: pytest.CaptureFixture[str], no_new_processes: None
) -> None:
    r = _run(capsys, "--kill", "--encoder-delay-ms", "100")
    _assert_the_workload_ran(r)
    # an encoder too slow for the camera: frames dropped, counted, the episode marked and still valid
    rec = r["recording"]
    assert r["encoder_delay_ms"] == 100
    assert rec["per_camera"]["observation.images.front"]["encoder_drops"] > 0
    assert rec["episode_drop_rate"] > 0.05 and rec["episodes_over_drop_rate"] == 1
    k = r["kill"]
    assert r["kill_case"] == "station"
    # teleop, unless the loaded machine made the arm's bus fail and the e-stop latch (then it says so)
    assert k["moving_before"] == (k["mode_before"] == "teleop") and k["mode_before"] in ("teleop", "estopped")
    assert k["last_write_before_ms"] < 0
    if k["writes_after"] == 0:  # the daemon's process held the arm: nothing reaches it once it is gone
        assert k["verdict"].startswith("no write after the kill") and k["first"] is None
    else:  # an arm process of its own outlives it
        assert k["first"]["after_kill_ms"] >= 0 and k["runs"]


def test_every_benchmark_states_the_cpu_its_vector_flags_and_how_many_cpus_it_may_use() -> None:
    from runtime.bench.machine import cpu_summary

    got = cpu_summary()
    flags = set(Path("/proc/cpuinfo").read_text().split())  # the kernel's own list, not lscpu's
    assert set(got) == {"cpu", "cpu_flags", "cpus"} and got["cpus"] == len(os.sched_getaffinity(0))
    assert ("avx2" in got["cpu_flags"]) == ("avx2" in flags)
    assert ("avx512_bf16" in got["cpu_flags"]) == ("avx512_bf16" in flags)
    assert got["cpu_flags"] == sorted(got["cpu_flags"]) and got["cpu"] != ""
