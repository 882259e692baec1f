"""CURVE allow-list, the refusal to expose a plain endpoint, and clients surviving a server restart."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zmq.auth

from runtime.client import ClientCurveKeys, PolicyClient, RequestTimeoutError
from runtime.engine.base import Engine
from runtime.errors import ConfigError
from runtime.protocol.errors import UnauthorizedError
from runtime.server import CurveConfig, PolicyServer, ServerConfig
from runtime.server.endpoints import is_local_endpoint
from runtime.server.synthetic import DEMO, example_observation, reference_actions


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    allowed = tmp_path / "authorized"
    allowed.mkdir()
    server_pub, server_sec = zmq.auth.create_certificates(tmp_path, "server")
    client_pub, client_sec = zmq.auth.create_certificates(tmp_path, "client")
    _, stranger_sec = zmq.auth.create_certificates(tmp_path, "stranger")
    Path(client_pub).rename(allowed / "client.key")
    return {
        "server_public": Path(server_pub),
        "server_secret": Path(server_sec),
        "client_secret": Path(client_sec),
        "stranger_secret": Path(stranger_sec),
        "allowed": allowed,
    }


def test_non_loopback_endpoint_without_curve_refuses_to_start(engine: Engine) -> None:
    for ep in ("tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://192.168.1.10:5555", "tcp://eth0:5555"):
        with pytest.raises(ConfigError, match="needs CURVE"):
            PolicyServer(engine, ServerConfig(endpoints=(ep,)))


def test_local_endpoints() -> None:
    assert is_local_endpoint("tcp://127.0.0.1:1") and is_local_endpoint("tcp://[::1]:1")
    assert is_local_endpoint("ipc:///run/x.sock") and is_local_endpoint("tcp://localhost:5")
    assert not is_local_endpoint("tcp://10.0.0.1:1")


def test_curve_half_configured_is_an_error() -> None:
    with pytest.raises(ConfigError, match="set both"):
        CurveConfig(server_secret_key="x")


def test_curve_allows_listed_key_and_rejects_unknown(
    make_server: Callable[..., PolicyServer], keys: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.server.auth")
    curve = CurveConfig(str(keys["server_secret"]), str(keys["allowed"]))
    server = make_server(endpoints=("tcp://127.0.0.1:*",), curve=curve)
    ep = server.bound_endpoints[0]
    obs = example_observation(DEMO, seed=5)
    good = ClientCurveKeys.from_files(keys["server_public"], keys["client_secret"])
    with PolicyClient(ep, curve=good, timeout_s=5.0) as client:
        np.testing.assert_allclose(client.infer(obs).actions, reference_actions(DEMO, obs), atol=1e-5)
    stranger = ClientCurveKeys.from_files(keys["server_public"], keys["stranger_secret"])
    with PolicyClient(ep, curve=stranger, timeout_s=5.0) as client, pytest.raises(UnauthorizedError):
        client.ping()
    # the journal names the refused key, under the daemon's own logger
    stranger_public = zmq.auth.load_certificate(keys["stranger_secret"])[0]
    denied = {(r.name, r.getMessage()) for r in caplog.records if r.getMessage().startswith("DENIED")}
    assert denied == {("runtime.server.auth", f"DENIED (CURVE) domain=lerobot-runtime client_key={stranger_public!r}")}
    with PolicyClient(ep, timeout_s=0.5) as plain, pytest.raises(RequestTimeoutError):
        plain.ping()  # a NULL-security client gets no answer from a CURVE socket


def test_client_survives_server_restart(
    make_server: Callable[..., PolicyServer], engine: Engine, short_tmp: Path
) -> None:
    first = make_server(endpoints=("ipc://policy.sock", "tcp://127.0.0.1:*"))
    endpoints = list(first.bound_endpoints)
    obs = example_observation(DEMO, seed=8)
    clients = [PolicyClient(ep, timeout_s=0.5) for ep in endpoints]
    try:
        for c in clients:
            c.infer(obs)
        first.stop(timeout=1.0)
        second = PolicyServer(engine, ServerConfig(endpoints=tuple(endpoints)), runtime_directory=short_tmp)
        second.start()
        try:
            for c in clients:
                # Same client objects: a call may time out while the socket reconnects, then works.
                deadline = time.monotonic() + 10
                while True:
                    try:
                        chunk = c.infer(obs)
                        break
                    except RequestTimeoutError:
                        assert time.monotonic() < deadline, "client never reconnected"
                np.testing.assert_allclose(chunk.actions, reference_actions(DEMO, obs), atol=1e-5)
        finally:
            second.stop(timeout=1.0)
    finally:
        for c in clients:
            c.close()
