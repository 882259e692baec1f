"""``teleop.*`` requests, answered on the server's I/O thread.

Like ``control.*``, nothing here moves the arm: a target goes into the loop's one-slot handoff, a
take-over or hand-back is queued for the loop's next tick, an episode request for the recorder
hook. One station holds the arm at a time (:class:`TeleopSessions`); another station asking gets
``session_held`` naming the holder, a request with a stale token ``no_session``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from runtime.arm_control.interface import ArmControl
from runtime.arm_control.teleop_session import NoSession, SessionHeld, TeleopSessions
from runtime.control.latch import ControlRefused
from runtime.control.mode import Mode
from runtime.protocol.errors import BadRequestError, ControlRefusedError, NoSessionError, SessionHeldError
from runtime.protocol.messages import TeleopRequest

log = logging.getLogger(__name__)


class TeleopControl:
    def __init__(self, loop: ArmControl, clock: Callable[[], float] = time.monotonic) -> None:
        self.loop = loop
        self.sessions = TeleopSessions(loop.teleop.config.session_timeout_ms / 1e3)
        #: the session whose last command was a hand-back (its close must not stop the policy)
        self._handed_back: str | None = None
        #: set while the daemon reads a leader of its own: stations are refused, naming it
        self.local: str | None = None
        self._clock = clock

    def holder(self) -> str | None:
        """Who holds the arm (for refusing other stations' ``control.start``/``stop``), or None."""
        self.expire(self._clock())
        held = self.sessions.current
        return held.who if held is not None else None

    def expire(self, now: float) -> None:
        """Lose a session not heard from in time: the arm goes to hold. Called per request and per daemon tick."""
        lost = self.sessions.expire(now)
        if lost is None:
            return
        self.loop.teleop.clear()
        self.loop.events.emit(
            logging.WARNING,
            "teleop: session of %s lost (no message for %.0f ms); arm to hold",
            lost.who,
            self.sessions.timeout_s * 1e3,
        )
        if self.loop.snapshot().mode is Mode.TELEOP and self._handed_back != lost.token:
            self.loop.request("stop", f"{lost.who} (session lost)")
        self._handed_back = None

    def handle(self, request: TeleopRequest, client: str) -> dict[str, Any]:
        now = self._clock()
        self.expire(now)
        loop = self.loop
        kind = request.kind
        if kind == "teleop.open":
            who = f"{request.who} (client {client})" if request.who else f"client {client}"
            if self.local is not None:
                raise SessionHeldError(
                    f"{kind}: the arm is driven by the daemon's own leader ({self.local}); "
                    "switch with control teleop / control start on the robot",
                    field="kind",
                    request_id=request.id,
                )
            try:
                session = self.sessions.open(who, now)
            except SessionHeld as e:
                raise SessionHeldError(f"{kind}: {e}", field="kind", request_id=request.id) from None
            loop.teleop.clear()
            loop.events.emit(logging.INFO, "teleop: session opened by %s", who)
            return {
                "session": session.token,
                "joints": list(loop.names),
                "rate_hz": loop.rate_hz,
                "deadman_ms": loop.teleop.config.deadman_ms,
                "session_timeout_ms": self.sessions.timeout_s * 1e3,
                "mode": loop.snapshot().mode.value,
            }
        try:
            session = self.sessions.check(request.session, now)
        except NoSession as e:
            raise NoSessionError(f"{kind}: {e}", field="body.session", request_id=request.id) from None
        who = session.who
        if kind == "teleop.target":
            if len(request.positions) != len(loop.names):
                raise BadRequestError(
                    f"{kind} body.positions: expected {len(loop.names)} numbers ({', '.join(loop.names)}), "
                    f"got {len(request.positions)}",
                    field="body.positions",
                    expected=f"{len(loop.names)} numbers",
                    received=f"{len(request.positions)} numbers",
                    request_id=request.id,
                )
            accepted = loop.teleop.put(request.seq, np.array(request.positions, dtype=np.float64), now)
            return self._state(accepted, request.seq, now)
        if kind == "teleop.take_over":
            self._command("teleop", who, request)
            self._handed_back = None
        elif kind == "teleop.hand_back":
            self._command("start", who, request)
            self._handed_back = session.token
        elif kind.startswith("teleop.episode_"):
            if loop.episodes is None:
                raise ControlRefusedError(
                    f"{kind}: recording is off on this daemon; set [recording] dataset_dir in its config",
                    field="kind",
                    request_id=request.id,
                )
            op = kind.removeprefix("teleop.episode_")
            loop.episodes.request(op, request.task, who)
        elif kind == "teleop.close":
            self.sessions.close(request.session, now)
            loop.teleop.clear()
            loop.events.emit(logging.INFO, "teleop: session of %s closed", who)
            # a hand-back queued just before the close is not undone by it: the mode still reads
            # teleop until the loop's next tick carries the hand-back out
            if loop.snapshot().mode is Mode.TELEOP and self._handed_back != session.token:
                loop.request("stop", f"{who} (session closed)")
            self._handed_back = None
        return {"accepted": True, "mode": loop.snapshot().mode.value}

    def _command(self, command: str, who: str, request: TeleopRequest) -> None:
        try:
            self.loop.check(command)
        except ControlRefused as e:
            raise ControlRefusedError(f"{request.kind}: {e}", field="kind", request_id=request.id) from None
        self.loop.request(command, who)

    def _state(self, accepted: bool, seq: int, now: float) -> dict[str, Any]:
        loop = self.loop
        snap = loop.snapshot()
        return {
            # when the loop reads the slot next: the station times its leader reads to land just before
            # (modulo the period: the tick after the one published may be running already)
            "next_tick_ms": round(((snap.next_due - now) % loop.period) * 1e3, 3),
            "seq": seq,
            "accepted": accepted,
            "mode": snap.mode.value,
            "phase": snap.teleop_phase,
            "estop": loop.estop_reason or "",
            "clamps": sum(snap.safety.values()),
            "recording": loop.episodes is not None and loop.episodes.active,
            # targets (any station's) that reached this daemon before a tick was due but the loop only
            # after that tick read its target: the hop past the reply, which the round trip does not see
            "late": snap.teleop_late,
        }

    def status(self) -> dict[str, Any]:
        held = self.sessions.current
        return {
            "holder": held.who if held is not None else None,
            "opened": self.sessions.opened,
            "refused": self.sessions.refused,
            "lost": self.sessions.lost,
        }
