"""The observation parts that come over ZeroMQ (cameras), newest part per stream.

A receiver thread connects one SUB socket per configured stream (see :mod:`runtime.protocol.stream`
for the wire format), checks each part against the policy input it fills and keeps only the newest.
The control tick peeks at the newest part of each stream without locking or waiting (one
:class:`~runtime.control.handoff.Latest` per stream) and ages it on CLOCK_MONOTONIC.
A part that does not fit its input is dropped, counted and logged once per stream.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import zmq

from runtime.bundle.manifest import TensorSpec
from runtime.control.config import StreamConfig
from runtime.control.handoff import Latest
from runtime.errors import ConfigError
from runtime.protocol.errors import BadRequestError
from runtime.protocol.stream import StreamPart, decode_part
from runtime.server.endpoints import resolve_endpoint

log = logging.getLogger(__name__)

POLL_MS = 50


class ObservationStreams:
    def __init__(
        self,
        streams: Sequence[StreamConfig],
        specs: Sequence[TensorSpec],
        *,
        runtime_directory: Path | None = None,
        cpus: set[int] | None = None,
    ) -> None:
        by_name = {s.name: s for s in specs}
        for s in streams:
            if s.input not in by_name:
                raise ConfigError(
                    f"control.streams: input {s.input!r} is not one of the policy's inputs ({', '.join(by_name)})"
                )
        self.configs = {s.input: s for s in streams}
        self.specs = {s.input: by_name[s.input] for s in streams}
        self.endpoints = {s.input: resolve_endpoint(s.endpoint, runtime_directory) for s in streams}
        self._latest: dict[str, Latest[StreamPart]] = {name: Latest() for name in self.configs}
        self.received = dict.fromkeys(self.configs, 0)
        self.refused = dict.fromkeys(self.configs, 0)
        self._warned: set[str] = set()
        self._cpus = cpus
        self._stop = threading.Event()
        self._context: Any = None
        self._thread: threading.Thread | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.configs)

    def start(self) -> None:
        self._context = zmq.Context()
        sockets = []
        for name, ep in self.endpoints.items():
            sock = self._context.socket(zmq.SUB)
            sock.linger = 0
            sock.rcvhwm = 4  # a backlog of frames is never wanted: only the newest is used
            sock.setsockopt(zmq.SUBSCRIBE, name.encode())
            sock.connect(ep)
            sockets.append(sock)
        self._thread = threading.Thread(target=self._run, args=(sockets,), name="lerobot-runtime-streams", daemon=True)
        self._thread.start()
        for name, ep in self.endpoints.items():
            log.info("observation stream %s: subscribed to %s (max age %g ms)", name, ep, self.configs[name].max_age_ms)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None
        if self._context is not None:
            self._context.term()
            self._context = None

    def latest(self, name: str) -> StreamPart | None:
        return self._latest[name].peek()

    def stale(self, now: float) -> list[tuple[str, float | None]]:
        """Streams whose newest part is older than allowed: (name, age in ms, None if nothing came yet)."""
        out: list[tuple[str, float | None]] = []
        for name, cfg in self.configs.items():
            part = self._latest[name].peek()
            if part is None:
                out.append((name, None))
                continue
            age_ms = (now - part.capture_ts) * 1e3
            if age_ms > cfg.max_age_ms:
                out.append((name, age_ms))
        return out

    def _run(self, sockets: list[Any]) -> None:
        if self._cpus:
            os.sched_setaffinity(0, self._cpus)
        poller = zmq.Poller()
        for sock in sockets:
            poller.register(sock, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                for sock, _ in poller.poll(POLL_MS):
                    self._drain(sock)
        finally:
            for sock in sockets:
                sock.close(0)

    def _drain(self, sock: Any) -> None:
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                part = decode_part([f.buffer for f in frames])
                self._check(part)
            except BadRequestError as e:
                name = bytes(frames[0].buffer).decode("utf-8", errors="replace") if frames else "?"
                if name in self.refused:
                    self.refused[name] += 1
                if name not in self._warned:
                    self._warned.add(name)
                    log.error("observation stream %s: part refused (further ones counted): %s", name, e.message)
                continue
            self.received[part.name] += 1
            self._latest[part.name].put(part)

    def _check(self, part: StreamPart) -> None:
        spec = self.specs.get(part.name)
        if spec is None:
            raise BadRequestError(f"no stream is configured for {part.name!r}", field="(topic)")
        if part.array.dtype.name != spec.dtype or tuple(part.array.shape) != tuple(spec.shape):
            raise BadRequestError(
                f"expected {spec.dtype}{list(spec.shape)}, got {part.array.dtype.name}{list(part.array.shape)}",
                field=part.name,
                expected=f"{spec.dtype}{list(spec.shape)}",
                received=f"{part.array.dtype.name}{list(part.array.shape)}",
            )
        if part.capture_ts > time.monotonic() + 1.0:
            raise BadRequestError(
                f"capture_ts {part.capture_ts:.3f} is in the future (this host's CLOCK_MONOTONIC is "
                f"{time.monotonic():.3f}); producers must stamp frames with time.monotonic() on this host",
                field="capture_ts",
            )
