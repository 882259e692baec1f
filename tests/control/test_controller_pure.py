"""The controller's step is pure: it reads nothing but its arguments and its own state.

A start, running on chunks, a teleop take-over, an e-stop and its release, a stall whose action is torque
off and a shutdown, driven tick by tick by a harness that plays the runner's part with recording stand-ins
for everything outside (the bus and its torque, the clock, the policy's feed, the mailbox, the chunk
handoff, the teleop landing). Around every call into the controller the stand-ins are armed: a call on
any of them, or a read of the clock, fails the test. None of them is reachable from the controller's
state, and every torque switch comes out in a decision.
"""

from __future__ import annotations

import gc
import types
from typing import Any

import numpy as np

from runtime.control.config import ControlConfig, SafetyConfig
from runtime.control.controller import ChunkResult, Controller, Decision, Inputs
from runtime.control.events import EventLog
from runtime.control.handoff import Latest
from runtime.control.mailbox import Mailbox, Release, Shutdown, Start, TakeOver
from runtime.control.mode import Mode
from runtime.control.target import TeleopTarget
from runtime.teleop.config import TeleopConfig

from .small_arm import CAL, JOINTS, P, interface, rows, same


class Armed:
    """Set while the controller runs: any stand-in touched then records it."""

    on = False
    touched: list[str] = []  # noqa: RUF012 - one list for the test, reset in each


def _touch(what: str) -> None:
    if Armed.on:
        Armed.touched.append(what)


class FrozenClock:
    """The time of the tick; reading it while the controller runs is recorded (and counted)."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.reads_in_step = 0

    def __call__(self) -> float:
        _touch("clock")
        self.reads_in_step += Armed.on
        return self.now


class RecordingBus:
    """The torque switch and the bus: every call recorded, torque too."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def torque_on(self) -> None:
        _touch("bus.torque_on")
        self.calls.append("torque on")

    def disable_torque(self) -> None:
        _touch("bus.disable_torque")
        self.calls.append("torque off")

    def write_goals(self, goals: Any) -> None:
        _touch("bus.write_goals")
        self.calls.append("write")


class RecordingFeed:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.callbacks: list[Any] = []
        self.gate: Any = None

    def submit(self, state: np.ndarray, on_done: Any, *, reset: bool = False, prefix: Any = None) -> bool:
        _touch("feed.submit")
        self.calls.append("submit")
        self.callbacks.append(on_done)
        return True

    def observe(self, state: np.ndarray, *, reset: bool = False) -> None:
        _touch("feed.observe")
        self.calls.append("observe")

    def blocked(self, now: float) -> Any:
        _touch("feed.blocked")
        return self.gate

    def lost(self) -> str | None:
        _touch("feed.lost")
        return None


class Harness:
    """The runner's part, done outside the controller; every controller call is made armed."""

    def __init__(self) -> None:
        self.clock, self.bus, self.feed = FrozenClock(), RecordingBus(), RecordingFeed()
        safety = SafetyConfig(
            max_step_deg=4.0,
            max_first_step_deg=10.0,
            stall_timeout_s=1.0,
            stall_action="torque_off",
            shutdown_action="torque_off",
        )
        config = ControlConfig(rate_hz=10.0, rt_priority=0, streams=(), safety=safety)
        self.mailbox = Mailbox(self.clock)
        self.results: Latest[ChunkResult] = Latest()
        self.teleop = TeleopTarget(len(JOINTS), TeleopConfig())
        self.events = EventLog()
        self.c = Controller(JOINTS, CAL, interface(), config, teleop=TeleopConfig(), period=0.1)
        self.decisions: list[Decision] = []
        self.k = 0

    def armed(self, call: Any, *args: Any) -> Any:
        Armed.on = True
        try:
            return call(*args)
        finally:
            Armed.on = False

    def tick(self, present: np.ndarray = P) -> Decision:
        self.k += 1
        now = self.clock.now
        commands = []
        while (command := self.mailbox.take_command()) is not None:
            commands.append(command)
        inputs = Inputs(
            self.mailbox.estop_requests(),
            tuple(commands),
            self.results.take(),
            self.feed.blocked(now),
            self.feed.lost(),
            self.teleop.fresh(now),
        )
        d = self.armed(self.c.step, self.k, now, present, inputs)
        self.mailbox.drop_estops(len(inputs.estops))
        self.decisions.append(d)
        while d.torque:
            if d.goal is not None:
                self.bus.write_goals(d.goal)
                self.armed(self.c.written, d.goal)
            (self.bus.torque_on if d.torque == "on" else self.bus.disable_torque)()
            d = self.armed(self.c.torque_done, None)
            self.decisions.append(d)
        if d.goal is not None:
            self.bus.write_goals(d.goal)
            self.armed(self.c.written, d.goal)
        self.armed(self.c.read_ok, present)
        if d.ask is not None:
            ask = d.ask
            if ask.chunk:
                results, gen, k = self.results, ask.gen, ask.k

                def done(actions: Any, error: Any) -> None:
                    results.put(ChunkResult(gen, k, actions, error))

                accepted = self.feed.submit(present.astype(np.float32), done, reset=ask.reset, prefix=ask.prefix)
            else:
                self.feed.observe(present.astype(np.float32), reset=ask.reset)
                accepted = True
            self.armed(self.c.asked, ask, accepted, now)
        self.c.events.move_to(self.events)
        return d


def _reachable(root: object) -> list[int]:
    """The ids of every object reachable from ``root``'s state (modules and classes left out)."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, types.ModuleType | type | types.FunctionType):
            continue
        seen.add(id(obj))
        todo.extend(gc.get_referents(obj))
    return list(seen)


def test_step_reads_and_calls_nothing_outside_through_every_mode() -> None:
    Armed.touched = []
    h = Harness()
    c = h.c
    # start: the decision asks for torque on over the hold of the present pose
    h.mailbox.post(Start("op"))
    d = h.tick()
    first, last = h.decisions[-2], h.decisions[-1]
    assert first.torque == "on" and same(first.goal, P) and last.torque == ""
    assert c.mode is Mode.RUNNING and h.bus.calls[:2] == ["write", "torque on"]
    assert d.ask is not None and d.ask.chunk and h.feed.calls == ["submit"]
    # running on chunks: answered on the feed's side, handed to the next step by the harness
    h.feed.callbacks[-1](rows(1.0, 2.0, 3.0, 4.0), None)
    h.clock.now += 0.1
    d = h.tick()
    assert d.requested is not None and c.counters["chunks"] == 1
    for _ in range(4):
        h.clock.now += 0.1
        if h.feed.callbacks and h.results.peek() is None:
            h.feed.callbacks[-1](rows(1.0, 2.0, 3.0, 4.0), None)
        h.tick()
    assert c.counters["chunks"] >= 2
    # teleop take-over from running: no torque switch
    h.teleop.put(1, P + np.array([1.0, 0.0, 0.0]), h.clock.now)
    h.mailbox.post(TakeOver("st"))
    h.clock.now += 0.1
    d = h.tick()
    assert c.mode is Mode.TELEOP and d.torque == "" and d.requested is not None
    # e-stop (hold) and its release
    latch = h.mailbox.estop("button")
    h.clock.now += 0.1
    d = h.tick()
    assert c.mode is Mode.ESTOPPED and d.goal is not None and d.torque == "" and d.dumps == ("estop",)
    h.mailbox.post(Release("op", latch.id))
    h.clock.now += 0.1
    h.tick()
    assert c.mode is Mode.HOLDING
    # a start from holding needs no torque; the policy stalls (no chunk), the stall action turns torque off
    h.mailbox.post(Start("op"))
    h.clock.now += 0.1
    h.tick()
    assert c.mode is Mode.RUNNING and h.decisions[-1].torque == ""
    h.feed.callbacks.clear()  # that request is never answered
    h.clock.now += 1.5
    d = h.tick()
    off = h.decisions[-2]
    assert off.torque == "off" and off.dumps == ("stall torque_off",) and d.torque == ""
    assert c.mode is Mode.IDLE and h.bus.calls[-1] == "torque off" and c.counters["torque_offs"] == 1
    # shutdown: decided in the step; the sequence is the runner's
    h.mailbox.post(Start("op"))
    h.clock.now += 0.1
    h.tick()
    h.mailbox.post(Shutdown())
    h.clock.now += 0.1
    d = h.tick()
    assert d.shutdown is True
    held, then = h.armed(c.begin_shutdown)
    assert same(held, P) and then == "torque_off"
    h.bus.disable_torque()
    h.armed(c.end_with_torque_off, None)
    assert c.mode is Mode.IDLE and c.torque_ok is True

    # nothing outside was called or read while the controller ran, and the clock was never read by it
    assert Armed.touched == []
    assert h.clock.reads_in_step == 0
    # every torque switch came out of a decision, in order
    switches = [d.torque for d in h.decisions if d.torque]
    assert switches == ["on", "off", "on"]
    assert [x for x in h.bus.calls if x.startswith("torque")] == ["torque on", "torque off", "torque on", "torque off"]
    # and nothing outside is reachable from the controller's state
    reachable = set(_reachable(c))
    outside = [h.clock, h.bus, h.feed, h.mailbox, h.results, h.teleop, h.events]
    assert [type(o).__name__ for o in outside if id(o) in reachable] == []
