"""A listening socket that cannot be set up makes ``start()`` raise, naming the endpoint; it never hangs."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from runtime.engine.base import Engine
from runtime.server import PolicyServer, ServerConfig


def test_a_failed_chmod_of_the_ipc_socket_is_raised_not_hung(
    engine: Engine, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    socket_path = str(short_tmp / "policy.sock")
    chmod = os.chmod

    def refuse(path: Any, mode: int, *args: Any, **kwargs: Any) -> None:
        if str(path) == socket_path:
            raise PermissionError(1, "Operation not permitted", socket_path)
        chmod(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "chmod", refuse)
    server = PolicyServer(engine, ServerConfig(endpoints=("ipc://policy.sock",)), runtime_directory=short_tmp)
    outcome: list[BaseException | None] = []

    def start() -> None:
        try:
            server.start()
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    # a thread of its own: with the bug, start() never returns and the test must still end
    t = threading.Thread(target=start, daemon=True)
    t.start()
    t.join(10.0)
    assert not t.is_alive(), "start() hung after the socket could not be set up"
    assert len(outcome) == 1 and isinstance(outcome[0], PermissionError), outcome
    assert not server.running
