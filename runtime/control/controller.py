"""The controller: what the arm should do this tick, decided from what it read and what was asked.

:meth:`Controller.step` is pure in the sense that matters on the tick: it reads nothing but its
arguments and its own state, and does nothing but change that state and say what it wants done.
Its arguments are the tick (``k``), the time (``now``), the joint reading (``present``; None when the
read failed) and :class:`Inputs`, what the runner (:class:`~runtime.control.loop.ControlLoop`)
gathered for the tick from outside: the e-stops and commands taken from the mailbox, the finished
chunk, the policy's gate, whether its side is lost, and the fresh teleop target. It returns a
:class:`Decision`: the one goal to write (made by the safety envelope, the only maker of a
:class:`~runtime.control.safety.Goal`), the request it came from, a torque switch, the reading to hand
the policy after the write (:class:`Ask`), flight recordings to write, and whether to shut down.

It touches no bus, no clock, no mailbox and no object another thread writes; its events go to its own
:class:`~runtime.control.events.TickEvents`, which the runner moves to the event log. The runner
carries each decision out and reports back what happened (:meth:`Controller.written`,
:meth:`Controller.bus_failed`, :meth:`Controller.servo_fault`, :meth:`Controller.read_ok`,
:meth:`Controller.asked`, :meth:`Controller.torque_done`). A start or a take-over from ``idle`` needs
torque on before it is accepted: the step stops there with a decision to hold the present pose and
switch torque on, and :meth:`Controller.torque_done` takes the outcome and returns the rest of the
tick's decision. No other thread calls the controller or reads its state.

The mode machine (:class:`~runtime.control.mode.Mode`), dropping the plan (:class:`~runtime.control.plan.Plan`),
stall and deadman (:class:`~runtime.control.stall.Stall`), rest and hand-over are written here, once.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, deque
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from drivers.calibration import Calibration
from drivers.errors import BusError
from runtime.bundle.interface import PolicyInterface
from runtime.control.actions import ActionQueue
from runtime.control.config import ControlConfig, rtc_in_effect
from runtime.control.events import TickEvents
from runtime.control.feed import Blocked, Prefix, state_input
from runtime.control.latch import LATCH_ID, ControlRefused, Latch
from runtime.control.mailbox import (
    Command,
    Release,
    Shutdown,
    Start,
    Stop,
    TakeOver,
    check_command,
    word,
)
from runtime.control.mode import MOVING, Mode, Source, source_of
from runtime.control.plan import Plan
from runtime.control.safety import Goal, SafetyEnvelope
from runtime.control.stall import Stall
from runtime.control.target import Handover, Target
from runtime.teleop.config import TeleopConfig

#: the chunks whose measured latency the inference delay of a real-time chunking request is the worst of
DELAY_WINDOW = 20

Torque = Literal["", "on", "off"]


@dataclass(frozen=True, slots=True)
class ChunkResult:
    """What the inference worker hands back: ``gen`` is the plan it was asked for (a newer plan
    discards it), ``obs_tick`` the tick its observation was taken at."""

    gen: int
    obs_tick: int
    actions: np.ndarray | None
    error: str | None


class Inputs(NamedTuple):
    """What the runner gathered for one tick from outside the controller, all of it read at ``now``:
    ``estops``: the e-stop requests not yet taken (oldest first); ``commands``: the commands taken from
    the mailbox (in order); ``result``: the chunk finished since the last tick; ``blocked``: why the
    policy may not be asked (:meth:`~runtime.control.feed.PolicyFeed.blocked`); ``lost``: why its side
    cannot be trusted any more (:meth:`~runtime.control.feed.PolicyFeed.lost`); ``target``: the newest
    teleop target younger than the deadman. A named tuple, as is :class:`Decision`: as frozen as a
    frozen dataclass, made in a third of its time, and both are made every tick."""

    estops: tuple[Latch, ...] = ()
    commands: tuple[Command, ...] = ()
    result: ChunkResult | None = None
    blocked: Blocked | None = None
    lost: str | None = None
    target: Target | None = None


@dataclass(frozen=True, slots=True)
class Ask:
    """Hand the policy the reading taken right after this tick's write: for a chunk (``chunk``), with
    the plan's ``gen`` and tick ``k`` the answer is matched to, or only for its observation history.
    ``reset``: the first observation of a run; ``prefix``: what the chunk continues (real-time chunking)."""

    k: int
    gen: int
    chunk: bool
    reset: bool
    prefix: Prefix | None = None


class Decision(NamedTuple):
    """One tick's outcome, for the runner to carry out in this order: write ``goal`` (None: nothing),
    then switch ``torque`` (``on``, ``off``; "" for none) and report it (:meth:`Controller.torque_done`,
    which returns the rest of the tick's decision); read, then hand the reading to the policy as
    ``ask`` says. ``requested``: what the policy or the station asked for before the envelope (None for
    holds and rests); ``dumps``: why flight recordings should be written; ``shutdown``: a shutdown was
    taken, the runner runs its sequence (:meth:`Controller.begin_shutdown`) from here."""

    goal: Goal | None
    requested: np.ndarray | None = None
    torque: Torque = ""
    ask: Ask | None = None
    dumps: tuple[str, ...] = ()
    shutdown: bool = False


@dataclass(slots=True)
class _Paused:
    """A tick stopped for a torque switch: what it was deciding from, and what is left of it."""

    k: int
    now: float
    present: np.ndarray | None
    inputs: Inputs
    #: the tick's commands not yet carried out
    commands: tuple[Command, ...]
    #: the command that needs torque on (None: the switch is a torque off)
    command: Start | TakeOver | None = None
    #: the tick's decision, already made (a stall's torque off)
    final: Decision | None = None


class Controller:
    def __init__(
        self,
        names: tuple[str, ...],
        calibration: Calibration,
        policy: PolicyInterface,
        config: ControlConfig,
        *,
        teleop: TeleopConfig,
        period: float,
    ) -> None:
        self.names = names
        self.config = config
        #: what the controller and its envelope raised since the runner last moved them to the event log
        self.events = TickEvents()
        self.period = period
        chunk = policy.chunk_length
        self.n_steps = min(config.n_action_steps or chunk, chunk)
        self.refill_at = math.ceil(config.chunk_size_threshold * self.n_steps)
        # A policy that looks at several observations sees one per tick, as in LeRobot's select_action:
        # every running tick that does not ask for a chunk still hands its observation over.
        self._observe_every_tick = policy.observation_history > 1
        state_input(policy)  # the joints fill exactly one input: refused here, not at the first ask
        # Real-time chunking: each request carries the plan's leftover, up to the policy's chunk size,
        # and the delay, at most one short of the steps a chunk serves (the server's bound).
        self.rtc = rtc_in_effect(config, policy)
        self._prefix_steps = policy.rtc_chunk_size
        self._max_delay = chunk - 1
        n = len(names)
        self.queue = ActionQueue(n, horizon=4 * chunk, aggregate=config.aggregate, coeff=config.ensemble_coeff)
        self.envelope = SafetyEnvelope(names, calibration, config.safety, self.events)
        self.handover = Handover(teleop, period)
        #: counted here and by the runner (ticks, writes): one set of counters in the snapshot
        self.counters: Counter[str] = Counter()
        self.mode = Mode.IDLE
        #: the e-stop in effect, and the newest latch id taken
        self.latch: Latch | None = None
        self.latches_taken = 0
        self.intervention = False
        self.last_teleop_seq = -1
        self.arm_error = ""
        self.hold_goal: np.ndarray | None = None
        #: the newest chunk's latency in ticks, how many were measured, the last DELAY_WINDOW of them
        self.last_latency_ticks = math.nan
        self.latencies_measured = 0
        self._recent: deque[int] = deque(maxlen=DELAY_WINDOW)
        #: False once torque could not be turned off when it had to be
        self.torque_ok = True
        self._present: np.ndarray | None = None
        self._last_goal: np.ndarray | None = None
        self._rest_target: np.ndarray | None = None
        self._plan = Plan(self.queue)
        self._stalled = Stall(config.safety.stall_timeout_s)
        self._bus_fail_run = 0
        self._goal: Goal | None = None  # a hold a command or an e-stop made this tick
        self._dumps: list[str] = []  # flight recordings asked for this tick
        self._paused: _Paused | None = None

    # --- the tick ------------------------------------------------------------------------------

    def step(self, k: int, now: float, present: np.ndarray | None, inputs: Inputs) -> Decision:
        """Decide tick ``k``: e-stops, then commands, then a finished chunk, then this tick's goal."""
        if present is not None:
            self._present = present
        self._goal = None
        if inputs.estops and self._take_estops(now, present, inputs.estops):
            # the e-stop's torque off, before any command of the tick
            self._paused = _Paused(k, now, present, inputs, inputs.commands)
            return self._decision(self._goal, torque="off")
        return self._go_on(k, now, present, inputs, inputs.commands)

    def torque_done(self, error: str | None) -> Decision:
        """The runner switched torque as the last decision said (``error``: why it failed, None when it
        did not); returns the rest of the tick's decision. A failed torque on refuses the start or the
        take-over that needed it; a failed torque off is CRITICAL and ``torque_ok`` turns False."""
        paused, self._paused = self._paused, None
        assert paused is not None, "torque_done without a torque switch to report"
        command, present = paused.command, paused.present
        if command is None:
            self._switched_off(error)
        elif error is not None:
            self.events.emit(logging.ERROR, "control %s: torque on failed: %s", word(command), error)
        else:
            assert present is not None
            if isinstance(command, TakeOver):
                self._take_over(command.who, present)
            else:
                self._start(command, present)
        if paused.final is not None:
            return paused.final
        return self._go_on(paused.k, paused.now, present, paused.inputs, paused.commands)

    def _go_on(
        self, k: int, now: float, present: np.ndarray | None, inputs: Inputs, commands: tuple[Command, ...]
    ) -> Decision:
        for i, command in enumerate(commands):
            if isinstance(command, Shutdown):
                return self._decision(self._goal, shutdown=True)
            if self._command(command, present, inputs.blocked):
                # accepted once torque is on: hold the present pose first, so the arm does not jump
                assert present is not None and isinstance(command, Start | TakeOver)
                self._paused = _Paused(k, now, present, inputs, commands[i + 1 :], command)
                return self._decision(self.envelope.hold_goal(present, present), torque="on")
        self._collect(k, now, present, inputs.result)
        goal: Goal | None = None
        requested: np.ndarray | None = None
        ask: Ask | None = None
        if present is not None:
            if self.mode is Mode.RUNNING:
                goal, requested, ask = self._running(k, now, present, inputs.blocked)
            elif self.mode is Mode.TELEOP:
                goal, requested = self._teleop(now, present, inputs)
            elif self.mode is Mode.RESTING:
                goal = self._resting()
        if goal is None:
            goal = self._goal
        if self._paused is None and not self._dumps:
            self._goal = None
            return Decision(goal, requested, "", ask)
        decision = self._decision(goal, requested, ask=ask)
        if self._paused is not None:  # a stall's torque off, decided on the way
            self._paused.final = Decision(decision.goal, decision.requested)
            return self._decision(decision.goal, decision.requested, torque="off", dumps=decision.dumps)
        return decision

    def _decision(
        self,
        goal: Goal | None,
        requested: np.ndarray | None = None,
        *,
        torque: Torque = "",
        ask: Ask | None = None,
        shutdown: bool = False,
        dumps: tuple[str, ...] = (),
    ) -> Decision:
        if self._dumps:
            dumps, self._dumps = (*dumps, *self._dumps), []
        self._goal = None  # handed over: written once
        return Decision(goal, requested, torque, ask, dumps, shutdown)

    def asked(self, ask: Ask, accepted: bool, at: float) -> None:
        """The runner handed the policy the reading ``ask`` wanted at ``at``; ``accepted``: the feed took it."""
        if not ask.chunk:
            self._plan.new_history = False
            self.counters["observations"] += 1
            return
        if ask.prefix is not None:
            self.counters["prefix_requests"] += 1
        if not accepted:
            self.counters["submit_refused"] += 1
            return
        self._plan.inflight_since = at
        self._plan.new_history = False
        self.counters["requests"] += 1

    def written(self, goal: Goal) -> None:
        """The runner wrote ``goal``: the next steps and holds start from it."""
        self._last_goal = goal

    def read_ok(self, present: np.ndarray) -> None:
        """The joints answered: holds made before the next step (shutdown) start from ``present``."""
        self._present = present
        self._bus_fail_run = 0
        self.arm_error = ""

    def servo_fault(self, error: BusError) -> str | None:
        """A servo reported a fault (overload, overheat, voltage); returns the e-stop to latch naming it."""
        self.counters["servo_faults"] += 1
        self.arm_error = str(error)
        return f"servo fault: {error}"

    def bus_failed(self, what: str, error: BusError) -> str | None:
        """A sync read or write failed; after ``max_bus_failures`` in a row, returns the e-stop to latch."""
        self.counters[f"bus_{what}_failures"] += 1
        self._bus_fail_run += 1
        self.arm_error = str(error)
        if self._bus_fail_run == 1:
            self.events.emit(logging.ERROR, "control: arm %s failed: %s", what, error)
        limit = self.config.safety.max_bus_failures
        if self._bus_fail_run >= limit:
            return f"{self._bus_fail_run} bus failures in a row (last: {error})"
        return None

    # --- shutdown (the runner's sequence) ----------------------------------------------------------

    def begin_shutdown(self) -> tuple[Goal | None, str]:
        """Stop motion and hold: (the hold to write, what follows it: ``rest`` ticks
        (:meth:`rest_step`), ``torque_off`` (the runner switches torque off after the hold is written
        and reports to :meth:`end_with_torque_off`) or "")."""
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

    def end_with_torque_off(self, error: str | None) -> None:
        """The shutdown's torque off was done (``error``: why it failed, or None)."""
        self._switched_off(error)
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
        self._paused = None
        if self.mode is Mode.IDLE:
            return None
        self._hold_present()
        return self._goal

    # --- e-stops, commands, chunks, goals -----------------------------------------------------------

    def _take_estops(self, now: float, present: np.ndarray | None, requests: tuple[Latch, ...]) -> bool:
        """Take this tick's e-stop requests; True when the one entered needs torque off."""
        newest = max(requests, key=LATCH_ID)
        self.latches_taken = max(self.latches_taken, newest.id)
        if self.latch is None or newest.id > self.latch.id:
            return self._enter_estop(now, present, newest)
        return False

    def _enter_estop(self, now: float, present: np.ndarray | None, latch: Latch) -> bool:
        again = self.latch is not None
        self.latch = latch
        after_ms = (now - latch.requested_at) * 1e3
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
            return False
        previous = self.mode
        self.mode = Mode.ESTOPPED
        self._plan.drop()
        action = self.config.safety.estop_action
        where = present if present is not None else self._present
        if action != "torque_off" and where is not None and previous is not Mode.IDLE:
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
        self._dumps.append("estop")
        return action == "torque_off"

    def _command(self, cmd: Command, present: np.ndarray | None, blocked: Blocked | None) -> bool:
        """Carry out ``cmd``; True when it is a start or a take-over that needs torque on first."""
        command, who = word(cmd), cmd.who
        latch = cmd.latch if isinstance(cmd, Release) else 0
        try:
            gate = blocked.reason if blocked is not None and command == "start" else None
            check_command(command, latch, self.latch, self.arm_error, gate)
            if present is None and isinstance(cmd, Start):
                raise ControlRefused(f"the arm did not answer this tick: {self.arm_error}")
        except ControlRefused as e:
            self.events.emit(logging.WARNING, "control %s (asked by %s) refused: %s", command, who or "?", e)
            return False
        if isinstance(cmd, TakeOver):
            if present is None:
                self.events.emit(
                    logging.WARNING, "control teleop (asked by %s) refused: the arm did not answer", who or "?"
                )
                return False
            if self.mode is Mode.IDLE:
                return True
            self._take_over(who, present)
        elif isinstance(cmd, Start):
            assert present is not None
            if self.mode is Mode.IDLE:
                return True
            self._start(cmd, present)
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
        return False

    def _start(self, cmd: Start, present: np.ndarray) -> None:
        """Source ``policy``: motion from the present pose, the queue empty (torque is on)."""
        self._plan.restart()
        self.envelope.reset(present)
        self._last_goal = present.copy()
        self._stalled.clear()
        was = self.mode
        self.mode = Mode.RUNNING
        self.intervention = False
        self.counters["starts"] += 1
        self.events.emit(
            logging.INFO, "control: source policy (was %s), motion started (asked by %s)", was, cmd.who or "?"
        )

    def _take_over(self, who: str, present: np.ndarray) -> None:
        """Source ``teleop``: the hand-over starts from the last goal written (or the present pose)."""
        was = self.mode
        if was is Mode.TELEOP:
            return
        if was is Mode.IDLE or self._last_goal is None or was is not Mode.RUNNING:
            self.envelope.reset(present)
            self._last_goal = present.copy()
        # A chunk in flight is for the policy's plan, which ends here.
        self._plan.drop()
        self.intervention = was is Mode.RUNNING
        self._stalled.clear()
        self.handover.begin()
        self.mode = Mode.TELEOP
        self.counters["takeovers"] += 1
        self.events.emit(
            logging.INFO,
            "control: source teleop (was %s), %s hand-over (asked by %s)",
            was,
            self.handover.config.handover,
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

    def _switched_off(self, error: str | None) -> None:
        if error is not None:
            self.events.emit(logging.CRITICAL, "control: torque off FAILED: %s; check the arm by hand", error)
            self.torque_ok = False
            return
        self.hold_goal = None
        self.counters["torque_offs"] += 1

    def _collect(self, k: int, now: float, present: np.ndarray | None, result: ChunkResult | None) -> None:
        if result is None:
            since = self._plan.inflight_since
            if since is not None and now - since > self.config.safety.stall_timeout_s:
                self.counters["inference_stalls"] += 1
                self.events.emit(
                    logging.ERROR,
                    "control: no chunk %.1f s after asking; dropping that request",
                    now - since,
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
        self._recent.append(latency)
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

    def _running(
        self, k: int, now: float, present: np.ndarray, blocked: Blocked | None
    ) -> tuple[Goal | None, np.ndarray | None, Ask | None]:
        if blocked is not None:
            self.counters["blocked_ticks"] += 1
            if self._stalled.key != blocked.key:
                # Finish no stale plan: what was queued was computed from what is now too old.
                self._plan.drop()
            return self._stall(now, present, blocked.key, blocked.reason), None, None
        action = self.queue.take(k)
        plan = self._plan
        ask: Ask | None = None
        if plan.inflight_since is None and self.queue.depth(k + 1) <= self.refill_at:
            # with the reading taken right after this tick's write
            ask = Ask(k, plan.gen, True, plan.new_history, self._prefix(k))
        elif self._observe_every_tick:
            ask = Ask(k, plan.gen, False, plan.new_history)
        if action is None:
            if plan.got_first:
                self.counters["starved"] += 1
                held = self._stall(now, present, "starved", "starved: no action due")
            else:
                self.counters["priming"] += 1
                held = self._stall(now, present, "priming", "waiting for the first chunk")
            # a stall action ends the run: nothing more for the policy
            return held, None, ask if self.mode is Mode.RUNNING else None
        self._moving_again(now)
        requested = action.copy()
        return self.envelope.apply(requested, present), requested, ask

    def _moving_again(self, now: float) -> None:
        reason = self._stalled.reason
        stalled = self._stalled.resume(now)
        if stalled is not None:
            self.events.emit(logging.INFO, "control: moving again after %.2f s (%s)", stalled, reason)

    def _teleop(self, now: float, present: np.ndarray, inputs: Inputs) -> tuple[Goal | None, np.ndarray | None]:
        """The station's newest target through the hand-over and the envelope; deadman: hold, then stall."""
        lost = inputs.lost
        if lost is not None:
            # the station's targets came through the side that is gone: the newest may be its last
            self.counters["blocked_ticks"] += 1
            return self._stall(now, present, "lost", lost), None
        target = inputs.target
        if target is None:
            self.counters["deadman_ticks"] += 1
            reason = f"deadman: no teleop target for more than {self.handover.config.deadman_ms:g} ms"
            return self._stall(now, present, "deadman", reason), None
        self._moving_again(now)
        last = self._last_goal if self._last_goal is not None else present
        requested = self.handover.goal(target.positions, last, present)
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
            self._dumps.append(f"stall {safety.stall_action}")
            if safety.stall_action == "rest":
                self._start_rest()
                return self._resting()
            if safety.stall_action == "torque_off":
                self._plan.drop()
                self.mode = Mode.IDLE
                # the runner switches torque off after this tick's (empty) write
                self._paused = _Paused(0, now, present, Inputs(), ())
                return None
        # checked each tick against where the arm is now (a hold is a goal like any other)
        assert self.hold_goal is not None
        return self.envelope.hold_goal(self.hold_goal, present)

    def inference_delay(self) -> int:
        """LeRobot's estimate of the next chunk's delay in ticks: the worst of the latencies measured for
        the last :data:`DELAY_WINDOW` chunks (0 before any), at most what a chunk can serve."""
        recent = self._recent
        return min(max(recent), self._max_delay) if recent else 0

    def _prefix(self, k: int) -> Prefix | None:
        """The plan from tick ``k`` on (this tick's action first: the chunk's step 0 is for tick ``k``)
        and the delay the new chunk continues it by; None when nothing is planned."""
        if not self.rtc:
            return None
        leftover = self.queue.leftover(k, self._prefix_steps)
        if leftover is None:
            return None
        return Prefix(leftover, self.inference_delay())

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
