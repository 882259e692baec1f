"""The systemd notify protocol: datagrams of ``KEY=VALUE`` lines to ``$NOTIFY_SOCKET``.

No libsystemd needed: an AF_UNIX SOCK_DGRAM socket, with a leading '@' meaning the Linux abstract
namespace. Outside systemd (no ``$NOTIFY_SOCKET``) every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)


class SystemdNotifier:
    def __init__(self, address: str | None = None, watchdog_usec: int | None = None) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec
        self._sock: socket.socket | None = None
        self._failing = False  # a failure is logged when it starts, not at every datagram

    @classmethod
    def from_env(cls) -> SystemdNotifier:
        """Read ``$NOTIFY_SOCKET`` and ``$WATCHDOG_USEC`` (honouring ``$WATCHDOG_PID``)."""
        address = os.environ.get("NOTIFY_SOCKET") or None
        usec: int | None = None
        raw = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        if raw.isdigit() and int(raw) > 0 and (not pid or pid == str(os.getpid())):
            usec = int(raw)
        return cls(address, usec)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """How often to send WATCHDOG=1: half the timeout systemd enforces, as sd_watchdog_enabled advises."""
        return None if self.watchdog_usec is None else self.watchdog_usec / 2e6

    def notify(self, *fields: str) -> bool:
        """Send one datagram; False (logged once per failure) instead of raising: never fatal."""
        if self.address is None:
            return False
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto("\n".join(fields).encode(), target)
        except OSError as e:
            if not self._failing:
                self._failing = True
                log.warning("systemd notify to %s failed: %s (not repeated until it works again)", self.address, e)
            self.close()  # a fresh socket next time, in case the listener comes back
            return False
        if self._failing:
            self._failing = False
            log.info("systemd notify to %s works again", self.address)
        return True

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={text}")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def stopping(self, status: str = "") -> bool:
        return self.notify("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
