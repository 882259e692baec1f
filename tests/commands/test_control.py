"""``lerobot-runtime control``, ``camera``, ``replay`` and ``bench loop`` in process: the
options, what reaches the daemon (a release naming the latch status shows now), refusals on stderr with
exit 1, what each prints (control status as a few lines, or its map with --json); the client, camera,
replay and benchmarks are stand-ins."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import runtime.bench.loop
import runtime.client
import runtime.commands.control
import runtime.control.replay
import runtime.producers.camera
from runtime.cli import build_parser, main
from runtime.protocol.errors import ControlRefusedError, ServerError
from tests.commands.parsers import defaults, handler, options


class Client:
    """A stand-in PolicyClient: each ``control`` call is recorded and answered from ``replies`` in turn
    (an exception in there is raised)."""

    calls: list[Any]
    replies: list[Any]

    def __init__(self, endpoint: str, timeout_s: float) -> None:
        self.calls.append(("client", endpoint, timeout_s))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.calls.append("closed")

    def control(self, command: str, **kw: Any) -> Any:
        self.calls.append((command, kw))
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> type[Client]:
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path))
    Client.calls, Client.replies = [], []
    monkeypatch.setattr(runtime.client, "PolicyClient", Client)
    return Client


def _sent(command: str, who: str = "", reason: str = "", latch: int | None = None, task: str = "") -> Any:
    return (command, {"who": who, "reason": reason, "latch": latch, "task": task})


def test_the_control_options() -> None:
    root = build_parser()
    assert options("control", root=root) == [
        (
            "control_command",
            None,
            None,
            ("start", "stop", "estop", "release", "status", "dump", "teleop"),
            True,
            None,
            None,
        ),
        (
            "--connect",
            "ipc://policy.sock",
            None,
            None,
            False,
            "ENDPOINT",
            "the daemon's endpoint (default ipc://policy.sock in the runtime directory)",
        ),
        ("--who", "", None, None, False, None, "your name, for the daemon's log"),
        ("--reason", "", None, None, False, None, "with estop: why (logged and shown in status)"),
        (
            "--task",
            "",
            None,
            None,
            False,
            None,
            "with start: the instruction a language policy (SmolVLA) follows from now on",
        ),
        (
            "--latch",
            None,
            int,
            None,
            False,
            "N",
            "with release: the e-stop latch to release (default: the one control status shows now; an e-stop "
            "after that still wins)",
        ),
        ("--timeout-s", 2.0, float, None, False, "S", "reply timeout in seconds (default 2)"),
        ("--json", False, None, None, False, None, "print the reply as JSON"),
    ]


def test_the_camera_replay_and_bench_options() -> None:
    root = build_parser()
    assert options("camera", root=root) == [
        ("--device", None, None, None, False, "DEV", "a V4L2 device (/dev/video0) or index (needs the camera extra)"),
        ("--synthetic", False, None, None, False, None, "a moving test pattern (the default)"),
        ("--input", "observation.images.front", None, None, False, None, "the policy input the frames fill"),
        (
            "--endpoint",
            "ipc://camera-front.sock",
            None,
            None,
            False,
            None,
            "where to publish (PUB; relative ipc paths live in the runtime directory)",
        ),
        ("--fps", 30.0, float, None, False, None, None),
        ("--width", 128, int, None, False, None, None),
        ("--height", 96, int, None, False, None, None),
        ("--frames", 0, int, None, False, None, "stop after this many frames (0: run until Ctrl-C)"),
    ]
    assert options("replay", root=root) == [
        ("file", None, None, None, True, "FILE", "a flight-*.npz from the state directory"),
        ("--png", None, None, None, False, "OUT", "where to draw it (default: FILE with .png)"),
        ("--no-png", False, None, None, False, None, "summary only"),
        ("--json", False, None, None, False, None, "print the summary as JSON"),
    ]
    assert options("bench", "loop", root=root) == [
        ("--bundle", None, None, None, False, "DIR", "bundle to run (default: the built-in ACT-size bundle)"),
        ("--demo", False, None, None, False, None, "use the small demo bundle instead of the ACT-size one"),
        ("--seconds", 10.0, float, None, False, None, "measured seconds per case (default 10)"),
        ("--rates", "30,100", None, None, False, None, "control rates to run, Hz (default 30,100)"),
        ("--steps", "100,10", None, None, False, None, "n_action_steps values to run (default 100,10)"),
        ("--json", False, None, None, False, None, "print the result as JSON"),
    ]


@pytest.mark.parametrize("argv", [["control"], ["control", "go"], ["camera", "--device", "0", "--synthetic"]])
def test_a_bad_command_line_is_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2


def test_a_command_is_sent_with_its_options_to_the_resolved_endpoint_and_its_reply_printed(
    daemon: type[Client], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.replies = [{"mode": "policy", "task": "pick"}]
    argv = ["control", "start", "--who", "ann", "--task", "pick", "--reason", "r", "--timeout-s", "0.25"]
    assert main(argv) == 0
    assert daemon.calls == [
        ("client", f"ipc://{tmp_path}/policy.sock", 0.25),
        _sent("start", who="ann", reason="r", task="pick"),
        "closed",
    ]
    assert capsys.readouterr() == ("control start: mode policy, task pick\n", "")


def test_a_reply_as_json_is_one_line_and_status_as_json_is_indented(
    daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.replies = [{"mode": "idle", "n": 1}, {"mode": "idle", "estop": {"latched": False}}]
    assert main(["control", "stop", "--json", "--connect", "tcp://10.0.0.2:5555"]) == 0
    assert main(["control", "status", "--json"]) == 0
    assert daemon.calls[0] == ("client", "tcp://10.0.0.2:5555", 2.0)
    assert daemon.calls[4] == _sent("status")
    assert capsys.readouterr().out == (
        '{"mode": "idle", "n": 1}\n{\n  "mode": "idle",\n  "estop": {\n    "latched": false\n  }\n}\n'
    )


def test_status_as_json_is_the_whole_map_indented(daemon: type[Client], capsys: pytest.CaptureFixture[str]) -> None:
    daemon.replies = [running()]
    assert main(["control", "status", "--json"]) == 0
    assert capsys.readouterr().out == json.dumps(running(), indent=2) + "\n"


def running(**changes: Any) -> dict[str, Any]:
    """A ``control status`` map as a daemon with its loop in an arm process answers it, mid-run."""
    status: dict[str, Any] = {
        "mode": "running",
        "source": "policy",
        "teleop": {
            "phase": "",
            "handover": "move",
            "last_seq": -1,
            "targets": 0,
            "out_of_order": 0,
            "late": 0,
            "intervention": False,
            "session": {"holder": None, "opened": 0, "refused": 0, "lost": 0},
        },
        "recording": None,
        "estop": {"latched": False, "reason": "", "latch": 0},
        "rate_hz": 30.0,
        "n_action_steps": 30,
        "refill_at": 15,
        "aggregate": "latest",
        "tick": 32,
        "queue_depth": 27,
        "counters": {
            "ticks": 32,
            "starts": 1,
            "priming": 1,
            "writes": 31,
            "requests": 3,
            "chunks": 3,
            "overruns": 0,
            "dropped_actions": 3,
        },
        "safety": {"limit": 0, "step": 0, "accel": 0, "nonfinite": 0, "refused_chunks": 0},
        "inference_latency_ticks": {"last": 1.0, "p50": 1.0, "max": 1.0},
        "jitter_ms": {"p50": 0.111, "p99": 1.0788, "max": 1.4465},
        "write_period_error_ms": {"p50": 0.087, "p99": 1.8748, "max": 2.0347, "periods": 30, "off_5ms": 0},
        "stale_streams": [],
        "blocked": "",
        "arm": {"healthy": True, "error": "", "positions": {"elbow_flex": 5.45}, "temperatures_c": {"elbow_flex": 31}},
        "scheduling": "SCHED_OTHER (rt_priority = 0)",
        "process": {"kind": "own", "pid": 7230, "alive": True, "death": "", "memory": "memory locked"},
        "task": "",
    }
    status.update(changes)
    return status


def status_lines(daemon: type[Client], capsys: pytest.CaptureFixture[str], status: dict[str, Any]) -> list[str]:
    daemon.replies = [status]
    assert main(["control", "status"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out.splitlines()


def test_status_of_a_running_loop_is_a_few_lines_the_mode_first(
    daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    assert status_lines(daemon, capsys, running()) == [
        "control    running, the policy commands the arm; tick 32 at 30 Hz",
        "e-stop     released",
        "arm        answering; arm process 7230 running",
        "policy     may be asked; 27 actions queued, the next chunk asked at 15 left of 30",
        "chunks     3 from 3 requests; latency last 1, p50 1, max 1 ticks",
        "stalls     none",
        "timing     0 overruns (ticks skipped); ticks woke late p99 1.08 ms, max 1.45 ms (last 10 s)",
        "writes     period error p99 1.87 ms, max 2.03 ms (last 10 s); 0 of 30 periods > 5 ms off",
        "safety     no interventions",
    ]


def test_status_names_the_policy_that_drives_and_for_a_remote_one_its_link(
    daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    local = running(policy={"where": "local", "policy": "act", "engine": {}})
    assert status_lines(daemon, capsys, local)[3].startswith("policy     act in this daemon; may be asked; 27 actions")
    trips = {"count": 40, "last_ms": 3.0, "p50_ms": 3.14, "p99_ms": 5.2}
    remote = {"where": "remote", "policy": "act", "endpoint": "tcp://10.0.0.2:5555", "link": "up", "round_trip": trips}
    assert status_lines(daemon, capsys, running(policy=remote))[3] == (
        "policy     act at tcp://10.0.0.2:5555 (remote, link up, round trip p50 3.14 ms / p99 5.2 ms over 40); "
        "may be asked; 27 actions queued, the next chunk asked at 15 left of 30"
    )
    lost = {**remote, "link": "lost", "round_trip": {"count": 0}}
    blocked = "policy unreachable: the policy at tcp://10.0.0.2:5555: no reply to ping request 9"
    assert status_lines(daemon, capsys, running(policy=lost, blocked=blocked))[3] == (
        "policy     act at tcp://10.0.0.2:5555 (remote, link lost, no round trip measured yet); "
        f"NOT ASKED: {blocked}; 27 actions queued, the next chunk asked at 15 left of 30"
    )


def test_status_of_an_estopped_loop_names_the_latch_its_reason_and_how_to_release_it(
    daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    estopped = running(
        mode="estopped",
        source="hold",
        queue_depth=0,
        estop={"latched": True, "reason": "hand in the way", "latch": 4},
        task="pick the cube",
    )
    lines = status_lines(daemon, capsys, estopped)
    assert lines[:2] == [
        "control    estopped, nothing commands the arm; tick 32 at 30 Hz; task 'pick the cube'",
        "e-stop     LATCHED (latch 4): hand in the way; release: `lerobot-runtime control release` (that latch), "
        "then `control start`",
    ]
    unreasoned = running(mode="estopped", estop={"latched": True, "reason": "", "latch": 1})
    assert status_lines(daemon, capsys, unreasoned)[1].startswith("e-stop     LATCHED (latch 1): no reason given;")
    idle = running(mode="idle", source="hold")
    assert status_lines(daemon, capsys, idle)[0] == (
        "control    idle, nothing commands the arm; tick 32 at 30 Hz; `lerobot-runtime control start` runs the policy"
    )


def test_status_of_a_stalled_loop_says_why_the_policy_is_not_asked_and_counts_the_stalls(
    daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    stale = "stale observation stream: observation.images.front (912 ms old > 300 ms)"
    counters = {
        "requests": 5,
        "chunks": 3,
        "submit_refused": 1,
        "inference_failures": 1,
        "starved": 12,
        "blocked_ticks": 40,
        "inference_stalls": 1,
        "stall_actions": 1,
        "overruns": 2,
    }
    stalled = running(
        blocked=stale,
        stale_streams=["observation.images.front"],
        queue_depth=0,
        counters=counters,
        safety={"limit": 3, "step": 0, "accel": 1, "nonfinite": 0, "refused_chunks": 1},
        inference_latency_ticks={"last": 4.0, "p50": 2.0, "max": 9.0},
        write_period_error_ms={"p50": 1.0, "p99": 31.5, "max": 66.7, "periods": 300, "off_5ms": 14},
    )
    assert status_lines(daemon, capsys, stalled)[3:9] == [
        f"policy     NOT ASKED: {stale}; 0 actions queued, the next chunk asked at 15 left of 30",
        "chunks     3 from 5 requests (1 refused by the server, 1 failed); latency last 4, p50 2, max 9 ticks",
        "stalls     starved 12 ticks (no action due); blocked 40 ticks (the policy could not be asked); "
        "1 requests unanswered past safety.stall_timeout_s; safety.stall_action taken 1 times",
        "timing     2 overruns (ticks skipped); ticks woke late p99 1.08 ms, max 1.45 ms (last 10 s)",
        "writes     period error p99 31.5 ms, max 66.7 ms (last 10 s); 14 of 300 periods > 5 ms off",
        "safety     limit 3, accel 1, refused_chunks 1",
    ]


def test_status_of_a_failing_arm_a_dead_arm_process_teleop_and_recording(
    daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    failing = running(arm={"healthy": False, "error": "bus read failed 3 times"})
    assert status_lines(daemon, capsys, failing)[2] == (
        "arm        FAILING: bus read failed 3 times; arm process 7230 running"
    )
    dead = running(arm={"healthy": False, "error": "gone"}, process={"alive": False, "death": "killed by SIGKILL"})
    assert status_lines(daemon, capsys, dead)[2] == "arm        FAILING: gone; arm process DEAD: killed by SIGKILL"
    in_thread = running()
    del in_thread["process"]  # the loop in the daemon's own process: no arm process line
    assert status_lines(daemon, capsys, in_thread)[2] == "arm        answering"
    teleop = {
        "phase": "tracking",
        "targets": 900,
        "out_of_order": 2,
        "late": 3,
        "intervention": True,
        "session": {"holder": "alice (client 7)"},
    }
    recording = {"active": True, "task": "pick", "frames": 120, "episodes_ended": 2, "episodes_discarded": 1}
    lines = status_lines(daemon, capsys, running(mode="teleop", source="teleop", teleop=teleop, recording=recording))
    assert lines[0].startswith("control    teleop, a teleop station commands the arm;")
    assert lines[-2:] == [
        "teleop     tracking; station alice (client 7); 900 targets (2 out of order), 3 late for their tick;"
        " intervention",
        "recording  episode running: 120 frames, task 'pick'; episodes 2 ended, 1 discarded",
    ]
    assert status_lines(daemon, capsys, running(recording={"active": False}))[-1] == "recording  no episode running"


def test_status_from_a_map_with_keys_missing_says_which(
    daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    old = running()
    for key in ("estop", "jitter_ms", "write_period_error_ms", "safety"):
        del old[key]
    del old["counters"]["overruns"]
    lines = status_lines(daemon, capsys, old)
    assert lines[1] == "e-stop     unknown"
    assert lines[6:9] == [
        "timing     ? overruns (ticks skipped); wake-up lateness not measured yet",
        "writes     period error not measured yet (needs writes on consecutive ticks)",
        "safety     unknown",
    ]
    assert lines[-1] == (
        "missing    estop, counters.overruns, jitter_ms, write_period_error_ms, safety (not in the reply: an older "
        "daemon, or the loop not started; --json shows what it sent)"
    )
    nothing = status_lines(daemon, capsys, {})
    assert nothing[0] == "control    unknown mode, source unknown; tick ? at ?"
    assert nothing[-1].startswith("missing    mode, source, tick, rate_hz, estop, arm, blocked, stale_streams, ")
    assert status_lines(daemon, capsys, running(arm=None, counters="?"))[2:6] == [
        "arm        unknown; arm process 7230 running",
        "policy     may be asked; 27 actions queued, the next chunk asked at 15 left of 30",
        "chunks     unknown; latency last 1, p50 1, max 1 ticks",
        "stalls     unknown",
    ]


def test_release_without_a_latch_releases_the_one_status_shows(
    daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    estop = {"latched": True, "latch": 3, "reason": "hand in the way"}
    daemon.replies = [{"estop": estop}, {"mode": "idle"}]
    assert main(["control", "release", "--who", "bo"]) == 0
    assert daemon.calls[1:3] == [("status", {}), _sent("release", who="bo", latch=3)]
    assert capsys.readouterr() == (
        "control release: releasing e-stop latch 3 (hand in the way)\ncontrol release: mode idle\n",
        "",
    )


def test_release_without_a_latched_estop_is_refused_and_sends_nothing_more(
    daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.replies = [{"estop": {"latched": False, "latch": 2, "reason": ""}}]
    assert main(["control", "release"]) == 1
    assert daemon.calls[1:] == [("status", {}), "closed"]
    assert capsys.readouterr() == ("", "control release refused: no e-stop is latched\n")


def test_release_with_a_latch_sends_that_one(daemon: type[Client]) -> None:
    daemon.replies = [{}]
    assert main(["control", "release", "--latch", "5"]) == 0
    assert daemon.calls[1:] == [_sent("release", latch=5), "closed"]
    daemon.replies = [{}]
    assert main(["control", "estop", "--latch", "0", "--reason", "test"]) == 0  # only a release looks it up
    assert daemon.calls[4] == _sent("estop", reason="test", latch=0)


@pytest.mark.parametrize(
    ("argv", "error", "line"),
    [
        (
            ["start"],
            ControlRefusedError("the arm is held by a station"),
            "control start refused [control_refused]: the arm is held by a station",
        ),
        (["release"], ServerError("no loop"), "control release refused [error]: no loop"),
    ],
)
def test_a_refusal_is_its_code_and_message_on_stderr_and_exit_1(
    argv: list[str], error: ServerError, line: str, daemon: type[Client], capsys: pytest.CaptureFixture[str]
) -> None:
    daemon.replies = [error]
    assert main(["control", *argv]) == 1
    assert capsys.readouterr() == ("", line + "\n")


class Publisher:
    made: list[Any]
    stop_with: BaseException | None = None

    def __init__(self, source: Any, name: str, endpoint: str, fps: float) -> None:
        self.endpoint = endpoint
        self.made.append(("publisher", source, name, endpoint, fps))

    def run(self, frames: int | None) -> None:
        self.made.append(("run", frames))
        if self.stop_with is not None:
            raise self.stop_with

    def close(self) -> None:
        self.made.append("closed")


@pytest.fixture
def camera(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    Publisher.made, Publisher.stop_with = [], None
    monkeypatch.setattr(runtime.producers.camera, "CameraPublisher", Publisher)
    monkeypatch.setattr(runtime.producers.camera, "SyntheticSource", lambda w, h: ("synthetic", w, h))
    monkeypatch.setattr(runtime.producers.camera, "OpenCVSource", lambda d, w, h, fps: ("opencv", d, w, h, fps))
    return Publisher.made


def test_the_camera_publishes_a_synthetic_pattern_by_default_until_stopped(camera: list[Any]) -> None:
    assert main(["camera"]) == 0
    assert camera == [
        ("publisher", ("synthetic", 128, 96), "observation.images.front", "ipc://camera-front.sock", 30.0),
        ("run", None),
        "closed",
    ]


def test_the_camera_publishes_a_device_for_the_frames_asked(camera: list[Any]) -> None:
    argv = ["--device", "/dev/video2", "--input", "wrist", "--endpoint", "ipc://w.sock", "--fps", "15"]
    assert main(["camera", *argv, "--width", "64", "--height", "48", "--frames", "9"]) == 0
    assert camera == [
        ("publisher", ("opencv", "/dev/video2", 64, 48, 15.0), "wrist", "ipc://w.sock", 15.0),
        ("run", 9),
        "closed",
    ]


def test_ctrl_c_stops_the_camera_with_exit_0_and_a_failure_still_closes_it(camera: list[Any]) -> None:
    Publisher.stop_with = KeyboardInterrupt()
    assert main(["camera"]) == 0
    assert camera[-1] == "closed"
    Publisher.stop_with = RuntimeError("device gone")
    assert main(["camera"]) == 1
    assert camera[-2:] == [("run", None), "closed"]


@pytest.fixture
def replay(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr(runtime.control.replay, "summarize", lambda f: calls.append(("summarize", f)) or {"ticks": 3})
    monkeypatch.setattr(runtime.control.replay, "draw", lambda f, out: calls.append(("draw", f, out)) or Path(out))
    monkeypatch.setattr(runtime.control.replay, "format_summary", lambda s: f"summary {s}")
    return calls


def test_replay_summarises_and_draws_next_to_the_file(replay: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "/s/flight-1.npz"]) == 0
    assert replay == [("summarize", "/s/flight-1.npz"), ("draw", "/s/flight-1.npz", Path("/s/flight-1.png"))]
    assert capsys.readouterr().out == "summary {'ticks': 3, 'png': '/s/flight-1.png'}\ndrawn to /s/flight-1.png\n"


def test_replay_draws_where_asked_or_not_at_all_and_prints_json(
    replay: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", "/s/f.npz", "--png", "/tmp/out.png", "--json"]) == 0
    assert replay[1] == ("draw", "/s/f.npz", "/tmp/out.png")
    assert json.loads(capsys.readouterr().out) == {"ticks": 3, "png": "/tmp/out.png"}
    replay.clear()
    assert main(["replay", "/s/f.npz", "--no-png"]) == 0
    assert replay == [("summarize", "/s/f.npz")]
    assert capsys.readouterr().out == "summary {'ticks': 3}\n"
    assert main(["replay", "/s/f.npz", "--no-png", "--json"]) == 0
    assert capsys.readouterr().out == '{\n  "ticks": 3\n}\n'


def test_bench_loop_runs_the_rates_and_steps_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs: list[dict[str, Any]] = []
    monkeypatch.setattr(runtime.bench.loop, "run_loop_bench", lambda **kw: runs.append(kw) or {"rows": 1})
    monkeypatch.setattr(runtime.bench.loop, "format_table", lambda result: f"table {result}")
    assert main(["bench", "loop"]) == 0
    assert (
        main(
            [
                "bench",
                "loop",
                "--bundle",
                "/b",
                "--demo",
                "--seconds",
                "2",
                "--rates",
                "50,,250",
                "--steps",
                "7,",
                "--json",
            ]
        )
        == 0
    )
    assert runs == [
        {"bundle": None, "demo": False, "seconds": 10.0, "rates": [30.0, 100.0], "steps": [100, 10]},
        {"bundle": "/b", "demo": True, "seconds": 2.0, "rates": [50.0, 250.0], "steps": [7]},
    ]
    assert capsys.readouterr().out == "table {'rows': 1}\n{\n  \"rows\": 1\n}\n"


def test_the_defaults_parsed() -> None:
    root = build_parser()
    control = runtime.commands.control
    assert handler("control", "stop", root=root) is control._control
    assert handler("camera", root=root) is control._camera
    assert handler("replay", "f.npz", root=root) is control._replay
    assert handler("bench", "loop", root=root) is control._bench_loop
    assert defaults("control", "dump", root=root) == {
        "command": "control",
        "control_command": "dump",
        "connect": "ipc://policy.sock",
        "who": "",
        "reason": "",
        "task": "",
        "latch": None,
        "timeout_s": 2.0,
        "json": False,
    }


def test_an_unexpected_failure_is_told_as_the_control_commands(
    daemon: type[Client], caplog: pytest.LogCaptureFixture
) -> None:
    daemon.replies = [RuntimeError("socket gone")]
    assert main(["control", "stop"]) == 1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "control failed: RuntimeError: socket gone"
    ]
