"""One daemon per endpoint set: a second server on the same endpoints refuses, naming the holder."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from runtime.client import PolicyClient
from runtime.engine.base import Engine
from runtime.errors import InstanceRunningError
from runtime.server import PolicyServer, ServerConfig


def test_second_server_on_the_same_ipc_socket_refuses(
    make_server: Callable[..., PolicyServer],
    engine: Engine,
    short_tmp: Path,
    observation: dict[str, np.ndarray],
) -> None:
    first = make_server(endpoints=("ipc://policy.sock",))
    second = PolicyServer(engine, ServerConfig(endpoints=("ipc://policy.sock",)), runtime_directory=short_tmp)
    with pytest.raises(InstanceRunningError, match=rf"already served by another lerobot-runtime \(PID {os.getpid()}"):
        second.start()
    # the first one still has its socket file and its clients
    with PolicyClient(first.bound_endpoints[0], timeout_s=5) as client:
        assert client.infer(observation).actions.shape[1] == 6
    first.stop(1.0)
    # once the first is gone the endpoint is free again
    third = PolicyServer(engine, ServerConfig(endpoints=("ipc://policy.sock",)), runtime_directory=short_tmp)
    third.start()
    third.stop(1.0)


def test_busy_tcp_port_names_the_listener(engine: Engine) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        server = PolicyServer(engine, ServerConfig(endpoints=(f"tcp://127.0.0.1:{port}",)))
        with pytest.raises(InstanceRunningError, match=rf"cannot bind tcp://127.0.0.1:{port}: PID {os.getpid()}"):
            server.start()
    finally:
        holder.close()


def test_ipc_socket_lets_the_group_connect(make_server: Callable[..., PolicyServer], short_tmp: Path) -> None:
    old = os.umask(0o022)  # the usual default: without a chmod the socket would be srwxr-xr-x
    try:
        server = make_server(endpoints=("ipc://policy.sock",))
    finally:
        os.umask(old)
    mode = (short_tmp / "policy.sock").stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o660, oct(mode)
    assert server.bound_endpoints
