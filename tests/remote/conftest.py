"""Fixtures for the remote policy: CURVE keys (a robot allowed by the remote, a stranger), and a policy
server on a loopback TCP port that can be stopped and started again on the same port."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq.auth

from runtime.server.config import CurveConfig, ServerConfig
from runtime.server.server import PolicyServer
from tests.control.conftest import calibration, camera, short_dir, sim_arm
from tools.bench.remote import make_keys

__all__ = ["calibration", "camera", "keys", "remote", "short_dir", "sim_arm"]


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    """The remote's key pair, a robot's (allowed) and a stranger's, as bench remote makes them."""
    made = make_keys(tmp_path)
    _, stranger_secret = zmq.auth.create_certificates(tmp_path, "stranger")
    return {**made, "stranger_secret": Path(stranger_secret)}


class Remote:
    """A policy server on one loopback port, with CURVE; ``stop()`` and ``start()`` again as a restart."""

    def __init__(self, engine: Any, keys: dict[str, Path]) -> None:
        self.engine = engine
        self.curve = CurveConfig(str(keys["server_secret"]), str(keys["allowed"]))
        self.server: PolicyServer | None = None
        self.endpoint = ""
        self.start("tcp://127.0.0.1:0")

    def start(self, endpoint: str | None = None) -> PolicyServer:
        self.server = PolicyServer(self.engine, ServerConfig(endpoints=(endpoint or self.endpoint,), curve=self.curve))
        self.server.start()
        self.endpoint = self.server.bound_endpoints[0]
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(2.0)
            self.server = None


@pytest.fixture
def remote(keys: dict[str, Path]) -> Iterator[Callable[[Any], Remote]]:
    made: list[Remote] = []

    def make(engine: Any) -> Remote:
        made.append(Remote(engine, keys))
        return made[-1]

    yield make
    for r in made:
        r.stop()
