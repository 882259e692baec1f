"""Fixtures for the server tests: a real OpenVINO engine, a running server, clean ZeroMQ teardown.

Socket discipline as in pyzmq's own tests: every socket is closed with linger 0, every context is
terminated on a watchdog thread so a leaked socket fails the test instead of hanging it, and every
receive polls with a timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zmq

from runtime.engine.base import Engine
from runtime.server import PolicyServer, ServerConfig
from runtime.server.synthetic import DEMO, SyntheticEngine, example_observation, reference_actions

TERM_TIMEOUT_S = 5.0
RECV_TIMEOUT_MS = 5000


def term_with_timeout(ctx: zmq.Context, timeout: float = TERM_TIMEOUT_S) -> None:
    t = threading.Thread(target=ctx.term, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        ctx.destroy(linger=0)
        pytest.fail("zmq context did not terminate: a socket was left open")


@pytest.fixture
def zmq_ctx() -> Iterator[zmq.Context]:
    ctx = zmq.Context()
    sockets: list[zmq.Socket] = []
    original = ctx.socket

    def tracked(*args: Any, **kwargs: Any) -> zmq.Socket:
        s = original(*args, **kwargs)
        s.linger = 0
        sockets.append(s)
        return s

    ctx.socket = tracked  # type: ignore[method-assign]
    yield ctx
    for s in sockets:
        if not s.closed:
            s.close(linger=0)
    term_with_timeout(ctx)


@pytest.fixture(scope="session")
def engine() -> Engine:
    # A real OpenVINO model built in code whose every chunk has a numpy reference, so concurrency tests
    # can check each reply; tests/server/test_bundle_serving.py serves the exported demo bundle.
    return SyntheticEngine(DEMO)


@pytest.fixture
def observation() -> dict[str, np.ndarray]:
    return example_observation(DEMO, seed=1)


@pytest.fixture
def expected() -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    return lambda obs: reference_actions(DEMO, obs)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    # ipc paths must fit in 107 bytes; pytest's tmp_path can be longer.
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lrt-") as d:
        yield Path(d)


@pytest.fixture
def make_server(engine: Engine, short_tmp: Path) -> Iterator[Callable[..., PolicyServer]]:
    started: list[PolicyServer] = []

    def make(engine_: Engine | None = None, **kwargs: Any) -> PolicyServer:
        kwargs.setdefault("endpoints", ("ipc://policy.sock", "tcp://127.0.0.1:*"))
        server = PolicyServer(engine_ or engine, ServerConfig(**kwargs), runtime_directory=short_tmp)
        server.start()
        started.append(server)
        return server

    yield make
    for s in started:
        s.stop(timeout=1.0)


@pytest.fixture
def server(make_server: Callable[..., PolicyServer]) -> PolicyServer:
    return make_server()


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``predicate`` until true; a deadline only so a broken test fails instead of hanging."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)
