"""``PolicyClient``: what a control loop, camera process or teleop station uses to talk to the server.

One DEALER socket per client. Every call has a timeout; on timeout the socket is thrown away and a
fresh one connected, so a late reply to the old request can never be read as the answer to a new
one (replies are also matched by request id). ZeroMQ reconnects by itself, so a server restart needs
nothing from the caller: the call in flight times out, the next one goes through. Error replies are
raised as the ``ServerError`` subclass for their code (``runtime.protocol.errors``).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from runtime.errors import LerobotRuntimeError
from runtime.protocol.codec import (
    Reply,
    actions_from_reply,
    decode_reply,
    encode_request,
    policy_info_from_reply,
    pong_from_reply,
    stats_from_reply,
)
from runtime.protocol.errors import UnauthorizedError, error_from_info
from runtime.protocol.messages import ActionChunk, PolicyInfo, Pong, StatsSnapshot

log = logging.getLogger(__name__)

__all__ = [
    "ActionChunk",
    "ClientCurveKeys",
    "ConnectionLostError",
    "PolicyClient",
    "PolicyInfo",
    "Pong",
    "RequestTimeoutError",
    "StatsSnapshot",
]

_AUTH_EVENTS = zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
_LINK_EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECTED
GIVE_UP_POLL_MS = 20  # how often a waiting call asks ``give_up``


class RequestTimeoutError(LerobotRuntimeError, TimeoutError):
    """No reply within the call's timeout (server down, restarting, or overloaded)."""


class ConnectionLostError(LerobotRuntimeError, ConnectionError):
    """The connection to the server closed while a call waited (``watch_link``): its reply will not come."""


@dataclass(frozen=True)
class ClientCurveKeys:
    """The server's public key and this client's key pair (z85 bytes, as ``zmq.auth`` files hold them)."""

    server_public: bytes
    public: bytes
    secret: bytes

    @classmethod
    def from_files(cls, server_public_file: str | Path, client_secret_file: str | Path) -> ClientCurveKeys:
        import zmq.auth

        server_public, _ = zmq.auth.load_certificate(str(server_public_file))
        public, secret = zmq.auth.load_certificate(str(client_secret_file))
        if secret is None:
            raise ValueError(f"{client_secret_file} holds no secret key; expected the .key_secret file")
        return cls(server_public, public, secret)


class PolicyClient:
    """A client of one policy server endpoint (``ipc://...`` or ``tcp://host:port``)."""

    def __init__(
        self,
        endpoint: str,
        *,
        timeout_s: float = 2.0,
        curve: ClientCurveKeys | None = None,
        context: Any = None,
        watch_link: bool = False,
        give_up: Callable[[], str | None] | None = None,
    ) -> None:
        """``watch_link``: a call fails at once with :class:`ConnectionLostError` when the connection
        closes while it waits (the server's process died, its host went away), instead of at its timeout.
        ``give_up``: asked every few ms while a call waits; a reason it returns ends the call the same
        way (another thread found the link lost: its reply is not waited for)."""
        self.endpoint = endpoint
        self.watch_link = watch_link
        self.give_up = give_up
        self.timeout_s = timeout_s
        self.curve = curve
        self._own_context = context is None
        self._context = context if context is not None else zmq.Context()
        self._ids = itertools.count(1)
        self._socket: Any = None
        self._monitor: Any = None
        self._poller = zmq.Poller()
        self._connect()

    # --- socket management -------------------------------------------------------------------

    def _connect(self) -> None:
        sock = self._context.socket(zmq.DEALER)
        sock.linger = 0
        sock.reconnect_ivl = 100
        sock.reconnect_ivl_max = 1000
        events = _LINK_EVENTS if self.watch_link else 0
        if self.curve is not None:
            sock.curve_serverkey = self.curve.server_public
            sock.curve_publickey = self.curve.public
            sock.curve_secretkey = self.curve.secret
            # A refused key shows up only as a handshake event, never as a reply.
            events |= _AUTH_EVENTS
        if events:
            self._monitor = sock.get_monitor_socket(events)
            self._monitor.linger = 0
        sock.connect(self.endpoint)
        #: whether the connection is up, as the socket's events last said (None: no event yet)
        self.link_up: bool | None = None
        self._socket = sock
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        if self._monitor is not None:
            self._poller.register(self._monitor, zmq.POLLIN)

    def _disconnect(self) -> None:
        if self._monitor is not None:
            self._socket.disable_monitor()
            self._monitor.close(0)
            self._monitor = None
        if self._socket is not None:
            self._socket.close(0)
            self._socket = None

    def reset(self) -> None:
        """Drop the socket (and anything queued in it) and connect a fresh one."""
        self._disconnect()
        self._connect()

    def close(self) -> None:
        self._disconnect()
        if self._own_context:
            self._context.term()

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- calls -------------------------------------------------------------------------------

    def _call(
        self,
        kind: str,
        observation: Mapping[str, np.ndarray] | None,
        timeout_s: float | None,
        body: Mapping[str, Any] | None = None,
    ) -> tuple[Reply, float]:
        rid = next(self._ids)
        frames = encode_request(kind, rid, observation, body)
        if self._monitor is not None:
            self._drain_monitor(rid)
            if self.link_up is False:
                # closed since the last call and not connected again: nothing would answer this one
                raise ConnectionLostError(f"the connection to {self.endpoint} is closed (reconnecting)")
        start = time.perf_counter()
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        self._socket.send_multipart(frames, copy=False)
        while True:
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1e3))
            if self.give_up is not None:
                if (reason := self.give_up()) is not None:
                    self.reset()
                    raise ConnectionLostError(f"gave up on {kind} request {rid} to {self.endpoint}: {reason}")
                if remaining_ms > GIVE_UP_POLL_MS:
                    events = dict(self._poller.poll(GIVE_UP_POLL_MS))
                    if not events:
                        continue
                else:
                    events = dict(self._poller.poll(remaining_ms))
            else:
                events = dict(self._poller.poll(remaining_ms))
            if not events:
                self.reset()
                raise RequestTimeoutError(
                    f"no reply to {kind} request {rid} from {self.endpoint} within "
                    f"{self.timeout_s if timeout_s is None else timeout_s:.3g} s"
                )
            if self._monitor is not None and self._monitor in events:
                self._check_monitor(rid, during=True)
            if self._socket not in events:
                continue
            reply = decode_reply([f.buffer for f in self._socket.recv_multipart(copy=False)])
            if reply.id != rid:
                # Left over from an earlier call of this socket (e.g. a superseded stream); not ours.
                log.debug("dropping reply %s while waiting for %d", reply.id, rid)
                continue
            rtt_ms = (time.perf_counter() - start) * 1e3
            if reply.error is not None:
                raise error_from_info(reply.error, rid)
            return reply, rtt_ms

    def watch(self, timeout_s: float) -> bool | None:
        """Between calls (``watch_link``): wait up to ``timeout_s`` for the connection to close or open;
        False as soon as it closed, True when it opened, None when nothing changed."""
        if self._monitor is None:
            raise RuntimeError("watch needs a client made with watch_link=True")
        before = self.link_up
        if self._monitor.poll(max(0, int(timeout_s * 1e3))):
            self._drain_monitor(0)
            if self.link_up is not before:
                return self.link_up
        return None

    def _drain_monitor(self, rid: int) -> None:
        while self._monitor.poll(0):
            self._check_monitor(rid, during=False)

    def _check_monitor(self, rid: int, *, during: bool) -> None:
        from zmq.utils.monitor import recv_monitor_message

        event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
        if event["event"] & zmq.EVENT_CONNECTED:
            self.link_up = True
            return
        if event["event"] & zmq.EVENT_DISCONNECTED:
            self.link_up = False
            if during:
                self.reset()
                raise ConnectionLostError(
                    f"the connection to {self.endpoint} closed while request {rid} waited for its reply"
                )
            return
        if event["event"] & _AUTH_EVENTS:
            self.reset()
            raise UnauthorizedError(
                f"{self.endpoint} refused this client's CURVE key (handshake error {event['value']}); "
                "add its public key file to the server's authorized_keys_dir",
                request_id=rid,
            )

    def hello(self, *, timeout_s: float | None = None) -> PolicyInfo:
        """The policy's inputs, outputs, chunk length, control rate, device and versions."""
        reply, _ = self._call("hello", None, timeout_s)
        return policy_info_from_reply(reply)

    def infer(
        self,
        observation: Mapping[str, np.ndarray],
        *,
        reset: bool = False,
        task: str | None = None,
        prefix: np.ndarray | None = None,
        delay: int | None = None,
        execution_horizon: int | None = None,
        prefix_attention_schedule: str | None = None,
        max_guidance_weight: float | None = None,
        timeout_s: float | None = None,
    ) -> ActionChunk:
        """Send one observation (arrays exactly as ``hello`` lists the inputs), get its action chunk.

        ``reset``: the observation starts a new episode; a policy with observation history forgets
        this client's earlier frames. ``task``: the instruction, for a language policy (``hello``'s
        ``takes_task``; it needs one with every observation, and other policies refuse one).

        Real-time chunking (``hello``'s ``takes_prefix``; other policies refuse these): ``prefix``,
        the previous chunk's actions not yet executed, ``[steps, joints]`` in the action's joint order
        and units (sent as float32), and ``delay``, how many of them the robot executes while this
        chunk is computed; the new chunk then starts by continuing them. The guidance settings default
        to the bundle's (``hello``'s ``prefix_defaults``).
        """
        body: dict[str, Any] = {}
        if reset:
            body["reset"] = True
        if task is not None:
            body["task"] = task
        if prefix is not None:
            body["prefix"] = np.ascontiguousarray(prefix, dtype=np.float32)
        for key, value in (
            ("delay", delay),
            ("execution_horizon", execution_horizon),
            ("prefix_attention_schedule", prefix_attention_schedule),
            ("max_guidance_weight", max_guidance_weight),
        ):
            if value is not None:
                body[key] = value
        reply, rtt_ms = self._call("infer", observation, timeout_s, body or None)
        return actions_from_reply(reply, rtt_ms)

    def ping(self, *, timeout_s: float | None = None) -> Pong:
        reply, rtt_ms = self._call("ping", None, timeout_s)
        return pong_from_reply(reply, rtt_ms)

    def stats(self, *, timeout_s: float | None = None) -> StatsSnapshot:
        reply, _ = self._call("stats", None, timeout_s)
        return stats_from_reply(reply)

    def control(
        self,
        command: str,
        *,
        who: str = "",
        reason: str = "",
        latch: int | None = None,
        task: str = "",
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """``control.<command>`` (start, stop, estop, release, status, dump, teleop); returns the reply body.

        ``start`` may carry ``task``: the instruction a language policy follows from then on.
        ``release`` needs ``latch``: the e-stop latch it releases, as the ``control.estop`` reply or
        ``control.status`` (``estop.latch``) reported it; a newer e-stop makes the release refused.
        Refusals raise ``ControlRefusedError`` (why, e.g. a latched e-stop) or ``NoControlError``
        (the daemon does not drive an arm).
        """
        body: dict[str, Any] = {"who": who} if who else {}
        if reason:
            body["reason"] = reason
        if latch is not None:
            body["latch"] = latch
        if task:
            body["task"] = task
        reply, _ = self._call(f"control.{command}", None, timeout_s, body)
        return dict(reply.body)

    def teleop(self, command: str, *, timeout_s: float | None = None, **body: Any) -> tuple[dict[str, Any], float]:
        """``teleop.<command>`` (open, target, take_over, hand_back, episode_start/stop/discard, close)
        with its body keys (``session``, ``who``, ``seq``, ``positions``, ``task``); returns the reply
        body and the round trip in ms. Refusals raise ``SessionHeldError`` (another station holds the
        arm, named), ``NoSessionError`` (the session was closed or lost) or ``ControlRefusedError``."""
        reply, rtt_ms = self._call(f"teleop.{command}", None, timeout_s, body)
        return dict(reply.body), rtt_ms
