"""Which station holds the arm: one teleop session at a time, opened, kept alive by its messages,
closed or lost.

Only the server's I/O thread (and the daemon's main thread, through :meth:`TeleopSessions.expire`)
touches this; both run under the GIL and each change is one assignment, so no lock is needed.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Session:
    token: str
    who: str  # the operator's name and client id, for refusals and the log
    opened_at: float


class SessionHeld(Exception):
    """Another station holds the arm; the message names it."""


class NoSession(Exception):
    """The token is not the open session's."""


class TeleopSessions:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.current: Session | None = None
        self.last_heard = 0.0
        self.opened = 0
        self.refused = 0
        self.lost = 0

    def open(self, who: str, now: float) -> Session:
        held = self.current
        if held is not None and now - self.last_heard <= self.timeout_s:
            self.refused += 1
            raise SessionHeld(
                f"the arm is held by {held.who} (session open {now - held.opened_at:.0f} s, last heard "
                f"{(now - self.last_heard) * 1e3:.0f} ms ago); watch with control status, or ask them to close"
            )
        session = Session(secrets.token_hex(8), who, now)
        self.current = session
        self.last_heard = now
        self.opened += 1
        return session

    def check(self, token: str, now: float) -> Session:
        """The open session if ``token`` is its token; refreshes its deadline."""
        held = self.current
        # compared as bytes: compare_digest refuses a str with non-ASCII characters (a garbled token)
        if held is None or not secrets.compare_digest(held.token.encode(), token.encode()):
            holder = f"; the arm is held by {held.who}" if held is not None else "; no session is open"
            raise NoSession(f"session {token[:16]!r} is not the open teleop session (closed or lost){holder}")
        self.last_heard = now
        return held

    def close(self, token: str, now: float) -> Session:
        held = self.check(token, now)
        self.current = None
        return held

    def expire(self, now: float) -> Session | None:
        """End a session not heard from for ``timeout_s``; returns it (once) if it was lost now."""
        held = self.current
        if held is None or now - self.last_heard <= self.timeout_s:
            return None
        self.current = None
        self.lost += 1
        return held
