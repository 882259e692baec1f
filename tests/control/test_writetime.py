"""Write-time measurement: the loop's stamp of each completed sync write against what the simulated
servos say they received, and the status, snapshot and recorder figures built from it."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from runtime.control.writetime import OFF_MS, WriteClock

from .conftest import ScriptedInference, wait_for
from .test_loop import CHUNK, offset, ramp, start

#: how far the loop's stamp of a write may be from the servos' receive time, for most writes (same
#: host, same clock; the simulator's thread needs the interpreter lock the loop thread may hold, and on
#: a loaded machine a few writes wait longer: the tail is not asserted)
STAMP_TOLERANCE_MS = 3.0


def test_period_errors_are_measured_between_consecutive_ticks_only() -> None:
    clock = WriteClock(0.02, 4)
    assert math.isnan(clock.stamp(1, 10.000))  # nothing before it
    assert clock.stamp(2, 10.021) == pytest.approx(1.0)
    assert clock.stamp(3, 10.047) == pytest.approx(6.0)  # 26 ms apart: more than OFF_MS off
    assert math.isnan(clock.stamp(5, 10.080))  # tick 4 wrote nothing: no period to measure
    assert clock.stamp(6, 10.099) == pytest.approx(-1.0)
    assert (clock.periods, clock.off) == (3, 1)
    stamps, errors = clock.recent()  # the ring keeps the newest 4, oldest first
    assert list(stamps) == [10.021, 10.047, 10.080, 10.099]
    assert errors[0] == pytest.approx(1.0) and math.isnan(errors[2])
    stats = clock.stats()
    assert stats["max"] == pytest.approx(6.0) and stats["periods"] == 3 and stats["off_5ms"] == 1
    assert OFF_MS == 5.0


def test_empty_write_clock_reports_nothing() -> None:
    stats = WriteClock(0.02, 8).stats()
    assert stats == {"p50": None, "p99": None, "max": None, "periods": 0, "off_5ms": 0}
    with pytest.raises(ValueError, match="capacity"):
        WriteClock(0.02, 1)


def test_write_times_agree_with_what_the_servos_received(run, sim_arm, calibration):
    """Each stamp is within a few ms of the simulated servo's own receive time, and the period
    errors computed from either side agree."""
    # a slow sweep: a new goal every tick for the whole test
    inference = ScriptedInference(lambda n, s: ramp(s, s + offset(shoulder_pan=20), steps=CHUNK))
    loop = run(inference, rate_hz=50.0, n_action_steps=50)
    start(loop)
    wait_for(lambda: loop.snapshot().write_periods >= 120, timeout=10, what="120 write periods")
    stamps, errors = loop.write_times()
    servo = sim_arm.simulator.servo(calibration.joints["shoulder_pan"].id)
    received = np.array([t for t, _ in list(servo.goal_log)])
    # the servos may have heard the newest writes after the copy above: compare the ones before
    stamps, errors = stamps[:-5], errors[:-5]
    nearest = received[np.abs(received[None, :] - stamps[:, None]).argmin(axis=1)]
    offsets_ms = (nearest - stamps) * 1e3
    assert np.median(np.abs(offsets_ms)) < 1.0, offsets_ms
    assert np.percentile(np.abs(offsets_ms), 95) < STAMP_TOLERANCE_MS, offsets_ms
    measured = np.isfinite(errors)
    assert measured.sum() >= 100
    # the servos' own period error, for the same consecutive pairs
    servo_errors = np.full(len(stamps), np.nan)
    servo_errors[1:] = (np.diff(nearest) - loop.period) * 1e3
    both = measured & np.isfinite(servo_errors)
    diff = np.abs(errors[both] - servo_errors[both])
    assert np.median(diff) < 1.0 and np.percentile(diff, 95) < 2 * STAMP_TOLERANCE_MS, diff
    loop_p50 = np.median(np.abs(errors[both]))
    servo_p50 = np.median(np.abs(servo_errors[both]))
    assert abs(loop_p50 - servo_p50) < 1.0, (loop_p50, servo_p50)


def test_status_snapshot_and_recorder_carry_the_write_period_error(run):
    inference = ScriptedInference(lambda n, s: ramp(s, s + offset(shoulder_pan=10), steps=CHUNK))
    loop = run(inference, rate_hz=50.0, n_action_steps=50)
    start(loop)
    wait_for(lambda: loop.snapshot().write_periods >= 30, timeout=10, what="30 write periods")
    snap = loop.snapshot()
    assert snap.last_write_at <= time.monotonic() and snap.writes_off <= snap.write_periods
    assert snap.last_write_at >= snap.at  # this tick's write completed after it woke
    w = loop.status()["write_period_error_ms"]
    assert set(w) == {"p50", "p99", "max", "periods", "off_5ms"}
    assert 0.0 <= w["p50"] <= w["p99"] <= w["max"] < 1e3 / 50.0  # less than a period off
    assert w["periods"] >= 30 and 0 <= w["off_5ms"] <= w["periods"]
    rows = loop.recorder.snapshot()
    wrote = np.isfinite(rows["write_ms"])
    assert wrote.sum() >= 30
    # completed after the tick's deadline and before the next one
    assert (rows["write_ms"][wrote] >= 0).all() and (rows["write_ms"][wrote] < 1e3 / 50.0).all()
    err = rows["write_err_ms"]
    assert np.isfinite(err).sum() >= 29 and np.all(np.isfinite(err) <= wrote)


def test_metrics_carry_wake_and_write_timing(run):
    from prometheus_client import CollectorRegistry, generate_latest

    from runtime.metrics import control_metrics

    inference = ScriptedInference(lambda n, s: ramp(s, s + offset(shoulder_pan=10), steps=CHUNK))
    loop = run(inference, rate_hz=50.0, n_action_steps=50)
    start(loop)
    wait_for(lambda: loop.snapshot().write_periods >= 10, timeout=10, what="10 write periods")

    class Control:
        def collect(self):  # type: ignore[no-untyped-def]
            return control_metrics(loop.status())

    registry = CollectorRegistry()
    registry.register(Control())
    text = generate_latest(registry).decode()
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    p99 = float(samples['lerobot_runtime_control_write_period_error_milliseconds{quantile="0.99"}'])
    assert 0.0 <= p99 < 20.0
    assert float(samples['lerobot_runtime_control_tick_lateness_milliseconds{quantile="0.5"}']) >= 0.0
    assert float(samples["lerobot_runtime_control_write_periods_total"]) >= 10
    assert float(samples["lerobot_runtime_control_write_periods_off_total"]) >= 0
    assert "lerobot_runtime_control_overruns_total" in samples
