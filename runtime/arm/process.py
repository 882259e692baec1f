"""The arm's own process: the serial port, the control loop, the safety envelope, the flight recorder.

Started by the daemon (:class:`runtime.arm_control.link.ArmLink`) as ``python -m runtime.arm --fd N``, one end
of the link socket inherited as file descriptor N; the first message is the configuration
(:class:`~runtime.arm.messages.Init`, refused when the daemon speaks another version of the link).
Nothing here decodes network messages, runs OpenVINO or encodes video: chunks, teleop targets and
commands arrive over the link (:mod:`runtime.arm.messages`), and the loop's snapshot, events and each
tick's episode record leave over it. A message from the daemon this side cannot take is refused: the
loop's events say the first of each kind and field, ``control status`` counts them all
(``link.refused``), and the tick goes on; a refused message is no word from the daemon (a daemon that
says nothing readable for ``control.link_timeout_s`` is lost).
The interpreter runs the loop's thread (pinned to the control CPU, SCHED_FIFO where allowed) and a
main thread that waits, builds the full status map four times a second (from the snapshot the loop
publishes, never on the tick), writes flight recordings and handles signals.

When the daemon side stops answering (its end of the link closes: SIGKILL, a native crash in
inference, an exit; or nothing heard for ``control.link_timeout_s``), the loop holds the last safe
goal at its next tick and, after ``safety.stall_timeout_s``, carries out ``safety.stall_action``, as
for any other stall; once the arm is no longer moving this process shuts down (hold, then
``safety.shutdown_action``) and exits. It never moves the arm again on its own.

Signals: SIGTERM shuts down as above (systemd stopping the unit reaches this process too); SIGUSR1
latches an e-stop at the next tick (``systemctl kill -s USR1`` reaches every process of the unit, so
an e-stop works even while the daemon is hung); SIGINT is left to the daemon (Ctrl-C in a terminal
reaches both, and the daemon asks for the shutdown).
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import logging
import os
import select
import signal
import socket
import sys
import time
from collections import deque
from types import FrameType

import numpy as np

from runtime.arm.collector import Collector
from runtime.arm.messages import (
    DAEMON_MESSAGES,
    KINDS,
    Ask,
    Bye,
    Chunk,
    CommandRequest,
    Dump,
    Dumped,
    DumpRequest,
    EpisodeRecord,
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
from runtime.control.config import control_rate
from runtime.control.feed import Blocked, OnDone, Prefix
from runtime.control.loop import ControlLoop
from runtime.control.mode import MOVING
from runtime.errors import LinkProtocolError

log = logging.getLogger("runtime.arm")

#: seconds between full ``control status`` maps the main thread sends to the daemon (snapshots go every tick)
STATUS_EVERY_S = 0.25
#: seconds the arm process waits for its configuration, the daemon's first message
INIT_TIMEOUT_S = 30.0


class LinkPolicy:
    """The loop's :class:`~runtime.control.feed.PolicyFeed` across the link: the daemon adds the camera
    parts, asks its inference worker and sends the chunk back; it also says, many times a second,
    whether the policy may be asked (the gate). Silence longer than ``timeout_s`` is a loss; what
    counts as word from the daemon is each message taken (:meth:`heard`)."""

    def __init__(self, link: Link, timeout_s: float) -> None:
        self.link = link
        self.timeout_s = timeout_s
        self._pending: dict[int, OnDone] = {}
        self._ids = itertools.count(1)
        self._gate: Blocked | None = Blocked("daemon", "no word from the daemon yet")
        self._heard_at = time.monotonic()
        self._lost: str | None = None

    # --- the loop ----------------------------------------------------------------------------

    def submit(self, state: np.ndarray, on_done: OnDone, *, reset: bool = False, prefix: Prefix | None = None) -> bool:
        if self.lost() is not None:
            return False
        rid = next(self._ids)
        if not self.link.send(Ask(rid, state, reset, prefix)):
            return False
        self._pending[rid] = on_done
        return True

    def observe(self, state: np.ndarray, *, reset: bool = False) -> None:
        if self.lost() is None:
            self.link.send(Observation(state, reset))

    def blocked(self, now: float) -> Blocked | None:
        lost = self._lost_at(now)
        return Blocked("lost", lost) if lost is not None else self._gate

    def lost(self) -> str | None:
        return self._lost_at(time.monotonic())

    @property
    def gone(self) -> str | None:
        """Why the daemon was given up, as last found by the loop's thread (no clock, no callback: for any thread)."""
        return self._lost

    def _lost_at(self, now: float) -> str | None:
        if self._lost is not None:
            return self._lost
        silent = now - self._heard_at
        if silent > self.timeout_s:
            # for good: a daemon that comes back after this is not trusted to drive the arm again
            self.on_lost(f"the daemon has not answered for {silent:.2f} s (control.link_timeout_s {self.timeout_s:g})")
            return self._lost
        return None

    # --- what arrived (on the loop's thread, before the tick) ---------------------------------

    def heard(self) -> None:
        self._heard_at = time.monotonic()

    def on_gate(self, blocked: Blocked | None) -> None:
        self._gate = blocked

    def on_chunk(self, chunk: Chunk) -> None:
        done = self._pending.pop(chunk.id, None)
        if done is not None:
            done(chunk.actions, chunk.error)

    def on_lost(self, reason: str) -> None:
        self._lost = reason
        pending, self._pending = self._pending, {}
        for done in pending.values():
            done(None, reason)


class _EpisodeTap:
    """The arm's side of :class:`~runtime.arm_control.episodes.EpisodeTap`: each tick's record goes to
    the daemon with the snapshot, where the camera frames are and the episode is written."""

    def __init__(self) -> None:
        self.record: EpisodeRecord | None = None
        self.ended = False

    def tick(
        self,
        now: float,
        present: np.ndarray | None,
        goal: np.ndarray | None,
        requested: np.ndarray | None,
        source: str,
        intervention: bool,
    ) -> None:
        self.record = EpisodeRecord(now, present, goal, requested, source, intervention)

    def end(self) -> None:
        self.ended = True

    def status(self) -> None:
        return None  # the daemon's side knows the episode


class ArmSide:
    """The loop's :class:`~runtime.control.loop.TickHooks` in the arm's process."""

    def __init__(self, link: Link, policy: LinkPolicy, rate_hz: float) -> None:
        self.link = link
        self.policy = policy
        self.episode = _EpisodeTap()
        self.dumps: deque[Dump] = deque()
        self.shutdown_requested = False
        self.signal_estop = ""
        self._signal_latched_at = -1e9
        self._status_failed = False
        self._refusals = Refusals()
        self.collector = Collector(rate_hz)

    def before_tick(self, loop: ControlLoop) -> None:
        if self.signal_estop:
            reason, self.signal_estop = self.signal_estop, ""
            current = loop.estop
            forwarded = (
                current is not None
                and current.reason.startswith("signal")
                and time.monotonic() - current.requested_at < 1.0
            )
            if not forwarded:  # the daemon's copy of the same signal may have come first
                loop.request_estop(reason)
                self._signal_latched_at = time.monotonic()
        if self.link.closed or self.policy.lost() is not None:
            return
        try:
            for message in self.link.messages(lambda e: self._refused(loop, e)):
                self.policy.heard()
                self._dispatch(loop, message)
        except LinkClosed as e:
            self._lost(loop, f"the daemon side is gone ({e})")

    def _refused(self, loop: ControlLoop, e: LinkProtocolError) -> None:
        if self._refusals.first(e):
            loop.events.emit(
                logging.ERROR, "arm: refused a message from the daemon (more like it are counted, not logged): %s", e
            )

    def _lost(self, loop: ControlLoop, reason: str) -> None:
        if self.policy.lost() is not None:
            return
        self.policy.on_lost(reason)
        log.critical("arm: %s; holding the last safe goal, then %s", reason, loop.config.safety.stall_action)

    def _dispatch(self, loop: ControlLoop, message: Message) -> None:
        match message:
            case Gate(blocked=blocked):
                self.policy.on_gate(blocked)
            case Chunk():
                self.policy.on_chunk(message)
            case TargetPut(target=target):
                loop.teleop.put(target.seq, target.positions, target.received_at)
            case TargetClear():
                loop.teleop.clear()
            case Estop(latch=latch):
                if latch.reason.startswith("signal") and time.monotonic() - self._signal_latched_at < 1.0:
                    return  # `systemctl kill -s USR1` reached this process too: one latch for one signal
                loop.post_estop(latch)
            case CommandRequest(command=command):
                loop.request(command)
            case Dump():
                self.dumps.append(message)
            case ShutdownRequest():
                self.shutdown_requested = True
            case _:  # a second configuration (the link refuses the arm process's own kinds)
                self.link.refused += 1
                self._refused(
                    loop,
                    LinkProtocolError(
                        f"the daemon's {KINDS[type(message)]!r} message comes only first",
                        kind=KINDS[type(message)],
                        field="t",
                    ),
                )

    def after_tick(self, loop: ControlLoop) -> None:
        self.collector.after_write()
        link = self.link
        if link.closed or self.policy.lost() is not None:
            return  # the daemon cannot log them now: this process's main thread does (see _wait)
        episode = self.episode
        record, episode.record = episode.record, None
        ended, episode.ended = episode.ended, False
        link.send(Tick(loop.snapshot(), record, ended))
        for event in loop.events.drain():
            link.send(LoopEvent(event.level, event.text()))
        while loop.dump_requests:
            link.send(DumpRequest(loop.dump_requests.popleft()))

    def send_status(self, loop: ControlLoop) -> None:
        """The full ``control status`` map, for the daemon: on the main thread, off the tick, from the
        snapshot the loop published and the gate its last tick read (the feed is the loop's own)."""
        link = self.link
        if link.closed or self.policy.gone is not None:
            return
        status = loop.status(ask_gate=False)
        status["link"] = {"dropped": link.dropped, "refused": link.refused}
        status["gc"] = self.collector.status()
        try:
            link.send(StatusMap(status))
        # a value msgpack cannot carry (OverflowError: an integer past 64 bits): say so, and go on
        except (TypeError, ValueError, OverflowError) as e:
            if not self._status_failed:
                self._status_failed = True
                loop.events.emit(logging.ERROR, "arm: the status map could not be sent: %s", e)


def _mlockall() -> str:
    """Keep every page of this process in RAM: a page fault in the tick is a stall."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mlockall(3) == 0:  # MCL_CURRENT | MCL_FUTURE
            return "memory locked"
        return f"memory not locked ({os.strerror(ctypes.get_errno())}; grant LimitMEMLOCK=infinity)"
    except (OSError, AttributeError) as e:
        return f"memory not locked ({e})"


def run(fd: int) -> int:
    link = Link(socket.socket(fileno=fd), DAEMON_MESSAGES)
    try:
        init = _receive_init(link)
    except LinkProtocolError as e:  # the daemon checked its configuration first: another version, said as such
        link.send_last(Failed(f"the arm process cannot take the daemon's configuration: {e}"))
        link.close()
        return 1
    control, policy_interface, cpu = init.control, init.policy, init.cpu

    side: ArmSide | None = None
    stop = {"term": False}

    def on_term(sig: int, frame: FrameType | None) -> None:
        stop["term"] = True

    def on_estop(sig: int, frame: FrameType | None) -> None:
        if side is not None:
            side.signal_estop = f"signal {signal.Signals(sig).name}"

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, on_estop)
    # started by a thread that a library may have raised to real time: this process starts normal,
    # and only its loop thread asks for control.rt_priority
    from runtime.scheduling import normal_scheduling

    normal_scheduling()
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {int(cpu)})
        except OSError as e:
            log.warning("arm: could not keep to CPU %s: %s", cpu, e)

    from runtime.arm_monitor import ArmMonitor

    monitor = ArmMonitor(init.arm)
    try:
        monitor.open_waiting(
            init.arm_wait_s,
            should_stop=lambda: stop["term"],
            on_wait=lambda text: link.send(Waiting(text)),
        )
    except (InterruptedError, Exception) as e:  # the daemon reports it and exits; nothing moved
        link.send_last(Failed(f"{type(e).__name__}: {e}" if not str(e) else str(e)))
        link.close()
        return 1
    bus = monitor.bus
    assert bus is not None
    policy = LinkPolicy(link, control.link_timeout_s)
    loop: ControlLoop | None = None
    try:
        side = ArmSide(link, policy, control_rate(control, policy_interface.control_rate_hz))
        try:
            loop = ControlLoop(
                bus, bus.calibration, policy_interface, control, policy, cpu=cpu, teleop=init.teleop, hooks=side
            )
        except Exception as e:  # a policy for another arm: the daemon reports it and exits; nothing moved
            link.send_last(Failed(str(e)))
            return 1
        if init.record:
            loop.episodes = side.episode
        link.send(StatusMap(loop.status()))
        memory = _mlockall()
        Collector.take_over()  # from here on only the loop's thread collects, after its writes
        positions = {n: s.position for n, s in monitor.last_state.items()}
        link.send(Ready(os.getpid(), memory, tuple(loop.names), positions))
        policy.heard()  # silence counts from here, not from before the arm was opened
        loop.start()
        if control.rt_priority > 1:
            # This thread shares the interpreter lock with the loop's. Were it SCHED_OTHER, a moment
            # of it holding the lock could wait behind every busy process on its CPU while the loop
            # waits for the lock: just below the loop, it is only ever behind the loop itself.
            from runtime.control.clock import request_realtime

            request_realtime(control.rt_priority - 1)
        return _wait(loop, side, stop)
    finally:
        if loop is not None and loop.alive:
            loop.shutdown()
        ok = monitor.close()
        link.send_last(Bye(ok and (loop.shutdown_ok if loop is not None else True)))
        link.close()


def _receive_init(link: Link, timeout_s: float = INIT_TIMEOUT_S) -> Init:
    """The daemon's first message, its configuration. :class:`LinkProtocolError` when that is not
    one this version takes (another version, another kind, a field wrong); SystemExit when none
    comes, with no one to tell."""
    if not select.select([link], [], [], timeout_s)[0]:
        raise SystemExit(f"arm: no configuration from the daemon within {timeout_s:g} s")
    try:
        first = next(link.receive(), None)
    except LinkClosed:
        raise SystemExit("arm: the daemon closed the link before its configuration") from None
    if isinstance(first, Init):
        return first
    kind = "nothing" if first is None else f"a {KINDS[type(first)]!r} message"
    raise LinkProtocolError(
        f"the daemon's first message must be its configuration ('init'), got {kind}",
        kind=None if first is None else KINDS[type(first)],
        field="t",
        expected="'init'",
        received=kind,
    )


def _wait(loop: ControlLoop, side: ArmSide, stop: dict[str, bool]) -> int:
    """The main thread: the full status, flight recordings, shutdown on request, on SIGTERM or after a loss."""
    status_at = time.monotonic() + STATUS_EVERY_S
    while loop.alive:
        if stop["term"] or side.shutdown_requested:
            break
        lost = side.policy.lost() is not None
        if lost:
            loop.events.flush_to_log()  # to this process's own stderr: the journal
        if lost and loop.snapshot().mode not in MOVING:
            log.warning("arm: the daemon side is gone and the arm is still: shutting down")
            break
        while side.dumps:
            _dump(loop, side.link, side.dumps.popleft())
        now = time.monotonic()
        if now >= status_at:
            side.send_status(loop)
            status_at = now + STATUS_EVERY_S
        time.sleep(0.05)
    ok = loop.shutdown()
    if side.policy.lost() is not None:
        loop.events.flush_to_log()
    while side.dumps:
        _dump(loop, side.link, side.dumps.popleft())
    return 0 if ok else 1


def _dump(loop: ControlLoop, link: Link, request: Dump) -> None:
    try:
        path = loop.recorder.dump(request.directory, request.reason, dict(request.extra))
    except OSError as e:
        link.send(Dumped(request.id, error=str(e)))
        return
    link.send(Dumped(request.id, path=path))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.arm", description="the arm's own process")
    parser.add_argument("--fd", type=int, required=True, help="the link socket inherited from the daemon")
    args = parser.parse_args(argv)
    from runtime.log import setup_logging

    setup_logging("INFO")
    return run(args.fd)


if __name__ == "__main__":
    sys.exit(main())
