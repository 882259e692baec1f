"""Starting, the hand-shake, shutting down and killing the arm process, from the daemon's side.

The arm process is a stand-in: a small Python program started exactly as the link starts the real
one (the same environment, the link's socket passed as ``--fd``), speaking the link's messages, and
doing what the test's scenario says: take the arm, fail, wait, end or ignore what it is asked. What
the real arm process does with the arm is in ``tests/arm/test_faults.py``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from drivers.config import ArmConfig
from runtime.arm.messages import LINK_VERSION
from runtime.arm_control import link as link_module
from runtime.arm_control.link import ArmLink, ArmProcessError
from runtime.control.config import ControlConfig
from runtime.teleop.config import TeleopConfig
from tests.arm_control.test_link import Feed
from tests.control.small_arm import interface

ROOT = str(Path(__file__).resolve().parents[2])
POPEN = subprocess.Popen  # the link's is replaced (the module is shared): the stand-in starts with this

# The stand-in arm process. argv: --fd N; the scenario and where to write what it heard in ARM_SCENARIO
# and ARM_HEARD. It writes each message it receives (one JSON line) as it receives it.
STAND_IN = r"""
import json, os, signal, socket, sys, time
import msgpack
from runtime.arm.codec import encode
from runtime.arm.messages import Bye, Failed, LoopEvent, Ready, StatusMap, Tick, Waiting
from runtime.control.snapshot import Snapshot

fd = int(sys.argv[sys.argv.index("--fd") + 1])
sock = socket.socket(fileno=fd)
scenario = os.environ["ARM_SCENARIO"]
heard = open(os.environ["ARM_HEARD"], "a", buffering=1)

def send(m):
    sock.send(encode(m))

def receive(timeout):
    sock.settimeout(timeout)
    try:
        data = sock.recv(1 << 20)
    except socket.timeout:
        return None
    if not data:
        sys.exit(0)
    m = msgpack.unpackb(data, raw=False, strict_map_key=False)  # the map as it came, for the test to read
    heard.write(json.dumps(m) + "\n")
    return m

def until(kind, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        m = receive(0.05)
        if m is not None and m.get("t") == kind:
            return m
    return None

def ready(memory=""):
    send(Ready(os.getpid(), memory, ("j1", "j2", "j3"), {"j1": 0.0, "j2": 0.0, "j3": 0.0}))

receive(10)  # init
if scenario == "refused":  # an event while it takes the arm; a ready missing its fields, then a whole one
    send(LoopEvent(30, "calibration read from the servos"))
    sock.send(msgpack.packb({"t": "ready", "pid": os.getpid()}))
    ready("after the refused one")
    until("gate", 5)
    heard.write(json.dumps({"stand-in": "tick sent"}) + "\n")
    send(Tick(Snapshot()))
    until("shutdown_request", 10)
    send(Bye(True))
    sys.exit(0)
if scenario == "ready":
    send(Waiting("the arm on /dev/ttyTEST does not answer; waiting"))
    send(StatusMap({"phase": "connected"}))
    ready("locked 12 MB")
    until("gate", 5)  # the gate comes once the arm is held, before the first tick
    send(Tick(Snapshot(scheduling="SCHED_FIFO 30")))
    until("shutdown_request", 10)
    send(Bye(os.environ.get("ARM_BYE", "1") == "1"))
    sys.exit(int(os.environ.get("ARM_EXIT", "0")))
if scenario == "failed":
    send(Failed("no arm on /dev/ttyTEST: [Errno 2] No such file or directory"))
    sys.exit(1)
if scenario == "exit":
    sys.exit(3)
if scenario == "wait-then-fail-on-term":
    signal.signal(signal.SIGTERM, lambda *a: (send(Failed("stopped")), sys.exit(1)))
    while True:
        send(Waiting("still waiting"))
        time.sleep(0.05)
if scenario == "wait":  # SIGTERM ends it at once (its handler not set up yet)
    while True:
        time.sleep(0.05)
if scenario == "vanish":  # takes the arm, then ends on its own, with status 0
    ready()
    until("gate", 5)
    send(Tick(Snapshot()))
    until("gate", 5)
    sys.exit(0)
if scenario == "stubborn":  # takes the arm, then ignores shutdown and SIGTERM
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready()
    send(Tick(Snapshot()))
    while True:
        time.sleep(0.05)
"""


class Launch:
    """Stands in for ``subprocess.Popen`` in the link: records what it was asked, starts the stand-in."""

    def __init__(self, tmp_path: Path, scenario: str, **env: str) -> None:
        self.heard = tmp_path / "heard.jsonl"
        self.scenario = scenario
        self.env = env
        self.asked: list[tuple[list[str], dict[str, Any]]] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def __call__(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        self.asked.append((args, kwargs))
        env = {**kwargs["env"], "ARM_SCENARIO": self.scenario, "ARM_HEARD": str(self.heard), **self.env}
        proc = POPEN([sys.executable, "-c", STAND_IN, *args[3:]], pass_fds=kwargs["pass_fds"], env=env)
        self.procs.append(proc)
        return proc

    def messages(self) -> list[dict[str, Any]]:
        if not self.heard.exists():
            return []
        return [json.loads(line) for line in self.heard.read_text().splitlines()]


@pytest.fixture
def launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    made: list[Launch] = []

    def make(scenario: str, **env: str) -> Launch:
        stand_in = Launch(tmp_path, scenario, **env)
        monkeypatch.setattr(link_module.subprocess, "Popen", stand_in)
        made.append(stand_in)
        return stand_in

    yield make
    for stand_in in made:
        for proc in stand_in.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _arm(record: bool = False) -> ArmLink:
    return ArmLink(
        arm=ArmConfig(port="/dev/ttyTEST"),
        control=ControlConfig(rate_hz=8.0, rt_priority=0, streams=()),
        teleop=TeleopConfig(),
        policy=interface(),
        feed=Feed(),  # type: ignore[arg-type]
        cpu=1,
        record=record,
    )


def test_the_arm_process_is_started_with_the_link_and_the_configuration_first(
    launch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    stand_in = launch("ready")
    arm = _arm(record=True)
    said: list[str] = []
    arm.start(7.5, on_wait=said.append)
    try:
        ((args, kwargs),) = stand_in.asked
        fd = kwargs["pass_fds"][0]
        assert args == [sys.executable, "-m", "runtime.arm", "--fd", str(fd)]
        env = kwargs["env"]
        assert env["PYTHONPATH"] == ROOT + os.pathsep + "/elsewhere"
        assert (env["OPENBLAS_NUM_THREADS"], env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"]) == ("1", "1", "1")
        assert arm.pid == stand_in.procs[0].pid
        assert said == [
            "starting the arm process for /dev/ttyTEST",
            "the arm on /dev/ttyTEST does not answer; waiting",
        ]
        # what the ready message says: the arm's own joint names, its memory; the status; the first tick
        assert arm.names == ("j1", "j2", "j3") and arm.memory == "locked 12 MB"
        assert arm._status == {"phase": "connected"}
        assert arm.snapshot().scheduling == "SCHED_FIFO 30"
        assert arm.alive and arm.death is None
        heard = stand_in.messages()
        init = heard[0]
        assert init["t"] == "init" and init["version"] == LINK_VERSION
        assert (init["cpu"], init["arm_wait_s"], init["record"]) == (1, 7.5, True)
        assert init["arm"]["port"] == "/dev/ttyTEST" and init["control"]["rate_hz"] == 8.0
        assert init["teleop"] == json.loads(json.dumps(__import__("dataclasses").asdict(TeleopConfig())))
        assert init["policy"] == json.loads(json.dumps(interface().to_json()))
        assert heard[1]["t"] == "gate"  # once it holds the arm, the link keeps the gate coming
    finally:
        assert arm.shutdown(5.0) is True
    assert arm.death == "the arm process ended (exit status 0)"
    assert {"t": "shutdown_request"} in stand_in.messages()


def test_without_pythonpath_the_arm_process_gets_the_packages_root(
    launch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    stand_in = launch("ready")
    arm = _arm()
    arm.start()
    assert stand_in.asked[0][1]["env"]["PYTHONPATH"] == ROOT
    assert stand_in.messages()[0]["arm_wait_s"] == 0.0  # no wait for an absent arm unless asked
    thread = arm._thread
    assert thread is not None and thread.name == "lerobot-runtime-arm-link" and thread.daemon
    assert arm.shutdown(5.0) is True
    assert not thread.is_alive()  # the link thread is joined before shutdown returns


@pytest.mark.parametrize(("bye", "code"), [("0", "0"), ("1", "4")])
def test_a_shutdown_the_arm_process_could_not_confirm_is_not_ok(launch: Any, bye: str, code: str) -> None:
    launch("ready", ARM_BYE=bye, ARM_EXIT=code)
    arm = _arm()
    arm.start()
    assert arm.shutdown(5.0) is False


def test_a_failure_to_take_the_arm_is_raised_with_the_arm_process_reason(launch: Any) -> None:
    stand_in = launch("failed")
    arm = _arm()
    with pytest.raises(ArmProcessError) as err:
        arm.start()
    assert str(err.value) == "no arm on /dev/ttyTEST: [Errno 2] No such file or directory"
    assert stand_in.procs[0].poll() is not None  # ended, or ended by the link, before start returns
    assert not arm.alive


def test_an_arm_process_that_ends_before_it_has_the_arm_is_named_by_its_exit(launch: Any) -> None:
    launch("exit")
    with pytest.raises(ArmProcessError) as err:
        _arm().start()
    assert str(err.value) == "the arm process ended before it had the arm (exit status 3)"


def test_stopping_while_it_waits_for_the_arm_is_an_interruption_not_a_failure(launch: Any) -> None:
    stand_in = launch("wait-then-fail-on-term")
    said: list[str] = []
    with pytest.raises(InterruptedError) as err:  # stopped once it waits (its SIGTERM handler set up)
        _arm().start(should_stop=lambda: "still waiting" in said, on_wait=said.append)
    assert str(err.value) == "stopped while waiting for the arm"
    assert stand_in.procs[0].poll() is not None


def test_stopping_before_the_arm_process_can_answer_names_how_it_ended(launch: Any) -> None:
    stand_in = launch("wait")
    with pytest.raises(InterruptedError) as err:
        _arm().start(should_stop=lambda: True)
    assert str(err.value) == "stopped while waiting for the arm (killed by SIGTERM)"
    assert stand_in.procs[0].returncode == -signal.SIGTERM


def test_an_arm_process_that_ignores_shutdown_and_sigterm_is_killed(launch: Any) -> None:
    stand_in = launch("stubborn")
    arm = _arm()
    arm.start()
    started = time.monotonic()
    assert arm.shutdown(0.2) is False
    assert stand_in.procs[0].returncode == -signal.SIGKILL
    assert time.monotonic() - started < 10.0  # 0.2 s for the shutdown, 3 s for SIGTERM, then killed
    arm._kill()  # already gone: nothing to do


def test_an_arm_process_that_ended_on_its_own_is_not_a_safe_shutdown(launch: Any) -> None:
    launch("vanish")
    arm = _arm()
    arm.start()
    deadline = time.monotonic() + 10.0
    while arm.death is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert arm.death == "the arm process died (exit status 0)"
    assert arm.shutdown(5.0) is False  # it exited 0, but not because it was asked to


def test_a_ready_missing_its_fields_is_refused_by_name_and_the_start_goes_on(
    launch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    stand_in = launch("refused")
    arm = _arm()
    with caplog.at_level(logging.ERROR, logger="runtime.arm_control.link"):
        arm.start()
    try:
        assert arm.names == ("j1", "j2", "j3") and arm.memory == "after the refused one"
        assert [(e.level, e.text()) for e in arm.events.drain()] == [(30, "calibration read from the servos")]
        assert [r.getMessage() for r in caplog.records] == [
            "arm link: refused a message from the arm process (more like it are counted, not logged): "
            "the arm process's 'ready' message has no 'memory' (expected a string)"
        ]
        assert arm.status()["process"]["link_refused"] == 1
        kinds = [m.get("t", m.get("stand-in")) for m in stand_in.messages()]
        # the gate is sent during the hand-shake, once the arm is held: before the first tick
        assert kinds[:3] == ["init", "gate", "tick sent"]
        blocked_at = arm.feed.blocked_at  # type: ignore[attr-defined]
        assert blocked_at and all(isinstance(t, float) and t > 0 for t in blocked_at)
    finally:
        assert arm.shutdown(5.0) is True


def test_a_stop_asked_while_a_silent_arm_process_starts_is_noticed(launch: Any) -> None:
    launch("wait")
    asked_at = time.monotonic() + 0.5
    with pytest.raises(InterruptedError) as err:  # noticed between polls, with no message to wake it
        _arm().start(should_stop=lambda: time.monotonic() > asked_at)
    assert str(err.value).startswith("stopped while waiting for the arm")


def test_an_arm_process_of_another_version_refuses_the_daemon_naming_both_versions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real arm process, told by a daemon of another version: it says so and ends, nothing opened."""
    monkeypatch.setattr(link_module, "LINK_VERSION", LINK_VERSION + 1)
    arm = _arm()
    with pytest.raises(ArmProcessError) as err:
        arm.start()
    assert str(err.value) == (
        "the arm process cannot take the daemon's configuration: the daemon speaks link protocol version "
        f"{LINK_VERSION + 1}, this arm process speaks version {LINK_VERSION}: the two come from different "
        "installs; restart the service so that both are the installed one"
    )
    assert arm._proc is not None and arm._proc.poll() is not None  # ended, or ended by the link
