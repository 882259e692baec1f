"""Which endpoints count as local, the refusal to expose a plain one, and CURVE key loading errors.

The handshake itself (allowed key in, unknown key out) runs over real sockets in
test_security_restart.py; these are the decisions in front of it, one case each.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import zmq
import zmq.auth

from runtime.errors import ConfigError
from runtime.server.config import CurveConfig
from runtime.server.endpoints import MAX_IPC_PATH, endpoint_host, is_local_endpoint, resolve_endpoint, runtime_dir
from runtime.server.security import (
    ZAP_DOMAIN,
    ServerCurve,
    apply_server_curve,
    check_endpoint_security,
    load_server_curve,
    needs_curve,
)

LOCAL = [
    "ipc:///run/lerobot-runtime/policy.sock",
    "ipc://@abstract",
    "inproc://x",
    "tcp://127.0.0.1:5555",
    "tcp://127.8.9.10:5555",
    "tcp://[::1]:5555",
    "tcp://localhost:5555",
]
EXPOSED = [
    "tcp://0.0.0.0:5555",
    "tcp://*:5555",
    "tcp://192.168.1.10:5555",
    "tcp://[::]:5555",
    "tcp://[fe80::1]:5555",
    "tcp://eth0:5555",
    "tcp://robot.local:5555",
    "udp://127.0.0.1:5555",
    "ws://127.0.0.1:5555",
]


@pytest.mark.parametrize("endpoint", LOCAL)
def test_local_endpoints(endpoint: str) -> None:
    assert is_local_endpoint(endpoint) is True


@pytest.mark.parametrize("endpoint", EXPOSED)
def test_exposed_endpoints(endpoint: str) -> None:
    assert is_local_endpoint(endpoint) is False


def test_endpoint_host() -> None:
    assert endpoint_host("tcp://[::1]:5555") == "::1"
    assert endpoint_host("tcp://127.0.0.1:5555") == "127.0.0.1"
    assert endpoint_host("tcp://a:b:5555") == "a:b"
    assert endpoint_host("ipc:///x") is None


def test_plain_exposed_endpoint_is_refused_and_named() -> None:
    with pytest.raises(ConfigError) as info:
        check_endpoint_security(["ipc://policy.sock", "tcp://0.0.0.0:5555", "tcp://*:6000"], None)
    assert str(info.value) == (
        "server.endpoints: tcp://0.0.0.0:5555, tcp://*:6000 is reachable from other hosts and needs CURVE "
        "encryption and client authentication; set server.curve.server_secret_key and "
        "server.curve.authorized_keys_dir (make keys with 'lerobot-runtime keys'), or bind 127.0.0.1 / ipc:// only"
    )


def test_local_endpoints_need_no_curve() -> None:
    check_endpoint_security(LOCAL, None)  # no exception


def test_curve_allows_exposed_endpoints_and_applies_to_tcp_only(tmp_path: Path) -> None:
    curve = ServerCurve(b"p" * 40, b"s" * 40, tmp_path, 1)
    check_endpoint_security(EXPOSED, curve)  # no exception: CURVE guards them
    assert needs_curve("tcp://0.0.0.0:5555", curve) and needs_curve("tcp://127.0.0.1:5555", curve)
    assert not needs_curve("ipc:///run/x.sock", curve)
    assert not needs_curve("tcp://0.0.0.0:5555", None)


def _keys(tmp_path: Path) -> tuple[Path, Path, Path]:
    allowed = tmp_path / "authorized"
    allowed.mkdir()
    server_pub, server_sec = zmq.auth.create_certificates(tmp_path, "server")
    client_pub, _ = zmq.auth.create_certificates(tmp_path, "client")
    Path(client_pub).rename(allowed / "client.key")
    return Path(server_pub), Path(server_sec), allowed


def test_load_server_curve(tmp_path: Path) -> None:
    assert load_server_curve(CurveConfig()) is None
    _, server_sec, allowed = _keys(tmp_path)
    curve = load_server_curve(CurveConfig(str(server_sec), str(allowed)))
    assert curve is not None
    public, secret = zmq.auth.load_certificate(server_sec)
    assert (curve.public_key, curve.secret_key) == (public, secret)
    assert curve.authorized_keys_dir == allowed and curve.authorized_count == 1


def test_curve_key_errors_name_the_key_and_the_fix(tmp_path: Path) -> None:
    server_pub, server_sec, allowed = _keys(tmp_path)
    garbage = tmp_path / "garbage.key_secret"
    garbage.write_text("not a key\n")
    cases = [
        (
            CurveConfig(str(tmp_path / "missing"), str(allowed)),
            f"server.curve.server_secret_key: {tmp_path}/missing does not exist; "
            "make one with 'lerobot-runtime keys --out DIR --name server'",
        ),
        (
            CurveConfig(str(server_pub), str(allowed)),
            f"server.curve.server_secret_key: {server_pub} holds only a public key; expected the .key_secret file",
        ),
        (
            CurveConfig(str(server_sec), str(tmp_path / "nope")),
            f"server.curve.authorized_keys_dir: {tmp_path}/nope is not a directory",
        ),
    ]
    for cfg, message in cases:
        with pytest.raises(ConfigError) as info:
            load_server_curve(cfg)
        assert str(info.value) == message
    with pytest.raises(ConfigError, match=r"server_secret_key: .*garbage.key_secret is not a CURVE key file: "):
        load_server_curve(CurveConfig(str(garbage), str(allowed)))  # the rest is pyzmq's own words


def test_an_empty_allow_list_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, server_sec, allowed = _keys(tmp_path)
    (allowed / "client.key").unlink()
    with caplog.at_level(logging.WARNING, logger="runtime.server.security"):
        curve = load_server_curve(CurveConfig(str(server_sec), str(allowed)))
    assert curve is not None and curve.authorized_count == 0
    assert "holds no .key files" in caplog.text


def test_apply_server_curve_makes_a_curve_server(tmp_path: Path) -> None:
    _, server_sec, allowed = _keys(tmp_path)
    curve = load_server_curve(CurveConfig(str(server_sec), str(allowed)))
    assert curve is not None
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    try:
        apply_server_curve(sock, curve)
        assert sock.curve_server == 1 and sock.zap_domain == ZAP_DOMAIN
        # the keys themselves are proven by the handshake in test_security_restart.py
    finally:
        sock.close(0)
        ctx.term()


def test_ipc_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_endpoint("tcp://127.0.0.1:1") == "tcp://127.0.0.1:1"
    assert resolve_endpoint("ipc://@name") == "ipc://@name"
    assert resolve_endpoint("ipc:///abs/p.sock", tmp_path) == "ipc:///abs/p.sock"
    assert resolve_endpoint("ipc://p.sock", tmp_path) == f"ipc://{tmp_path}/p.sock"
    with pytest.raises(ConfigError, match="has no socket path"):
        resolve_endpoint("ipc://", tmp_path)
    long = "x" * (MAX_IPC_PATH + 1 - len(str(tmp_path)) - 1)
    with pytest.raises(ConfigError, match=f"is {MAX_IPC_PATH + 1} bytes; Unix sockets allow {MAX_IPC_PATH}"):
        resolve_endpoint(f"ipc://{long}", tmp_path)
    fits = "x" * (MAX_IPC_PATH - len(str(tmp_path)) - 1)
    assert resolve_endpoint(f"ipc://{fits}", tmp_path) == f"ipc://{tmp_path}/{fits}"
    monkeypatch.setenv("RUNTIME_DIRECTORY", f"{tmp_path}/a:{tmp_path}/b")
    assert resolve_endpoint("ipc://p.sock") == f"ipc://{tmp_path}/a/p.sock"


def test_runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    path = runtime_dir()
    assert path == tmp_path / "lerobot-runtime" and path.is_dir()
    assert path.stat().st_mode & 0o777 == 0o700
    (tmp_path / "lerobot-runtime").rmdir()
    (tmp_path / "lerobot-runtime").write_text("a file, not a directory")
    with pytest.raises(ConfigError, match=f"is not a directory owned by uid {os.getuid()}"):
        runtime_dir()


def test_runtime_dir_fallbacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "not" / "yet"))  # parents are created
    assert runtime_dir() == tmp_path / "not" / "yet" / "lerobot-runtime"
    assert runtime_dir().is_dir()  # and a second call finds it
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    path = runtime_dir()
    assert path == Path("/tmp") / f"lerobot-runtime-{os.getuid()}" and path.is_dir()
    assert runtime_dir() == path
