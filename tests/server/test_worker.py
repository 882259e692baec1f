"""The inference worker on a stand-in engine: what it takes from the queue, what it sends back and when.

The engine is not under test here (tests/server/test_server.py serves a real one): a stand-in whose
every run moves a clock the test owns, so each reply's queue, inference and total milliseconds are
known exactly. Most tests run the worker's loop on the test's own thread over a closed queue (it
answers what is queued, then returns); a few start the thread to see it wait, beat and swap engines.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import zmq

from runtime.bundle.bundle import TestCase
from runtime.bundle.manifest import Manifest, ProgramEntry, TensorSpec, TestCaseEntry
from runtime.engine.base import Engine, EngineInfo
from runtime.engine.canary import Canary
from runtime.errors import InferenceError
from runtime.liveness import Heartbeat
from runtime.protocol.codec import Reply, actions_from_reply, decode_reply
from runtime.server import worker as worker_module
from runtime.server.queue import Job, RequestQueue
from runtime.server.stats import StatsCollector
from runtime.server.worker import InferenceWorker

from .conftest import wait_until

JOINTS, STEPS = 3, 2
RECEIVED_AT = 10.0  # every job's receive time; the clock starts START later
START = 0.5  # so each job waits 500 ms in the queue (the first one)
STEP_S = 0.25  # and each engine run takes 250 ms of the test's clock


def manifest(*, action: str = "action", noise: bool = False) -> Manifest:
    zeros = "0" * 64
    inputs = [TensorSpec("observation.state", "float32", (JOINTS,), "state")]
    if noise:
        inputs.append(TensorSpec("noise", "float32", (STEPS, JOINTS), "noise"))
    return Manifest(
        policy_name="stand-in",
        inputs=tuple(inputs),
        outputs=(
            TensorSpec("value", "float32", (1,), "other"),
            TensorSpec(action, "float32", (STEPS, JOINTS), "action"),
        ),
        action_output=action,
        chunk_length=STEPS,
        action_names=tuple(f"joint_{i}" for i in range(JOINTS)),
        control_rate_hz=30.0,
        programs={"CPU": ProgramEntry("CPU", "p.pte", "f32", zeros, "full", "")},
        test_case=TestCaseEntry("test_case.npz", zeros),
    )


class Clock:
    def __init__(self) -> None:
        self.t = RECEIVED_AT + START

    def monotonic(self) -> float:
        return self.t


class StandIn(Engine):
    """Step i of the chunk is ``scale * (state + i)``; each run moves the clock by STEP_S."""

    def __init__(
        self,
        clock: Clock,
        *,
        scale: float = 1.0,
        action: str = "action",
        noise: bool = False,
        fail: BaseException | None = None,
        seen: Callable[[], Any] = lambda: None,
    ) -> None:
        super().__init__(
            manifest(action=action, noise=noise), EngineInfo("openvino", "CPU", "f32", 1, (0,), "b", "p", "")
        )
        self.clock = clock
        self.scale = scale
        self.action = action
        self.fail = fail
        self.seen = seen  # called during each run: what the worker shows while it runs
        self.runs: list[list[np.ndarray]] = []
        self.during: list[Any] = []
        self.closed = 0

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        self.runs.append([a.copy() for a in arrays])
        self.during.append(self.seen())
        self.clock.t += STEP_S
        if self.fail is not None:
            raise self.fail
        return {"value": np.zeros(1, np.float32), self.action: chunk(arrays[0], self.scale)}

    def close(self) -> None:
        self.closed += 1


def chunk(state: np.ndarray, scale: float = 1.0) -> np.ndarray:
    return (scale * (state[None, :] + np.arange(STEPS, dtype=np.float32)[:, None])).astype(np.float32)


def state(v: float) -> np.ndarray:
    return np.full(JOINTS, v, np.float32)


def job(rid: int, v: float = 0.0, *, client: bytes | None = None, socket_index: int = 0, **kw: Any) -> Job:
    """Job ``rid`` from its own client (the queue keeps one job per client: the newest)."""
    who = client if client is not None else f"c{rid}".encode()
    return Job(socket_index, [who, b""], rid, [state(v)], RECEIVED_AT, **kw)


class Rig:
    def __init__(self, ctx: zmq.Context, clock: Clock) -> None:
        self.ctx = ctx
        self.clock = clock
        self.endpoint = f"inproc://replies-{uuid.uuid4().hex}"
        self.pull = ctx.socket(zmq.PULL)
        self.pull.bind(self.endpoint)
        self.queue = RequestQueue(8)
        self.stats = StatsCollector()

    def worker(self, engine: Engine | Callable[[], Engine], **kw: Any) -> InferenceWorker:
        return InferenceWorker(engine, self.queue, self.stats, self.ctx, self.endpoint, **kw)

    def answer_all(self, worker: InferenceWorker, *jobs: Job) -> None:
        """Queue ``jobs``, close the queue and run the worker's loop here until it has answered them."""
        for j in jobs:
            assert self.queue.put(j).accepted
        self.queue.close()
        worker.serve()
        worker.run()

    def replies(self) -> list[tuple[int, list[bytes], Reply]]:
        """Everything the worker sent: (socket index, envelope, decoded reply)."""
        out = []
        while self.pull.poll(100):
            frames = self.pull.recv_multipart()
            index, client, empty, *rest = frames
            out.append((int.from_bytes(index, "little"), [client, empty], decode_reply(rest)))
        return out

    def snapshot(self) -> Any:
        return self.stats.snapshot(0, 0, 8, 0)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(worker_module, "time", SimpleNamespace(monotonic=c.monotonic))
    monkeypatch.setattr(worker_module, "current_cpu", lambda: 5)
    return c


@pytest.fixture
def rig(zmq_ctx: zmq.Context, clock: Clock) -> Iterator[Rig]:
    yield Rig(zmq_ctx, clock)


# --- replies -------------------------------------------------------------------------------------


def test_each_job_is_answered_in_order_through_its_socket_and_envelope_with_its_chunk(rig: Rig) -> None:
    engine = StandIn(rig.clock, scale=2.0)
    rig.answer_all(rig.worker(engine), job(1, 1.0, client=b"a"), job(2, 5.0, client=b"b", socket_index=258))
    frames = []
    while rig.pull.poll(100):
        frames.append(rig.pull.recv_multipart())
    assert [f[0] for f in frames] == [b"\x00\x00", b"\x02\x01"]  # the socket's index: two bytes, little-endian
    replies = [(int.from_bytes(f[0], "little"), f[1:3], decode_reply(f[3:])) for f in frames]
    assert [(i, env, r.id, r.kind, r.ok) for i, env, r in replies] == [
        (0, [b"a", b""], 1, "infer", True),
        (258, [b"b", b""], 2, "infer", True),
    ]
    np.testing.assert_array_equal(actions_from_reply(replies[0][2], 0.0).actions, chunk(state(1.0), 2.0))
    np.testing.assert_array_equal(actions_from_reply(replies[1][2], 0.0).actions, chunk(state(5.0), 2.0))
    assert [run[0][0] for run in engine.runs] == [1.0, 5.0]


def test_a_reply_carries_its_queue_inference_and_total_milliseconds_and_the_stats_count_them(rig: Rig) -> None:
    engine = StandIn(rig.clock)
    rig.answer_all(rig.worker(engine), job(1), job(2))
    (_, _, first), (_, _, second) = rig.replies()
    assert (first.timing.queue_ms, first.timing.infer_ms, first.timing.total_ms) == (500.0, 250.0, 750.0)
    # the second waited for the first one's run too
    assert (second.timing.queue_ms, second.timing.infer_ms, second.timing.total_ms) == (750.0, 250.0, 1000.0)
    s = rig.snapshot()
    assert s.replies_ok == 2 and s.errors == {}
    assert (s.latency_ms["queue"].count, s.latency_ms["queue"].max) == (2, 750.0)
    assert s.latency_ms["infer"].max == 250.0 and s.latency_ms["total"].max == 1000.0


def test_the_cpu_each_inference_ended_on_is_counted_the_control_loops_too(rig: Rig) -> None:
    worker = rig.worker(StandIn(rig.clock))
    rig.answer_all(worker, job(1), job(2), job(3, on_done=lambda a, e: None))
    assert worker.cpu_samples == {5: 3}
    s = rig.snapshot()
    assert s.replies_ok == 3 and s.latency_ms["infer"].count == 3


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (
            InferenceError("inference failed", backend_reason="[cpu] reshape: bad"),
            "inference_failed",
            "inference failed ([cpu] reshape: bad)",
        ),
        (InferenceError("inference failed"), "inference_failed", "inference failed"),
        (ValueError("no such output"), "internal", "ValueError: no such output"),
    ],
)
def test_a_failed_run_is_answered_with_its_code_reason_and_timing_and_the_next_job_still_runs(
    rig: Rig, error: BaseException, code: str, message: str
) -> None:
    engine = StandIn(rig.clock, fail=error)

    def recover() -> None:
        engine.fail = None

    rig.answer_all(rig.worker(engine), job(1), job(2, 3.0, on_done=lambda a, e: recover()), job(3, 4.0, client=b"c"))
    (_, env, failed), (_, _, ok) = rig.replies()
    assert env == [b"c1", b""]
    assert (failed.id, failed.kind, failed.ok) == (1, "infer", False)
    assert failed.error is not None
    assert (failed.error.code, failed.error.message, failed.error.field) == (code, message, None)
    assert (failed.timing.queue_ms, failed.timing.infer_ms, failed.timing.total_ms) == (500.0, 250.0, 750.0)
    assert ok.ok and ok.id == 3
    s = rig.snapshot()
    assert s.errors == {code: 2}  # the socket job's and the control loop's
    assert s.local_errors == {code: 1}
    assert s.replies_ok == 1 and s.latency_ms["infer"].count == 1


def test_a_chunk_without_the_action_output_is_an_internal_error_naming_it(rig: Rig) -> None:
    engine = StandIn(rig.clock, action="other_name")
    engine.manifest = manifest()  # says "action", returns "other_name"
    rig.answer_all(rig.worker(engine), job(1))
    ((_, _, reply),) = rig.replies()
    assert reply.error is not None
    assert (reply.error.code, reply.error.message) == ("internal", "KeyError: 'action'")


@pytest.mark.timeout(30, method="thread")
def test_a_reply_with_no_io_thread_left_to_take_it_is_dropped_and_the_worker_still_ends(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    # At a stop whose deadline passed during a run, the I/O thread has closed its end: a blocking
    # send would never return, so the worker, the context and the engine would never be let go.
    class ClosingMidRun(StandIn):
        def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
            rig.pull.close(0)  # the I/O thread ends while this run is under way,
            threading.Event().wait(0.2)  # and ZeroMQ tears the pipe down (asynchronously) before it ends
            return super().run_validated(arrays)

    with caplog.at_level(logging.WARNING, logger="runtime.server.worker"):
        rig.answer_all(rig.worker(ClosingMidRun(rig.clock)), job(7, client=b"\xab\xcd"))
    assert [r.getMessage() for r in caplog.records] == [
        "request 7 from client abcd finished after the server stopped answering; its reply is dropped"
    ]


class Pushes:
    """A PUSH socket the I/O thread is slow to read: each send times out ``slow`` times first."""

    def __init__(self, slow: int) -> None:
        self.slow = slow
        self.tries = 0
        self.sent: list[list[Any]] = []

    def send_multipart(self, frames: list[Any]) -> None:
        self.tries += 1
        if self.tries <= self.slow:
            raise zmq.Again()
        self.sent.append(frames)


def test_while_the_server_runs_a_reply_waits_for_a_slow_io_thread_and_is_never_dropped(rig: Rig) -> None:
    worker = rig.worker(StandIn(rig.clock))
    push = Pushes(slow=3)
    worker._hand_over(push, job(4, client=b"c"), [b"reply"])
    assert push.tries == 4 and push.sent == [[b"\x00\x00", b"c", b"", b"reply"]]
    rig.queue.close()  # stopping: a send that times out now has nobody left to take it
    push = Pushes(slow=3)
    worker._hand_over(push, job(5, client=b"c"), [b"reply"])
    assert (push.tries, push.sent) == (1, [])
    assert worker_module.REPLY_WAIT_MS == 100


# --- the control loop's jobs -----------------------------------------------------------------


def test_a_control_loop_job_goes_to_its_callback_and_nothing_to_the_sockets(rig: Rig) -> None:
    got: list[tuple[Any, Any]] = []
    rig.answer_all(rig.worker(StandIn(rig.clock)), job(1, 2.0, on_done=lambda a, e: got.append((a, e))))
    assert rig.replies() == []
    ((actions, error),) = got
    assert error is None
    np.testing.assert_array_equal(actions, chunk(state(2.0)))
    s = rig.snapshot()
    assert s.replies_ok == 1 and s.errors == {}
    assert [s.latency_ms[k].max for k in ("queue", "infer", "total")] == [500.0, 250.0, 750.0]


@pytest.mark.parametrize(
    ("error", "code", "reason"),
    [
        (
            InferenceError("inference failed", backend_reason="out of memory"),
            "inference_failed",
            "inference failed (out of memory)",
        ),
        (InferenceError("inference failed"), "inference_failed", "inference failed"),
        (TypeError("bad dtype"), "internal", "TypeError: bad dtype"),
    ],
)
def test_a_control_loop_job_that_fails_gets_the_reason_and_the_error_is_counted(
    rig: Rig, error: BaseException, code: str, reason: str
) -> None:
    got: list[tuple[Any, Any]] = []
    rig.answer_all(rig.worker(StandIn(rig.clock, fail=error)), job(1, on_done=lambda a, e: got.append((a, e))))
    assert got == [(None, reason)]
    s = rig.snapshot()
    assert s.errors == {code: 1} and s.replies_ok == 0 and s.latency_ms["total"].count == 0


def test_in_flight_is_one_while_a_job_runs_and_zero_after_even_a_failure(rig: Rig) -> None:
    box: list[InferenceWorker] = []
    engine = StandIn(rig.clock, fail=InferenceError("x"), seen=lambda: box[0].in_flight)
    worker = rig.worker(engine)
    box.append(worker)
    rig.answer_all(worker, job(1), job(2, on_done=lambda a, e: None))
    assert engine.during == [1, 1]
    assert worker.in_flight == 0


# --- sampling noise -----------------------------------------------------------------------------


def test_noise_is_drawn_for_each_job_in_run_order_from_the_seeded_generator(rig: Rig) -> None:
    engine = StandIn(rig.clock, noise=True)
    worker = rig.worker(engine, noise_seed=7)
    placeholder = np.empty(0, np.float32)

    def with_noise(j: Job) -> Job:
        j.inputs.append(placeholder)
        return j

    rig.answer_all(worker, with_noise(job(1, client=b"a")), with_noise(job(2, client=b"b", on_done=lambda a, e: None)))
    rng = np.random.default_rng(7)
    for run in engine.runs:
        assert run[1].shape == (STEPS, JOINTS) and run[1].dtype == np.float32
        np.testing.assert_array_equal(run[1], rng.standard_normal((STEPS, JOINTS), dtype=np.float32))
    assert worker.noise is not None and worker.noise.draws == 2 and worker.noise.seed == 7


def test_a_policy_without_noise_inputs_gets_its_inputs_untouched(rig: Rig) -> None:
    engine = StandIn(rig.clock)
    worker = rig.worker(engine, noise_seed=7)
    rig.answer_all(worker, job(1, 4.0))
    assert worker.noise is None
    assert len(engine.runs[0]) == 1
    np.testing.assert_array_equal(engine.runs[0][0], state(4.0))


# --- loading and swapping engines --------------------------------------------------------------


def test_a_factory_is_called_on_the_worker_thread_and_its_engine_is_the_workers_to_close(rig: Rig) -> None:
    threads: list[str] = []
    made: list[StandIn] = []

    def factory() -> Engine:
        threads.append(threading.current_thread().name)
        made.append(StandIn(rig.clock))
        return made[0]

    worker = rig.worker(factory)
    assert worker.engine is None and worker.owns_engine
    worker.start()
    assert worker.wait_loaded() is made[0]
    assert threads == ["lerobot-runtime-infer"]
    rig.queue.close()
    worker.join(2.0)
    assert not worker.is_alive()


def test_a_worker_not_yet_running_has_nothing_in_flight_no_canary_no_noise() -> None:
    worker = InferenceWorker(StandIn(Clock()), RequestQueue(1), StatsCollector(), None, "inproc://unused")
    assert not worker.owns_engine
    assert worker.in_flight == 0 and worker.canary is None and worker.noise is None and worker.engine is None
    assert worker.cpu_samples == {}
    assert worker.daemon  # a run hung in the backend does not keep the process from exiting


def test_a_factory_that_fails_is_raised_to_whoever_waits_for_the_engine(rig: Rig) -> None:
    boom = RuntimeError("the bundle is broken")

    def factory() -> Engine:
        raise boom

    worker = rig.worker(factory)
    worker.run()  # returns at once, with nothing to serve
    with pytest.raises(RuntimeError) as err:
        worker.wait_loaded()
    assert err.value is boom
    assert worker.engine is None


def test_a_swapped_engine_serves_from_the_next_job_on_and_the_old_one_is_closed_only_if_ours(rig: Rig) -> None:
    given = StandIn(rig.clock)
    worker = rig.worker(given)
    replacement = StandIn(rig.clock, scale=10.0, action="joints")  # another action output's name
    third = StandIn(rig.clock, scale=100.0)

    given.seen = lambda: worker.swap_engine(replacement)  # while job 1 runs
    replacement.seen = lambda: worker.swap_engine(third)
    rig.answer_all(worker, job(1, 1.0, client=b"a"), job(2, 1.0, client=b"b"), job(3, 1.0, client=b"c"))
    replies = [r for _, _, r in rig.replies()]
    assert [r.ok for r in replies] == [True, True, True]
    scales = [actions_from_reply(r, 0.0).actions[0, 0] for r in replies]
    assert scales == [1.0, 10.0, 100.0]
    assert worker.canary is None  # none of them carries a test case
    assert worker.engine is third
    assert given.closed == 0  # handed in by the caller, who closes it
    assert replacement.closed == 1  # a reload's engine is the worker's
    assert worker.owns_engine


def test_a_swap_while_idle_closes_the_old_engine_without_waiting_for_a_job(rig: Rig) -> None:
    first = StandIn(rig.clock)
    worker = rig.worker(lambda: first, heartbeat=Heartbeat("infer", 0.04))
    worker.start()
    worker.wait_loaded()
    worker.serve()
    second = StandIn(rig.clock)
    worker.swap_engine(second)
    wait_until(lambda: first.closed == 1, timeout=2.0, what="the old engine closed")
    assert worker.engine is second and first.runs == []
    rig.queue.close()
    worker.join(2.0)
    assert not worker.is_alive()


# --- the canary ----------------------------------------------------------------------------------


def case(expected_scale: float) -> TestCase:
    s = state(2.0)
    return TestCase({"observation.state": s}, {"action": chunk(s, expected_scale)}, {"f32": 1e-4})


@pytest.fixture
def canary_clock(monkeypatch: pytest.MonkeyPatch, clock: Clock) -> Clock:
    """The canary on the test's clock too."""
    monkeypatch.setattr(worker_module, "Canary", lambda c, interval: Canary(c, interval, clock=clock.monotonic))
    return clock


def test_no_canary_without_an_interval_or_without_a_test_case(rig: Rig, canary_clock: Clock) -> None:
    engine = StandIn(rig.clock)
    engine.test_case = case(1.0)
    worker = rig.worker(engine, canary_interval_s=0.0)
    rig.answer_all(worker, job(1))
    assert worker.wait_loaded() is engine and worker.canary is None
    assert [r.ok for _, _, r in rig.replies()] == [True]
    worker = InferenceWorker(engine, RequestQueue(1), rig.stats, rig.ctx, rig.endpoint)  # off by default
    worker.queue.close()
    worker.run()
    assert worker.wait_loaded() is engine and worker.canary is None
    bare = StandIn(rig.clock)
    worker = InferenceWorker(bare, RequestQueue(1), rig.stats, rig.ctx, rig.endpoint, canary_interval_s=1.0)
    worker.queue.close()
    worker.run()
    assert worker.canary is None


def test_the_canary_runs_between_jobs_once_due_and_waits_for_an_empty_queue_until_a_period_late(
    rig: Rig, canary_clock: Clock
) -> None:
    engine = StandIn(rig.clock)
    engine.test_case = case(1.0)
    worker = rig.worker(engine, canary_interval_s=1.2)
    # due at 11.7; job 1 ends at 10.75, job 2 at 11.0, job 3 at 11.25, job 4 at 11.5, job 5 at 11.75
    # (due, but job 6 waits), job 6 at 12.0 with the queue empty: the check comes then
    rig.answer_all(worker, *(job(i, float(i), client=bytes([i])) for i in range(1, 7)))
    assert [run[0][0] for run in engine.runs] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 2.0]
    assert worker.canary is not None and worker.canary.state.checks == 1 and worker.canary.failure is None
    assert len(rig.replies()) == 6


def test_under_load_the_canary_runs_anyway_once_a_whole_period_late(rig: Rig, canary_clock: Clock) -> None:
    engine = StandIn(rig.clock)
    engine.test_case = case(1.0)
    worker = rig.worker(engine, canary_interval_s=0.3)
    # due at 10.8, a period late at 11.1: job 3 ends at 11.25 with jobs still queued, the check runs
    rig.answer_all(worker, *(job(i, float(i), client=bytes([i])) for i in range(1, 6)))
    assert [run[0][0] for run in engine.runs][:4] == [1.0, 2.0, 3.0, 2.0]


def test_once_the_canary_failed_every_job_is_refused_without_running_until_a_swap(
    rig: Rig, canary_clock: Clock
) -> None:
    engine = StandIn(rig.clock)
    engine.test_case = case(3.0)  # the engine no longer gives the reference answer
    worker = rig.worker(engine, canary_interval_s=0.1)
    got: list[tuple[Any, Any]] = []
    healthy = StandIn(rig.clock, scale=7.0)

    rig.answer_all(
        worker,
        job(1, client=b"a"),  # runs, then the canary check fails
        job(2, client=b"b"),
        job(3, client=b"c", on_done=lambda a, e: (got.append((a, e)), worker.swap_engine(healthy))),
        job(4, 1.0, client=b"d"),
    )
    failure = "verification failed on canary check 1"
    assert len(engine.runs) == 2  # job 1 and the check
    replies = [r for _, _, r in rig.replies()]
    assert replies[0].ok
    refused = replies[1]
    assert refused.error is not None and refused.error.code == "verification_failed"
    assert refused.error.message.startswith(failure) and refused.error.message.endswith("reload the policy")
    assert (refused.timing.queue_ms, refused.timing.infer_ms, refused.timing.total_ms) == (1000.0, 0.0, 1000.0)
    assert got[0][0] is None and got[0][1].startswith(f"verification_failed: {failure}")
    assert rig.snapshot().errors == {"verification_failed": 2}
    assert rig.snapshot().local_errors == {"verification_failed": 1}
    np.testing.assert_array_equal(actions_from_reply(replies[2], 0.0).actions, chunk(state(1.0), 7.0))


def test_a_swap_clears_a_failed_canary_at_once() -> None:
    engine = StandIn(Clock())
    engine.test_case = case(3.0)
    worker = InferenceWorker(engine, RequestQueue(1), StatsCollector(), None, "inproc://unused", canary_interval_s=5.0)
    worker.canary = Canary(engine.test_case, 5.0)
    worker.swap_engine(StandIn(Clock()))
    assert worker.canary is None  # status stops showing the old engine's failure


# --- waiting, beating and stopping -------------------------------------------------------------


class Beats(Heartbeat):
    def __init__(self, deadline_s: float) -> None:
        super().__init__("infer", deadline_s)
        self.log: list[str] = []

    def beat(self, doing: str) -> None:
        self.log.append(doing)
        super().beat(doing)


class TimeoutsQueue(RequestQueue):
    def __init__(self) -> None:
        super().__init__(8)
        self.timeouts: list[float | None] = []

    def get(self, timeout: float | None = None) -> Job | None:
        self.timeouts.append(timeout)
        return super().get(timeout)


@pytest.mark.parametrize(("deadline_s", "wait_s"), [(2.0, 0.5), (3.0, 0.75), (8.0, 1.0)])
def test_it_waits_for_a_job_a_quarter_of_the_heartbeat_deadline_at_most_one_second(
    rig: Rig, deadline_s: float, wait_s: float
) -> None:
    rig.queue = TimeoutsQueue()
    worker = rig.worker(StandIn(rig.clock), heartbeat=Beats(deadline_s))
    rig.answer_all(worker, job(1))
    assert rig.queue.timeouts[:2] == [wait_s, wait_s]  # for job 1, then for more


def test_without_a_heartbeat_or_canary_it_waits_for_a_job_without_a_timeout(rig: Rig) -> None:
    rig.queue = TimeoutsQueue()
    rig.answer_all(rig.worker(StandIn(rig.clock)), job(1))
    assert rig.queue.timeouts[:2] == [None, None]


def test_it_waits_no_longer_than_until_the_canary_is_due(rig: Rig, canary_clock: Clock) -> None:
    rig.queue = TimeoutsQueue()
    engine = StandIn(rig.clock)
    engine.test_case = case(1.0)
    worker = rig.worker(engine, heartbeat=Beats(8.0), canary_interval_s=0.75)
    rig.answer_all(worker, job(1), job(2))
    # due at 11.25: 0.75 s before job 1, 0.5 s after it (below the 1 s beat), 0.25 s after job 2
    assert rig.queue.timeouts[:3] == [0.75, 0.5, 0.25]


def test_it_beats_while_idle_before_each_job_naming_it_and_before_a_check(rig: Rig, canary_clock: Clock) -> None:
    engine = StandIn(rig.clock)
    engine.test_case = case(1.0)
    beats = Beats(8.0)
    worker = rig.worker(engine, heartbeat=beats, canary_interval_s=0.1)
    rig.answer_all(worker, job(7, client=b"\x0a\xff"))
    assert beats.log[:3] == ["idle", "running request 7 from client 0aff", "canary check"]


def test_it_beats_while_waiting_for_the_sockets_and_ends_if_the_queue_closes_first(rig: Rig) -> None:
    beats = Beats(8.0)
    worker = rig.worker(StandIn(rig.clock), heartbeat=beats)
    worker.start()
    worker.wait_loaded()
    # it looks every 0.05 s: a beat, and whether start() gave up
    wait_until(lambda: "waiting for the sockets" in beats.log, timeout=0.8, what="a beat before serve()")
    rig.queue.close()
    worker.join(0.8)
    assert not worker.is_alive()
    assert set(beats.log) == {"waiting for the sockets"}


def test_a_running_worker_answers_a_job_queued_while_it_waits_and_stops_when_the_queue_closes(rig: Rig) -> None:
    worker = rig.worker(StandIn(rig.clock), heartbeat=Beats(0.04))
    worker.start()
    worker.wait_loaded()
    worker.serve()
    assert rig.queue.put(job(1, 3.0)).accepted
    assert rig.pull.poll(2000)
    ((_, _, reply),) = rig.replies()
    assert reply.ok and reply.id == 1
    rig.queue.close()
    worker.join(2.0)
    assert not worker.is_alive()


def test_a_swapped_in_engine_with_a_test_case_gets_a_canary_of_its_own(rig: Rig, canary_clock: Clock) -> None:
    first = StandIn(rig.clock)
    worker = rig.worker(first, canary_interval_s=100.0)
    checked = StandIn(rig.clock, scale=2.0)
    checked.test_case = case(2.0)
    first.seen = lambda: worker.swap_engine(checked)
    rig.answer_all(worker, job(1), job(2))
    assert worker.canary is not None and worker.canary.interval_s == 100.0
    assert worker.canary.check(checked) and worker.canary.state.checks == 1


# --- the rest of a staged parity gate --------------------------------------------------------------


def staged(engine: StandIn, expected_scale: float, passed: int, runs: int) -> StandIn:
    """``engine`` as a staged load leaves it: ``passed`` of ``runs`` replays of ``case(expected_scale)``
    passed, the rest pending."""
    from runtime.engine.parity import PendingGate, run_parity

    engine.test_case = case(expected_scale)
    first = run_parity(engine, engine.test_case, passed)
    engine.runs.clear()
    engine.pending_gate = PendingGate(engine, engine.test_case, passed, runs, first)
    return engine


def test_the_rest_of_a_staged_gate_runs_before_the_first_job_which_then_is_answered(rig: Rig) -> None:
    engine = staged(StandIn(rig.clock), 1.0, 2, 5)
    beats = Beats(10.0)
    worker = rig.worker(engine, heartbeat=beats)
    got: list[Any] = []
    rig.answer_all(worker, job(1, 4.0), job(2, 5.0, on_done=lambda a, e: got.append((a, e))))
    # three replays of the case (state 2), then the two jobs
    assert [run[0][0] for run in engine.runs] == [2.0, 2.0, 2.0, 4.0, 5.0]
    assert [b for b in beats.log if b.startswith("parity")] == [
        "parity gate: replay 3 of 5",
        "parity gate: replay 4 of 5",
        "parity gate: replay 5 of 5",
    ]
    ((_, _, reply),) = rig.replies()
    assert reply.ok and got[0][1] is None
    assert worker.gate_pending is None and worker.gate_failure is None and worker.verification_failure() is None
    assert engine.pending_gate is not None and engine.pending_gate.done


def test_while_the_rest_of_the_gate_runs_the_worker_says_how_far_it_is(rig: Rig) -> None:
    seen: list[Any] = []
    engine = staged(StandIn(rig.clock), 1.0, 1, 3)
    worker = rig.worker(engine)
    engine.seen = lambda: seen.append(worker.gate_pending)
    assert worker.gate_pending is None  # nothing known before the worker took the engine
    rig.answer_all(worker, job(1))
    assert seen == [
        "the parity gate is still running: 1 of 3 replays passed",
        "the parity gate is still running: 2 of 3 replays passed",
        None,  # the job: the gate has passed
    ]


def test_a_gate_that_fails_after_ready_refuses_every_job_unrun_and_is_the_verification_failure(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    engine = staged(StandIn(rig.clock), 1.0, 2, 4)
    engine.scale = 3.0  # from the third replay on, no longer the reference
    worker = rig.worker(engine)
    got: list[Any] = []
    with caplog.at_level(logging.ERROR, logger="runtime.server.worker"):
        rig.answer_all(worker, job(1), job(2, on_done=lambda a, e: got.append((a, e))))
    assert len(engine.runs) == 1  # the failing replay; no job ran
    failure = worker.verification_failure()
    assert failure is not None and failure.startswith("the parity gate failed after the daemon was ready: ")
    assert "on replay 3 of 4" in failure and worker.gate_pending is None
    ((_, _, reply),) = rig.replies()
    assert reply.error is not None and reply.error.code == "verification_failed"
    assert reply.error.message.startswith(failure)
    assert got == [(None, f"verification_failed: {failure}")]
    assert f"{failure}; every request is refused (verification_failed) until the policy is loaded again" in caplog.text


def test_a_swap_clears_a_failed_gate(rig: Rig) -> None:
    engine = staged(StandIn(rig.clock), 1.0, 1, 2)
    engine.scale = 3.0
    worker = rig.worker(engine)
    rig.answer_all(worker)
    assert worker.verification_failure() is not None
    worker.swap_engine(StandIn(rig.clock))
    worker._take_next_engine()
    assert worker.verification_failure() is None and worker.gate is None
