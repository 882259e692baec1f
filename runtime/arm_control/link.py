"""The daemon's side of the arm process: starts it, feeds it, watches it, and stands in for its loop.

:class:`ArmLink` starts ``python -m runtime.arm`` with one end of the link socket, sends it the
configuration and waits until it has the arm (it opens the serial port itself; the daemon never does).
From then on one thread of the daemon (``lerobot-runtime-arm-link``) carries the link:

- in: each tick's snapshot (kept as the newest, read by status, the handlers, the arm monitor and
  metrics), the tick's episode record (handed to the daemon's episode tap, which adds the camera
  frames: they never pass through the arm process), the loop's events (logged by the daemon), the
  loop's requests for a chunk (with real-time chunking, the plan's leftover and the delay; the camera
  parts are added here by the :class:`StreamFeed` and the inference worker answers over the link),
  and its full status map a few times a second;
- out: the gate (whether the policy may be asked: streams fresh, self-check passed), sent every
  ``GATE_EVERY_S``, which is also the arm process's sign that the daemon is alive.

The messages are those of :mod:`runtime.arm.messages`; one the arm process sends that this side
cannot take is refused (logged the first time for its kind and field, counted in ``control status``
as ``process.link_refused``) and the link goes on with the next.

Commands, e-stops and teleop targets are sent by whichever thread asks (the server's I/O thread, a
signal handler, the local leader): one datagram each, never a wait. It is the daemon's
:class:`~runtime.arm_control.interface.ArmControl`: the handlers, teleop, recording and status reach
the arm through nothing else.

When the arm process dies, its end of the link closes: the thread sees it at once, the event is
logged as CRITICAL, ``alive`` turns false (the daemon then withholds systemd's watchdog ping and says
so in STATUS=), status and metrics report it, and nothing is restarted: a new arm process, and any
motion, come only from a restart of the service and an operator's ``control start``.
"""

from __future__ import annotations

import itertools
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from drivers.config import ArmConfig
from drivers.errors import BusError
from runtime.arm.messages import (
    ARM_MESSAGES,
    LINK_VERSION,
    Ask,
    Bye,
    Chunk,
    CommandRequest,
    Dump,
    Dumped,
    DumpRequest,
    Estop,
    Failed,
    Gate,
    Init,
    LoopEvent,
    Message,
    Observation,
    Ready,
    ShutdownRequest,
    StatusMap,
    TargetClear,
    TargetPut,
    Tick,
    Waiting,
)
from runtime.arm.wire import Link, LinkClosed, Refusals
from runtime.arm_control.episodes import EpisodeTap
from runtime.arm_control.feed import StreamFeed
from runtime.bundle.interface import PolicyInterface
from runtime.control.config import ControlConfig, control_rate
from runtime.control.events import EventLog
from runtime.control.feed import Blocked
from runtime.control.handoff import Latest
from runtime.control.latch import ControlRefused, Latch, LatchNumbers, estop_status
from runtime.control.mailbox import Command, Shutdown, check_command, newest_latch, parse
from runtime.control.snapshot import Snapshot
from runtime.control.target import Target
from runtime.errors import LinkProtocolError
from runtime.teleop.config import TeleopConfig

log = logging.getLogger(__name__)

GATE_EVERY_S = 0.02
DUMP_TIMEOUT_S = 10.0


class ArmProcessError(BusError):
    """The arm process could not be started, or could not open the arm."""


class TeleopInbox:
    """The station's targets on their way to the arm process (the loop's ``teleop`` for the handlers)."""

    def __init__(self, link: ArmLink, config: TeleopConfig) -> None:
        self._link = link
        self.config = config
        self.received = 0
        self.out_of_order = 0
        self._last_seq: int | None = None

    def put(self, seq: int, positions: np.ndarray, now: float) -> bool:
        """Forward a target; False (and counted) when it is older than the newest one."""
        if self._last_seq is not None and seq <= self._last_seq:
            self.out_of_order += 1
            return False
        self._last_seq = seq
        self.received += 1
        self._link.send(TargetPut(Target(seq, np.asarray(positions, dtype=np.float64), now)))
        return True

    def clear(self) -> None:
        self._last_seq = None
        self._link.send(TargetClear())

    @property
    def phase(self) -> str:
        return self._link.snapshot().teleop_phase


class _FlightRecorder:
    """``loop.recorder`` for the daemon: the recording lives in the arm process, which writes it."""

    def __init__(self, link: ArmLink) -> None:
        self._link = link

    def dump(self, directory: Path, reason: str, extra: dict[str, Any] | None = None) -> Path:
        return self._link.dump(directory, reason, extra or {})


class ArmLink:
    def __init__(
        self,
        *,
        arm: ArmConfig,
        control: ControlConfig,
        teleop: TeleopConfig,
        policy: PolicyInterface,
        feed: StreamFeed,
        cpu: int | None,
        record: bool = False,
    ) -> None:
        self.arm_config = arm
        self.config = control
        self.policy = policy
        self.feed = feed
        self.cpu = cpu
        self.record = record
        self.names = tuple(policy.action_names)
        self.rate_hz = control_rate(control, policy.control_rate_hz)
        self.period = 1.0 / self.rate_hz
        self.events = EventLog()
        self.dump_requests: deque[str] = deque()
        self.teleop = TeleopInbox(self, teleop)
        self.recorder = _FlightRecorder(self)
        #: set by the daemon when ``[recording]`` is configured: fed each tick's record here
        self.episodes: EpisodeTap | None = None
        self.pid = 0
        self.memory = ""
        self._link: Link | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._snapshot: Latest[Snapshot] = Latest()
        self._snapshot.put(Snapshot(scheduling="not started"))
        self._status: dict[str, Any] = {}
        self._dead: str | None = None
        self._closing = False
        self._bye: bool | None = None
        self._latches = LatchNumbers()
        self._pending_estops: deque[Latch] = deque()
        self._dumps: dict[int, tuple[threading.Event, list[Dumped]]] = {}
        self._dump_ids = itertools.count(1)
        self.link_dropped = 0
        self._refusals = Refusals()

    # --- start ---------------------------------------------------------------------------------

    def start(
        self,
        wait_s: float = 0.0,
        *,
        should_stop: Callable[[], bool] = lambda: False,
        on_wait: Callable[[str], object] = lambda text: None,
        state_dir: Path | None = None,
    ) -> None:
        """Start the arm process and wait until it holds the arm (it waits up to ``wait_s`` for an
        absent one); raises :class:`ArmProcessError` with its reason when it cannot."""
        link, child = Link.pair(ARM_MESSAGES)
        self._link = link
        env = dict(os.environ)
        # the arm process imports this package from wherever the daemon did
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # numpy's BLAS would start a thread pool of its own beside the loop: the arm process needs none
        env.update({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.arm", "--fd", str(child.fileno())],
            pass_fds=(child.fileno(),),
            env=env,
        )
        child.close()
        self.pid = self._proc.pid
        link.send(
            Init(
                LINK_VERSION,
                self.config,
                self.teleop.config,
                self.arm_config,
                self.policy,
                self.cpu,
                wait_s,
                self.record,
            )
        )
        try:
            # said at once: the arm process says more once it runs (a loaded machine takes a while to start it)
            on_wait(f"starting the arm process for {self.arm_config.port}")
            self._handshake(should_stop, on_wait)
        except BaseException:
            self._kill()
            link.close()
            raise
        self._thread = threading.Thread(target=self._run, name="lerobot-runtime-arm-link", daemon=True)
        self._thread.start()

    def _handshake(self, should_stop: Callable[[], bool], on_wait: Callable[[str], object]) -> None:
        assert self._link is not None and self._proc is not None
        poller = select.poll()
        poller.register(self._link.fileno(), select.POLLIN)
        terminated = ready = False
        while True:
            if should_stop() and not terminated:
                self._proc.send_signal(signal.SIGTERM)  # it stops waiting for the arm and says so
                terminated = True
            if ready:  # from now on the arm process counts silence as the daemon's loss
                self._send_gate(time.monotonic())
            poller.poll(GATE_EVERY_S * 1e3)
            try:
                for message in self._link.messages(self._refused):
                    match message:
                        case Waiting(text=text):
                            on_wait(text)
                        case Failed(error=error):
                            if terminated:
                                raise InterruptedError("stopped while waiting for the arm")
                            raise ArmProcessError(error)
                        case StatusMap(status=status):
                            self._status = dict(status)
                        case Ready(joints=joints, memory=memory):
                            ready = True
                            self.names = joints  # as the arm names them
                            self.memory = memory
                            log.info("arm process %d holds the arm (%s)", self.pid, memory)
                        case Tick() | LoopEvent():
                            self._dispatch(message)
                            if isinstance(message, Tick):  # the loop ticks: what status reads is the loop's own
                                return
                        case _:
                            pass  # nothing else comes before the loop ticks
            except LinkClosed:
                code = self._proc.wait(5)
                if terminated:  # asked to stop: ended by the SIGTERM, before its handler was even set up
                    raise InterruptedError(f"stopped while waiting for the arm ({_exit_words(code)})") from None
                raise ArmProcessError(f"the arm process ended before it had the arm ({_exit_words(code)})") from None

    # --- the link thread ------------------------------------------------------------------------

    def send(self, message: Message) -> bool:
        link = self._link
        if link is None or self._dead is not None:
            return False
        sent = link.send(message)
        if not sent:
            self.link_dropped += 1
        return sent

    def _run(self) -> None:
        link = self._link
        assert link is not None
        poller = select.poll()
        poller.register(link.fileno(), select.POLLIN)
        next_gate = 0.0
        while True:
            now = time.monotonic()
            if now >= next_gate:
                self._send_gate(now)
                next_gate = now + GATE_EVERY_S
            poller.poll(max(0.0, (next_gate - time.monotonic()) * 1e3))
            try:
                for message in link.messages(self._refused):
                    self._take(message)
            except LinkClosed:
                self._died()
                link.close()
                return

    def _send_gate(self, now: float) -> None:
        try:
            blocked = self.feed.blocked(now)
        except Exception as e:
            blocked = Blocked("untrusted", f"the policy check failed: {e}")
        self.send(Gate(blocked))

    def _take(self, message: Message) -> None:
        try:
            self._dispatch(message)
        except Exception:  # a bug here must not end the link (and with it the watchdog)
            log.exception("arm link: a %s from the arm process failed", type(message).__name__)

    def _refused(self, e: LinkProtocolError) -> None:
        if self._refusals.first(e):
            log.error("arm link: refused a message from the arm process (more like it are counted, not logged): %s", e)

    def _dispatch(self, message: Message) -> None:
        match message:
            case Tick(snapshot=snap, episode=record, episode_end=ended):
                self._snapshot.put(snap)
                taken = snap.latches_taken
                while self._pending_estops and self._pending_estops[0].id <= taken:
                    self._pending_estops.popleft()
                episodes = self.episodes
                if episodes is not None:
                    if record is not None:
                        episodes.tick(
                            record.now,
                            record.present,
                            record.goal,
                            record.requested,
                            record.source,
                            record.intervention,
                        )
                    if ended:
                        episodes.end()
            case Ask(id=rid, state=state, reset=reset, prefix=prefix):

                def done(actions: np.ndarray | None, error: str | None) -> None:
                    if actions is not None:
                        self.send(Chunk(rid, actions=np.asarray(actions, dtype=np.float32)))
                    else:
                        self.send(Chunk(rid, error=error or "no chunk"))

                if not self.feed.submit(state, done, reset=reset, prefix=prefix):
                    done(None, "the server is not taking work")
            case Observation(state=state, reset=reset):
                self.feed.observe(state, reset=reset)
            case LoopEvent(level=level, text=text):
                self.events.emit(level, "%s", text)
            case StatusMap(status=status):
                self._status = dict(status)
            case DumpRequest(reason=reason):
                self.dump_requests.append(reason)
            case Dumped(id=rid):
                waiting = self._dumps.get(rid)
                if waiting is not None:
                    waiting[1].append(message)
                    waiting[0].set()
            case Bye(ok=ok):
                self._bye = ok
            case _:  # Waiting, Failed, Ready: the hand-shake's, said once the loop ticks
                log.warning("arm link: a %s from the arm process after its start: ignored", type(message).__name__)

    def _died(self) -> None:
        proc = self._proc
        code: int | None = None
        if proc is not None:
            try:
                code = proc.wait(2)
            except subprocess.TimeoutExpired:
                code = None
        if self._closing:
            self._dead = f"the arm process ended ({_exit_words(code)})"
        else:
            self._dead = f"the arm process died ({_exit_words(code)})"
            self.events.emit(
                logging.CRITICAL,
                "%s: the arm is unattended (its servos keep their last goal); "
                "nothing restarts it: check the arm, then restart the service",
                self._dead,
            )
        for waiting in self._dumps.values():  # a recording asked for will not come: say so now
            waiting[0].set()

    # --- what the handlers and the daemon ask ------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._dead is None and self._proc is not None and self._thread is not None

    @property
    def death(self) -> str | None:
        """Why the arm process is gone, or None while it runs."""
        return self._dead

    def snapshot(self) -> Snapshot:
        snap = self._snapshot.peek()
        assert snap is not None
        if self._dead is not None:
            return replace(snap, arm_error=self._dead)
        return snap

    def stalled_for(self, now: float) -> float:
        """Seconds since the arm process's last tick beyond five periods (0 while it ticks)."""
        return self.snapshot().stalled_for(now, self.period) if self.alive else 0.0

    @property
    def estop(self) -> Latch | None:
        pending = max(tuple(self._pending_estops), key=lambda latch: latch.id, default=None)
        return newest_latch(pending, self.snapshot().latch)

    @property
    def estop_reason(self) -> str | None:
        latch = self.estop
        return latch.reason if latch is not None else None

    def request_estop(self, reason: str) -> Latch:
        """Number and send an e-stop (any thread, a signal handler too); the arm takes it at its next tick."""
        snap = self.snapshot()
        seen = max(snap.latches_taken, snap.latch.id if snap.latch is not None else 0)
        latch = self._latches.issue(reason, time.monotonic(), seen)
        self._pending_estops.append(latch)
        self.send(Estop(latch))
        return latch

    def check(self, command: str, latch: int = 0) -> None:
        if self._dead is not None and command != "release":
            raise ControlRefused(f"the arm is unattended: {self._dead}")
        blocked = self.feed.blocked(time.monotonic()) if command == "start" else None
        check_command(
            command, latch, self.estop, self.snapshot().arm_error, blocked.reason if blocked is not None else None
        )

    def request(self, command: str | Command, who: str = "", latch: int = 0) -> None:
        if isinstance(command, Shutdown):
            self.send(ShutdownRequest())
            return
        if isinstance(command, str):
            try:
                command = parse(command, who, latch)
            except ValueError as e:  # as the loop's own request refuses a word it does not know
                raise ControlRefused(str(e)) from None
            assert not isinstance(command, Shutdown)  # parse knows no word for it
        self.send(CommandRequest(command))

    def dump(self, directory: Path, reason: str, extra: dict[str, Any]) -> Path:
        """Ask the arm process to write its flight recording; the path it wrote (OSError if it could not)."""
        rid = next(self._dump_ids)
        event: threading.Event = threading.Event()
        answer: list[Dumped] = []
        self._dumps[rid] = (event, answer)
        try:
            if not self.send(Dump(rid, directory, reason, extra)):
                raise OSError(f"the arm process is not reachable ({self._dead or 'link full'})")
            if not event.wait(DUMP_TIMEOUT_S) or not answer:
                raise OSError(self._dead or f"the arm process did not write it within {DUMP_TIMEOUT_S:g} s")
        finally:
            self._dumps.pop(rid, None)
        reply = answer[0]
        if reply.path is None:
            raise OSError(reply.error or "the arm process wrote no recording and said no reason")
        return reply.path

    def status(self) -> dict[str, Any]:
        """``control status``: the arm process's newest status map, brought up to date with this
        tick's snapshot and what only the daemon knows (recording, stale streams, the process)."""
        snap = self.snapshot()
        status = {k: (dict(v) if isinstance(v, dict) else v) for k, v in self._status.items()}
        estop = self.estop
        status.update(
            {
                "mode": snap.mode.value,
                "source": snap.source.value,
                "tick": snap.tick,
                "queue_depth": snap.queue_depth,
                "estop": estop_status(estop),
                "recording": self.episodes.status() if self.episodes is not None else None,
            }
        )
        blocked = self.feed.blocked(time.monotonic())
        status["stale_streams"] = list(blocked.stale) if blocked is not None else []
        status["blocked"] = blocked.reason if blocked is not None else ""
        teleop = status.setdefault("teleop", {})
        teleop["targets"] = self.teleop.received
        teleop["out_of_order"] = self.teleop.out_of_order
        if self._dead is not None:
            arm = dict(status.get("arm", {}))
            arm.update({"healthy": False, "error": self._dead})
            status["arm"] = arm
        status["process"] = {
            "kind": "own",
            "pid": self.pid,
            "alive": self._dead is None,
            "death": self._dead or "",
            "memory": self.memory,
            "link_dropped": self.link_dropped,
            "link_refused": self._link.refused if self._link is not None else 0,
        }
        return status

    # --- stop ----------------------------------------------------------------------------------------

    def shutdown(self, timeout: float = 15.0) -> bool:
        """Ask the arm process to stop motion, hold, carry out ``safety.shutdown_action`` and exit;
        False when it could not confirm the arm safe (or had to be killed)."""
        proc = self._proc
        if proc is None:
            return True
        self._closing = True
        self.send(ShutdownRequest())
        ok = True
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.error("the arm process did not stop within %.0f s; terminating it", timeout)
            ok = False
            self._kill()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._link is not None:
            self._link.close()
        if self._dead is not None and "died" in self._dead:
            ok = False
        return ok and self._bye is not False and proc.returncode == 0

    def _kill(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _exit_words(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
