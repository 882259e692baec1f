"""From the observation a client sends to the inputs the program takes: frames of history, sampling noise.

A policy that looks at several observations at once (LeRobot's ``n_obs_steps``; the manifest's
``observation_history``) takes every image, state and env input with that many frames, oldest
first. Clients send one frame per request; :class:`ObservationHistory` keeps each client's last
frames, keyed by who sent them (the ZeroMQ routing identity, or the control loop). As LeRobot's
``populate_queues`` does, a client's first observation fills every slot; so does the first one after
a reset (an infer with ``reset``, or a gap longer than ``max_gap_s``: frames seconds apart are not
the history the policy was trained on).

The sampling noise of a generative policy (inputs with role ``noise``: Diffusion Policy's initial
sample) is drawn by :class:`NoiseSource` on the inference worker, the one thread that runs the
engine, from one numpy ``Generator`` per server: seeded, a server's sequence of chunks is
reproducible; unseeded, it draws fresh entropy at each start.

A language policy's token inputs (role ``language``) come from the request's task, tokenized by
runtime.server.tasks, and a real-time chunking policy's prefix inputs from the request's leftover and
delay (runtime.server.rtc); :meth:`ObservationHistory.assemble` puts them in their places.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable, Sequence

import numpy as np

from runtime.bundle.manifest import HISTORY_ROLES, RTC_ROLES, Manifest

# Stands in for a noise input between the I/O thread and the worker, which draws the real one.
NOISE_PLACEHOLDER = np.empty(0, np.float32)
# Histories kept at once. Each holds observation_history frames (two camera frames of 921 KB for a
# 640x480 Diffusion Policy), and every new connection is a new client: the bound caps the memory a
# reconnecting client can pin. Histories past max_gap_s are dropped first, then the longest silent.
MAX_CLIENTS = 64


class ObservationHistory:
    """Per-client frames of history; :meth:`assemble` turns one frame into the program's inputs.

    Called from the server's I/O thread and from the control loop's thread, hence the lock; it is
    held only to update one client's deque.
    """

    def __init__(self, manifest: Manifest, *, max_gap_s: float = 0.0, max_clients: int = MAX_CLIENTS) -> None:
        self.frames = manifest.observation_history
        self.max_gap_s = max_gap_s
        self.max_clients = max_clients
        observation_names = [s.name for s in manifest.observation_inputs]
        # per program input: where it comes from in what the client sent, or None for noise
        self._sources: list[int | None] = []
        self._stacked: list[bool] = []
        # program input index -> 0 (the task's tokens) or 1 (their mask)
        self._language: dict[int, int] = {}
        # program input index -> 0 (the leftover), 1 (its weights) or 2 (the guidance cap)
        self._prefix: dict[int, int] = {}
        lang = manifest.language
        for i, spec in enumerate(manifest.inputs):
            if spec.role == "language":
                self._language[i] = 0 if lang is not None and spec.name == lang.tokens_input else 1
                self._sources.append(None)
                self._stacked.append(False)
            elif spec.role in RTC_ROLES:
                self._prefix[i] = RTC_ROLES.index(spec.role)
                self._sources.append(None)
                self._stacked.append(False)
            elif spec.role == "noise":
                self._sources.append(None)
                self._stacked.append(False)
            else:
                self._sources.append(observation_names.index(spec.name))
                self._stacked.append(self.frames > 1 and spec.role in HISTORY_ROLES)
        self._clients: dict[Hashable, tuple[deque[Sequence[np.ndarray]], list[float]]] = {}
        self._lock = threading.Lock()
        self.resets = 0  # histories (re)started from a single frame: new clients, resets, gaps

    @property
    def needed(self) -> bool:
        """False when the program takes exactly what a client sends (nothing to keep or draw)."""
        return self.frames > 1 or any(s is None for s in self._sources)  # noise, language, prefix inputs too

    def observe(self, client: Hashable, observation: Sequence[np.ndarray], now: float, *, reset: bool = False) -> None:
        """Add a frame to the client's history without running the policy (the control loop, every tick
        it does not ask, so the frames are consecutive ticks as in LeRobot's ``select_action``)."""
        if self.frames > 1:
            self._push(client, observation, now, reset)

    def assemble(
        self,
        client: Hashable,
        observation: Sequence[np.ndarray],
        now: float,
        *,
        reset: bool = False,
        language: Sequence[np.ndarray] = (),
        prefix: Sequence[np.ndarray] = (),
    ) -> list[np.ndarray]:
        """The program's inputs, in manifest order, from ``observation`` (validated, in
        ``observation_inputs`` order) and the client's earlier frames; noise inputs hold
        :data:`NOISE_PLACEHOLDER` until :meth:`NoiseSource.fill`; language inputs take ``language``
        (the task's tokens and mask), prefix inputs ``prefix`` (leftover, weights, cap: see
        runtime.server.rtc). ``now``: time.monotonic()."""
        if self._language and len(language) != 2:
            raise ValueError("assemble: a language policy's inputs need the task's tokens and mask")
        if self._prefix and len(prefix) != len(RTC_ROLES):
            raise ValueError("assemble: a real-time chunking policy's inputs need its leftover, weights and cap")
        window = self._push(client, observation, now, reset) if self.frames > 1 else [observation]
        out: list[np.ndarray] = []
        for i, (source, stacked) in enumerate(zip(self._sources, self._stacked, strict=True)):
            if i in self._language:
                out.append(language[self._language[i]])
            elif i in self._prefix:
                out.append(prefix[self._prefix[i]])
            elif source is None:
                out.append(NOISE_PLACEHOLDER)
            elif stacked:
                out.append(np.stack([frame[source] for frame in window]))
            else:
                out.append(observation[source])
        return out

    def _push(
        self, client: Hashable, observation: Sequence[np.ndarray], now: float, reset: bool
    ) -> list[Sequence[np.ndarray]]:
        with self._lock:
            entry = self._clients.get(client)
            stale = entry is not None and self.max_gap_s > 0 and now - entry[1][0] > self.max_gap_s
            if entry is None or reset or stale:
                if entry is None and len(self._clients) >= self.max_clients:
                    self._forget_oldest(now)
                # as LeRobot's populate_queues: the first observation stands for every earlier one
                entry = (deque([observation] * self.frames, maxlen=self.frames), [now])
                self._clients[client] = entry
                self.resets += 1
            else:
                entry[0].append(observation)
                entry[1][0] = now
            return list(entry[0])

    def _forget_oldest(self, now: float) -> None:
        if self.max_gap_s > 0:  # those would start over anyway
            for client in [c for c, (_, heard) in self._clients.items() if now - heard[0] > self.max_gap_s]:
                del self._clients[client]
        if len(self._clients) >= self.max_clients:
            oldest = min(self._clients, key=lambda c: self._clients[c][1][0])
            del self._clients[oldest]

    def forget(self, client: Hashable) -> None:
        """Drop a client's history: its next observation starts a new one."""
        with self._lock:
            self._clients.pop(client, None)

    def __len__(self) -> int:
        return len(self._clients)


class NoiseSource:
    """Standard-normal float32 noise for the program's noise inputs, from one seeded Generator.

    Only the inference worker calls :meth:`fill`, so draws need no lock and happen in the order the
    engine runs the jobs.
    """

    def __init__(self, manifest: Manifest, seed: int | None = None) -> None:
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._slots = [(i, s.shape) for i, s in enumerate(manifest.inputs) if s.role == "noise"]
        self.draws = 0

    @property
    def needed(self) -> bool:
        return bool(self._slots)

    def fill(self, inputs: list[np.ndarray]) -> None:
        """Replace each noise slot of ``inputs`` (program order) with a fresh draw."""
        for index, shape in self._slots:
            inputs[index] = self._rng.standard_normal(shape, dtype=np.float32)
        self.draws += 1
