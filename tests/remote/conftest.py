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

__all__ = ["calibration", "camera", "keys", "remote", "short_dir", "sim_arm"]


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    allowed = tmp_path / "authorized"
    allowed.mkdir()
    server_pub, server_sec = zmq.auth.create_certificates(tmp_path, "server")
    robot_pub, robot_sec = zmq.auth.create_certificates(tmp_path, "robot")
    _, stranger_sec = zmq.auth.create_certificates(tmp_path, "stranger")
    Path(robot_pub).rename(allowed / "robot.key")
    return {
        "server_public": Path(server_pub),
        "server_secret": Path(server_sec),
        "robot_secret": Path(robot_sec),
        "stranger_secret": Path(stranger_sec),
        "allowed": allowed,
    }


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
