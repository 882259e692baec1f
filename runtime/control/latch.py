"""E-stop latches: every e-stop request is one, numbered; a release names the one it saw.

Shared by the loop (which takes latches at its next tick), the per-tick snapshot (the latch in
effect) and the ``control.*`` handler (which refuses a release naming a latch that is not the newest).
"""

from __future__ import annotations

from dataclasses import dataclass
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


def estop_status(latch: Latch | None) -> dict[str, Any]:
    """The ``estop`` map of status and of the ``control.estop`` reply; ``latch`` 0 when none is latched."""
    if latch is None:
        return {"latched": False, "reason": "", "latch": 0}
    return {"latched": True, "reason": latch.reason, "latch": latch.id}
