"""What the runner hands every tick to while ``[recording]`` is on: an :class:`EpisodeSink`.

In the arm process it is the arm side's tap, which sends each tick's record to the daemon with the
snapshot; there :class:`runtime.arm_control.episodes.EpisodeTap` adds the camera frames and writes
the episode. The runner knows only this protocol.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class EpisodeSink(Protocol):
    def tick(
        self,
        now: float,
        present: np.ndarray | None,
        goal: np.ndarray | None,
        requested: np.ndarray | None,
        source: str,
        intervention: bool,
    ) -> None:
        """One tick: the joints read, the goal written (or held), what was asked before the envelope,
        the goal's source and whether an operator had taken over from the policy."""

    def end(self) -> None:
        """The loop shut down or an e-stop ended motion: an open episode ends with what it has."""

    def status(self) -> dict[str, Any] | None:
        """``control status``'s ``recording`` map, or None where the episode is known elsewhere."""
