"""The operator's station: reads the leader, streams targets to the daemon at the control rate, keeps
a one-line status and turns keys into requests.

Each target is read and sent the lead before one of the loop's ticks (:mod:`runtime.teleop.lead`: from
the trips the station measures, on its own clock); the station phase-locks to the loop with the
``next_tick_ms`` each reply carries, and counts the targets that missed the tick they were placed before.

Everything here is plain logic over a :class:`PolicyClient` and a :class:`Leader`, so it is tested
without a terminal; ``runtime.teleop.terminal`` supplies the keys and draws the line.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drivers.errors import BusError
from runtime.client import PolicyClient, RequestTimeoutError
from runtime.protocol.errors import NoSessionError, ServerError
from runtime.teleop.config import LEAD_MS
from runtime.teleop.lead import Lead
from runtime.teleop.leader import Leader

log = logging.getLogger(__name__)

KEYS: dict[str, str] = {
    "t": "take over",
    "h": "hand back",
    "e": "e-stop",
    " ": "e-stop",
    "r": "episode start",
    "s": "episode stop",
    "d": "episode discard",
    "q": "quit",
}
HELP = "keys: t take over, h hand back, e/space e-stop, r record, s save, d discard, q quit"


@dataclass
class StationStatus:
    mode: str = "?"
    phase: str = ""
    estop: str = ""
    clamps: int = 0
    recording: bool = False
    rtt_ms: float = 0.0
    sent: int = 0
    timeouts: int = 0
    message: str = ""
    next_tick_ms: float | None = None
    leader_failures: int = 0
    #: the lead in use, and the targets that reached the loop after the tick they were placed before
    lead_ms: float = LEAD_MS
    misses: int = 0
    #: how long the last leader read took, from when it was due
    read_ms: float = 0.0

    def line(self) -> str:
        mode = self.mode + (f" ({self.phase})" if self.phase else "")
        estop = f"E-STOP: {self.estop}" if self.estop else "no e-stop"
        rec = "REC" if self.recording else "not recording"
        text = (
            f"{mode:<20} rtt {self.rtt_ms:5.1f} ms  lead {self.lead_ms:4.1f} ms  misses {self.misses}"
            f"  clamps {self.clamps:<5d} {estop}  {rec}  sent {self.sent}  timeouts {self.timeouts}"
        )
        return text + (f"  | {self.message}" if self.message else "")


class Station:
    """One station holding (or trying to hold) the daemon's arm."""

    def __init__(
        self,
        client: PolicyClient,
        leader: Leader,
        *,
        who: str = "",
        task: str = "teleop",
        lead_ms: float = LEAD_MS,
        fixed_lead: bool = False,
    ) -> None:
        """``lead_ms``: how long before the loop's tick the leader is read and the target sent until the
        trips are measured (:class:`~runtime.teleop.lead.Lead`), and for good with ``fixed_lead``; a
        target that reaches the loop after the tick waits a whole period for the next. The station
        phase-locks to the loop with the ``next_tick_ms`` of each reply."""
        self.client = client
        self.lead = Lead(lead_ms, fixed=fixed_lead)
        self._loop_tick_at: float | None = None
        #: the daemon's count of late targets in the last reply (None: none since the session opened)
        self._late_seen: int | None = None
        self.leader = leader
        self.who = who
        self.task = task
        self.session = ""
        self.rate_hz = 30.0
        self.seq = 0
        self.status = StationStatus(lead_ms=self.lead.configured_ms)
        self.quit = False

    @property
    def lead_s(self) -> float:
        """The lead in use, in seconds."""
        return self.lead.ms(1.0 / self.rate_hz) / 1e3

    def open(self) -> dict[str, Any]:
        """Open the session (raises ``SessionHeldError`` naming the holder if another station has it)."""
        body, _ = self.client.teleop("open", who=self.who)
        self.session = str(body["session"])
        self.rate_hz = float(body["rate_hz"])
        self._late_seen = None  # the daemon's count is the loop's: this session's start from its next reply
        joints = [str(j) for j in body["joints"]]
        order = getattr(self.leader, "order", None)
        if order is not None:
            order(joints)
        self.status.mode = str(body.get("mode", "?"))
        self.status.message = f"session open, {len(joints)} joints at {self.rate_hz:g} Hz"
        return body

    def step(self, placed_at: float | None = None) -> None:
        """Read the leader and send one target; a lost session is re-opened at the next step.
        ``placed_at``: when this read was due (:meth:`next_send_at`), so that waking late for it counts
        in the read the lead is measured from, as it delays the target (None: from the read itself)."""
        if not self.session:
            placed_at = None  # the open took a round trip of its own: this target was not placed
            try:
                self.open()
            except ServerError as e:
                self.status.message = str(e)
                return
            except RequestTimeoutError as e:
                self.status.timeouts += 1
                self.status.message = str(e)
                return
        read_at = time.monotonic()
        if placed_at is not None:
            read_at = min(read_at, placed_at)
        try:
            positions = self.leader.read()
        except BusError as e:  # a glitch on the leader's bus: no target this tick; the deadman covers a long one
            self.status.leader_failures += 1
            self.status.message = f"leader read failed: {e}"
            return
        self.seq += 1
        sent_at = time.monotonic()
        # the tick this target is for: the loop's first after the read was due (None: not locked yet)
        aimed = self._tick_after(read_at)
        try:
            body, rtt = self.client.teleop(
                "target", session=self.session, seq=self.seq, positions=[float(v) for v in positions]
            )
        except NoSessionError as e:
            self.session = ""
            self.status.message = f"session lost: {e.message}"
            return
        except RequestTimeoutError:
            self.status.timeouts += 1
            self.status.message = "no reply from the daemon"
            return
        s = self.status
        s.sent += 1
        s.rtt_ms = rtt
        s.mode = str(body.get("mode", "?"))
        s.phase = str(body.get("phase", ""))
        s.estop = str(body.get("estop", ""))
        s.clamps = int(body.get("clamps", 0))
        s.recording = bool(body.get("recording", False))
        missed = 0
        next_tick = body.get("next_tick_ms")
        if isinstance(next_tick, (int, float)):
            s.next_tick_ms = float(next_tick)
            # the server measured from when it got the request: about half the round trip after sending
            tick_at = sent_at + rtt / 2e3 + next_tick / 1e3
            # the loop's next tick is a period (or more) after the one aimed at: the daemon got it too late
            if aimed is not None and tick_at - aimed > 0.5 / self.rate_hz:
                missed += 1
            self._loop_tick_at = tick_at
        late = body.get("late")
        if isinstance(late, int) and not isinstance(late, bool):
            # in time at the daemon, but the loop took it after its tick: the daemon counts those
            if self._late_seen is not None and late > self._late_seen:
                missed += late - self._late_seen
            self._late_seen = late
        s.read_ms = (sent_at - read_at) * 1e3
        self.lead.add(s.read_ms, rtt, missed)
        s.misses = self.lead.misses
        s.lead_ms = self.lead.ms(1.0 / self.rate_hz)

    def _tick_after(self, t: float) -> float | None:
        """The loop's first tick at or after ``t`` as the phase lock places it (None: not locked)."""
        tick_at = self._loop_tick_at
        if tick_at is None:
            return None
        period = 1.0 / self.rate_hz
        return tick_at + math.ceil((t - tick_at) / period) * period

    def next_send_at(self, now: float) -> float:
        """When to read the leader and send next: the lead in use before one of the loop's ticks, so
        the loop acts on a leader pose read moments ago (unlocked: one period from now)."""
        period = 1.0 / self.rate_hz
        tick_at = self._loop_tick_at
        if tick_at is None:
            return now + period
        at = tick_at - self.lead_s
        # the next such moment at least half a period away (never two targets for one tick)
        k = math.ceil((now + period / 2 - at) / period)
        return at + k * period

    def key(self, ch: str) -> str:
        """Carry out the key's action; returns what was done (shown in the status line)."""
        action = KEYS.get(ch.lower() if ch != " " else ch)
        if action is None:
            return ""
        try:
            if action == "quit":
                self.quit = True
            elif action == "e-stop":
                self.client.control("estop", who=self.who or "teleop station", reason="e-stop from the teleop station")
            elif not self.session:
                raise NoSessionError("no session is open")
            elif action == "take over":
                self.client.teleop("take_over", session=self.session)
            elif action == "hand back":
                self.client.teleop("hand_back", session=self.session)
            elif action == "episode start":
                self.client.teleop("episode_start", session=self.session, task=self.task)
            elif action == "episode stop":
                self.client.teleop("episode_stop", session=self.session)
            elif action == "episode discard":
                self.client.teleop("episode_discard", session=self.session)
        except ServerError as e:
            self.status.message = f"{action} refused: {e.message}"
            return self.status.message
        except RequestTimeoutError:
            self.status.message = f"{action}: no reply from the daemon"
            return self.status.message
        self.status.message = action
        return action

    def close(self) -> None:
        if self.session:
            try:
                self.client.teleop("close", session=self.session)
            except (ServerError, RequestTimeoutError) as e:
                log.warning("teleop close: %s", e)
            self.session = ""

    def run(self, keys: Callable[[], str | None], show: Callable[[str], None], *, max_steps: int = 0) -> None:
        """Stream at the control rate until ``q`` (or ``max_steps`` targets), reading keys between ticks."""
        if not self.session:
            self.open()
        steps = 0
        at = time.monotonic()
        while not self.quit and (max_steps <= 0 or steps < max_steps):
            time.sleep(max(0.0, at - time.monotonic()))
            while (ch := keys()) is not None:
                self.key(ch)
            self.step(at)
            steps += 1
            show(self.status.line())
            at = self.next_send_at(time.monotonic())
