"""One daemon per endpoint set: a lock file beside each ipc socket, taken before anything binds.

ZeroMQ's ipc bind unlinks an existing socket file and binds a new one, so a second daemon on the
same config would silently take the first one's clients. Each ``ipc://`` path gets ``PATH.lock``,
held with ``flock`` for the server's lifetime and holding the owner's PID, which is named in the
refusal. The kernel drops the lock when the process dies, so a crash leaves nothing to clean up.
``tcp://`` endpoints need no lock (a second bind fails with "address in use"); the refusal names
the listening process when the system lets us see it.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from runtime.errors import InstanceRunningError

log = logging.getLogger(__name__)


def _holder(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def lock_holder(path: Path) -> int | None:
    """The PID of the live server holding ``path``, or None when nobody holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(path)
        return int(holder) if holder.isdigit() else None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None  # we could lock it: nobody serves there
    finally:
        os.close(fd)


class InstanceLock:
    """Locks for the ipc endpoints of one server; ``release()`` (or process exit) frees them."""

    def __init__(self) -> None:
        self._held: list[tuple[int, Path]] = []

    @classmethod
    def acquire(cls, endpoints: list[str]) -> InstanceLock:
        lock = cls()
        try:
            for ep in endpoints:
                if ep.startswith("ipc://") and not ep.startswith("ipc://@"):
                    lock._take(ep, Path(ep[len("ipc://") :] + ".lock"))
        except BaseException:
            lock.release()
            raise
        return lock

    def _take(self, endpoint: str, path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise InstanceRunningError(f"cannot create the lock file {path} for {endpoint}: {e}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise InstanceRunningError(
                f"{endpoint} is already served by another lerobot-runtime (PID {_holder(path)}, lock {path}); "
                "stop that one first (systemctl stop lerobot-runtime), or give this one other endpoints"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._held.append((fd, path))

    def release(self) -> None:
        for fd, _path in self._held:
            # The file stays: unlinking it could let a third process lock a fresh inode while a second
            # still waits on the old one. An unlocked file with a stale PID is harmless.
            os.close(fd)
        self._held = []


def tcp_listener_pid(endpoint: str) -> int | None:
    """PID of the process listening on a ``tcp://HOST:PORT`` endpoint, when visible to us."""
    try:
        port = int(endpoint.rsplit(":", 1)[1])
        import psutil

        for conn in psutil.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                return int(conn.pid)
    except (ValueError, IndexError, OSError, ImportError):
        return None
    except Exception as e:  # psutil.AccessDenied and friends: only a hint is lost
        log.debug("cannot list listening sockets: %s", e)
    return None
