"""Endpoint resolution: the runtime directory for ipc sockets and which endpoints count as local."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import stat
from pathlib import Path

from runtime.errors import ConfigError

APP_DIR = "lerobot-runtime"
# sun_path is 108 bytes including the terminating NUL.
MAX_IPC_PATH = 107


def runtime_dir() -> Path:
    """``$RUNTIME_DIRECTORY`` (systemd), else ``$XDG_RUNTIME_DIR/lerobot-runtime``, else a per-user /tmp dir.

    Created mode 0700 when missing; an existing /tmp fallback owned by someone else is refused, since
    whoever owns it could swap the socket.
    """
    systemd_dirs = os.environ.get("RUNTIME_DIRECTORY", "")
    if systemd_dirs:
        return Path(systemd_dirs.split(":")[0])
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    path = Path(xdg) / APP_DIR if xdg else Path("/tmp") / f"{APP_DIR}-{os.getuid()}"
    # something there that is not a directory is refused just below, with the reason
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ConfigError(
            f"runtime directory {path} is not a directory owned by uid {os.getuid()}; remove it"
        )
    return path


def resolve_endpoint(endpoint: str, base: Path | None = None) -> str:
    """Make relative ``ipc://`` paths absolute under the runtime directory; check ipc path length."""
    if not endpoint.startswith("ipc://"):
        return endpoint
    path = endpoint[len("ipc://") :]
    if path.startswith("@"):  # Linux abstract namespace
        return endpoint
    if not path:
        raise ConfigError(f"server.endpoints: {endpoint!r} has no socket path")
    full = Path(path) if path.startswith("/") else (base if base is not None else runtime_dir()) / path
    if len(str(full)) > MAX_IPC_PATH:
        raise ConfigError(
            f"server.endpoints: ipc path {full} is {len(str(full))} bytes; Unix sockets allow {MAX_IPC_PATH}"
        )
    return f"ipc://{full}"


def endpoint_host(endpoint: str) -> str | None:
    """The host part of a ``tcp://`` endpoint (brackets stripped), None for other transports."""
    if not endpoint.startswith("tcp://"):
        return None
    rest = endpoint[len("tcp://") :]
    if rest.startswith("["):
        return rest[1 : rest.find("]")]
    return rest.rsplit(":", 1)[0]


def is_local_endpoint(endpoint: str) -> bool:
    """True for ipc/inproc and for tcp bound to a loopback address; ``*``, interfaces and others are not."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    host = endpoint_host(endpoint)
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "*", "eth0", a DNS name: could be reachable from outside
