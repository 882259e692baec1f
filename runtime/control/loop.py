"""The control loop: the arm's motion authority when the daemon owns the arm.

One thread, pinned to the control CPU and (where allowed) SCHED_FIFO, ticks on absolute deadlines:

    read joints (one sync read) -> e-stop / commands -> merge a finished chunk -> pick this tick's
    action -> safety envelope -> write goals (one sync write) -> ask for the next chunk -> record

Inference never runs here: the loop hands an observation (joint state of this tick plus the newest
camera parts) to the inference worker and carries on; the finished chunk comes back through a
one-slot handoff (:class:`~runtime.control.handoff.Latest`) and is merged at the next tick, keyed by
the tick its observation was taken at. Other threads talk to the loop only through flags and deques;
nothing in the tick waits on a lock a slow thread holds, and nothing in it logs (events are logged by
the daemon's main thread). Each tick ends by publishing a frozen :class:`Snapshot`; everything outside
the loop reads that (:meth:`ControlLoop.snapshot`), never the loop's attributes.

Every e-stop request is a latch of its own, numbered from 1 (:class:`Latch`), taken at the next tick
before any command; a release names the latch it saw and is refused if a newer one came since, so an
e-stop pressed while a release is on its way is never lost.

Modes (:class:`~runtime.control.mode.Mode`): ``idle`` (never commanded, or torque off), ``running``
(executing chunks), ``teleop`` (a station's leader pose, after a hand-over that does not jump),
``holding`` (torque on, a fixed goal), ``resting`` (moving slowly to the rest pose), ``estopped``
(latched). The goal's source, as recorded and reported, is ``policy`` (running), ``teleop`` or
``hold`` (everything else); exactly one at a time, switched only by an explicit request.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from drivers.bus import JointState
from drivers.calibration import Calibration
from drivers.errors import BusError, ServoFaultError
from runtime.bundle.manifest import Manifest
from runtime.control.actions import ActionQueue
from runtime.control.clock import Ticker, pin_thread, request_realtime
from runtime.control.config import ControlConfig
from runtime.control.episodes import EpisodeTap
from runtime.control.events import EventLog
from runtime.control.feed import PolicyFeed, state_input
from runtime.control.handoff import Latest
from runtime.control.latch import LATCH_ID, ControlRefused, Latch, estop_status
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
    parse,
    word,
)
from runtime.control.mode import MOVING, Mode, Source, source_of
from runtime.control.plan import Plan
from runtime.control.recorder import MODE_CODE, FlightRecorder
from runtime.control.safety import Goal, SafetyEnvelope
from runtime.control.snapshot import Snapshot
from runtime.control.stall import Stall
from runtime.control.writetime import WriteClock
from runtime.engine.affinity import current_cpu
from runtime.errors import ConfigError
from runtime.teleop.config import TeleopConfig
from runtime.teleop.target import TeleopTarget

log = logging.getLogger(__name__)

SHUTDOWN_REST_LIMIT_S = 10.0
GIL_SWITCH_S = 0.0002


class TickHooks(Protocol):
    """What runs on the loop's thread around each tick: the arm process's link to the daemon takes
    what arrived before the tick and sends the tick's snapshot after it (the write has left by then)."""

    def before_tick(self, loop: ControlLoop) -> None: ...
    def after_tick(self, loop: ControlLoop) -> None: ...


class ArmBus(Protocol):
    @property
    def joints(self) -> tuple[str, ...]: ...
    def read_state(self) -> dict[str, JointState]: ...
    def write_goals(self, goals: Mapping[str, float]) -> dict[str, float]: ...
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


class ControlLoop:
    def __init__(
        self,
        bus: ArmBus,
        calibration: Calibration,
        manifest: Manifest,
        config: ControlConfig,
        policy: PolicyFeed,
        *,
        events: EventLog | None = None,
        cpu: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        teleop: TeleopConfig | None = None,
        hooks: TickHooks | None = None,
    ) -> None:
        self.bus = bus
        self.hooks = hooks
        self.config = config
        self.policy = policy
        self.events = events if events is not None else EventLog()
        self.cpu = cpu
        self._clock = clock
        self.names = tuple(manifest.action_names)
        missing = [n for n in self.names if n not in bus.joints]
        if missing:
            raise ConfigError(
                f"the policy's action names {', '.join(missing)} are not joints of the arm "
                f"({', '.join(bus.joints)}); the bundle was made for another arm"
            )
        self.rate_hz = config.rate_hz or manifest.control_rate_hz
        self.period = 1.0 / self.rate_hz
        chunk = manifest.chunk_length
        self.n_steps = min(config.n_action_steps or chunk, chunk)
        self.refill_at = math.ceil(config.chunk_size_threshold * self.n_steps)
        # A policy that looks at several observations sees one per tick, as in LeRobot's select_action:
        # every running tick that does not ask for a chunk still hands its observation over.
        self._observe_every_tick = manifest.observation_history > 1
        state_input(manifest)  # the joints fill exactly one input: refused here, not at the first ask
        n = len(self.names)
        self._queue = ActionQueue(n, horizon=4 * chunk, aggregate=config.aggregate, coeff=config.ensemble_coeff)
        self._envelope = SafetyEnvelope(self.names, calibration, config.safety, self.events)
        self.recorder = FlightRecorder(self.names, self.rate_hz, config.recorder_s)
        self.teleop = TeleopTarget(n, teleop if teleop is not None else TeleopConfig(), self.period)
        #: set by the daemon when ``[recording]`` is configured: feeds open episodes every tick
        self.episodes: EpisodeTap | None = None
        self._intervention = False
        self._last_teleop_seq = -1
        self._mode = Mode.IDLE
        #: commands and e-stops from other threads, taken at the next tick (e-stops first)
        self._mailbox = Mailbox(clock)
        #: the e-stop in effect (set and cleared by the loop thread only)
        self._latch: Latch | None = None
        self._latches_taken = 0
        self.dump_requests: deque[str] = deque()
        self._present: np.ndarray | None = None
        self._last_state: dict[str, JointState] = {}
        self._last_goal: np.ndarray | None = None
        self._hold_goal: np.ndarray | None = None
        self._rest_target: np.ndarray | None = None
        self._result: Latest[ChunkResult] = Latest()
        self._plan = Plan(self._queue)
        self._stalled = Stall(config.safety.stall_timeout_s)
        self._bus_fail_run = 0
        self._arm_error = ""
        self._latencies = np.full(256, np.nan)
        self._latency_i = 0
        self._last_latency_ticks = math.nan
        self._counters: Counter[str] = Counter()
        self._cpu_ticks: Counter[int] = Counter()  # the loop thread's alone
        self._scheduling = ""
        self._native_id = 0
        self._ticker = Ticker(self.period, clock=clock)
        self._tick_at = 0.0
        self._writes = WriteClock(self.period, max(2, round(self.rate_hz * 10)))
        # when this tick's write completed and its period error (NaN: nothing written this tick)
        self._write_at = math.nan
        self._write_err_ms = math.nan
        #: what the loop did, as of its last tick: everyone else reads this, not the attributes
        self._snapshot: Latest[Snapshot] = Latest()
        self._snapshot.put(Snapshot(scheduling="not started"))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shutdown_done = threading.Event()
        self.shutdown_ok = True

    # --- requests from other threads (flags only) -------------------------------------------------

    def request(self, command: str | Command, who: str = "", latch: int = 0) -> None:
        """Queue ``start`` (policy) | ``teleop`` | ``stop`` (hold) | ``release`` (or the
        :mod:`~runtime.control.mailbox` command itself) for the next tick (checked first by
        :meth:`check`). ``latch``: the e-stop latch a release is for."""
        if isinstance(command, str):
            try:
                command = parse(command, who, latch)
            except ValueError as e:
                raise ControlRefused(str(e)) from None
        self._mailbox.post(command)

    def check(self, command: str, latch: int = 0) -> None:
        """Raise :class:`ControlRefused` when ``command`` cannot be carried out now; a release of any
        latch but the newest (``latch``) raises :class:`StaleLatch`."""
        blocked = self.policy.blocked(self._clock()) if command == "start" else None
        check_command(command, latch, self.estop, self._arm_error, blocked.reason if blocked is not None else None)

    def post_estop(self, latch: Latch) -> Latch:
        """Latch an e-stop numbered elsewhere (the daemon's, in the arm's process); returns it as
        posted (renumbered after a newer latch given out here). For the loop's own thread."""
        return self._mailbox.post_estop(latch)

    def request_estop(self, reason: str) -> Latch:
        """Latch a new e-stop, effective at the next tick, and return it. Each request is a latch
        of its own, also while one is latched, so a release already on its way is refused. Safe to call
        from any thread and from a signal handler (no lock)."""
        return self._mailbox.estop(reason)

    @property
    def estop(self) -> Latch | None:
        """The newest e-stop, requested (effective at the next tick) or in effect; None when released."""
        # Read the requests before the latch: the tick sets the latch before it drops the requests.
        pending = self._mailbox.pending_estop()
        return newest_latch(pending, self._latch)

    @property
    def estop_reason(self) -> str | None:
        latch = self.estop
        return latch.reason if latch is not None else None

    def _fault_estop(self, reason: str) -> None:
        # The loop's own checks fail again every tick while the fault lasts: a latch per tick would
        # leave nothing a release could name. Released while it lasts, the fault latches again.
        if self.estop is None:
            self.request_estop(reason)

    # --- thread ---------------------------------------------------------------------------------------

    def start(self) -> None:
        # A thread waking for its tick waits for the GIL until the holder is asked to drop it, after
        # the switch interval (5 ms by default): as long as a control period's worth of jitter.
        sys.setswitchinterval(min(sys.getswitchinterval(), GIL_SWITCH_S))
        self._thread = threading.Thread(target=self._run, name="lerobot-runtime-control", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stalled_for(self, now: float) -> float:
        """Seconds since the last tick beyond five periods (0 while ticking normally)."""
        at = self.snapshot().at
        if not self.alive or at == 0.0:
            return 0.0
        late = now - at
        return late if late > 5 * self.period else 0.0

    def snapshot(self) -> Snapshot:
        """The newest per-tick snapshot (any thread; never waits)."""
        snap = self._snapshot.peek()
        assert snap is not None  # one is put in __init__ and only replaced since
        return snap

    def latencies(self, since: int = 0) -> np.ndarray:
        """Inference latencies in ticks of the chunks measured since the ``since``-th (a snapshot's
        ``latencies_measured``), the newest 256 at most."""
        n = self._latency_i
        ring = self._latencies
        first = max(since, n - len(ring))
        return np.array([ring[i % len(ring)] for i in range(first, n)], dtype=np.float64)

    def write_times(self) -> tuple[np.ndarray, np.ndarray]:
        """(completion stamps on the loop's clock, period errors in ms) of the recent sync writes."""
        return self._writes.recent()

    def _publish(self) -> None:
        k = self._ticker.tick
        self._snapshot.put(
            Snapshot(
                tick=k,
                at=self._tick_at,
                next_due=self._ticker.deadline(k + 1),
                mode=self._mode,
                latch=self._latch,
                latches_taken=self._latches_taken,
                present=self._present,
                state=self._last_state,
                arm_error=self._arm_error,
                queue_depth=self._queue.depth(k + 1),
                dropped_actions=self._queue.dropped,
                overruns=self._ticker.overruns,
                counters=self._counters.copy(),
                safety=dict(self._envelope.counts),
                last_latency_ticks=self._last_latency_ticks,
                latencies_measured=self._latency_i,
                teleop_phase=self.teleop.phase if self._mode is Mode.TELEOP else "",
                teleop_last_seq=self._last_teleop_seq,
                intervention=self._intervention and self._mode is Mode.TELEOP,
                cpu_seen=dict(self._cpu_ticks),
                scheduling=self._scheduling,
                native_id=self._native_id,
                last_write_at=self._writes.last_at,
                last_write_error_ms=self._writes.last_error_ms,
                write_periods=self._writes.periods,
                writes_off=self._writes.off,
            )
        )

    def shutdown(self, timeout: float = 15.0) -> bool:
        """Stop motion, hold, then ``safety.shutdown_action``; returns False if the arm could not be made safe."""
        if self._thread is None:
            return True
        self._mailbox.post(Shutdown())
        self._shutdown_done.wait(timeout)
        self._stop.set()
        self._thread.join(2.0)
        return self.shutdown_ok and self._shutdown_done.is_set()

    def _run(self) -> None:
        self._native_id = threading.get_native_id()
        if self.cpu is not None:
            pin_thread(self.cpu)
        self._scheduling = request_realtime(self.config.rt_priority)
        self.events.emit(
            logging.INFO if self._scheduling.startswith(("SCHED_FIFO", "SCHED_OTHER (")) else logging.WARNING,
            "control loop: %.1f Hz, %d of %d steps per chunk, next chunk at %d queued, aggregate %s; CPU %s; %s",
            self.rate_hz,
            self.n_steps,
            self._queue.size // 4,
            self.refill_at,
            self.config.aggregate,
            self.cpu if self.cpu is not None else "any",
            self._scheduling,
        )
        ticker = self._ticker
        ticker.start()
        try:
            while not self._stop.is_set():
                k, _due, late = ticker.wait()
                self._cpu_ticks[current_cpu()] += 1
                if self.hooks is not None:
                    self.hooks.before_tick(self)
                self._tick(k, late)
                self._publish()
                if self.hooks is not None:
                    self.hooks.after_tick(self)
                if self._shutdown_done.is_set():
                    break
        except Exception as e:  # a bug in the tick must not leave the arm moving unattended
            self.events.emit(logging.CRITICAL, "control loop failed: %s: %s; holding the arm", type(e).__name__, e)
            log.exception("control loop failed")
            self._hold_present()
            self._publish()
            if self.hooks is not None:
                self.hooks.after_tick(self)
            self.shutdown_ok = False
            self._shutdown_done.set()

    # --- the tick -------------------------------------------------------------------------------------

    def _tick(self, k: int, late: float) -> None:
        now = self._clock()
        self._write_at = self._write_err_ms = math.nan
        present = self._read()
        self._take_estops(present)
        while (command := self._mailbox.take_command()) is not None:
            self._command(command, present)
            if self._shutdown_done.is_set():
                return
        self._collect(k, present)
        goal: Goal | None = None
        requested: np.ndarray | None = None
        if present is not None:
            if self._mode is Mode.RUNNING:
                goal, requested = self._running(k, now, present)
            elif self._mode is Mode.TELEOP:
                goal, requested = self._teleop(now, present)
            elif self._mode is Mode.RESTING:
                goal = self._resting()
            if goal is not None:
                self._write(goal)
        if self.episodes is not None:
            self.episodes.tick(
                now,
                present,
                goal if goal is not None else self._hold_goal,
                requested,
                (self.source if requested is not None else Source.HOLD).value,
                self._intervention and self._mode is Mode.TELEOP,
            )
        self.recorder.record(
            now,
            k,
            MODE_CODE[self._mode],
            present,
            goal,
            requested,
            self._envelope.last_bits if requested is not None else None,
            self._queue.depth(k + 1),
            self._last_latency_ticks,
            late * 1e3,
            (self._write_at - self._ticker.deadline(k)) * 1e3,
            self._write_err_ms,
        )
        self._counters["ticks"] += 1
        self._tick_at = now

    def _read(self) -> np.ndarray | None:
        try:
            state = self.bus.read_state()
        except ServoFaultError as e:
            self._counters["servo_faults"] += 1
            self._arm_error = str(e)
            self._fault_estop(f"servo fault: {e}")
            return self._present
        except BusError as e:
            self._bus_failure("read", e)
            return None
        self._bus_fail_run = 0
        self._arm_error = ""
        self._last_state = state
        present = np.fromiter((state[n].position for n in self.names), dtype=np.float64, count=len(self.names))
        self._present = present
        return present

    def _bus_failure(self, what: str, e: BusError) -> None:
        self._counters[f"bus_{what}_failures"] += 1
        self._bus_fail_run += 1
        self._arm_error = str(e)
        if self._bus_fail_run == 1:
            self.events.emit(logging.ERROR, "control: arm %s failed: %s", what, e)
        limit = self.config.safety.max_bus_failures
        if self._bus_fail_run >= limit:
            self._fault_estop(f"{self._bus_fail_run} bus failures in a row (last: {e})")

    def _write(self, goal: Goal) -> None:
        """Write one goal; only the envelope makes a :class:`Goal`, so nothing else reaches the bus."""
        try:
            self.bus.write_goals({n: float(goal[i]) for i, n in enumerate(self.names)})
        except BusError as e:
            self._bus_failure("write", e)
            return
        # what the servos see: when the goal left, not when the tick woke
        self._write_at = self._clock()
        self._write_err_ms = self._writes.stamp(self._ticker.tick, self._write_at)
        self._counters["writes"] += 1
        self._last_goal = goal

    # --- e-stop and commands --------------------------------------------------------------------------

    def _take_estops(self, present: np.ndarray | None) -> None:
        requests = self._mailbox.estop_requests()
        if not requests:
            return
        newest = max(requests, key=LATCH_ID)
        self._latches_taken = max(self._latches_taken, newest.id)
        if self._latch is None or newest.id > self._latch.id:
            self._enter_estop(present, newest)
        self._mailbox.drop_estops(len(requests))  # after the latch is set: see estop

    def _enter_estop(self, present: np.ndarray | None, latch: Latch) -> None:
        again = self._latch is not None
        self._latch = latch
        after_ms = (self._clock() - latch.requested_at) * 1e3
        self._counters["estops"] += 1
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
        previous = self._mode
        self._mode = Mode.ESTOPPED
        self._plan.drop()
        action = self.config.safety.estop_action
        where = present if present is not None else self._present
        if action == "torque_off":
            self._torque_off()
        elif where is not None and previous is not Mode.IDLE:
            held = self._envelope.hold_goal(where, where)
            self._hold_goal = held.copy()
            self._write(held)
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
        if isinstance(cmd, Shutdown):
            self._shutdown(present)
            return
        command, who = word(cmd), cmd.who
        latch = cmd.latch if isinstance(cmd, Release) else 0
        try:
            self.check(command, latch)
            if present is None and isinstance(cmd, Start):
                raise ControlRefused(f"the arm did not answer this tick: {self._arm_error}")
        except ControlRefused as e:
            self.events.emit(logging.WARNING, "control %s (asked by %s) refused: %s", command, who or "?", e)
            return
        if isinstance(cmd, TakeOver):
            self._take_over(who, present)
        elif isinstance(cmd, Start):
            assert present is not None
            if self._mode is Mode.IDLE:
                try:
                    self.bus.enable_torque()
                except BusError as e:
                    self.events.emit(logging.ERROR, "control start: torque on failed: %s", e)
                    return
            self._plan.restart()
            self._envelope.reset(present)
            self._last_goal = present.copy()
            self._stalled.clear()
            was = self._mode
            self._mode = Mode.RUNNING
            self._intervention = False
            self._counters["starts"] += 1
            self.events.emit(
                logging.INFO, "control: source policy (was %s), motion started (asked by %s)", was, who or "?"
            )
        elif isinstance(cmd, Stop):
            if self._mode in MOVING:
                self._hold_present()
            self.events.emit(logging.INFO, "control: motion stopped, holding (asked by %s)", who or "?")
        elif isinstance(cmd, Release):
            self._latch = None
            held = self._hold_goal is not None and self.config.safety.estop_action == "hold"
            self._mode = Mode.HOLDING if held else Mode.IDLE
            self.events.emit(
                logging.WARNING, "control: e-stop latch %d released by %s; arm %s", latch, who or "?", self._mode
            )

    def _take_over(self, who: str, present: np.ndarray | None) -> None:
        """Source ``teleop``: the hand-over starts from the last goal written (or the present pose)."""
        if present is None:
            self.events.emit(
                logging.WARNING, "control teleop (asked by %s) refused: the arm did not answer", who or "?"
            )
            return
        was = self._mode
        if was is Mode.TELEOP:
            return
        if was is Mode.IDLE:
            try:
                self.bus.enable_torque()
            except BusError as e:
                self.events.emit(logging.ERROR, "control teleop: torque on failed: %s", e)
                return
            self._envelope.reset(present)
            self._last_goal = present.copy()
        elif self._last_goal is None or was is not Mode.RUNNING:
            self._envelope.reset(present)
            self._last_goal = present.copy()
        # A chunk in flight is for the policy's plan, which ends here.
        self._plan.drop()
        self._intervention = was is Mode.RUNNING
        self._stalled.clear()
        self.teleop.begin()
        self._mode = Mode.TELEOP
        self._counters["takeovers"] += 1
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
            held = self._envelope.hold_goal(where, where)
            self._hold_goal = held.copy()
            self._write(held)
        self._mode = Mode.HOLDING

    def _torque_off(self) -> None:
        try:
            self.bus.disable_torque()
        except BusError as e:
            self.events.emit(logging.CRITICAL, "control: torque off FAILED: %s; check the arm by hand", e)
            self.shutdown_ok = False
            return
        self._hold_goal = None
        self._counters["torque_offs"] += 1

    def _shutdown(self, present: np.ndarray | None) -> None:
        """Stop motion, hold, then rest or torque off, in that order."""
        was = self._mode
        if self.episodes is not None:
            self.episodes.end()
        if was in MOVING or was is Mode.HOLDING:
            self._hold_present()
            action = self.config.safety.shutdown_action
            if action == "rest":
                self._start_rest()
                end = self._clock() + SHUTDOWN_REST_LIMIT_S
                while self._mode is Mode.RESTING and self._clock() < end:
                    self._ticker.wait()
                    if self._read() is not None:
                        goal = self._resting()
                        if goal is not None:
                            self._write(goal)
                    self._publish()
                    if self.hooks is not None:
                        self.hooks.after_tick(self)
            elif action == "torque_off":
                self._torque_off()
                self._mode = Mode.IDLE
        self.events.emit(logging.INFO, "control: shut down (mode was %s, now %s)", was, self._mode)
        self._shutdown_done.set()

    # --- running ------------------------------------------------------------------------------------------

    def _collect(self, k: int, present: np.ndarray | None) -> None:
        result = self._result.take()
        if result is None:
            since = self._plan.inflight_since
            if since is not None and self._clock() - since > self.config.safety.stall_timeout_s:
                self._counters["inference_stalls"] += 1
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
            self._counters["chunks_discarded"] += 1
            return
        latency = k - obs_tick
        self._last_latency_ticks = float(latency)
        self._latencies[self._latency_i % len(self._latencies)] = latency
        self._latency_i += 1
        if error is not None or actions is None:
            self._counters["inference_failures"] += 1
            self.events.emit(logging.ERROR, "control: inference failed: %s; holding", error)
            return
        if present is None:
            self._counters["chunks_discarded"] += 1
            return
        # The whole chunk is checked, also the steps past n_action_steps: a policy emitting NaN
        # anywhere is not trusted for any of it.
        reason = self._envelope.check_chunk(actions, present, max(0, k - obs_tick))
        chunk = actions[: self.n_steps]
        if reason is not None:
            self._envelope.refuse(reason)
            return
        self._queue.merge(chunk, obs_tick, k)
        self._plan.got_first = True
        self._counters["chunks"] += 1

    def _running(self, k: int, now: float, present: np.ndarray) -> tuple[Goal | None, np.ndarray | None]:
        blocked = self.policy.blocked(now)
        if blocked is not None:
            self._counters["blocked_ticks"] += 1
            if self._stalled.key != blocked.key:
                # Finish no stale plan: what was queued was computed from what is now too old.
                self._plan.drop()
            return self._stall(now, present, blocked.key, blocked.reason), None
        action = self._queue.take(k)
        if self._plan.inflight_since is None and self._queue.depth(k + 1) <= self.refill_at:
            self._ask(k, present)
        elif self._observe_every_tick:
            self._observe(present)
        if action is None:
            if self._plan.got_first:
                self._counters["starved"] += 1
                return self._stall(now, present, "starved", "starved: no action due"), None
            self._counters["priming"] += 1
            return self._stall(now, present, "priming", "waiting for the first chunk"), None
        self._moving_again(now)
        requested = action.copy()
        return self._envelope.apply(requested, present), requested

    def _moving_again(self, now: float) -> None:
        reason = self._stalled.reason
        stalled = self._stalled.resume(now)
        if stalled is not None:
            self.events.emit(logging.INFO, "control: moving again after %.2f s (%s)", stalled, reason)

    # --- teleop ---------------------------------------------------------------------------------------

    def _teleop(self, now: float, present: np.ndarray) -> tuple[Goal | None, np.ndarray | None]:
        """The station's newest target through the hand-over and the envelope; deadman: hold, then stall."""
        lost = self.policy.lost()
        if lost is not None:
            # the station's targets came through the side that is gone: the newest may be its last
            self._counters["blocked_ticks"] += 1
            return self._stall(now, present, "lost", lost), None
        target = self.teleop.fresh(now)
        if target is None:
            self._counters["deadman_ticks"] += 1
            reason = f"deadman: no teleop target for more than {self.teleop.config.deadman_ms:g} ms"
            return self._stall(now, present, "deadman", reason), None
        self._moving_again(now)
        last = self._last_goal if self._last_goal is not None else present
        requested = self.teleop.goal(target.positions, last, present)
        self._last_teleop_seq = target.seq
        return self._envelope.apply(requested, present), requested.copy()

    @property
    def source(self) -> Source:
        """Who commands the arm now."""
        return source_of(self._mode)

    def _stall(self, now: float, present: np.ndarray, key: str, reason: str) -> Goal | None:
        """Hold the last safe goal; after ``stall_timeout_s``, the configured stall action."""
        stall = self._stalled.tick(now, key, reason)
        if stall.began:
            held = self._last_goal if self._last_goal is not None else self._present
            assert held is not None
            self._hold_goal = held.copy()
            self._envelope.hold(self._hold_goal)
        if stall.new_reason and key != "priming":
            self.events.emit(logging.WARNING, "control: holding the last safe goal: %s", reason)
        safety = self.config.safety
        if stall.act:
            self._counters["stall_actions"] += 1
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
                self._mode = Mode.IDLE
                return None
        # checked each tick against where the arm is now (a hold is a goal like any other)
        assert self._hold_goal is not None
        return self._envelope.hold_goal(self._hold_goal, present)

    def _observe(self, present: np.ndarray) -> None:
        self.policy.observe(present.astype(np.float32), reset=self._plan.new_history)
        self._plan.new_history = False
        self._counters["observations"] += 1

    def _ask(self, k: int, present: np.ndarray) -> None:
        gen = self._plan.gen
        self._plan.inflight_since = self._clock()

        def done(actions: np.ndarray | None, error: str | None) -> None:
            self._result.put(ChunkResult(gen, k, actions, error))

        if not self.policy.submit(present.astype(np.float32), done, reset=self._plan.new_history):
            self._plan.inflight_since = None
            self._counters["submit_refused"] += 1
        else:
            self._plan.new_history = False
            self._counters["requests"] += 1

    # --- resting --------------------------------------------------------------------------------------

    def _start_rest(self) -> None:
        self._plan.drop()
        start = self._last_goal if self._last_goal is not None else self._present
        if start is None:
            return
        self._rest_target = self._envelope.rest_target(start)
        self._mode = Mode.RESTING

    def _resting(self) -> Goal | None:
        """This tick's goal on the way to the rest pose: at ``rest_speed_deg_s``, through the envelope."""
        target, present = self._rest_target, self._present
        if target is None or present is None:
            self._mode = Mode.HOLDING
            return None
        step = self.config.safety.rest_speed_deg_s * self.period
        # From where the arm is, not from the last goal: a blocked joint's goal must not run away.
        goal = self._envelope.apply(present + np.clip(target - present, -step, step), present)
        if np.allclose(goal, target, atol=1e-6):
            self._mode = Mode.HOLDING
            self._hold_goal = target.copy()
            self._envelope.hold(target)
            self.events.emit(logging.INFO, "control: rest pose reached; holding")
        return goal

    # --- status ---------------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """``control status``: the newest snapshot, with figures computed here, off the tick."""
        snap = self.snapshot()
        lat = self._latencies[~np.isnan(self._latencies)]
        late = self.recorder.recent_late_ms(int(self.rate_hz * 10))
        blocked = self.policy.blocked(self._clock())
        k = snap.tick
        return {
            "mode": snap.mode.value,
            "source": snap.source.value,
            "teleop": {
                "phase": snap.teleop_phase,
                "handover": self.teleop.config.handover,
                "last_seq": snap.teleop_last_seq,
                "targets": self.teleop.received,
                "out_of_order": self.teleop.out_of_order,
                "intervention": snap.intervention,
            },
            "recording": self.episodes.status() if self.episodes is not None else None,
            "estop": estop_status(self.estop),
            "rate_hz": self.rate_hz,
            "n_action_steps": self.n_steps,
            "refill_at": self.refill_at,
            "aggregate": self.config.aggregate,
            "tick": k,
            "queue_depth": snap.queue_depth,
            "counters": {
                **dict(snap.counters),
                "overruns": snap.overruns,
                "dropped_actions": snap.dropped_actions,
            },
            "safety": dict(snap.safety),
            "inference_latency_ticks": {
                "last": None if math.isnan(snap.last_latency_ticks) else snap.last_latency_ticks,
                "p50": float(np.percentile(lat, 50)) if len(lat) else None,
                "max": float(lat.max()) if len(lat) else None,
            },
            "jitter_ms": {
                "p50": float(np.percentile(np.abs(late), 50)) if len(late) else None,
                "p99": float(np.percentile(np.abs(late), 99)) if len(late) else None,
                "max": float(np.abs(late).max()) if len(late) else None,
            },
            "write_period_error_ms": self._writes.stats(),
            "stale_streams": list(blocked.stale) if blocked is not None else [],
            "blocked": blocked.reason if blocked is not None else "",
            "arm": {
                "healthy": not snap.arm_error,
                "error": snap.arm_error,
                "positions": {n: round(float(snap.present[i]), 2) for i, n in enumerate(self.names)}
                if snap.present is not None
                else {},
                "temperatures_c": {n: s.temperature_c for n, s in snap.state.items()},
            },
            "cpus_seen": {str(c): n for c, n in snap.cpu_seen.items()},
            "scheduling": snap.scheduling,
        }


def _estop_effect(action: str, previous_mode: Mode) -> str:
    if action == "torque_off":
        return "torque off"
    return "holding the present pose" if previous_mode is not Mode.IDLE else "arm idle"
