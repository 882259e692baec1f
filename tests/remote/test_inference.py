"""The loop's way to a remote policy, against a real policy server over loopback TCP with CURVE: chunks
back, round trips measured here, one request in flight, the link lost at once on a closed connection
and after the silence bound on a mute one, back on the first answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from runtime.control.feed import Prefix
from runtime.errors import ConfigError
from runtime.protocol.messages import PolicyInfo
from runtime.remote.config import RemotePolicyConfig
from runtime.remote.inference import RemoteInference, interface_of
from runtime.server.synthetic import DEMO, IMAGE, STATE, SyntheticEngine, example_observation, reference_actions
from tests.control.conftest import wait_for
from tests.daemon.conftest import FreezingEngine
from tools.bench.lossy_link import LossyLink

from .conftest import Remote


class Done:
    def __init__(self) -> None:
        self.got: list[tuple[np.ndarray | None, str | None]] = []
        self.event = threading.Event()

    def __call__(self, actions: np.ndarray | None, error: str | None) -> None:
        self.got.append((actions, error))
        self.event.set()

    def wait(self, timeout: float = 10.0) -> tuple[np.ndarray | None, str | None]:
        assert self.event.wait(timeout), "no answer"
        self.event.clear()
        return self.got[-1]


def _config(endpoint: str, keys: dict[str, Path], secret: str = "robot_secret", **kw: Any) -> RemotePolicyConfig:
    return RemotePolicyConfig(endpoint, str(keys["server_public"]), str(keys[secret]), **kw)


def _inputs(remote: RemoteInference, seed: int = 0) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    obs = example_observation(DEMO, seed)
    assert remote.interface is not None
    return [obs[s.name] for s in remote.interface.observation_inputs], obs


@pytest.fixture
def linked(remote: Callable[[Any], Remote], keys: dict[str, Path]):  # type: ignore[no-untyped-def]
    server = remote(SyntheticEngine(DEMO))
    client = RemoteInference(_config(server.endpoint, keys, timeout_s=0.3, ping_s=0.05))
    client.connect()
    yield server, client
    client.close()


def test_the_remote_tells_the_loop_what_it_takes_and_answers_chunks(linked: tuple[Remote, RemoteInference]) -> None:
    server, client = linked
    face = client.interface
    assert face is not None and face.source == f"remote {server.endpoint}"
    assert {s.name for s in face.observation_inputs} == {IMAGE, STATE}
    assert face.chunk_length == DEMO.chunk and face.rtc_chunk_size == 0
    done = Done()
    arrays, obs = _inputs(client)
    assert client.submit(arrays, done)
    actions, error = done.wait()
    assert error is None and actions is not None
    np.testing.assert_allclose(actions, reference_actions(DEMO, obs), atol=1e-6)
    chunk_trips = client.round_trips(chunks=True)
    assert chunk_trips["count"] == 1 and 0 < chunk_trips["p50_ms"] < 1000
    wait_for(lambda: client.round_trips()["count"] >= 2, what="pings")
    trips = client.round_trips()
    assert 0 < trips["p50_ms"] <= trips["p99_ms"] < 1000
    described = client.describe()
    assert described["where"] == "remote" and described["link"] == "up" and described["counters"]["chunks"] == 1
    assert client.unreachable() is None and client.failure() is None and client.pending() is None


def test_one_request_is_in_flight_at_a_time(linked: tuple[Remote, RemoteInference]) -> None:
    _, client = linked
    gate = threading.Event()
    first = Done()

    def slow(actions: np.ndarray | None, error: str | None) -> None:
        gate.wait(5)
        first(actions, error)

    arrays, _ = _inputs(client)
    assert client.submit(arrays, slow)
    wait_for(lambda: client.counters["chunks"] == 1, what="the first chunk")
    assert not client.submit(arrays, Done())  # the first one's answer is still being handed over
    assert client.counters["busy"] == 1
    gate.set()
    first.wait()
    second = Done()
    assert client.submit(arrays, second)
    assert second.wait()[1] is None


def test_a_stopped_remote_is_lost_at_once_and_back_on_its_first_answer(
    linked: tuple[Remote, RemoteInference],
) -> None:
    server, client = linked
    wait_for(lambda: client.counters["pings"] >= 2, what="pings")
    server.stop()  # the connection closes: the ping waiting on it fails without its timeout
    wait_for(lambda: client.unreachable() is not None, timeout=2.0, what="the link lost")
    why = client.unreachable()
    assert why is not None and why.startswith(f"the policy at {server.endpoint}: ")
    assert client.describe()["link"] == "lost" and client.counters["link_lost"] == 1
    done = Done()
    arrays, _ = _inputs(client)
    assert client.submit(arrays, done)
    actions, error = done.wait()
    assert actions is None and error is not None and error.startswith("remote policy: ")
    server.start()  # the same port
    wait_for(lambda: client.unreachable() is None, timeout=5.0, what="the link back")
    again = Done()
    assert client.submit(arrays, again)
    assert again.wait()[1] is None
    assert client.counters["link_lost"] == 1


def test_a_closed_connection_is_seen_between_pings_not_at_the_next_one(
    keys: dict[str, Path], remote: Callable[[Any], Remote]
) -> None:
    server = remote(SyntheticEngine(DEMO))
    client = RemoteInference(_config(server.endpoint, keys, timeout_s=0.5, ping_s=0.5))
    client.connect()
    try:
        wait_for(lambda: client.counters["pings"] >= 1, what="a ping")
        time.sleep(0.05)  # between two pings, half a second apart
        link_cut = time.monotonic()
        server.stop()
        wait_for(lambda: client.unreachable() is not None, timeout=2.0, what="the link lost")
        assert time.monotonic() - link_cut < 0.3  # at the socket's event, not at the next ping
        assert "closed" in (client.unreachable() or "")
    finally:
        client.close()


def test_a_slow_chunk_times_out_after_request_timeout_s_while_the_pings_keep_the_link_up(
    keys: dict[str, Path], remote: Callable[[Any], Remote]
) -> None:
    server = remote(FreezingEngine(2.0))  # an observation with joint 0 at 99 takes 2 s
    client = RemoteInference(_config(server.endpoint, keys, timeout_s=0.2, ping_s=0.05, request_timeout_s=0.6))
    client.connect()
    try:
        arrays, _ = _inputs(client)
        state = [s.name for s in client.interface.observation_inputs].index(STATE)  # type: ignore[union-attr]
        arrays[state] = arrays[state].copy()
        arrays[state][0] = 99.0
        done = Done()
        started = time.monotonic()
        assert client.submit(arrays, done)
        time.sleep(0.4)
        assert client.unreachable() is None  # the remote's I/O thread answers pings while its model computes
        actions, error = done.wait()
        waited = time.monotonic() - started
        assert actions is None and error is not None and "no reply to infer" in error
        assert 0.55 < waited < 1.5  # request_timeout_s, not the 2 s the remote takes
        assert client.counters["timed_out_requests"] == 1 and client.counters["link_lost"] == 0
    finally:
        client.close()


def test_a_silent_link_is_lost_after_the_silence_bound_and_back_on_the_next_answer(
    keys: dict[str, Path], remote: Callable[[Any], Remote]
) -> None:
    server = remote(SyntheticEngine(DEMO))
    link = LossyLink(int(server.endpoint.rsplit(":", 1)[1]))
    client = RemoteInference(_config(link.endpoint, keys, timeout_s=0.2, ping_s=0.05))
    client.connect()
    try:
        wait_for(lambda: client.counters["pings"] >= 2, what="pings")
        link.silence(True)  # the connection stays open: nothing arrives
        silenced = time.monotonic()
        wait_for(lambda: client.unreachable() is not None, timeout=2.0, what="the link lost")
        waited = time.monotonic() - silenced
        assert 0.15 < waited < 0.6  # the silence bound (0.2 s) plus at most one ping interval
        assert "no reply to ping" in (client.unreachable() or "")
        link.silence(False)
        wait_for(lambda: client.unreachable() is None, timeout=3.0, what="the link back")
        done = Done()
        assert client.submit(_inputs(client)[0], done)
        assert done.wait()[1] is None
    finally:
        client.close()
        link.close()


def test_a_request_in_flight_is_given_up_when_the_link_is_found_lost(
    keys: dict[str, Path], remote: Callable[[Any], Remote]
) -> None:
    server = remote(FreezingEngine(3.0))
    link = LossyLink(int(server.endpoint.rsplit(":", 1)[1]))
    client = RemoteInference(_config(link.endpoint, keys, timeout_s=0.2, ping_s=0.05, request_timeout_s=5.0))
    client.connect()
    try:
        arrays, _ = _inputs(client)
        state = [s.name for s in client.interface.observation_inputs].index(STATE)  # type: ignore[union-attr]
        arrays[state] = arrays[state].copy()
        arrays[state][0] = 99.0  # the remote's model takes 3 s over it
        done = Done()
        assert client.submit(arrays, done)
        time.sleep(0.2)
        link.silence(True)
        silenced = time.monotonic()
        actions, error = done.wait(5.0)
        waited = time.monotonic() - silenced
        assert actions is None and error is not None and "gave up on infer request" in error
        assert waited < 1.0  # the silence bound and a ping, not the 5 s request timeout
        assert client.counters["lost_requests"] == 1
    finally:
        client.close()
        link.close()


def test_a_robot_key_the_remote_does_not_allow_is_refused_at_connect(
    keys: dict[str, Path], remote: Callable[[Any], Remote]
) -> None:
    server = remote(SyntheticEngine(DEMO))
    client = RemoteInference(_config(server.endpoint, keys, secret="stranger_secret", connect_wait_s=2.0))
    with pytest.raises(ConfigError, match=r"^policy.endpoint: .* refused this client's CURVE key"):
        client.connect()


def test_no_answer_at_start_is_refused_after_connect_wait(keys: dict[str, Path]) -> None:
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as mute:
        port = mute.bind_to_random_port("tcp://127.0.0.1")
        endpoint = f"tcp://127.0.0.1:{port}"
        client = RemoteInference(RemotePolicyConfig(endpoint, connect_wait_s=1.5, timeout_s=0.1, ping_s=0.05))
        waits: list[str] = []
        with pytest.raises(ConfigError) as e:
            client.connect(on_wait=waits.append)
    assert str(e.value).startswith(f"policy.endpoint: no answer from {endpoint} within policy.connect_wait_s (1.5 s)")
    assert waits == [f"waiting for the policy at {endpoint}"]


def test_the_prefix_and_task_travel_with_the_request(linked: tuple[Remote, RemoteInference]) -> None:
    _, client = linked
    done = Done()
    arrays, _ = _inputs(client)
    # the demo policy takes neither: the remote's refusal comes back through on_done, the link stays up
    assert client.submit(arrays, done, prefix=Prefix(np.zeros((3, 6), np.float32), 1))
    actions, error = done.wait()
    assert actions is None and error is not None and "refused the request" in error and "prefix" in error
    assert client.unreachable() is None and client.counters["errors"] == 1


def test_a_policy_with_observation_history_is_not_driven_remotely() -> None:
    from dataclasses import replace

    info = PolicyInfo(1, "x", "p", (), (), "action", 4, ("a",), 30.0, {}, {}, (), 0, 0)
    interface_of(info, "tcp://h:1")
    with pytest.raises(ConfigError, match=r"^policy.endpoint: the policy at tcp://h:1 \(p\) looks at 2 observation"):
        interface_of(replace(info, history_frames=2), "tcp://h:1")


def test_robots_sharing_one_remote_are_answered_each_its_own_chunk_none_replacing_anothers(
    keys: dict[str, Path], remote: Callable[[Any], Remote]
) -> None:
    server = remote(FreezingEngine(0.5))  # robot a's observation keeps the worker 0.5 s
    robots = [RemoteInference(_config(server.endpoint, keys, request_timeout_s=3.0)) for _ in range(3)]
    for robot in robots:
        robot.connect()
    try:
        inputs = [_inputs(robot, seed) for seed, robot in enumerate(robots)]
        state = [s.name for s in robots[0].interface.observation_inputs].index(STATE)  # type: ignore[union-attr]
        frozen = [a.copy() for a in inputs[0][0]]
        frozen[state][0] = 99.0
        done = [Done() for _ in robots]
        assert robots[0].submit(frozen, done[0])
        time.sleep(0.1)
        # robots b and c queue behind a's: the newer (c's) takes nobody's place (latest wins per robot only)
        assert robots[1].submit(inputs[1][0], done[1]) and robots[2].submit(inputs[2][0], done[2])
        answers = [d.wait() for d in done]
        assert all(error is None and actions is not None for actions, error in answers)
        for (actions, _), (_, obs) in list(zip(answers, inputs, strict=True))[1:]:
            np.testing.assert_allclose(actions, reference_actions(DEMO, obs), atol=1e-6)
        assert server.server is not None and server.server.snapshot().errors.get("superseded", 0) == 0
    finally:
        for robot in robots:
            robot.close()
