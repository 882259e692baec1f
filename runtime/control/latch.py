"""E-stop latches: every e-stop request is one, numbered; a release names the one it saw.

Shared by the loop (which takes latches at its next tick), the per-tick snapshot (the latch in
effect) and the ``control.*`` handler (which refuses a release naming a latch that is not the newest).
:class:`LatchNumbers` is the one numbering, used where a latch is made: the loop's mailbox (faults,
signals in the arm process, requests the daemon sent) and the daemon's end of the arm link (which
answers an operator's ``control estop`` with the number before the arm has taken it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any


class ControlRefused(Exception):
    """A control request that cannot be carried out now; the message says why."""


@dataclass(frozen=True, slots=True)
class Latch:
    """One e-stop request: ``id`` numbers them from 1 since the loop was made, so a release can name
    the one its operator saw; ``requested_at`` is on the loop's clock."""

    id: int
    reason: str
    requested_at: float


class StaleLatch(ControlRefused):
    """A release naming an e-stop latch that is not the current one: another e-stop came since."""

    def __init__(self, named: int, current: Latch) -> None:
        why = "another e-stop came since" if named < current.id else "no such latch was given out yet"
        super().__init__(
            f"the release names e-stop latch {named}, but the latch now is {current.id} ({current.reason}): "
            f"{why}; check the arm, then release latch {current.id}"
        )
        self.named = named
        self.current = current


LATCH_ID = attrgetter("id")


class LatchNumbers:
    """Numbers e-stop latches from 1, each after every number given out or heard of before.

    :meth:`issue` makes a latch here (``next`` on a counter is one C call: safe from any thread and
    from a signal handler); ``seen`` is the newest number the caller knows was given out elsewhere
    (the arm's own latches, for the daemon's end of the link), and the latch is numbered after it.
    :meth:`claim` takes a latch numbered elsewhere (the daemon's, for the arm process): it keeps its
    number unless that number or a newer one was given out here already (a fault latched while the
    request was on its way), then it is numbered after it, so a release naming the number the
    requester heard is refused as stale and never applied to the other latch. :meth:`claim` and a
    renumbering :meth:`issue` are for one thread: the loop's (claim), the link's callers (issue)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._highest = 0

    def issue(self, reason: str, now: float, seen: int = 0) -> Latch:
        n = next(self._ids)
        if n <= seen:
            n = seen + 1
            self._ids = itertools.count(n + 1)
        self._highest = max(self._highest, n)
        return Latch(n, reason, now)

    def claim(self, latch: Latch) -> Latch:
        if latch.id <= self._highest:
            latch = replace(latch, id=self._highest + 1)
        self._highest = latch.id
        self._ids = itertools.count(latch.id + 1)
        return latch


def estop_status(latch: Latch | None) -> dict[str, Any]:
    """The ``estop`` map of status and of the ``control.estop`` reply; ``latch`` 0 when none is latched."""
    if latch is None:
        return {"latched": False, "reason": "", "latch": 0}
    return {"latched": True, "reason": latch.reason, "latch": latch.id}
