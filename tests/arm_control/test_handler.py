"""``control.*`` requests on a stand-in loop and server: who a request is from, e-stop and dump,
a station holding the arm, a local leader that is not there, the loop's refusals (a stale latch
with both numbers), the task a start leaves with the policy or is refused for, the replies, status
field by field; and the loop's way to the server's inference worker."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from runtime.arm_control.handler import LoopControl, ServerInference
from runtime.control.config import RtcConfig
from runtime.control.events import EventLog
from runtime.control.feed import Prefix
from runtime.control.latch import ControlRefused, Latch, StaleLatch
from runtime.control.mode import Mode
from runtime.control.snapshot import Snapshot
from runtime.protocol.errors import ControlRefusedError
from runtime.protocol.messages import ControlRequest, PrefixFields, TeleopRequest


class Loop:
    """The loop's side of the handler: logs what it is asked; ``refuse`` is what ``check`` raises."""

    def __init__(self) -> None:
        self.teleop = SimpleNamespace(config=SimpleNamespace(session_timeout_ms=1e9), clear=lambda: None)
        self.events = EventLog()
        self.dump_requests: list[str] = []
        self.pid = 4242
        self.mode = Mode.IDLE
        self.calls: list[tuple[Any, ...]] = []
        self.refuse: Exception | None = None

    def snapshot(self) -> Snapshot:
        return Snapshot(mode=self.mode, native_id=77)

    def request_estop(self, reason: str) -> Latch:
        self.calls.append(("estop", reason))
        self.mode = Mode.ESTOPPED
        return Latch(3, reason, 1.0)

    def check(self, command: str, latch: int) -> None:
        self.calls.append(("check", command, latch))
        if self.refuse is not None:
            raise self.refuse

    def request(self, command: str, who: str, latch: int = 0) -> None:
        self.calls.append(("request", command, who, latch))
        self.mode = Mode.RUNNING if command == "start" else Mode.HOLDING

    def status(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "teleop": {"phase": "idle"}}


class Server:
    def __init__(self, takes_task: bool = False) -> None:
        self.takes_task = takes_task
        self.info = SimpleNamespace(policy_name="p", engine={"engine": "openvino", "device": "CPU"})
        self.submitted: list[tuple[Any, ...]] = []
        self.observed: list[tuple[Any, ...]] = []
        self.accept = True

    def submit_local(self, inputs: Any, on_done: Any, *, reset: bool, task: str | None, rtc: Any) -> bool:
        self.submitted.append((inputs, on_done, reset, task, rtc))
        return self.accept

    def observe_local(self, inputs: Any, *, reset: bool, task: str | None) -> None:
        self.observed.append((inputs, reset, task))


def control(loop: Loop | None = None, **kw: Any) -> tuple[LoopControl, Loop]:
    loop = loop or Loop()
    return LoopControl(loop, **{"state_dir": "/var/lib/arm", **kw}), loop  # type: ignore[arg-type]


def refused(ctl: LoopControl, request: ControlRequest, client: str = "7") -> ControlRefusedError:
    with pytest.raises(ControlRefusedError) as err:
        ctl.handle(request, client)
    return err.value


# --- e-stop, dump, status ------------------------------------------------------------------


def test_an_estop_names_who_asked_when_it_gives_no_reason() -> None:
    ctl, loop = control()
    assert ctl.handle(ControlRequest(1, "control.estop", who="ana"), "7") == {
        "mode": "estopped",
        "estop": {"latched": True, "reason": "requested by ana (client 7)", "latch": 3},
    }
    ctl.handle(ControlRequest(2, "control.estop"), "9")
    ctl.handle(ControlRequest(3, "control.estop", who="bo", reason="hand in the way"), "9")
    assert loop.calls == [
        ("estop", "requested by ana (client 7)"),
        ("estop", "requested by client 9"),
        ("estop", "hand in the way"),
    ]


def test_a_dump_is_queued_for_the_loop_and_the_reply_says_where_it_goes() -> None:
    ctl, loop = control()
    assert ctl.handle(ControlRequest(1, "control.dump", who="ana"), "7") == {"directory": "/var/lib/arm"}
    ctl.handle(ControlRequest(2, "control.dump"), "8")
    assert loop.dump_requests == ["requested by ana (client 7)", "requested by client 8"]
    assert loop.calls == []


def test_status_names_the_threads_and_processes() -> None:
    ctl, loop = control(inference_thread=55)
    out = ctl.handle(ControlRequest(1, "control.status"), "7")
    assert out == {
        "mode": "idle",
        "teleop": {"phase": "idle", "session": ctl.teleop.status()},
        "threads": {"control": 77, "inference": 55},
        "processes": {"control": 4242, "inference": os.getpid()},
    }
    assert loop.calls == []


def test_status_carries_the_task_and_every_stream() -> None:
    streams = SimpleNamespace(
        names=("observation.images.front", "wrist"),
        endpoints={"observation.images.front": "ipc:///run/front", "wrist": "tcp://10.0.0.2:5600"},
        received={"observation.images.front": 120, "wrist": 3},
        refused={"observation.images.front": 1, "wrist": 0},
        configs={
            "observation.images.front": SimpleNamespace(max_age_ms=100.0),
            "wrist": SimpleNamespace(max_age_ms=250.0),
        },
    )
    inference = ServerInference(Server(), task="pick the cube")  # type: ignore[arg-type]
    ctl, _ = control(streams=streams, inference=inference)
    out = ctl.status()
    assert out["task"] == "pick the cube"
    assert out["policy"] == {"where": "local", "policy": "p", "engine": {"engine": "openvino", "device": "CPU"}}
    assert out["streams"] == {
        "observation.images.front": {
            "endpoint": "ipc:///run/front",
            "received": 120,
            "refused": 1,
            "max_age_ms": 100.0,
        },
        "wrist": {"endpoint": "tcp://10.0.0.2:5600", "received": 3, "refused": 0, "max_age_ms": 250.0},
    }
    assert "task" not in control()[0].status() and "streams" not in control()[0].status()


def test_teleop_requests_go_to_the_teleop_handler() -> None:
    ctl, loop = control()
    seen: list[tuple[Any, str]] = []
    ctl.teleop.handle = lambda request, client: seen.append((request, client)) or {"via": "teleop"}  # type: ignore[method-assign]
    request = TeleopRequest(1, "teleop.open")
    assert ctl.handle(request, "7") == {"via": "teleop"}
    assert seen == [(request, "7")] and loop.calls == []


# --- commands ------------------------------------------------------------------------------


def test_a_command_is_checked_then_queued_with_who_asked() -> None:
    ctl, loop = control()
    assert ctl.handle(ControlRequest(1, "control.start", who="ana"), "7") == {"accepted": True, "mode": "running"}
    assert ctl.handle(ControlRequest(2, "control.stop"), "8") == {"accepted": True, "mode": "holding"}
    assert loop.calls == [
        ("check", "start", 0),
        ("request", "start", "ana (client 7)", 0),
        ("check", "stop", 0),
        ("request", "stop", "client 8", 0),
    ]


def test_a_release_reply_names_the_latch_it_releases() -> None:
    ctl, loop = control()
    assert ctl.handle(ControlRequest(1, "control.release", who="ana", latch=4), "7") == {
        "accepted": True,
        "mode": "holding",
        "latch": 4,
    }
    assert loop.calls == [("check", "release", 4), ("request", "release", "ana (client 7)", 4)]


def test_a_command_the_loop_refuses_is_refused_with_its_words_and_not_queued() -> None:
    ctl, loop = control()
    loop.refuse = ControlRefused("the e-stop is latched (hand in the way): release it first")
    e = refused(ctl, ControlRequest(5, "control.start", who="ana"))
    assert e.message == "control.start: the e-stop is latched (hand in the way): release it first"
    assert (e.field, e.expected, e.received, e.request_id) == ("kind", None, None, 5)
    assert e.__cause__ is None and e.__suppress_context__
    assert loop.calls == [("check", "start", 0)]


def test_a_stale_latch_is_refused_naming_both_latches() -> None:
    ctl, loop = control()
    stale = StaleLatch(2, Latch(3, "hand in the way", 1.0))
    loop.refuse = stale
    e = refused(ctl, ControlRequest(6, "control.release", latch=2))
    assert e.message == f"control.release: {stale}"
    assert (e.field, e.expected, e.received, e.request_id) == ("body.latch", "3", "2", 6)
    assert e.__suppress_context__
    assert loop.calls == [("check", "release", 2)]


@pytest.mark.parametrize("kind", ["control.start", "control.stop", "control.teleop"])
def test_while_a_station_holds_the_arm_others_do_not_command_it(kind: str) -> None:
    ctl, loop = control()
    ctl.teleop.local = "leader on /dev/ttyACM1"
    ctl.teleop.sessions.open("station b (client 3)", time.monotonic())
    e = refused(ctl, ControlRequest(8, kind, who="ana"))
    assert e.message == (
        f"{kind}: a teleop station holds the arm (station b (client 3)); it hands back with teleop.hand_back"
    )
    assert (e.field, e.request_id) == ("kind", 8)
    assert loop.calls == []


def test_while_a_station_holds_the_arm_a_release_still_goes_to_the_loop() -> None:
    ctl, loop = control()
    ctl.teleop.sessions.open("station b (client 3)", time.monotonic())
    assert ctl.handle(ControlRequest(1, "control.release", latch=1), "7")["accepted"] is True
    assert loop.calls == [("check", "release", 1), ("request", "release", "client 7", 1)]


def test_teleop_without_a_leader_of_its_own_is_refused() -> None:
    ctl, loop = control()
    e = refused(ctl, ControlRequest(9, "control.teleop", who="ana"))
    assert e.message == (
        "control.teleop: this daemon reads no leader of its own ([teleop] leader_port is empty); "
        "a station takes over with lerobot-runtime teleop"
    )
    assert (e.field, e.request_id) == ("kind", 9)
    assert loop.calls == []
    ctl.teleop.local = "leader on /dev/ttyACM1"
    assert ctl.handle(ControlRequest(10, "control.teleop"), "7") == {"accepted": True, "mode": "holding"}


# --- the task a start leaves ---------------------------------------------------------------


def test_a_start_with_a_task_sets_it_for_the_loops_requests() -> None:
    inference = ServerInference(Server(takes_task=True), task="old")  # type: ignore[arg-type]
    ctl, loop = control(inference=inference)
    ctl.handle(ControlRequest(1, "control.start", task="stack the cups"), "7")
    assert inference.task == "stack the cups"
    ctl.handle(ControlRequest(2, "control.start"), "7")  # none named: the loop's own goes on
    assert inference.task == "stack the cups"
    assert [c[0] for c in loop.calls] == ["check", "request", "check", "request"]


def test_a_task_for_a_policy_that_takes_none_is_refused() -> None:
    inference = ServerInference(Server(takes_task=False))  # type: ignore[arg-type]
    ctl, loop = control(inference=inference)
    e = refused(ctl, ControlRequest(3, "control.start", task="abcde"))
    assert e.message == "control.start body.task: this policy takes no task (it follows no instruction)"
    assert (e.field, e.expected, e.received, e.request_id) == ("body.task", "no task", "5 characters", 3)
    assert loop.calls == [] and inference.task == ""


def test_a_policy_that_follows_an_instruction_needs_one() -> None:
    inference = ServerInference(Server(takes_task=True))  # type: ignore[arg-type]
    ctl, loop = control(inference=inference)
    e = refused(ctl, ControlRequest(4, "control.start"))
    assert e.message == (
        "control.start body.task: this policy follows an instruction and the loop has none: "
        "control start --task TEXT, or [control] task in the config"
    )
    assert (e.field, e.expected, e.received, e.request_id) == ("body.task", "a task", "nothing", 4)
    assert loop.calls == []


def test_a_server_that_does_not_say_takes_no_task() -> None:
    server = Server()
    del server.takes_task
    inference = ServerInference(server)  # type: ignore[arg-type]
    ctl, _ = control(inference=inference)
    assert refused(ctl, ControlRequest(1, "control.start", task="x")).field == "body.task"
    assert ctl.handle(ControlRequest(2, "control.start"), "7")["accepted"] is True


def test_the_task_is_not_set_when_the_loop_refuses_the_start() -> None:
    inference = ServerInference(Server(takes_task=True), task="old")  # type: ignore[arg-type]
    ctl, loop = control(inference=inference)
    loop.refuse = ControlRefused("idle only")
    refused(ctl, ControlRequest(1, "control.start", task="new"))
    assert inference.task == "old"


def test_only_a_start_reads_the_task() -> None:
    inference = ServerInference(Server(takes_task=False), task="")  # type: ignore[arg-type]
    ctl, _ = control(inference=inference)
    # a stop naming a task (the parser lets only start's through; the handler ignores it anyway)
    assert ctl.handle(ControlRequest(1, "control.stop", task="x"), "7")["accepted"] is True
    assert inference.task == ""


def test_without_inference_a_start_is_not_checked_for_a_task() -> None:
    ctl, _ = control()
    assert ctl.handle(ControlRequest(1, "control.start", task="x"), "7")["accepted"] is True


# --- the loop's way to inference -----------------------------------------------------------


def test_a_loop_request_carries_the_task_and_no_prefix() -> None:
    server = Server()
    inference = ServerInference(server, task="pick")  # type: ignore[arg-type]
    inputs = [np.zeros(3, np.float32)]

    def done(*a: Any) -> None:
        pass

    assert inference.submit(inputs, done) is True
    assert inference.submit(inputs, done, reset=True) is True
    server.accept = False
    assert inference.submit(inputs, done) is False
    assert server.submitted == [
        (inputs, done, False, "pick", None),
        (inputs, done, True, "pick", None),
        (inputs, done, False, "pick", None),
    ]
    inference.task = ""
    inference.submit(inputs, done)
    assert server.submitted[-1][3] is None


def test_a_loop_request_with_a_prefix_carries_the_rtc_settings() -> None:
    server = Server()
    rtc = RtcConfig(True, 8, "EXP", 5.0)
    inference = ServerInference(server, rtc=rtc)  # type: ignore[arg-type]
    plan = np.ones((4, 3), np.float32)
    inference.submit([], lambda *a: None, prefix=Prefix(plan, 2))
    fields = server.submitted[0][4]
    assert isinstance(fields, PrefixFields)
    assert fields.prefix is plan
    assert (fields.delay, fields.execution_horizon, fields.prefix_attention_schedule, fields.max_guidance_weight) == (
        2,
        8,
        "EXP",
        5.0,
    )


def test_without_rtc_settings_the_bundles_are_used() -> None:
    server = Server()
    inference = ServerInference(server)  # type: ignore[arg-type]
    assert inference.rtc == RtcConfig() and inference.task == ""
    inference.submit([], lambda *a: None, prefix=Prefix(np.ones((2, 3), np.float32), 1))
    fields = server.submitted[0][4]
    assert (fields.delay, fields.execution_horizon, fields.prefix_attention_schedule, fields.max_guidance_weight) == (
        1,
        None,
        None,
        None,
    )


def test_observations_carry_the_task() -> None:
    server = Server()
    inference = ServerInference(server, task="pick")  # type: ignore[arg-type]
    inference.observe([1], reset=True)
    inference.task = ""
    inference.observe([2])
    assert server.observed == [([1], True, "pick"), ([2], False, None)]


def test_the_verification_failure_is_the_servers() -> None:
    server = Server()
    inference = ServerInference(server)  # type: ignore[arg-type]
    assert inference.failure() is None
    server.verification_failure = "the test case's outputs differ"  # type: ignore[attr-defined]
    assert inference.failure() == "the test case's outputs differ"


def test_the_pending_gate_is_the_servers() -> None:
    server = Server()
    inference = ServerInference(server)  # type: ignore[arg-type]
    assert inference.pending() is None
    server.gate_pending = "the parity gate is still running: 3 of 16 replays passed"  # type: ignore[attr-defined]
    assert inference.pending() == "the parity gate is still running: 3 of 16 replays passed"


def test_a_start_while_the_parity_gate_still_runs_is_refused_and_the_rest_is_not() -> None:
    server = Server()
    server.gate_pending = "the parity gate is still running: 3 of 16 replays passed"  # type: ignore[attr-defined]
    ctl, loop = control(inference=ServerInference(server))  # type: ignore[arg-type]
    e = refused(ctl, ControlRequest(4, "control.start"))
    assert e.message == (
        "control.start: the parity gate is still running: 3 of 16 replays passed; the policy is asked only "
        "once it has passed (a few seconds after start-up): start again then"
    )
    assert (e.field, e.request_id) == ("kind", 4) and loop.calls == []
    ctl.handle(ControlRequest(5, "control.stop"), "7")  # stopping, e-stops and status are never held back
    ctl.handle(ControlRequest(6, "control.estop"), "7")
    assert [c[0] for c in loop.calls][:2] == ["check", "request"]
    server.gate_pending = None  # type: ignore[attr-defined]
    ctl.handle(ControlRequest(7, "control.start"), "7")
    assert loop.calls[-1][0] == "request"


def test_status_before_the_inference_thread_is_known_names_thread_zero() -> None:
    ctl, _ = control()
    assert ctl.status()["threads"] == {"control": 77, "inference": 0}
