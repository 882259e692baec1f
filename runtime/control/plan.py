"""The policy's plan: the action queue, and the generation that tells a current chunk from a stale one.

Dropping the plan (:meth:`Plan.drop`) empties the queue and bumps the generation, so a chunk still in
flight for the old plan is discarded when it arrives: at a stop, a hold, an e-stop, a hand-over, a
rest, a stale stream and a new start. Written once here, so no path forgets half of it.
"""

from __future__ import annotations

from runtime.control.actions import ActionQueue


class Plan:
    def __init__(self, queue: ActionQueue) -> None:
        self.queue = queue
        #: bumped each time the plan is dropped; a chunk asked for under another one is stale
        self.gen = 0
        #: when the chunk in flight was asked for (loop clock), None when none is
        self.inflight_since: float | None = None
        #: a chunk of this run was merged (no action due after that is starvation, before it priming)
        self.got_first = False
        #: the next observation starts the policy's observation history (a new run)
        self.new_history = True

    def drop(self) -> None:
        """Forget the queued actions and whatever chunk is in flight for them."""
        self.gen += 1
        self.queue.clear()

    def restart(self) -> None:
        """A new run (``control start``): nothing queued, no chunk yet, a new observation history."""
        self.drop()
        self.got_first = False
        self.new_history = True

    def forget_request(self) -> None:
        """The chunk in flight is given up (it stalled): its answer will be stale, a new one may be asked."""
        self.gen += 1
        self.inflight_since = None

    def is_current(self, gen: int) -> bool:
        return gen == self.gen
