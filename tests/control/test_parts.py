"""The loop's parts on their own: action queue, safety envelope, stream format, recorder and replay."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest

from drivers.calibration import Calibration
from runtime.control.actions import ActionQueue
from runtime.control.config import SafetyConfig
from runtime.control.events import EventLog
from runtime.control.recorder import FlightRecorder, load_flight
from runtime.control.replay import draw, format_summary, summarize
from runtime.control.safety import SafetyEnvelope
from runtime.errors import ConfigError
from runtime.protocol.errors import BadRequestError
from runtime.protocol.stream import decode_part, encode_part

JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


def chunk(value: float, n: int = 10, joints: int = 2) -> np.ndarray:
    return np.full((n, joints), value)


class TestActionQueue:
    def test_actions_for_past_ticks_are_dropped_and_counted(self):
        q = ActionQueue(2, horizon=40)
        dropped = q.merge(np.arange(20.0).reshape(10, 2), first_tick=100, now=103)
        assert dropped == 3 and q.dropped == 3
        assert q.take(102) is None
        assert list(q.take(103)) == [6.0, 7.0]
        assert q.depth(104) == 6

    def test_latest_wins(self):
        q = ActionQueue(2, horizon=40, aggregate="latest")
        q.merge(chunk(1.0), 0, 0)
        q.merge(chunk(5.0), 5, 5)
        assert q.take(5)[0] == 5.0
        assert q.depth(6) == 9

    def test_average(self):
        q = ActionQueue(2, horizon=40, aggregate="average")
        q.merge(chunk(1.0), 0, 0)
        q.merge(chunk(3.0), 0, 0)
        q.merge(chunk(8.0), 0, 0)
        assert q.take(0)[0] == pytest.approx(4.0)

    def test_temporal_ensemble_matches_act(self):
        # ACT (Zhao et al.) / LeRobot's ACTTemporalEnsembler: w_i = exp(-k * i), i = 0 the oldest
        # prediction, a_t = sum(w_i * a_i) / sum(w_i).
        k = 0.5
        q = ActionQueue(1, horizon=40, aggregate="temporal_ensemble", coeff=k)
        preds = [2.0, -1.0, 7.0, 3.0]
        for p in preds:
            q.merge(np.full((10, 1), p), 0, 0)
        w = [math.exp(-k * i) for i in range(len(preds))]
        assert q.take(0)[0] == pytest.approx(sum(wi * p for wi, p in zip(w, preds, strict=True)) / sum(w))
        assert ActionQueue.ensemble_weights(3, k) == pytest.approx(w[:3])

    def test_a_tick_is_taken_once(self):
        q = ActionQueue(1, horizon=40)
        q.merge(chunk(1.0, joints=1), 0, 0)
        assert q.take(0) is not None
        assert q.take(0) is None


@pytest.fixture
def envelope(calibration: Calibration) -> SafetyEnvelope:
    cfg = SafetyConfig(
        soft_limits={"shoulder_pan": (-20.0, 20.0)}, max_step_deg=4.0, max_step_change_deg=1.0, max_first_step_deg=10
    )
    return SafetyEnvelope(JOINTS, calibration, cfg, EventLog())


class TestSafetyEnvelope:
    def test_soft_limit_and_calibrated_range(self, envelope: SafetyEnvelope, calibration: Calibration):
        assert envelope.lo[0] == -20.0 and envelope.hi[0] == 20.0
        lo, hi = calibration.joints["elbow_flex"].user_range
        assert (envelope.lo[2], envelope.hi[2]) == (lo, hi)
        assert (envelope.lo[5], envelope.hi[5]) == (0.0, 100.0)  # gripper in percent

    def test_limit_is_never_passed_and_reported_once(self, envelope: SafetyEnvelope):
        present = np.zeros(6)
        present[5] = 50
        goals = []
        for _ in range(40):
            request = present.copy()
            request[0] = 90.0
            goal = envelope.apply(request, present)
            goals.append(goal[0])
            present = goal
        assert max(goals) == pytest.approx(20.0)
        events = [e.text() for e in envelope.events.drain() if "shoulder_pan limit" in e.text()]
        assert len(events) == 1  # one occurrence, one line, however many ticks it lasted
        assert envelope.counts["limit"] == 40

    def test_step_and_step_change_bounds(self, envelope: SafetyEnvelope):
        present = np.array([0, 0, 0, 0, 0, 50.0])
        envelope.reset(present)
        request = present.copy()
        request[2] = 30.0
        goals = []
        for _ in range(20):
            goal = envelope.apply(request, present)
            goals.append(goal[2])
            present = goal
        steps = np.diff([0.0, *goals])
        assert steps.max() <= 4.0 + 1e-9
        assert np.abs(np.diff(steps)).max() <= 1.0 + 1e-9
        assert steps[0] == pytest.approx(1.0)  # from standstill, one step-change

    def test_velocity_bound_is_measured_from_the_present_position(self, envelope: SafetyEnvelope):
        envelope.reset(np.array([0, 0, 0, 0, 0, 50.0]))
        lagging = np.array([0, 0, -10.0, 0, 0, 50.0])  # the joint is 10 degrees behind
        goal = envelope.apply(np.array([0, 0, 0.5, 0, 0, 50.0]), lagging)
        assert goal[2] == pytest.approx(-6.0)  # present + max_step, not the request

    def test_nan_in_a_single_action_holds_that_joint(self, envelope: SafetyEnvelope):
        present = np.array([1, 2, 3, 4, 5, 50.0])
        envelope.reset(present)
        goal = envelope.apply(np.array([1, 2, np.nan, 4, 5, 50.0]), present)
        assert goal[2] == 3 and envelope.counts["nonfinite"] == 1

    def test_chunk_checks(self, envelope: SafetyEnvelope):
        present = np.array([0, 0, 0, 0, 0, 50.0])
        good = np.tile(present, (5, 1))
        assert envelope.check_chunk(good, present, 0) is None
        bad = good.copy()
        bad[4, 3] = np.inf
        assert "non-finite" in (envelope.check_chunk(bad, present, 0) or "")
        far = good.copy()
        far[2:, 1] = 25.0
        assert envelope.check_chunk(far, present, 0) is None  # the first executed step is fine
        reason = envelope.check_chunk(far, present, 2)
        assert reason and "shoulder_lift" in reason and "25.00" in reason

    def test_unknown_joint_in_soft_limits_is_named(self, calibration: Calibration):
        with pytest.raises(ConfigError, match="unknown joint\\(s\\) elbow; the arm has shoulder_pan"):
            SafetyEnvelope(JOINTS, calibration, SafetyConfig(soft_limits={"elbow": (0.0, 1.0)}), EventLog())


class TestStreamFormat:
    def test_round_trip(self):
        frame = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
        part = decode_part([memoryview(bytes(f)) for f in encode_part("observation.images.front", 7, 12.5, frame)])
        assert (part.name, part.seq, part.capture_ts) == ("observation.images.front", 7, 12.5)
        assert np.array_equal(part.array, frame)

    @pytest.mark.parametrize(
        ("mutate", "message"),
        [
            (lambda f: f[:2], "expected 3 frames"),
            (lambda f: [f[0], b"\xc1", f[2]], "header is not msgpack"),
            (lambda f: [f[0], f[1], f[2][:-1]], "observation.images.front"),
        ],
    )
    def test_bad_parts_are_named(self, mutate, message):
        frames = [bytes(f) for f in encode_part("observation.images.front", 1, 1.0, np.zeros((2, 2, 3), np.uint8))]
        with pytest.raises(BadRequestError, match=message):
            decode_part(mutate(frames))


def test_events_are_logged_off_the_control_thread(caplog: pytest.LogCaptureFixture):
    events = EventLog(capacity=2)
    for i in range(3):
        events.emit(logging.WARNING, "event %d", i)
    with caplog.at_level(logging.INFO):
        assert events.flush_to_log() == 2
    assert "event 2" in caplog.text and "1 control events were dropped" in caplog.text


def test_recorder_dump_replay_and_drawing(tmp_path: Path):
    rec = FlightRecorder(JOINTS, 30.0, seconds=1.0)  # 30 rows kept
    for k in range(45):
        present = np.full(6, k * 0.1)
        goal = present + 0.5
        clamps = np.zeros(6, np.int8)
        clamps[1] = 2 if k == 40 else 0
        # from tick 42 (holding) nothing is written: no write time, no period error
        write_ms = 2.0 if k < 42 else np.nan
        write_err = (-1.0 if k % 2 else 6.0) if 0 < k < 42 else np.nan
        rec.record(k / 30, k, 1 if k < 42 else 2, present, goal, goal, clamps, 10, 1.0, 0.01 * k, write_ms, write_err)
    path = rec.dump(tmp_path, "e-stop: test")
    meta, arrays = load_flight(path)
    assert meta["joints"] == list(JOINTS) and meta["reason"] == "e-stop: test"
    assert list(arrays["tick"]) == list(range(15, 45))  # oldest first, the last 30 ticks
    summary = summarize(path)
    assert summary["ticks"] == 30
    assert [m["mode"] for m in summary["modes"]] == ["running", "holding"]
    assert summary["joints"]["shoulder_lift"]["interventions"] == {"step": 1}
    writes = summary["write_period_error_ms"]  # ticks 15..41 wrote: 27 periods, 13 of them 6 ms off
    assert writes["periods"] == 27 and writes["off_5ms"] == 13 and writes["max"] == 6.0
    assert "write period error ms: p50 1.000, p99 6.000, max 6.000 (27 periods, 13 more than 5 ms off)" in (
        format_summary(summary)
    )
    png = draw(path, tmp_path / "flight.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


class TestControlRequests:
    def test_body_is_read(self):
        import msgpack

        from runtime.protocol.codec import decode_request

        header = msgpack.packb(
            {"v": 1, "id": 9, "kind": "control.estop", "body": {"who": "ana", "reason": "hand in the way"}}
        )
        req = decode_request([header], 1 << 20)
        assert (req.id, req.kind, req.who, req.reason) == (9, "control.estop", "ana", "hand in the way")

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"reason": "x"}, "body.reason"),  # only control.estop takes a reason
            ({"who": 5}, "body.who"),
            ({"who": "x" * 201}, "body.who"),
            ({"speed": 1}, "body.speed"),
        ],
    )
    def test_bad_body_is_named_with_the_request_id(self, body, field):
        import msgpack

        from runtime.protocol.codec import decode_request

        header = msgpack.packb({"v": 1, "id": 4, "kind": "control.start", "body": body})
        with pytest.raises(BadRequestError) as err:
            decode_request([header], 1 << 20)
        assert err.value.field == field and err.value.request_id == 4
