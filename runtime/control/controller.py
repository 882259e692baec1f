"""The controller: what the arm should do this tick, decided from what it read and what was asked.

:meth:`Controller.step` takes the tick's joint reading (``present``; None when the read failed) and
the time, takes what other threads queued in the :class:`~runtime.control.mailbox.Mailbox` (e-stops
first, then commands), merges a finished chunk, and returns a :class:`Decision`: the one goal to write
this tick (made by the safety envelope, the only maker of a :class:`~runtime.control.safety.Goal`) and
the request it came from. It writes nothing: the runner (:class:`~runtime.control.loop.ControlLoop`)
writes the decision's goal, for every source alike (policy, teleop, hand-over, rest, hold, e-stop
hold), and reports back what the bus did (:meth:`Controller.written`, :meth:`Controller.bus_failed`,
:meth:`Controller.servo_fault`). The one thing it asks the bus for directly is torque, which a start
or take-over needs before it is accepted and an e-stop or stall action may turn off.

The mode machine (:class:`~runtime.control.mode.Mode`), dropping the plan (:class:`~runtime.control.plan.Plan`),
stall and deadman (:class:`~runtime.control.stall.Stall`), rest and hand-over are written here, once.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from drivers.calibration import Calibration
from drivers.errors import BusError
from runtime.bundle.manifest import Manifest
from runtime.control.actions import ActionQueue
from runtime.control.config import ControlConfig, rtc_in_effect
from runtime.control.events import EventLog
from runtime.control.feed import PolicyFeed, Prefix, state_input
from runtime.control.handoff import Latest
from runtime.control.latch import LATCH_ID, ControlRefused, Latch
from runtime.control.mailbox import (
    Command,
    Mailbox,
    Release,
    Shutdown,
    Start,
    Stop,
    TakeOver,
    check_command,
    newest_latch,
    word,
)
from runtime.control.mode import MOVING, Mode, Source, source_of
from runtime.control.plan import Plan
from runtime.control.safety import Goal, SafetyEnvelope
from runtime.control.stall import Stall
from runtime.control.target import TeleopTarget
from runtime.teleop.config import TeleopConfig

#: the chunks whose measured latency the inference delay of a real-time chunking request is the worst of
DELAY_WINDOW = 20


class Torque(Protocol):
    """The bus, as far as the controller reaches it."""

    def enable_torque(self) -> None: ...
    def disable_torque(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ChunkResult:
    """What the inference worker hands back: ``gen`` is the plan it was asked for (a newer plan
    discards it), ``obs_tick`` the tick its observation was taken at."""

    gen: int
    obs_tick: int
    actions: np.ndarray | None
    error: str | None


@dataclass(frozen=True, slots=True)
class Decision:
    """One tick's outcome. ``goal``: what to write (None: nothing); ``requested``: what the policy or
    the station asked for before the envelope (None for holds and rests); ``shutdown``: a shutdown was
    taken, the runner runs its sequence (:meth:`Controller.begin_shutdown`) from here."""

    goal: Goal | None
    requested: np.ndarray | None = None
    shutdown: bool = False


class Controller:
    def __init__(
        self,
        names: tuple[str, ...],
        calibration: Calibration,
        manifest: Manifest,
        config: ControlConfig,
        policy: PolicyFeed,
        torque: Torque,
        *,
        events: EventLog,
        clock: Callable[[], float],
        teleop: TeleopConfig,
        period: float,
    ) -> None:
        self.names = names
        self.config = config
        self.policy = policy
        self.events = events
        self._torque = torque
        self._clock = clock
        self.period = period
        chunk = manifest.chunk_length
        self.n_steps = min(config.n_action_steps or chunk, chunk)
        self.refill_at = math.ceil(config.chunk_size_threshold * self.n_steps)
        # A policy that looks at several observations sees one per tick, as in LeRobot's select_action:
        # every running tick that does not ask for a chunk still hands its observation over.
        self._observe_every_tick = manifest.observation_history > 1
        state_input(manifest)  # the joints fill exactly one input: refused here, not at the first ask
        # Real-time chunking: each request carries the plan's leftover, up to the policy's chunk size,
        # and the delay, at most one short of the steps a chunk serves (the server's bound).
        self.rtc = rtc_in_effect(config, manifest)
        self._prefix_steps = manifest.rtc.chunk_size if manifest.rtc is not None else 0
        self._max_delay = chunk - 1
        n = len(names)
        self.queue = ActionQueue(n, horizon=4 * chunk, aggregate=config.aggregate, coeff=config.ensemble_coeff)
        self.envelope = SafetyEnvelope(names, calibration, config.safety, events)
        self.teleop = TeleopTarget(n, teleop, period)
        #: commands and e-stops from other threads, taken at the next tick (e-stops first)
        self.mailbox = Mailbox(clock)
        #: why the flight recorder should be written (e-stops, stall actions), for the daemon
        self.dump_requests: deque[str] = deque()
        #: counted here and by the runner (ticks, writes): one set of counters in the snapshot
        self.counters: Counter[str] = Counter()
        self.mode = Mode.IDLE
        #: the e-stop in effect, and the newest latch id taken (set by the tick only)
        self.latch: Latch | None = None
        self.latches_taken = 0
        self.intervention = False
        self.last_teleop_seq = -1
        self.arm_error = ""
        self.hold_goal: np.ndarray | None = None
        self.last_latency_ticks = math.nan
        self.latency_ring = np.full(256, np.nan)
        self.latencies_measured = 0
        #: False once torque could not be turned off when it had to be
        self.torque_ok = True
        self.result: Latest[ChunkResult] = Latest()
        self._present: np.ndarray | None = None
        self._last_goal: np.ndarray | None = None
        self._rest_target: np.ndarray | None = None
        self._plan = Plan(self.queue)
        self._stalled = Stall(config.safety.stall_timeout_s)
        self._bus_fail_run = 0
        self._goal: Goal | None = None  # a hold a command or an e-stop made this tick
        self._observing: tuple[str, int] | None = None  # what observe_now hands the policy

    # --- the tick ------------------------------------------------------------------------------

    def step(self, k: int, now: float, present: np.ndarray | None) -> Decision:
        """Decide tick ``k``: e-stops, then commands, then a finished chunk, then this tick's goal."""
        if present is not None:
            self._present = present
        self._goal = None
        self._take_estops(present)
        while (command := self.mailbox.take_command()) is not None:
            if isinstance(command, Shutdown):
                return Decision(self._goal, shutdown=True)
            self._command(command, present)
        self._collect(k, present)
        goal: Goal | None = None
        requested: np.ndarray | None = None
        if present is not None:
            if self.mode is Mode.RUNNING:
                goal, requested = self._running(k, now, present)
            elif self.mode is Mode.TELEOP:
                goal, requested = self._teleop(now, present)
            elif self.mode is Mode.RESTING:
                goal = self._resting()
        return Decision(goal if goal is not None else self._goal, requested)

    def observe_now(self, present: np.ndarray | None) -> None:
        """After the tick's write and read: hand the policy this fresh reading, if the step wanted a
        chunk (or a history frame). A failed read (None) asks again at the next tick."""
        if present is not None:
            self._present = present  # holds made before the next step (shutdown) start from here
        observing, self._observing = self._observing, None
        if observing is None or present is None or self.mode is not Mode.RUNNING:
            return
        kind, k = observing
        if kind == "ask":
            self._ask(k, present)
        else:
            self._observe(present)

    def written(self, goal: Goal) -> None:
        """The runner wrote ``goal``: the next steps and holds start from it."""
        self._last_goal = goal

    def read_ok(self) -> None:
        self._bus_fail_run = 0
        self.arm_error = ""

    def servo_fault(self, error: BusError) -> None:
        """A servo reported a fault (overload, overheat, voltage): latched as an e-stop naming it."""
        self.counters["servo_faults"] += 1
        self.arm_error = str(error)
        self._fault_estop(f"servo fault: {error}")

    def bus_failed(self, what: str, error: BusError) -> None:
        """A sync read or write failed; ``max_bus_failures`` in a row latch an e-stop."""
        self.counters[f"bus_{what}_failures"] += 1
        self._bus_fail_run += 1
        self.arm_error = str(error)
        if self._bus_fail_run == 1:
            self.events.emit(logging.ERROR, "control: arm %s failed: %s", what, error)
        limit = self.config.safety.max_bus_failures
        if self._bus_fail_run >= limit:
            self._fault_estop(f"{self._bus_fail_run} bus failures in a row (last: {error})")

    # --- asked from other threads ----------------------------------------------------------------

    def check(self, command: str, latch: int = 0) -> None:
        """Raise :class:`ControlRefused` when ``command`` cannot be carried out now; a release of any
        latch but the newest (``latch``) raises :class:`StaleLatch`."""
        blocked = self.policy.blocked(self._clock()) if command == "start" else None
        check_command(command, latch, self.estop, self.arm_error, blocked.reason if blocked is not None else None)

    # --- shutdown (the runner's sequence) ----------------------------------------------------------

    def begin_shutdown(self) -> tuple[Goal | None, str]:
        """Stop motion and hold: (the hold to write, what follows it: ``rest`` ticks
        (:meth:`rest_step`), ``torque_off`` (:meth:`end_with_torque_off`, after the hold is written) or "")."""
        was = self.mode
        self._goal = None
        if was is Mode.HOLDING and self.hold_goal is not None and self._present is not None:
            # already holding (a stop, a rest reached): that goal, not where the arm lags behind it
            self._goal = self.envelope.hold_goal(self.hold_goal, self._present)
        elif was in MOVING:
            self._hold_present()
        if was in MOVING or was is Mode.HOLDING:
            action = self.config.safety.shutdown_action
            if action == "rest":
                self._start_rest()
                return self._goal, "rest" if self.mode is Mode.RESTING else ""
            if action == "torque_off":
                return self._goal, "torque_off"
        return self._goal, ""

    def end_with_torque_off(self) -> None:
        self._torque_off()
        self.mode = Mode.IDLE

    def rest_step(self, present: np.ndarray | None) -> Goal | None:
        """One tick of the shutdown rest: the goal toward the rest pose (None: nothing to write)."""
        if present is None:
            return None
        self._present = present
        return self._resting()

    def hold_present(self) -> Goal | None:
        """Hold where the arm is (the runner's answer to a bug in the tick); the hold to write. None for an
        idle arm: its torque is off, there is nothing to hold and it stays idle."""
        self._goal = None
        if self.mode is Mode.IDLE:
            return None
        self._hold_present()
        return self._goal

    # --- e-stops, commands, chunks, goals -----------------------------------------------------------

    @property
    def estop(self) -> Latch | None:
        """The newest e-stop, requested (effective at the next tick) or in effect; None when released."""
        # Read the requests before the latch: the tick sets the latch before it drops the requests.
        pending = self.mailbox.pending_estop()
        return newest_latch(pending, self.latch)

    @property
    def estop_reason(self) -> str | None:
        latch = self.estop
        return latch.reason if latch is not None else None

    def _fault_estop(self, reason: str) -> None:
        # The loop's own checks fail again every tick while the fault lasts: a latch per tick would
        # leave nothing a release could name. Released while it lasts, the fault latches again.
        if self.estop is None:
            self.mailbox.estop(reason)

    def _take_estops(self, present: np.ndarray | None) -> None:
        requests = self.mailbox.estop_requests()
        if not requests:
            return
        newest = max(requests, key=LATCH_ID)
        self.latches_taken = max(self.latches_taken, newest.id)
        if self.latch is None or newest.id > self.latch.id:
            self._enter_estop(present, newest)
        self.mailbox.drop_estops(len(requests))  # after the latch is set: see estop

    def _enter_estop(self, present: np.ndarray | None, latch: Latch) -> None:
        again = self.latch is not None
        self.latch = latch
        after_ms = (self._clock() - latch.requested_at) * 1e3
        self.counters["estops"] += 1
        if again:
            # The arm stopped at the first latch; the new one only makes a release of that one stale.
            self.events.emit(
                logging.ERROR,
                "E-STOP latched again (latch %d): %s; %.1f ms after the request; release with: "
                "lerobot-runtime control release",
                latch.id,
                latch.reason,
                after_ms,
            )
            return
        previous = self.mode
        self.mode = Mode.ESTOPPED
        self._plan.drop()
        action = self.config.safety.estop_action
        where = present if present is not None else self._present
        if action == "torque_off":
            self._torque_off()
        elif where is not None and previous is not Mode.IDLE:
            held = self.envelope.hold_goal(where, where)
            self.hold_goal = held.copy()
            self._goal = held
        self.events.emit(
            logging.ERROR,
            "E-STOP latched (latch %d): %s; %s %.1f ms after the request (mode was %s); "
            "release with: lerobot-runtime control release",
            latch.id,
            latch.reason,
            _estop_effect(action, previous),
            after_ms,
            previous,
        )
        self.dump_requests.append("estop")

    def _command(self, cmd: Command, present: np.ndarray | None) -> None:
        command, who = word(cmd), cmd.who
        latch = cmd.latch if isinstance(cmd, Release) else 0
        try:
            self.check(command, latch)
            if present is None and isinstance(cmd, Start):
                raise ControlRefused(f"the arm did not answer this tick: {self.arm_error}")
        except ControlRefused as e:
            self.events.emit(logging.WARNING, "control %s (asked by %s) refused: %s", command, who or "?", e)
            return
        if isinstance(cmd, TakeOver):
            self._take_over(who, present)
        elif isinstance(cmd, Start):
            assert present is not None
            if self.mode is Mode.IDLE:
                try:
                    self._torque.enable_torque()
                except BusError as e:
                    self.events.emit(logging.ERROR, "control start: torque on failed: %s", e)
                    return
            self._plan.restart()
            self.envelope.reset(present)
            self._last_goal = present.copy()
            self._stalled.clear()
            was = self.mode
            self.mode = Mode.RUNNING
            self.intervention = False
            self.counters["starts"] += 1
            self.events.emit(
                logging.INFO, "control: source policy (was %s), motion started (asked by %s)", was, who or "?"
            )
        elif isinstance(cmd, Stop):
            if self.mode in MOVING:
                self._hold_present()
            self.events.emit(logging.INFO, "control: motion stopped, holding (asked by %s)", who or "?")
        elif isinstance(cmd, Release):
            self.latch = None
            held = self.hold_goal is not None and self.config.safety.estop_action == "hold"
            self.mode = Mode.HOLDING if held else Mode.IDLE
            self.events.emit(
                logging.WARNING, "control: e-stop latch %d released by %s; arm %s", latch, who or "?", self.mode
            )

    def _take_over(self, who: str, present: np.ndarray | None) -> None:
        """Source ``teleop``: the hand-over starts from the last goal written (or the present pose)."""
        if present is None:
            self.events.emit(
                logging.WARNING, "control teleop (asked by %s) refused: the arm did not answer", who or "?"
            )
            return
        was = self.mode
        if was is Mode.TELEOP:
            return
        if was is Mode.IDLE:
            try:
                self._torque.enable_torque()
            except BusError as e:
                self.events.emit(logging.ERROR, "control teleop: torque on failed: %s", e)
                return
            self.envelope.reset(present)
            self._last_goal = present.copy()
        elif self._last_goal is None or was is not Mode.RUNNING:
            self.envelope.reset(present)
            self._last_goal = present.copy()
        # A chunk in flight is for the policy's plan, which ends here.
        self._plan.drop()
        self.intervention = was is Mode.RUNNING
        self._stalled.clear()
        self.teleop.begin()
        self.mode = Mode.TELEOP
        self.counters["takeovers"] += 1
        self.events.emit(
            logging.INFO,
            "control: source teleop (was %s), %s hand-over (asked by %s)",
            was,
            self.teleop.config.handover,
            who or "?",
        )

    def _hold_present(self) -> None:
        self._plan.drop()
        where = self._present
        if where is not None:
            held = self.envelope.hold_goal(where, where)
            self.hold_goal = held.copy()
            self._goal = held
        self.mode = Mode.HOLDING

    def _torque_off(self) -> None:
        try:
            self._torque.disable_torque()
        except BusError as e:
            self.events.emit(logging.CRITICAL, "control: torque off FAILED: %s; check the arm by hand", e)
            self.torque_ok = False
            return
        self.hold_goal = None
        self.counters["torque_offs"] += 1

    def _collect(self, k: int, present: np.ndarray | None) -> None:
        result = self.result.take()
        if result is None:
            since = self._plan.inflight_since
            if since is not None and self._clock() - since > self.config.safety.stall_timeout_s:
                self.counters["inference_stalls"] += 1
                self.events.emit(
                    logging.ERROR,
                    "control: no chunk %.1f s after asking; dropping that request",
                    self._clock() - since,
                )
                self._plan.forget_request()
            return
        self._plan.inflight_since = None
        gen, obs_tick, actions, error = result.gen, result.obs_tick, result.actions, result.error
        if not self._plan.is_current(gen):
            self.counters["chunks_discarded"] += 1
            return
        latency = k - obs_tick
        self.last_latency_ticks = float(latency)
        self.latency_ring[self.latencies_measured % len(self.latency_ring)] = latency
        self.latencies_measured += 1
        if error is not None or actions is None:
            self.counters["inference_failures"] += 1
            self.events.emit(logging.ERROR, "control: inference failed: %s; holding", error)
            return
        if present is None:
            self.counters["chunks_discarded"] += 1
            return
        # The whole chunk is checked, also the steps past n_action_steps: a policy emitting NaN
        # anywhere is not trusted for any of it.
        reason = self.envelope.check_chunk(actions, present, max(0, k - obs_tick))
        chunk = actions[: self.n_steps]
        if reason is not None:
            self.envelope.refuse(reason)
            return
        self.queue.merge(chunk, obs_tick, k)
        self._plan.got_first = True
        self.counters["chunks"] += 1

    def _running(self, k: int, now: float, present: np.ndarray) -> tuple[Goal | None, np.ndarray | None]:
        blocked = self.policy.blocked(now)
        if blocked is not None:
            self.counters["blocked_ticks"] += 1
            if self._stalled.key != blocked.key:
                # Finish no stale plan: what was queued was computed from what is now too old.
                self._plan.drop()
            return self._stall(now, present, blocked.key, blocked.reason), None
        action = self.queue.take(k)
        if self._plan.inflight_since is None and self.queue.depth(k + 1) <= self.refill_at:
            self._observing = ("ask", k)  # with the reading taken right after this tick's write
        elif self._observe_every_tick:
            self._observing = ("observe", k)
        if action is None:
            if self._plan.got_first:
                self.counters["starved"] += 1
                return self._stall(now, present, "starved", "starved: no action due"), None
            self.counters["priming"] += 1
            return self._stall(now, present, "priming", "waiting for the first chunk"), None
        self._moving_again(now)
        requested = action.copy()
        return self.envelope.apply(requested, present), requested

    def _moving_again(self, now: float) -> None:
        reason = self._stalled.reason
        stalled = self._stalled.resume(now)
        if stalled is not None:
            self.events.emit(logging.INFO, "control: moving again after %.2f s (%s)", stalled, reason)

    def _teleop(self, now: float, present: np.ndarray) -> tuple[Goal | None, np.ndarray | None]:
        """The station's newest target through the hand-over and the envelope; deadman: hold, then stall."""
        lost = self.policy.lost()
        if lost is not None:
            # the station's targets came through the side that is gone: the newest may be its last
            self.counters["blocked_ticks"] += 1
            return self._stall(now, present, "lost", lost), None
        target = self.teleop.fresh(now)
        if target is None:
            self.counters["deadman_ticks"] += 1
            reason = f"deadman: no teleop target for more than {self.teleop.config.deadman_ms:g} ms"
            return self._stall(now, present, "deadman", reason), None
        self._moving_again(now)
        last = self._last_goal if self._last_goal is not None else present
        requested = self.teleop.goal(target.positions, last, present)
        self.last_teleop_seq = target.seq
        return self.envelope.apply(requested, present), requested.copy()

    @property
    def source(self) -> Source:
        """Who commands the arm now."""
        return source_of(self.mode)

    def _stall(self, now: float, present: np.ndarray, key: str, reason: str) -> Goal | None:
        """Hold the last safe goal; after ``stall_timeout_s``, the configured stall action."""
        stall = self._stalled.tick(now, key, reason)
        if stall.began:
            held = self._last_goal if self._last_goal is not None else self._present
            assert held is not None
            self.hold_goal = held.copy()
            self.envelope.hold(self.hold_goal)
        if stall.new_reason and key != "priming":
            self.events.emit(logging.WARNING, "control: holding the last safe goal: %s", reason)
        safety = self.config.safety
        if stall.act:
            self.counters["stall_actions"] += 1
            self.events.emit(
                logging.ERROR, "control: stalled %.2f s (%s): %s", stall.waited, reason, safety.stall_action
            )
            self.dump_requests.append(f"stall {safety.stall_action}")
            if safety.stall_action == "rest":
                self._start_rest()
                return self._resting()
            if safety.stall_action == "torque_off":
                self._plan.drop()
                self._torque_off()
                self.mode = Mode.IDLE
                return None
        # checked each tick against where the arm is now (a hold is a goal like any other)
        assert self.hold_goal is not None
        return self.envelope.hold_goal(self.hold_goal, present)

    def _observe(self, present: np.ndarray) -> None:
        self.policy.observe(present.astype(np.float32), reset=self._plan.new_history)
        self._plan.new_history = False
        self.counters["observations"] += 1

    def inference_delay(self) -> int:
        """LeRobot's estimate of the next chunk's delay in ticks: the worst of the latencies measured for
        the last :data:`DELAY_WINDOW` chunks (0 before any), at most what a chunk can serve."""
        n = min(self.latencies_measured, DELAY_WINDOW, len(self.latency_ring))
        if n == 0:
            return 0
        end = self.latencies_measured % len(self.latency_ring)
        recent = np.take(self.latency_ring, range(end - n, end), mode="wrap")
        return int(min(np.nanmax(recent), self._max_delay)) if not np.isnan(recent).all() else 0

    def _prefix(self, k: int) -> Prefix | None:
        """The plan from tick ``k`` on (this tick's action first: the chunk's step 0 is for tick ``k``)
        and the delay the new chunk continues it by; None when nothing is planned."""
        if not self.rtc:
            return None
        leftover = self.queue.leftover(k, self._prefix_steps)
        if leftover is None:
            return None
        self.counters["prefix_requests"] += 1
        return Prefix(leftover, self.inference_delay())

    def _ask(self, k: int, present: np.ndarray) -> None:
        gen = self._plan.gen
        self._plan.inflight_since = self._clock()

        def done(actions: np.ndarray | None, error: str | None) -> None:
            self.result.put(ChunkResult(gen, k, actions, error))

        prefix = self._prefix(k)
        if not self.policy.submit(present.astype(np.float32), done, reset=self._plan.new_history, prefix=prefix):
            self._plan.inflight_since = None
            self.counters["submit_refused"] += 1
        else:
            self._plan.new_history = False
            self.counters["requests"] += 1

    def _start_rest(self) -> None:
        self._plan.drop()
        start = self._last_goal if self._last_goal is not None else self._present
        if start is None:
            return
        self._rest_target = self.envelope.rest_target(start)
        self.mode = Mode.RESTING

    def _resting(self) -> Goal | None:
        """This tick's goal on the way to the rest pose: at ``rest_speed_deg_s``, through the envelope."""
        target, present = self._rest_target, self._present
        if target is None or present is None:
            self.mode = Mode.HOLDING
            return None
        step = self.config.safety.rest_speed_deg_s * self.period
        # From where the arm is, not from the last goal: a blocked joint's goal must not run away.
        goal = self.envelope.apply(present + np.clip(target - present, -step, step), present)
        if np.allclose(goal, target, atol=1e-6):
            self.mode = Mode.HOLDING
            self.hold_goal = target.copy()
            self.envelope.hold(target)
            self.events.emit(logging.INFO, "control: rest pose reached; holding")
        return goal


def _estop_effect(action: str, previous_mode: Mode) -> str:
    if action == "torque_off":
        return "torque off"
    return "holding the present pose" if previous_mode is not Mode.IDLE else "arm idle"
