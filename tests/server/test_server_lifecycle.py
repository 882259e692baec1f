"""The server's life on a stand-in engine and real ipc sockets: start, each failure cleaned up, the I/O
thread, a graceful, forced or timed-out stop, a reloaded engine, the stats snapshot.

No test waits on the wall clock for its result: a run the engine holds is released by the test, and the
snapshot's client window is read on a clock the test sets.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from runtime.bundle.manifest import FileEntry, LanguageEntry, RtcEntry, TensorSpec
from runtime.errors import BundleError, ConfigError, InstanceRunningError
from runtime.liveness import Heartbeat
from runtime.protocol import codec
from runtime.server import PolicyServer, ServerConfig
from runtime.server import server as server_module

from .stand_in import INFO, JOINTS, STATE, WAIT_S, Caller, StandIn, chunk, error_of, manifest, state

pytestmark = pytest.mark.timeout(30, method="thread")


@pytest.fixture
def made(short_tmp: Path) -> Iterator[Callable[..., PolicyServer]]:
    """Servers made (not started) here are stopped at the end, their engines let go first."""
    servers: list[tuple[PolicyServer, list[StandIn]]] = []

    def make(engine: Any = None, engines: list[StandIn] | None = None, **kwargs: Any) -> PolicyServer:
        engine = engine if engine is not None else StandIn()
        kwargs.setdefault("endpoints", ("ipc://a.sock",))
        kwargs.setdefault("canary_interval_s", 0)
        server = PolicyServer(engine, ServerConfig(**kwargs), runtime_directory=short_tmp)
        servers.append((server, [engine] if isinstance(engine, StandIn) else (engines or [])))
        return server

    yield make
    for server, engines in servers:
        for e in engines:
            e.release()
        server.stop(timeout=1.0)


def caller(ctx: zmq.Context, server: PolicyServer, identity: bytes | None = None) -> Caller:
    return Caller(ctx, server.bound_endpoints[0], identity)


# --- start ---------------------------------------------------------------------------------------


def test_a_with_block_serves_then_stops_and_leaves_a_given_engine_open(
    made: Callable[..., PolicyServer], zmq_ctx: zmq.Context
) -> None:
    engine = StandIn()
    server = made(engine)
    with server as entered:
        assert entered is server and server.running
        assert caller(zmq_ctx, server).call("infer", 1, {STATE: state(1.0)}).ok
    assert not server.running
    assert (server._context, server._routers, server._pull) == (None, [], None)
    assert engine.closed == 0  # the caller's, not the server's, to close
    server.stop()  # twice is nothing


def test_a_server_is_started_once(made: Callable[..., PolicyServer]) -> None:
    server = made()
    server.start()
    with pytest.raises(RuntimeError) as err:
        server.start()
    assert str(err.value) == "server already started"
    assert server.running


def test_stop_before_start_does_nothing(made: Callable[..., PolicyServer]) -> None:
    server = made()
    server.stop()
    assert not server.running and server._context is None


def test_the_factorys_engine_is_made_on_the_worker_thread_and_closed_at_stop(
    made: Callable[..., PolicyServer], zmq_ctx: zmq.Context
) -> None:
    engines: list[StandIn] = []
    threads: list[int] = []

    def factory() -> StandIn:
        threads.append(threading.get_native_id())
        engines.append(StandIn())
        return engines[0]

    server = made(factory, engines)
    server.start()
    assert threads == [server.worker_thread_id] and threads[0] != threading.get_native_id()
    assert server.engine is engines[0]
    assert caller(zmq_ctx, server).call("infer", 1, {STATE: state(2.0)}).ok
    server.stop(timeout=1.0)
    assert engines[0].closed == 1
    server.stop(timeout=1.0)  # a second stop closes nothing twice
    assert engines[0].closed == 1


def test_the_worker_beats_the_heartbeat(short_tmp: Path, zmq_ctx: zmq.Context) -> None:
    beats: list[str] = []

    class Beats(Heartbeat):
        def beat(self, doing: str) -> None:
            beats.append(doing)
            super().beat(doing)

    cfg = ServerConfig(endpoints=("ipc://a.sock",), canary_interval_s=0)
    with PolicyServer(StandIn(), cfg, runtime_directory=short_tmp, heartbeat=Beats("inference", 5.0)) as server:
        assert caller(zmq_ctx, server).call("infer", 1, {STATE: state(1.0)}).ok
    assert "idle" in beats


def _second_server_starts(short_tmp: Path) -> None:
    """The ipc endpoint's instance lock is free: another server takes it."""
    other = PolicyServer(
        StandIn(), ServerConfig(endpoints=("ipc://a.sock",), canary_interval_s=0), runtime_directory=short_tmp
    )
    other.start()
    other.stop(timeout=1.0)


def _left_nothing(server: PolicyServer) -> None:
    assert not server.running
    assert server._context is None and server._routers == [] and server._pull is None
    assert server.queue.closed
    assert server._worker is not None and not server._worker.is_alive()


def test_an_engine_that_fails_to_load_is_raised_and_nothing_is_left_behind(
    made: Callable[..., PolicyServer], short_tmp: Path
) -> None:
    def factory() -> StandIn:
        raise BundleError("policy.pte: not an ExecuTorch program")

    server = made(factory)
    with pytest.raises(BundleError) as err:
        server.start()
    assert str(err.value) == "policy.pte: not an ExecuTorch program"
    _left_nothing(server)
    _second_server_starts(short_tmp)


def test_a_second_server_on_the_same_socket_is_refused_before_loading(
    made: Callable[..., PolicyServer], short_tmp: Path
) -> None:
    made().start()
    loads: list[int] = []

    def factory() -> StandIn:
        loads.append(1)
        return StandIn()

    with pytest.raises(InstanceRunningError):
        made(factory).start()
    assert loads == []


def test_an_allowed_non_finite_input_the_policy_lacks_is_refused_and_nothing_is_left_behind(
    made: Callable[..., PolicyServer], short_tmp: Path
) -> None:
    server = made(allow_non_finite=(STATE, "observation.velocity"))
    with pytest.raises(ConfigError) as err:
        server.start()
    assert str(err.value) == (
        "server.allow_non_finite: 'observation.velocity' is not an input of this policy (['observation.state'])"
    )
    _left_nothing(server)
    _second_server_starts(short_tmp)


def test_a_language_policy_whose_tokenizer_is_missing_is_refused_and_nothing_is_left_behind(
    made: Callable[..., PolicyServer], short_tmp: Path, tmp_path: Path
) -> None:
    language = LanguageEntry(FileEntry("tokenizer.json", "0" * 64), "tokens", "mask", 4)
    m = manifest(
        TensorSpec("tokens", "int64", (4,), "language"), TensorSpec("mask", "bool", (4,), "language"), language=language
    )
    server = made(StandIn(m, dataclasses.replace(INFO, bundle=str(tmp_path))))
    with pytest.raises(BundleError):
        server.start()
    _left_nothing(server)
    _second_server_starts(short_tmp)


def test_an_endpoint_that_cannot_be_bound_leaves_nothing_behind(
    made: Callable[..., PolicyServer], short_tmp: Path
) -> None:
    server = made(endpoints=("ipc://a.sock", "tcp://127.0.0.1:0x"))
    with pytest.raises(ConfigError):
        server.start()
    _left_nothing(server)
    assert server.bound_endpoints == [f"ipc://{short_tmp}/a.sock"]
    _second_server_starts(short_tmp)


def test_the_message_limit_is_the_configured_one_or_twice_the_inputs(made: Callable[..., PolicyServer]) -> None:
    server = made(max_message_bytes=5000)
    server.start()
    assert (server.max_message_bytes, server.info.max_message_bytes) == (5000, 5000)
    auto = made(endpoints=("ipc://b.sock",), queue_depth=3)
    auto.start()
    # 3 float32 joints, twice, plus 64 KiB
    assert (auto.max_message_bytes, auto.info.max_message_bytes, auto.info.queue_depth) == (65560, 65560, 3)


def test_the_defaults_listen_on_the_runtime_directorys_socket_and_loopback(short_tmp: Path) -> None:
    server = PolicyServer(StandIn(), runtime_directory=short_tmp)
    assert server.config == ServerConfig()
    assert server.endpoints == [f"ipc://{short_tmp}/policy.sock", "tcp://127.0.0.1:5555"]
    assert server.curve is None and server.bound_endpoints == []
    assert (server.control, server.arm_status, server.heartbeat) == (None, None, None)
    assert not server.running and server.worker_thread_id == 0


def test_a_tcp_endpoint_off_loopback_needs_curve(short_tmp: Path) -> None:
    with pytest.raises(ConfigError) as err:
        PolicyServer(StandIn(), ServerConfig(endpoints=("tcp://0.0.0.0:5555",)), runtime_directory=short_tmp)
    assert "tcp://0.0.0.0:5555" in str(err.value)


def test_the_zmq_threads_and_the_io_thread_stay_off_the_inference_cpus(
    made: Callable[..., PolicyServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    added: list[tuple[int, int]] = []
    pinned: list[tuple[int, set[int], str]] = []

    class Recording(zmq.Context):  # type: ignore[type-arg]
        def set(self, option: int, value: Any) -> None:
            if option == zmq.THREAD_AFFINITY_CPU_ADD:
                added.append((option, value))  # kept, not applied: these CPUs are made up
                return
            super().set(option, value)

    monkeypatch.setattr(zmq, "Context", Recording)
    monkeypatch.setattr(
        os, "sched_setaffinity", lambda pid, cpus: pinned.append((pid, set(cpus), threading.current_thread().name))
    )
    engine = StandIn(info=dataclasses.replace(INFO, cpus=(2, 5)))
    server = made(engine)
    server._all_cpus = {1, 2, 3, 5, 7}
    server.start()
    assert added == [
        (zmq.THREAD_AFFINITY_CPU_ADD, 1),
        (zmq.THREAD_AFFINITY_CPU_ADD, 3),
        (zmq.THREAD_AFFINITY_CPU_ADD, 7),
    ]
    server.stop(timeout=1.0)
    assert pinned == [(0, {1, 3, 7}, "lerobot-runtime-io")]


def test_the_cpus_left_to_io_are_this_processs_own(
    made: Callable[..., PolicyServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under systemd's CPUAffinity= the service may use fewer CPUs than PID 1 (or any other process):
    # the I/O thread and ZeroMQ's threads must be kept to the CPUs this process was given.
    asked: list[int] = []

    def affinity(pid: int) -> set[int]:
        asked.append(pid)
        return {1, 3} if pid == 0 else {0, 1, 2, 3}

    monkeypatch.setattr(os, "sched_getaffinity", affinity)
    server = made()
    monkeypatch.undo()
    assert asked == [0]
    assert server._all_cpus == {1, 3}


def test_an_io_thread_with_no_cpu_of_its_own_is_not_pinned(
    made: Callable[..., PolicyServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    pinned: list[Any] = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: pinned.append(cpus))
    server = made(StandIn(info=dataclasses.replace(INFO, cpus=(0, 1))))
    server._all_cpus = {0, 1}
    server.start()
    server.stop(timeout=1.0)
    assert pinned == []


def test_the_io_thread_is_a_named_daemon_thread(made: Callable[..., PolicyServer]) -> None:
    server = made()
    server.start()
    assert server._io is not None
    assert (server._io.name, server._io.daemon) == ("lerobot-runtime-io", True)


# --- the I/O thread ------------------------------------------------------------------------------


def test_a_failing_io_thread_closes_its_sockets_and_stop_still_ends_cleanly(
    made: Callable[..., PolicyServer], zmq_ctx: zmq.Context, caplog: pytest.LogCaptureFixture
) -> None:
    server = made()
    server.start()

    def broken(index: int, sock: Any) -> None:
        raise RuntimeError("bug")

    server._receive = broken  # type: ignore[method-assign]
    c = caller(zmq_ctx, server)
    with caplog.at_level(logging.ERROR, logger="runtime.server.server"):
        c.send(codec.encode_request("ping", 1))
        assert server._io is not None
        server._io.join(WAIT_S)
    assert not server.running
    assert server._routers == [] and server._pull is None
    assert not server.submit_local([state(1.0)], lambda a, e: None)  # nothing would answer it
    server.stop(timeout=1.0)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == ["I/O thread failed"]
    assert server._context is None


# --- stop ----------------------------------------------------------------------------------------


def _hold_one_and_queue_one(server: PolicyServer, engine: StandIn, ctx: zmq.Context) -> tuple[Caller, Caller]:
    engine.hold = True
    server.start()
    a, b = caller(ctx, server, b"a"), caller(ctx, server, b"b")
    a.send(codec.encode_request("infer", 1, {STATE: state(1.0)}))
    engine.wait_entered()
    b.send(codec.encode_request("infer", 2, {STATE: state(2.0)}))
    deadline = threading.Event()
    for _ in range(int(WAIT_S / 0.005)):
        if len(server.queue) == 1:
            break
        deadline.wait(0.005)
    assert len(server.queue) == 1
    return a, b


def test_a_graceful_stop_runs_what_is_queued(made: Callable[..., PolicyServer], zmq_ctx: zmq.Context) -> None:
    engine = StandIn()
    server = made(engine)
    a, b = _hold_one_and_queue_one(server, engine, zmq_ctx)
    stopping = threading.Thread(target=server.stop, kwargs={"timeout": 10.0})
    stopping.start()
    for _ in range(int(WAIT_S / 0.005)):
        if server.queue.closed:
            break
        threading.Event().wait(0.005)
    # while it finishes what is queued, a new infer is refused, not queued
    late = caller(zmq_ctx, server, b"c").call("infer", 3, {STATE: state(3.0)})
    assert error_of(late) == (3, "infer", "shutting_down", "the server is stopping", None, None, None)
    engine.release()
    stopping.join(WAIT_S * 2)
    assert not stopping.is_alive()
    first, second = a.receive(), b.receive()
    assert first.ok and first.id == 1 and second.ok and second.id == 2
    np.testing.assert_array_equal(codec.actions_from_reply(second, 0.0).actions, chunk(state(2.0)))
    assert [float(r[0][0]) for r in engine.runs] == [1.0, 2.0]
    assert not server.running and server._context is None


def test_at_the_deadline_what_is_queued_is_answered_shutting_down(
    made: Callable[..., PolicyServer], zmq_ctx: zmq.Context, caplog: pytest.LogCaptureFixture
) -> None:
    engine = StandIn()
    server = made(engine)
    _, b = _hold_one_and_queue_one(server, engine, zmq_ctx)
    with caplog.at_level(logging.ERROR, logger="runtime.server.server"):
        server.stop(timeout=0.0)
    reply = b.receive()
    assert error_of(reply) == (
        2,
        "infer",
        "shutting_down",
        "the server stopped before running this request",
        None,
        None,
        None,
    )
    assert dict(server.snapshot().errors) == {"shutting_down": 1}
    # the held inference keeps the context alive: left behind, not terminated (that would hang)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == ["inference still running at shutdown; leaving it behind"]
    assert server._context is not None and not server.running
    assert [float(r[0][0]) for r in engine.runs] == [1.0]


def test_an_inference_ending_just_after_the_deadline_is_let_finish_and_everything_closes(
    made: Callable[..., PolicyServer], zmq_ctx: zmq.Context, caplog: pytest.LogCaptureFixture
) -> None:
    # A graceful stop gives a running inference half a second past the I/O thread's end: one that
    # ends within it lets the context be terminated, rather than left open with an error.
    engine = StandIn()
    server = made(engine)
    _, b = _hold_one_and_queue_one(server, engine, zmq_ctx)
    stopping = threading.Thread(target=server.stop, kwargs={"timeout": 0.05})
    with caplog.at_level(logging.ERROR, logger="runtime.server.server"):
        stopping.start()
        for _ in range(int(WAIT_S / 0.002)):
            if not server.running:  # the I/O thread gave up at the deadline; stop() now waits on the worker
                break
            threading.Event().wait(0.002)
        assert not server.running
        engine.release()
        stopping.join(WAIT_S)
    assert not stopping.is_alive()
    assert error_of(b.receive())[2] == "shutting_down"
    # its reply has no socket left to leave by: dropped (tests/server/test_worker.py), never waited on for ever
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert server._context is None and [float(r[0][0]) for r in engine.runs] == [1.0]


def test_a_forced_stop_answers_what_is_queued_at_once(made: Callable[..., PolicyServer], zmq_ctx: zmq.Context) -> None:
    engine = StandIn()
    server = made(engine)
    _, b = _hold_one_and_queue_one(server, engine, zmq_ctx)
    asked: list[int] = []

    def force() -> bool:
        asked.append(1)
        return True

    server.stop(timeout=10.0, force=force)
    assert asked
    reply = b.receive()
    assert error_of(reply)[2:4] == ("shutting_down", "the server stopped before running this request")
    assert [float(r[0][0]) for r in engine.runs] == [1.0]


def test_after_stop_the_socket_is_free_for_the_next_server(made: Callable[..., PolicyServer], short_tmp: Path) -> None:
    server = made()
    server.start()
    server.stop(timeout=1.0)
    assert not server._started
    _second_server_starts(short_tmp)


# --- a reloaded engine ---------------------------------------------------------------------------


def test_a_reloaded_engine_serves_the_next_infer_and_hello_describes_it(
    made: Callable[..., PolicyServer], zmq_ctx: zmq.Context
) -> None:
    old = StandIn()
    server = made(old, max_message_bytes=4000, queue_depth=2)
    server.start()
    new = StandIn(info=dataclasses.replace(INFO, bundle="/bundles/v2", precision="bf16"))
    server.replace_engine(new)
    c = caller(zmq_ctx, server)
    assert c.call("infer", 1, {STATE: state(3.0)}).ok
    assert (len(old.runs), len(new.runs)) == (0, 1)
    assert server.engine is new
    hello = c.call("hello", 2)
    assert hello.body["engine"]["bundle"] == "/bundles/v2" and hello.body["engine"]["precision"] == "bf16"
    assert hello.body["limits"] == {"max_message_bytes": 4000, "queue_depth": 2}
    assert server.info.engine == new.info.to_json()


RTC = RtcEntry("rtc.prefix", "rtc.weights", "rtc.cap", 4, 2, "ZEROS", 5.0)
PREFIX_INPUTS = (
    TensorSpec("rtc.prefix", "float32", (4, JOINTS), "prefix"),
    TensorSpec("rtc.weights", "float32", (4,), "prefix_weights"),
    TensorSpec("rtc.cap", "float32", (1,), "guidance"),
)


def test_a_reloaded_engine_brings_its_own_prefix_settings(made: Callable[..., PolicyServer]) -> None:
    server = made(StandIn(manifest(*PREFIX_INPUTS, rtc=RTC)))
    server.start()
    server.replace_engine(StandIn(manifest(*PREFIX_INPUTS, rtc=dataclasses.replace(RTC, max_guidance_weight=7.0))))
    assert server.prefix is not None and server.prefix.defaults["max_guidance_weight"] == 7.0
    assert server.info.prefix_defaults["max_guidance_weight"] == 7.0


def _tokenizer(folder: Path) -> FileEntry:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"<pad>": 0, "<unk>": 1, "pick": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")
    tok.enable_truncation(4)
    tok.enable_padding(length=4, pad_id=0, pad_token="<pad>")
    text = str(tok.to_str()).encode()
    folder.mkdir(exist_ok=True)
    (folder / "tokenizer.json").write_bytes(text)
    return FileEntry("tokenizer.json", hashlib.sha256(text).hexdigest())


def test_a_reloaded_language_engine_brings_its_own_task_bound(
    made: Callable[..., PolicyServer], tmp_path: Path
) -> None:
    inputs = (TensorSpec("tokens", "int64", (4,), "language"), TensorSpec("mask", "bool", (4,), "language"))

    def engine(folder: Path, max_bytes: int) -> StandIn:
        language = LanguageEntry(_tokenizer(folder), "tokens", "mask", 4, max_task_bytes=max_bytes)
        return StandIn(manifest(*inputs, language=language), dataclasses.replace(INFO, bundle=str(folder)))

    server = made(engine(tmp_path / "v1", 20))
    server.start()
    server.replace_engine(engine(tmp_path / "v2", 30))
    assert server.tasks is not None and server.tasks.max_bytes == 30
    assert server.info.max_task_bytes == 30


@pytest.mark.parametrize(
    ("other", "names"),
    [
        (
            manifest(TensorSpec("observation.velocity", "float32", (JOINTS,), "state")),
            "['observation.state', 'observation.velocity'] -> ['action']",
        ),
        (
            manifest(outputs=(TensorSpec("action", "float32", (4, JOINTS), "action"),)),
            "['observation.state'] -> ['action']",
        ),
        (
            manifest(
                outputs=(
                    TensorSpec("action", "float32", (2, JOINTS), "action"),
                    TensorSpec("goal", "float32", (2, JOINTS), "action"),
                ),
            ),
            "['observation.state'] -> ['action', 'goal']",
        ),
    ],
    ids=["inputs", "outputs", "another output"],
)
def test_a_reloaded_engine_with_other_inputs_or_outputs_is_refused(
    made: Callable[..., PolicyServer], zmq_ctx: zmq.Context, other: Any, names: str
) -> None:
    old = StandIn()
    server = made(old)
    server.start()
    with pytest.raises(ConfigError) as err:
        server.replace_engine(StandIn(other, dataclasses.replace(INFO, bundle="/bundles/v2")))
    assert str(err.value) == (
        f"/bundles/v2: its inputs or outputs differ from the running policy's ({names}); restart to serve it"
    )
    assert server.engine is old
    assert caller(zmq_ctx, server).call("infer", 1, {STATE: state(1.0)}).ok and len(old.runs) == 1


def test_a_reloaded_engine_with_another_action_output_is_refused(made: Callable[..., PolicyServer]) -> None:
    outputs = (
        TensorSpec("action", "float32", (2, JOINTS), "action"),
        TensorSpec("goal", "float32", (2, JOINTS), "action"),
    )
    server = made(StandIn(manifest(outputs=outputs)))
    server.start()
    with pytest.raises(ConfigError):
        server.replace_engine(StandIn(manifest(outputs=outputs, action_output="goal")))


# --- the stats snapshot --------------------------------------------------------------------------


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def monotonic(self) -> float:
        return self.t


def test_the_snapshot_counts_the_clients_heard_within_the_last_minute(
    made: Callable[..., PolicyServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = made()
    server.start()
    server._clients = {b"a": 1000.0, b"b": 1040.0, b"c": 1059.5, b"d": 1100.0}
    monkeypatch.setattr(server_module, "time", Clock(1100.0))
    assert server.snapshot().clients == 3  # a: 100 s ago
    monkeypatch.setattr(server_module, "time", Clock(1119.5))
    assert server.snapshot().clients == 2  # c heard exactly 60 s ago still counts


def test_the_snapshot_reports_the_queue_the_engine_the_arm_and_the_cpus(
    made: Callable[..., PolicyServer], zmq_ctx: zmq.Context
) -> None:
    engine = StandIn()
    server = made(engine, queue_depth=3)
    _hold_one_and_queue_one(server, engine, zmq_ctx)
    server.arm_status = lambda: {"health": "ok"}
    assert server._worker is not None
    server._worker.cpu_samples = Counter({3: 2})
    snap = server.snapshot()
    assert (snap.queue_depth, snap.queue_depth_max, snap.queue_capacity, snap.in_flight) == (1, 1, 3, 1)
    assert snap.arm == {"health": "ok"}
    assert dict(snap.inference_cpus) == {3: 2}
    assert dict(snap.engine) == INFO.to_json()
    assert dict(snap.verification) == {}
    assert dict(snap.requests) == {"infer": 2}


def test_the_snapshot_carries_the_canarys_state(made: Callable[..., PolicyServer]) -> None:
    server = made()
    server.start()

    class Canary:
        failure = None

        def due(self, *, idle: bool) -> bool:
            return False

        def seconds_until_due(self) -> None:
            return None

        class state:  # stands in for CanaryState
            @staticmethod
            def to_wire() -> dict[str, Any]:
                return {"checks": 4, "failed": False}

    assert server._worker is not None
    server._worker.canary = Canary()  # type: ignore[assignment]
    assert dict(server.snapshot().verification) == {"checks": 4, "failed": False}
    assert server.verification_failure is None


def test_a_snapshot_before_start_has_no_engine_and_nothing_in_flight(made: Callable[..., PolicyServer]) -> None:
    server = made(queue_depth=2)
    snap = server.snapshot()
    assert (snap.queue_depth, snap.queue_capacity, snap.in_flight, snap.clients) == (0, 2, 0, 0)
    assert (dict(snap.engine), dict(snap.inference_cpus), dict(snap.verification), snap.arm) == ({}, {}, {}, None)


def test_the_noise_seed_makes_the_sampling_noise_reproducible(
    made: Callable[..., PolicyServer], zmq_ctx: zmq.Context
) -> None:
    noise = TensorSpec("noise", "float32", (2, JOINTS), "noise")
    drawn: list[np.ndarray] = []
    for i, seed in enumerate((7, 7, 8)):
        engine = StandIn(manifest(noise))
        server = made(engine, endpoints=(f"ipc://n{i}.sock",), noise_seed=seed)
        server.start()
        assert caller(zmq_ctx, server).call("infer", 1, {STATE: state(1.0)}).ok
        drawn.append(engine.runs[0][1])
    # numpy's generator seeded as the server.noise_seed documents
    np.testing.assert_array_equal(drawn[0], np.random.default_rng(7).standard_normal((2, JOINTS), dtype=np.float32))
    np.testing.assert_array_equal(drawn[1], drawn[0])
    assert not np.array_equal(drawn[2], drawn[0])


def test_a_clients_history_restarts_after_the_configured_gap(made: Callable[..., PolicyServer]) -> None:
    engine = StandIn(manifest(history=2))
    server = made(engine, history_max_gap_s=1.0)  # the default is 2 s
    server.start()

    class Sock:
        def send_multipart(self, frames: list[Any], flags: int = 0, copy: bool = True) -> None:
            raise AssertionError(f"refused: {frames}")

    # received at times the test sets, 0.5 s then 1.5 s apart; replies go to a client that is not there
    for rid, (v, at) in enumerate([(1.0, 100.0), (2.0, 100.5), (3.0, 102.0)], start=1):
        frames = codec.encode_request("infer", rid, {STATE: state(v)})
        server._handle(0, Sock(), [b"gone"], [memoryview(f) for f in frames], at)
        engine.wait_entered()
    assert [r[0][:, 0].tolist() for r in engine.runs] == [[1.0, 1.0], [1.0, 2.0], [3.0, 3.0]]


def test_curve_answers_a_listed_key_and_refuses_another(made: Callable[..., PolicyServer], tmp_path: Path) -> None:
    import zmq.auth

    from runtime.client import ClientCurveKeys, PolicyClient
    from runtime.protocol.errors import UnauthorizedError
    from runtime.server.config import CurveConfig

    allowed = tmp_path / "authorized"
    allowed.mkdir()
    server_public, server_secret = zmq.auth.create_certificates(tmp_path, "server")
    client_public, client_secret = zmq.auth.create_certificates(tmp_path, "client")
    _, stranger_secret = zmq.auth.create_certificates(tmp_path, "stranger")
    Path(client_public).rename(allowed / "client.key")
    server = made(endpoints=("tcp://127.0.0.1:*",), curve=CurveConfig(server_secret, str(allowed)))
    server.start()
    endpoint = server.bound_endpoints[0]
    with PolicyClient(endpoint, curve=ClientCurveKeys.from_files(server_public, client_secret), timeout_s=WAIT_S) as c:
        c.ping()
    stranger = ClientCurveKeys.from_files(server_public, stranger_secret)
    with PolicyClient(endpoint, curve=stranger, timeout_s=WAIT_S) as c, pytest.raises(UnauthorizedError):
        c.ping()
    server.stop(timeout=1.0)
    assert server._auth is None and server._context is None
    # with CURVE, an endpoint off loopback may be configured
    off_loopback = PolicyServer(StandIn(), ServerConfig(endpoints=("tcp://0.0.0.0:5555",), curve=server.config.curve))
    assert off_loopback.endpoints == ["tcp://0.0.0.0:5555"] and off_loopback.curve is not None


def test_a_stop_with_no_time_left_cancels_the_queue_at_once(
    made: Callable[..., PolicyServer], zmq_ctx: zmq.Context
) -> None:
    """On a clock that does not move, only a deadline of now lets the stop end."""
    engine = StandIn()
    server = made(engine)
    _, b = _hold_one_and_queue_one(server, engine, zmq_ctx)
    server_module.time = Clock(1000.0)  # type: ignore[assignment]
    try:
        stopping = threading.Thread(target=server.stop, kwargs={"timeout": 0.0}, daemon=True)
        stopping.start()
        stopping.join(WAIT_S)
        assert not stopping.is_alive(), "the stop waited for a deadline the clock never reaches"
    finally:
        server_module.time = time
    assert error_of(b.receive())[2] == "shutting_down"


def test_the_io_thread_reads_a_socket_only_when_it_has_a_message(
    made: Callable[..., PolicyServer], zmq_ctx: zmq.Context
) -> None:
    """Polled for input only: a ROUTER is always writable, and polling that too would spin the thread."""
    server = made()
    server.start()
    reads: list[int] = []
    receive = server._receive

    def counted(index: int, sock: Any) -> None:
        reads.append(index)
        receive(index, sock)

    server._receive = counted  # type: ignore[method-assign]
    assert caller(zmq_ctx, server).call("ping", 1).ok
    assert reads == [0]
