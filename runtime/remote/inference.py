"""The loop's way to a policy served by another lerobot-runtime: :class:`RemoteInference`.

It stands where the daemon's own inference worker stands for the loop's feed
(:class:`runtime.arm_control.feed.Inference`): whole observations in, chunks out through ``on_done``.
Two threads, each with its own client socket (ZeroMQ sockets stay on one thread): one sends the
loop's requests and waits for their chunks (up to ``policy.request_timeout_s``: a large model takes
its time), the other pings the remote every ``policy.ping_s`` (its I/O thread answers while the
model computes), which is how the link is known to be up whatever inference takes.

Timing is the robot's alone: the loop stamps each request with the tick its observation was read at
and places the chunk by that tick and the tick it arrived (the arm process measures both), so no
chunk is placed by comparing two machines' clocks. Round trips are measured here, on this
machine's monotonic clock, and kept for status (their recent distribution: p50 / p99): the link's
(pings) and the chunks' (request to chunk, inference included).

At most one request is in flight: a second one while the first waits is refused (the loop counts it
and asks again on a later tick). The link counts as lost on a closed connection (at once) or when
a ping was not answered within ``policy.timeout_s`` (the silence bound); while it is lost the feed
says the policy is unreachable and the loop holds, then takes its stall action after
``stall_timeout_s``. The first answer after that makes it reachable again. A chunk that comes after
the loop dropped its plan (a stall, a stop) is discarded by the loop and counted there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime.bundle.interface import PolicyInterface
from runtime.bundle.manifest import TensorSpec
from runtime.client import ClientCurveKeys, ConnectionLostError, PolicyClient, RequestTimeoutError
from runtime.control.config import RtcConfig
from runtime.control.feed import OnDone, Prefix
from runtime.errors import ConfigError, LerobotRuntimeError
from runtime.protocol.errors import ServerError, UnauthorizedError
from runtime.protocol.messages import PolicyInfo
from runtime.remote.config import RemotePolicyConfig

log = logging.getLogger(__name__)

RTT_WINDOW = 200  # round trips kept for the distribution status shows


def interface_of(info: PolicyInfo, endpoint: str) -> PolicyInterface:
    """What the loop needs of the remote's policy, from its ``hello``; ConfigError for one the loop
    cannot drive from here."""
    if info.history_frames > 1:
        raise ConfigError(
            f"policy.endpoint: the policy at {endpoint} ({info.policy_name}) looks at {info.history_frames} "
            "observation frames; a remote policy is served only to loops that send one frame per chunk "
            "(ACT, SmolVLA, Diffusion with one frame): serve it in this daemon instead"
        )
    return PolicyInterface(
        info.policy_name,
        tuple(TensorSpec(t.name, t.dtype, tuple(t.shape), t.role) for t in info.inputs),
        tuple(info.action_names),
        info.chunk_length,
        info.control_rate_hz,
        info.history_frames,
        info.prefix_steps,
        f"remote {endpoint}",
    )


def client_keys(config: RemotePolicyConfig) -> ClientCurveKeys | None:
    if not config.server_public_key:
        return None
    try:
        return ClientCurveKeys.from_files(config.server_public_key, config.client_secret_key)
    except (OSError, ValueError) as e:
        raise ConfigError(f"policy.server_public_key / policy.client_secret_key: cannot read the keys: {e}") from e


@dataclass
class _Job:
    observation: dict[str, np.ndarray]
    on_done: OnDone
    reset: bool
    prefix: Prefix | None
    task: str


class RemoteInference:
    def __init__(
        self,
        config: RemotePolicyConfig,
        task: str = "",
        rtc: RtcConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        beat: Callable[[], None] = lambda: None,
    ) -> None:
        """``beat``: called on every turn of the client thread (the daemon's liveness heartbeat)."""
        self.config = config
        self.endpoint = config.endpoint
        #: the instruction every request of the loop carries (a language policy needs one)
        self.task = task
        self.rtc = rtc or RtcConfig()
        self.info: PolicyInfo | None = None
        self.interface: PolicyInterface | None = None
        self.counters: Counter[str] = Counter()
        self._clock = clock
        self._beat = beat
        self._curve = client_keys(config)
        self._lock = threading.Lock()
        self._job: _Job | None = None
        self._busy = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._rtts: deque[float] = deque(maxlen=RTT_WINDOW)  # pings: the link's own round trip
        self._chunk_rtts: deque[float] = deque(maxlen=RTT_WINDOW)  # request to chunk, inference included
        self._lost: str | None = "not connected yet"
        self._lost_since: float | None = clock()
        self._last_answer: float | None = None
        self._failure: str | None = None
        self._names: tuple[str, ...] = ()

    # --- start and stop ------------------------------------------------------------------------

    def connect(
        self, *, should_stop: Callable[[], bool] = lambda: False, on_wait: Callable[[str], object] = lambda t: None
    ) -> PolicyInterface:
        """Ask the remote what it serves (waiting up to ``policy.connect_wait_s``), then start the client
        thread. Raises ConfigError when it never answered or serves what the loop cannot drive."""
        deadline = self._clock() + self.config.connect_wait_s
        client = self._client()
        said = False
        try:
            while True:
                try:
                    left = max(0.05, deadline - self._clock())
                    info = client.hello(timeout_s=min(max(self.config.timeout_s, 1.0), left))
                    break
                except UnauthorizedError as e:
                    raise ConfigError(f"policy.endpoint: {e}") from e
                except RequestTimeoutError as e:
                    if should_stop():
                        raise InterruptedError("stopped while waiting for the remote policy") from e
                    if self._clock() >= deadline:
                        raise ConfigError(
                            f"policy.endpoint: no answer from {self.endpoint} within policy.connect_wait_s "
                            f"({self.config.connect_wait_s:g} s): is lerobot-runtime serving there, and does it "
                            "allow this robot's key?"
                        ) from e
                    if not said:
                        on_wait(f"waiting for the policy at {self.endpoint}")
                        said = True
        finally:
            client.close()
        self.info = info
        self.interface = interface_of(info, self.endpoint)
        self._names = tuple(t.name for t in info.inputs)
        self._answered(self._clock())
        log.info(
            "remote policy: %s at %s (%s on %s)",
            info.policy_name,
            self.endpoint,
            info.engine.get("engine", "?"),
            info.engine.get("device", "?"),
        )
        self._threads = [
            threading.Thread(target=self._requests, name="lerobot-runtime-remote", daemon=True),
            threading.Thread(target=self._heartbeat, name="lerobot-runtime-remote-ping", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self.interface

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(self.config.request_timeout_s + 1.0)

    def _client(self, timeout_s: float | None = None, give_up: Callable[[], str | None] | None = None) -> PolicyClient:
        timeout = self.config.timeout_s if timeout_s is None else timeout_s
        return PolicyClient(self.endpoint, timeout_s=timeout, curve=self._curve, watch_link=True, give_up=give_up)

    # --- what the feed asks --------------------------------------------------------------------

    @property
    def takes_task(self) -> bool:
        return self.info is not None and self.info.takes_task

    def submit(
        self, inputs: list[np.ndarray], on_done: OnDone, *, reset: bool = False, prefix: Prefix | None = None
    ) -> bool:
        with self._lock:
            if self._busy:
                self.counters["busy"] += 1
                return False  # one request in flight at a time; the loop asks again later
            self._busy = True
            self._job = _Job(dict(zip(self._names, inputs, strict=True)), on_done, reset, prefix, self.task)
        self._wake.set()
        return True

    def observe(self, inputs: list[np.ndarray], *, reset: bool = False) -> None:
        # interface_of refuses policies with observation history: the loop never hands one over alone
        return None

    def failure(self) -> str | None:
        return self._failure

    def pending(self) -> str | None:
        return None  # the remote keeps its own requests back until its parity gate has passed

    def unreachable(self) -> str | None:
        lost = self._lost
        return None if lost is None else f"the policy at {self.endpoint}: {lost}"

    def round_trips(self, chunks: bool = False) -> dict[str, Any]:
        """The recent round trips: the link's (pings), or with ``chunks`` request to chunk."""
        rtts = np.array(self._chunk_rtts if chunks else self._rtts)  # one C-level copy: safe against appends
        if not len(rtts):
            return {"count": 0}
        p50, p99 = np.percentile(rtts, [50, 99])
        return {"count": len(rtts), "last_ms": float(rtts[-1]), "p50_ms": float(p50), "p99_ms": float(p99)}

    def describe(self) -> dict[str, Any]:
        """Which policy drives, where, and how the link is: for ``control status`` and metrics."""
        info = self.info
        return {
            "where": "remote",
            "endpoint": self.endpoint,
            "policy": info.policy_name if info is not None else "",
            "engine": dict(info.engine) if info is not None else {},
            "link": "lost" if self._lost is not None else "up",
            "unreachable": self.unreachable(),
            "lost_for_s": round(self._clock() - since, 3) if (since := self._lost_since) is not None else None,
            "round_trip": self.round_trips(),
            "chunk_round_trip": self.round_trips(chunks=True),
            "counters": dict(self.counters),
        }

    # --- the client thread ---------------------------------------------------------------------

    def _answered(self, now: float) -> None:
        if self._lost is not None and self._last_answer is not None:
            log.warning("remote policy: %s answers again (the link was lost: %s)", self.endpoint, self._lost)
        self._last_answer = now
        self._lost = None
        self._lost_since = None

    def _link_lost(self, why: str, now: float) -> None:
        if self._lost is None:
            self.counters["link_lost"] += 1
            self._lost_since = now
            log.error("remote policy: the link to %s is lost: %s; the loop holds", self.endpoint, why)
        self._lost = why

    def _requests(self) -> None:
        # a request in flight when the pings find the link lost is given up then, not at its timeout:
        # the next one can go as soon as the link is back
        client = self._client(self.config.request_timeout_s, give_up=lambda: self._lost)
        try:
            while not self._stop.is_set():
                self._wake.wait(self.config.ping_s)
                self._wake.clear()
                with self._lock:
                    job, self._job = self._job, None
                if job is not None and not self._stop.is_set():
                    self._infer(client, job)
        finally:
            client.close()

    def _heartbeat(self) -> None:
        client = self._client()
        try:
            while not self._stop.is_set():
                self._beat()
                # between pings, a closed connection is seen the moment its socket says so
                try:
                    closed = client.watch(self.config.ping_s) is False
                except UnauthorizedError as e:  # the remote no longer takes this robot's key
                    self._link_lost(str(e), self._clock())
                    continue
                if closed:
                    self._link_lost(f"the connection to {self.endpoint} closed", self._clock())
                    continue
                if not self._stop.is_set():
                    self._ping(client)
        finally:
            client.close()

    def _ping(self, client: PolicyClient) -> None:
        try:
            pong = client.ping()
        except (RequestTimeoutError, ConnectionLostError, UnauthorizedError) as e:
            self._link_lost(str(e), self._clock())
            return
        self.counters["pings"] += 1
        self._rtts.append(pong.round_trip_ms)
        self._answered(self._clock())

    def _infer(self, client: PolicyClient, job: _Job) -> None:
        actions: np.ndarray | None = None
        error: str | None = None
        prefix, rtc = job.prefix, self.rtc
        try:
            chunk = client.infer(
                job.observation,
                reset=job.reset,
                task=job.task or None,
                prefix=prefix.actions if prefix is not None else None,
                delay=prefix.delay if prefix is not None else None,
                execution_horizon=rtc.execution_horizon if prefix is not None else None,
                prefix_attention_schedule=rtc.prefix_attention_schedule if prefix is not None else None,
                max_guidance_weight=rtc.max_guidance_weight if prefix is not None else None,
            )
        except RequestTimeoutError as e:  # the link may be up (the pings say): the chunk is late
            self.counters["timed_out_requests"] += 1
            error = f"remote policy: {e}"
        except (ConnectionLostError, UnauthorizedError) as e:
            self.counters["lost_requests"] += 1
            self._link_lost(str(e), self._clock())
            error = f"remote policy: {e}"
        except ServerError as e:
            self.counters["errors"] += 1
            self._answered(self._clock())  # it answered: the link is up, the request was refused
            if e.code == "verification_failed":
                self._failure = f"the policy at {self.endpoint} failed its verification: {e}"
            error = f"remote policy refused the request: {e}"
        except LerobotRuntimeError as e:  # a reply that could not be read
            self.counters["errors"] += 1
            error = f"remote policy: {e}"
        else:
            self.counters["chunks"] += 1
            self._chunk_rtts.append(chunk.round_trip_ms)
            self._answered(self._clock())
            actions = chunk.actions
        try:
            job.on_done(actions, error)
        except Exception:
            log.exception("remote policy: handing the chunk to the loop failed")
        finally:
            with self._lock:
                self._busy = False  # in flight until the loop has it
