"""A bad network between a robot and its remote policy, on loopback: a TCP proxy that delays, jitters,
stalls and cuts the bytes it forwards (``python -m tools.bench.remote`` puts it between the two daemons).

Each direction adds half the round trip, plus a jitter drawn per read uniformly in +-half the jitter,
so a round trip is ``rtt_ms`` +- ``jitter_ms`` (two draws). Bytes stay in order: a read never leaves
before the one ahead of it. Loss on TCP is a stall (the sender resends what Wi-Fi lost; the stream
arrives late, not damaged): :meth:`LossyLink.stall` holds both directions for a burst. :meth:`silence`
holds everything until lifted, the connections left open (the remote's host gone quiet);
:meth:`cut` closes every connection at once (its process killed), and new ones are still taken.
"""

from __future__ import annotations

import contextlib
import math
import random
import socket
import threading
import time
from collections import deque


class _Pipe:
    """One direction of one connection: read, stamp with a release time, write when it is due."""

    def __init__(self, link: LossyLink, src: socket.socket, dst: socket.socket, name: str) -> None:
        self.link, self.src, self.dst = link, src, dst
        self._queue: deque[tuple[float, bytes]] = deque()
        self._ready = threading.Condition()
        self._last = 0.0
        self._closed = False
        self._reader = threading.Thread(target=self._read, name=f"lossy-link-{name}-read", daemon=True)
        self._writer = threading.Thread(target=self._write, name=f"lossy-link-{name}-write", daemon=True)
        self._reader.start()
        self._writer.start()

    def _read(self) -> None:
        try:
            while True:
                data = self.src.recv(65536)
                if not data:
                    break
                due = max(self._last, time.monotonic() + self.link.one_way_s())
                self._last = due
                with self._ready:
                    self._queue.append((due, data))
                    self._ready.notify()
        except OSError:
            pass
        finally:
            self.close()

    def _write(self) -> None:
        try:
            while True:
                with self._ready:
                    while not self._queue and not self._closed:
                        self._ready.wait(0.05)
                    if not self._queue:
                        return
                    due, data = self._queue[0]
                wait = max(due, self.link.held_until) - time.monotonic()
                if wait > 0:
                    time.sleep(min(wait, 0.005))  # short sleeps: a hold lifted or a cut is seen soon
                    continue
                with self._ready:
                    self._queue.popleft()
                self.dst.sendall(data)
        except OSError:
            pass
        finally:
            self.close()

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._queue.clear()
            self._ready.notify_all()
        for s in (self.src, self.dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()  # both pipes of a connection close its two sockets: closing twice is harmless


class LossyLink:
    def __init__(self, upstream_port: int, *, rtt_ms: float = 0.0, jitter_ms: float = 0.0, seed: int = 0) -> None:
        """Forward 127.0.0.1:``self.port`` to 127.0.0.1:``upstream_port``."""
        self.upstream_port = upstream_port
        self.rtt_ms = rtt_ms
        self.jitter_ms = jitter_ms
        #: nothing is forwarded before this monotonic time (a stall, or inf while silenced)
        self.held_until = 0.0
        self._rng = random.Random(seed)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self._pipes: list[_Pipe] = []
        self._lock = threading.Lock()
        self._closed = False
        self.connections = 0
        self._accepting = threading.Thread(target=self._accept, name="lossy-link-accept", daemon=True)
        self._accepting.start()

    def one_way_s(self) -> float:
        half = self.jitter_ms / 2
        return max(0.0, self.rtt_ms / 2 + self._rng.uniform(-half, half)) / 1e3 if half else self.rtt_ms / 2e3

    def set(self, rtt_ms: float, jitter_ms: float = 0.0) -> None:
        self.rtt_ms, self.jitter_ms = rtt_ms, jitter_ms

    def stall(self, seconds: float) -> None:
        """A burst of loss: both directions arrive ``seconds`` late from now."""
        self.held_until = max(self.held_until, time.monotonic() + seconds)

    def silence(self, on: bool = True) -> None:
        """Hold everything (the connections stay open) until called with False."""
        self.held_until = math.inf if on else time.monotonic()

    def cut(self) -> None:
        """Close every open connection now, as a killed process's kernel does."""
        with self._lock:
            pipes, self._pipes = self._pipes, []
        for pipe in pipes:
            pipe.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=1.0)
            except OSError:
                client.close()  # nothing listens upstream (the remote is down): refused, as it would be
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections += 1
                self._pipes += [_Pipe(self, client, upstream, "up"), _Pipe(self, upstream, client, "down")]
