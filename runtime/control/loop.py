"""The control loop's runner: the thread that ticks, reads the arm, writes what the controller decided.

One thread, pinned to the control CPU and (where allowed) SCHED_FIFO, ticks on absolute deadlines:

    gather the tick's inputs (commands and e-stops from the mailbox, the finished chunk, the policy's
    gate, the teleop target) -> controller.step (from them and the last reading)
    -> write the goal (one sync write) [-> switch torque, report it] -> read joints (one sync read)
    -> hand them to the policy if the step asked -> record -> publish the snapshot

The write comes first so that it leaves at the deadline: a read waits on the servos' replies, a
write on nothing, and what the servos see is when the write arrives.

The controller (:class:`~runtime.control.controller.Controller`) only decides: everything it acts
on from outside comes in the step's :class:`~runtime.control.controller.Inputs`, and the runner
carries out each :class:`~runtime.control.controller.Decision`. Every goal the runner writes is a
decision's, and only the safety envelope makes one (:class:`~runtime.control.safety.Goal`): policy,
teleop, hand-over, rest, hold, shutdown, e-stop hold and the hold written before torque goes on all
reach the bus the same way. Torque is the runner's too: it writes the hold, then switches torque on
(:meth:`~drivers.bus.SerialServoBus.torque_on`, which writes no goal of its own), and reports how it
went, so a start whose torque did not come on is refused. Inference never runs here: the runner
hands the joints to the :class:`~runtime.control.feed.PolicyFeed` when the decision asks, and the
finished chunk comes back through a one-slot handoff, given to the next step. Other threads talk to
the loop through its mailbox (e-stops are numbered latches, never lost; a release names the latch it
saw) and read what it did from the frozen :class:`Snapshot` each tick ends by publishing
(:meth:`ControlLoop.snapshot`), never the loop's or the controller's attributes. Nothing in the tick
logs: events are logged by another thread. ``hooks`` run on the loop's thread around each tick: the
arm process's link to the daemon (:mod:`runtime.arm.process`).

Modes (:class:`~runtime.control.mode.Mode`): ``idle`` (never commanded, or torque off), ``running``
(executing chunks), ``teleop`` (a station's leader pose, after a hand-over that does not jump),
``holding`` (torque on, a fixed goal), ``resting`` (moving slowly to the rest pose), ``estopped``
(latched). The goal's source, as recorded and reported, is ``policy`` (running), ``teleop`` or
``hold`` (everything else); exactly one at a time, switched only by an explicit request.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from drivers.bus import JointState
from drivers.calibration import Calibration
from drivers.errors import BusError, ServoFaultError
from runtime.bundle.interface import PolicyInterface
from runtime.control.clock import Ticker, pin_thread, request_realtime
from runtime.control.config import ControlConfig, control_rate
from runtime.control.controller import Ask, ChunkResult, Controller, Decision, Inputs
from runtime.control.events import EventLog
from runtime.control.feed import Blocked, PolicyFeed
from runtime.control.handoff import Latest
from runtime.control.latch import ControlRefused, Latch, estop_status
from runtime.control.mailbox import Command, Mailbox, Shutdown, check_command, newest_latch, parse
from runtime.control.mode import Mode, Source
from runtime.control.recorder import MODE_CODE, FlightRecorder
from runtime.control.safety import Goal
from runtime.control.snapshot import Snapshot
from runtime.control.tap import EpisodeSink
from runtime.control.target import TeleopTarget
from runtime.control.writetime import WriteClock
from runtime.engine.affinity import current_cpu
from runtime.errors import ConfigError
from runtime.teleop.config import TeleopConfig

__all__ = ["ArmBus", "ChunkResult", "ControlLoop", "TickHooks"]

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
    def torque_on(self) -> None: ...
    def disable_torque(self) -> None: ...


def joint_name(action: str, joints: tuple[str, ...]) -> str:
    """The arm's joint an action name drives: itself, or LeRobot's ``<joint>.pos`` (its SO-100/SO-101
    and Koch datasets name actions so) when the arm has that joint."""
    if action not in joints and action.endswith(".pos") and action[: -len(".pos")] in joints:
        return action[: -len(".pos")]
    return action


class ControlLoop:
    def __init__(
        self,
        bus: ArmBus,
        calibration: Calibration,
        policy_interface: PolicyInterface,
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
        self.names = tuple(joint_name(n, bus.joints) for n in policy_interface.action_names)
        missing = [n for n in self.names if n not in bus.joints]
        if missing:
            raise ConfigError(
                f"the policy's action names {', '.join(missing)} are not joints of the arm "
                f"({', '.join(bus.joints)}); the bundle was made for another arm"
            )
        self.rate_hz = control_rate(config, policy_interface.control_rate_hz)
        self.period = 1.0 / self.rate_hz
        teleop = teleop if teleop is not None else TeleopConfig()
        self.controller = Controller(
            self.names, calibration, policy_interface, config, teleop=teleop, period=self.period
        )
        #: the steps run per chunk and the queue depth the next is asked for at (fixed, for status)
        self.n_steps, self.refill_at = self.controller.n_steps, self.controller.refill_at
        #: commands and e-stops from other threads, taken at the next tick (e-stops first)
        self.mailbox = Mailbox(clock)
        #: where the station's targets land (any thread); the runner gives each step the fresh one
        self.teleop = TeleopTarget(len(self.names), teleop)
        #: why the flight recorder should be written (e-stops, stall actions), for the daemon
        self.dump_requests: deque[str] = deque()
        #: the finished chunk, put by the inference callback's thread, given to the next step
        self._results: Latest[ChunkResult] = Latest()
        #: the e-stop in effect as of the last step, and the gate it was given: for other threads
        self._latch: Latch | None = None
        self._blocked: Blocked | None = None
        #: the latencies of the chunks measured, newest 256, and how many: for status and the benches
        self._latency_ring = np.full(256, np.nan)
        self._latencies = 0
        self.recorder = FlightRecorder(self.names, self.rate_hz, config.recorder_s)
        #: set by the daemon when ``[recording]`` is configured: feeds open episodes every tick
        self.episodes: EpisodeSink | None = None
        self._present: np.ndarray | None = None
        #: the reading the next tick decides from (None: that read failed)
        self._reading: np.ndarray | None = None
        self._last_state: dict[str, JointState] = {}
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

    # --- requests from other threads (the mailbox; no lock) --------------------------------------

    def request(self, command: str | Command, who: str = "", latch: int = 0) -> None:
        """Queue ``start`` (policy) | ``teleop`` | ``stop`` (hold) | ``release`` (or the
        :mod:`~runtime.control.mailbox` command itself) for the next tick (checked first by
        :meth:`check`). ``latch``: the e-stop latch a release is for."""
        if isinstance(command, str):
            try:
                command = parse(command, who, latch)
            except ValueError as e:
                raise ControlRefused(str(e)) from None
        self.mailbox.post(command)

    def check(self, command: str, latch: int = 0) -> None:
        """Raise :class:`ControlRefused` when ``command`` cannot be carried out now; a release of any
        latch but the newest (``latch``) raises :class:`StaleLatch`. For any thread: from the mailbox,
        the newest snapshot and the policy's gate at the caller's time; the tick checks again."""
        blocked = self.policy.blocked(self._clock()) if command == "start" else None
        arm_error = self.snapshot().arm_error
        check_command(command, latch, self.estop, arm_error, blocked.reason if blocked is not None else None)

    def post_estop(self, latch: Latch) -> Latch:
        """Latch an e-stop numbered elsewhere (the daemon's, in the arm's process); returns it as
        posted (renumbered after a newer latch given out here). For the loop's own thread."""
        return self.mailbox.post_estop(latch)

    def request_estop(self, reason: str) -> Latch:
        """Latch a new e-stop, effective at the next tick, and return it. Each request is a latch
        of its own, also while one is latched, so a release already on its way is refused. Safe to call
        from any thread and from a signal handler (no lock)."""
        return self.mailbox.estop(reason)

    @property
    def estop(self) -> Latch | None:
        """The newest e-stop, requested (effective at the next tick) or in effect; None when released."""
        # Read the requests before the latch: the tick sets the latch before it drops the requests.
        pending = self.mailbox.pending_estop()
        return newest_latch(pending, self._latch)

    @property
    def estop_reason(self) -> str | None:
        latch = self.estop
        return latch.reason if latch is not None else None

    @property
    def source(self) -> Source:
        """Who commands the arm now (as of the last tick)."""
        return self.snapshot().source

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

    @property
    def death(self) -> str | None:
        """Why the loop's process is gone: never, for a thread of the daemon (see ArmLink.death)."""
        return None

    @property
    def pid(self) -> int:
        """The process the loop's thread runs in: the daemon's own."""
        return os.getpid()

    def stalled_for(self, now: float) -> float:
        """Seconds since the last tick beyond five periods (0 while ticking normally)."""
        return self.snapshot().stalled_for(now, self.period) if self.alive else 0.0

    def snapshot(self) -> Snapshot:
        """The newest per-tick snapshot (any thread; never waits)."""
        snap = self._snapshot.peek()
        assert snap is not None  # one is put in __init__ and only replaced since
        return snap

    def latencies(self, since: int = 0) -> np.ndarray:
        """Inference latencies in ticks of the chunks measured since the ``since``-th (a snapshot's
        ``latencies_measured``), the newest 256 at most."""
        n = self._latencies
        ring = self._latency_ring.copy()
        first = max(since, n - len(ring))
        return np.array([ring[i % len(ring)] for i in range(first, n)], dtype=np.float64)

    def write_times(self) -> tuple[np.ndarray, np.ndarray]:
        """(completion stamps on the loop's clock, period errors in ms) of the recent sync writes."""
        return self._writes.recent()

    def _publish(self) -> None:
        k = self._ticker.tick
        c = self.controller
        self._snapshot.put(
            Snapshot(
                tick=k,
                at=self._tick_at,
                next_due=self._ticker.deadline(k + 1),
                mode=c.mode,
                latch=c.latch,
                latches_taken=c.latches_taken,
                present=self._present,
                state=self._last_state,
                arm_error=c.arm_error,
                queue_depth=c.queue.depth(k + 1),
                dropped_actions=c.queue.dropped,
                overruns=self._ticker.overruns,
                counters=c.counters.copy(),
                safety=dict(c.envelope.counts),
                last_latency_ticks=c.last_latency_ticks,
                latencies_measured=c.latencies_measured,
                teleop_phase=c.handover.phase if c.mode is Mode.TELEOP else "",
                teleop_last_seq=c.last_teleop_seq,
                teleop_late=self.teleop.late,
                intervention=c.intervention and c.mode is Mode.TELEOP,
                cpu_seen=dict(self._cpu_ticks),
                scheduling=self._scheduling,
                native_id=self._native_id,
                last_write_at=self._writes.last_at,
                last_write_error_ms=self._writes.last_error_ms,
                write_periods=self._writes.periods,
                writes_off=self._writes.off,
            )
        )
        if self.hooks is not None:
            self.hooks.after_tick(self)

    def shutdown(self, timeout: float = 15.0) -> bool:
        """Stop motion, hold, then ``safety.shutdown_action``; returns False if the arm could not be made safe."""
        if self._thread is None:
            return True
        self.mailbox.post(_SHUTDOWN)
        self._shutdown_done.wait(timeout)
        self._stop.set()
        self._thread.join(2.0)
        # the loop's thread is done (or given up on): what it left is read once, here
        return self.shutdown_ok and self.controller.torque_ok and self._shutdown_done.is_set()

    def _run(self) -> None:
        self._native_id = threading.get_native_id()
        if self.cpu is not None:
            pin_thread(self.cpu)
        self._scheduling = request_realtime(self.config.rt_priority)
        c = self.controller
        self.events.emit(
            logging.INFO if self._scheduling.startswith(("SCHED_FIFO", "SCHED_OTHER (")) else logging.WARNING,
            "control loop: %.1f Hz, %d of %d steps per chunk, next chunk at %d queued, aggregate %s; CPU %s; %s",
            self.rate_hz,
            c.n_steps,
            c.queue.size // 4,
            c.refill_at,
            self.config.aggregate,
            self.cpu if self.cpu is not None else "any",
            self._scheduling,
        )
        ticker = self._ticker
        self._reading = self._read()  # the first tick decides from it
        ticker.start()
        try:
            while not self._stop.is_set():
                k, _due, late = ticker.wait()
                self._cpu_ticks[current_cpu()] += 1
                if self.hooks is not None:
                    self.hooks.before_tick(self)
                self._tick(k, late)
                self._publish()
                if self._shutdown_done.is_set():
                    break
        except Exception as e:  # a bug in the tick must not leave the arm moving unattended
            idle = c.mode is Mode.IDLE
            then = "the arm stays idle (torque off)" if idle else "holding the arm"
            self.events.emit(logging.CRITICAL, "control loop failed: %s: %s; %s", type(e).__name__, e, then)
            log.exception("control loop failed")
            held = c.hold_present()
            if held is not None:
                self._write(held)
            c.events.move_to(self.events)
            self._publish()
            self.shutdown_ok = False
            self._shutdown_done.set()

    # --- the tick -------------------------------------------------------------------------------------

    def _tick(self, k: int, late: float) -> None:
        now = self._clock()
        self._write_at = self._write_err_ms = math.nan
        c = self.controller
        # Decide from the reading taken right after the last write, write at once, then read for the
        # next tick: the write leaves at the deadline, however long the servos take to answer a read
        # (a read waits on their replies; a write waits on nothing).
        present = self._reading
        inputs = self._inputs(now, self._ticker.deadline(k))
        decision = c.step(k, now, present, inputs)
        # publish the latch, then drop the requests it was taken from (see estop)
        self._latch = c.latch
        if inputs.estops:
            self.mailbox.drop_estops(len(inputs.estops))
        held: Goal | None = None  # the hold written before torque went on
        while decision.torque:
            if decision.torque == "on":
                held = decision.goal
            decision = c.torque_done(self._switch_torque(decision))
        if decision.dumps:
            self.dump_requests.extend(decision.dumps)
        if c.latencies_measured != self._latencies:  # a chunk's latency was measured
            self._latency_ring[self._latencies % len(self._latency_ring)] = c.last_latency_ticks
            self._latencies += 1
        goal = decision.goal
        # a start's first goal is the hold written before its torque on: one write of it
        if goal is not None and (held is None or not np.array_equal(goal, held)):
            self._write(goal)
        if decision.shutdown:
            c.events.move_to(self.events)
            self._shutdown()
            return
        self._reading = self._read()
        if decision.ask is not None and self._reading is not None:
            self._hand_over(decision.ask, self._reading, now)  # from the freshest joints
        c.events.move_to(self.events)
        requested = decision.requested
        if self.episodes is not None:
            self.episodes.tick(
                now,
                present,
                goal if goal is not None else c.hold_goal,
                requested,
                (c.source if requested is not None else Source.HOLD).value,
                c.intervention and c.mode is Mode.TELEOP,
            )
        self.recorder.record(
            now,
            k,
            MODE_CODE[c.mode],
            present,
            goal,
            requested,
            c.envelope.last_bits if requested is not None else None,
            c.queue.depth(k + 1),
            c.last_latency_ticks,
            late * 1e3,
            (self._write_at - self._ticker.deadline(k)) * 1e3,
            self._write_err_ms,
        )
        c.counters["ticks"] += 1
        self._tick_at = now

    def _inputs(self, now: float, due: float) -> Inputs:
        """What the step needs from outside, read at ``now`` by the tick due at ``due``: the commands
        first, then the e-stop requests, so an e-stop posted before a command is taken with it (and comes
        first). Whether the policy's side is lost and the teleop target matter only in teleop or to a
        command (a take-over reads them in its own tick): read then, not on every tick of a running policy."""
        box = self.mailbox
        commands: tuple[Command, ...] = ()
        command = box.take_command()
        if command is not None:
            taken = [command]
            # nothing after a shutdown is taken: the loop ends with it
            while not isinstance(command, Shutdown) and (command := box.take_command()) is not None:
                taken.append(command)
            commands = tuple(taken)
        policy = self.policy
        self._blocked = blocked = policy.blocked(now)
        if commands or self.controller.mode is Mode.TELEOP:
            return Inputs(
                box.estop_requests(),
                commands,
                self._results.take(),
                blocked,
                policy.lost(),
                self.teleop.fresh(now, due),
            )
        return Inputs(box.estop_requests(), commands, self._results.take(), blocked)

    def _switch_torque(self, decision: Decision) -> str | None:
        """Carry out a decision's torque switch: its goal first (a hold), then torque. Torque comes on
        only over a goal written this way, so the arm holds where it is; returns why it failed, or None."""
        if decision.dumps:
            self.dump_requests.extend(decision.dumps)
        goal = decision.goal
        if goal is not None and not self._write(goal) and decision.torque == "on":
            return "the hold before it could not be written"
        try:
            if decision.torque == "on":
                self.bus.torque_on()
            else:
                self.bus.disable_torque()
        except BusError as e:
            return str(e)
        return None

    def _hand_over(self, ask: Ask, reading: np.ndarray, now: float) -> None:
        """Hand the policy the reading the decision asked for: for a chunk (answered into the handoff
        the next step is given) or for its history alone."""
        state = reading.astype(np.float32)
        if not ask.chunk:
            self.policy.observe(state, reset=ask.reset)
            self.controller.asked(ask, True, now)
            return
        results, gen, k = self._results, ask.gen, ask.k

        def done(actions: np.ndarray | None, error: str | None) -> None:
            results.put(ChunkResult(gen, k, actions, error))

        accepted = self.policy.submit(state, done, reset=ask.reset, prefix=ask.prefix)
        self.controller.asked(ask, accepted, now)

    def _fault_estop(self, reason: str | None) -> None:
        # The loop's own checks fail again every tick while the fault lasts: a latch per tick would
        # leave nothing a release could name. Released while it lasts, the fault latches again.
        if reason is not None and self.estop is None:
            self.mailbox.estop(reason)

    def _read(self) -> np.ndarray | None:
        """This tick's joint positions; the last good ones on a servo fault; None when the bus failed."""
        try:
            state = self.bus.read_state()
        except ServoFaultError as e:
            self._fault_estop(self.controller.servo_fault(e))
            return self._present
        except BusError as e:
            self._fault_estop(self.controller.bus_failed("read", e))
            return None
        self._last_state = state
        present = np.fromiter((state[n].position for n in self.names), dtype=np.float64, count=len(self.names))
        self.controller.read_ok(present)
        self._present = present
        return present

    def _write(self, goal: Goal) -> bool:
        """Write one goal; only the envelope makes a :class:`Goal`, so nothing else reaches the bus."""
        try:
            self.bus.write_goals({n: float(goal[i]) for i, n in enumerate(self.names)})
        except BusError as e:
            self._fault_estop(self.controller.bus_failed("write", e))
            return False
        # what the servos see: when the goal left, not when the tick woke
        self._write_at = self._clock()
        self._write_err_ms = self._writes.stamp(self._ticker.tick, self._write_at)
        self.controller.counters["writes"] += 1
        self.controller.written(goal)
        return True

    def _shutdown(self) -> None:
        """Stop motion, hold, then rest or torque off, in that order (the controller decides; here the ticks)."""
        c = self.controller
        was = c.mode
        if self.episodes is not None:
            self.episodes.end()
        held, then = c.begin_shutdown()
        if held is not None:
            self._write(held)
        if then == "torque_off":
            try:
                self.bus.disable_torque()
            except BusError as e:
                c.end_with_torque_off(str(e))
            else:
                c.end_with_torque_off(None)
        c.events.move_to(self.events)
        end = self._clock() + SHUTDOWN_REST_LIMIT_S
        while then == "rest" and c.mode is Mode.RESTING and self._clock() < end:
            self._ticker.wait()
            goal = c.rest_step(self._read())
            if goal is not None:
                self._write(goal)
            c.events.move_to(self.events)
            self._publish()
        self.events.emit(logging.INFO, "control: shut down (mode was %s, now %s)", was, c.mode)
        self._shutdown_done.set()

    # --- status ---------------------------------------------------------------------------------------

    def status(self, *, ask_gate: bool = True) -> dict[str, Any]:
        """``control status``: the newest snapshot, with figures computed here, off the tick (any
        thread: what it reads besides the snapshot is copied in one step, or plain counts). The
        policy's gate is asked now, at the caller's time; ``ask_gate=False`` takes it as the last tick
        read it, for a thread that must not call the feed (the arm process's, whose feed is the loop's)."""
        snap = self.snapshot()
        ring = self._latency_ring.copy()
        lat = ring[~np.isnan(ring)]
        late = self.recorder.recent_late_ms(int(self.rate_hz * 10))
        blocked = self.policy.blocked(self._clock()) if ask_gate else self._blocked
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
                "late": snap.teleop_late,
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


_SHUTDOWN = Shutdown()
