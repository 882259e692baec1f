"""CURVE: the server key pair, the client allow-list and the rule that off-host endpoints need them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import ConfigError
from runtime.server.config import CurveConfig
from runtime.server.endpoints import is_local_endpoint

log = logging.getLogger(__name__)

ZAP_DOMAIN = b"lerobot-runtime"


@dataclass(frozen=True)
class ServerCurve:
    public_key: bytes
    secret_key: bytes
    authorized_keys_dir: Path
    authorized_count: int


def load_server_curve(cfg: CurveConfig) -> ServerCurve | None:
    """Read the server key pair and count the allowed client keys; None when CURVE is not configured."""
    if not cfg.enabled:
        return None
    import zmq.auth

    secret_file = Path(cfg.server_secret_key)
    keys_dir = Path(cfg.authorized_keys_dir)
    if not secret_file.is_file():
        raise ConfigError(
            f"server.curve.server_secret_key: {secret_file} does not exist; "
            "make one with 'lerobot-runtime keys --out DIR --name server'"
        )
    try:
        public, secret = zmq.auth.load_certificate(secret_file)
    except (ValueError, OSError) as e:
        raise ConfigError(
            f"server.curve.server_secret_key: {secret_file} is not a CURVE key file: {e}"
        ) from e
    if secret is None:
        raise ConfigError(
            f"server.curve.server_secret_key: {secret_file} holds only a public key; "
            "expected the .key_secret file"
        )
    if not keys_dir.is_dir():
        raise ConfigError(f"server.curve.authorized_keys_dir: {keys_dir} is not a directory")
    count = len(list(keys_dir.glob("*.key")))
    if count == 0:
        log.warning("CURVE allow-list %s holds no .key files: no client can connect over tcp", keys_dir)
    return ServerCurve(public, secret, keys_dir, count)


def check_endpoint_security(endpoints: Sequence[str], curve: ServerCurve | None) -> None:
    """Refuse to bind anything reachable from another host without CURVE."""
    if curve is not None:
        return
    exposed = [ep for ep in endpoints if not is_local_endpoint(ep)]
    if exposed:
        raise ConfigError(
            f"server.endpoints: {', '.join(exposed)} is reachable from other hosts and needs CURVE "
            "encryption and client authentication; set server.curve.server_secret_key and "
            "server.curve.authorized_keys_dir (make keys with 'lerobot-runtime keys'), or bind "
            "127.0.0.1 / ipc:// only"
        )


def needs_curve(endpoint: str, curve: ServerCurve | None) -> bool:
    return curve is not None and endpoint.startswith("tcp://")


def apply_server_curve(sock: Any, curve: ServerCurve) -> None:
    sock.zap_domain = ZAP_DOMAIN
    sock.curve_secretkey = curve.secret_key
    sock.curve_publickey = curve.public_key
    sock.curve_server = True


def start_authenticator(context: Any, curve: ServerCurve) -> Any:
    """A ZAP handler thread that admits only the client public keys in the allow-list folder."""
    from zmq.auth.thread import ThreadAuthenticator

    auth = ThreadAuthenticator(context, log=logging.getLogger("runtime.server.auth"))
    auth.start()
    auth.configure_curve(domain=ZAP_DOMAIN.decode(), location=str(curve.authorized_keys_dir))
    log.info("CURVE on: %d client key(s) allowed from %s", curve.authorized_count, curve.authorized_keys_dir)
    return auth
