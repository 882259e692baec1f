"""``lerobot-runtime status``: which endpoint it asks, the map it makes of ``hello`` and ``stats``, and
the lines it prints, on replies made in the test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.config import DaemonConfig
from runtime.errors import ConfigError
from runtime.protocol.messages import Percentiles, PolicyInfo, StatsSnapshot
from runtime.server.config import CurveConfig, ServerConfig
from runtime.status import format_status, gather, status_endpoint


def with_endpoints(*endpoints: str, curve: bool = False) -> DaemonConfig:
    keys = CurveConfig("/k/server.key_secret", "/k/clients") if curve else CurveConfig()
    return DaemonConfig(server=ServerConfig(endpoints=endpoints, curve=keys))


class TestEndpoint:
    def test_the_first_ipc_endpoint_resolved_in_the_runtime_directory(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path))
        config = with_endpoints("tcp://127.0.0.1:5555", "ipc://policy.sock", "ipc:///run/other.sock")
        assert status_endpoint(config) == f"ipc://{tmp_path}/policy.sock"
        assert status_endpoint(with_endpoints("ipc:///run/a.sock", "ipc://b.sock")) == "ipc:///run/a.sock"

    def test_else_the_first_loopback_tcp_endpoint(self) -> None:
        config = with_endpoints("tcp://127.0.0.1:5555", "tcp://[::1]:5556")
        assert status_endpoint(config) == "tcp://127.0.0.1:5555"
        config = with_endpoints("tcp://0.0.0.0:5555", "tcp://localhost:5557", curve=True)
        with pytest.raises(ConfigError):  # not without the keys CURVE asks for
            status_endpoint(config)

    def test_the_refusal_says_to_pass_connect(self) -> None:
        with pytest.raises(ConfigError) as err:
            status_endpoint(with_endpoints("tcp://0.0.0.0:5555", curve=True))
        assert str(err.value) == (
            "status: the config has no ipc endpoint (nor a loopback tcp one without CURVE) to ask; pass --connect"
        )


ENGINE = {
    "bundle": "/b/pick",
    "program": "model.xml",
    "engine": "openvino",
    "device": "CPU",
    "precision": "f32",
    "threads": 3,
    "cpus": [1, 2, 3],
}


def info(engine: dict[str, Any] | None = None) -> PolicyInfo:
    return PolicyInfo(
        protocol_version=1,
        server_version="1.2.3",
        policy_name="act",
        inputs=(),
        outputs=(),
        action_output="action",
        chunk_length=50,
        action_names=(),
        control_rate_hz=30.0,
        engine=ENGINE if engine is None else engine,
        versions={"openvino": "2025.1", "numpy": "2.0"},
        kinds=("infer",),
        max_message_bytes=1 << 20,
        queue_depth=4,
    )


ARM = {
    "kind": "feetech",
    "healthy": True,
    "last_error": "",
    "estop": False,
    "estop_reason": "",
    "temperature_c": {"shoulder_pan": 31, "gripper": 38},
}


def stats(**overrides: Any) -> StatsSnapshot:
    values: dict[str, Any] = {
        "uptime_s": 3600.4,
        "requests": {"ping": 2, "infer": 10},
        "errors": {"queue_full": 1},
        "replies_ok": 11,
        "queue_depth": 1,
        "queue_depth_max": 3,
        "queue_capacity": 4,
        "in_flight": 1,
        "latency_ms": {"total": Percentiles(10, 5.0, 6.5, 7.25, 8.0), "queue": Percentiles(10, 0.1, 0.2, 0.3, 0.4)},
        "arm": ARM,
        "clients": 2,
        "inference_cpus": {3: 4, 1: 6},
        "engine": {},
    }
    values.update(overrides)
    return StatsSnapshot(**values)


def test_gather_takes_the_engine_from_stats_else_from_hello() -> None:
    s = gather(info(), stats())
    assert s == {
        "policy": "act",
        "remote": None,
        "bundle": "/b/pick",
        "program": "model.xml",
        "engine": "openvino",
        "device": "CPU",
        "precision": "f32",
        "threads": 3,
        "cpus_allowed": [1, 2, 3],
        "cpus_observed": {"1": 6, "3": 4},
        "uptime_s": 3600.4,
        "clients": 2,
        "requests": {"ping": 2, "infer": 10},
        "errors": {"queue_full": 1},
        "local_requests": {},
        "local_errors": {},
        "queue": {"depth": 1, "capacity": 4, "depth_max": 3, "in_flight": 1},
        "latency_ms": {
            "total": {"count": 10, "p50": 5.0, "p90": 6.5, "p99": 7.25, "max": 8.0},
            "queue": {"count": 10, "p50": 0.1, "p90": 0.2, "p99": 0.3, "max": 0.4},
        },
        "arm": ARM,
        "gate": None,
        "versions": {"openvino": "2025.1", "numpy": "2.0"},
    }
    assert list(s["cpus_observed"]) == ["1", "3"]  # by CPU number
    swapped = gather(info(), stats(engine={**ENGINE, "device": "GPU", "bundle": "/b/new"}))
    assert (swapped["device"], swapped["bundle"]) == ("GPU", "/b/new")
    assert gather(info(), stats(arm=None))["arm"] is None
    remote = gather(info(), stats(engine={**ENGINE, "where": "remote", "endpoint": "tcp://10.0.0.2:5555"}))
    assert remote["remote"] == "tcp://10.0.0.2:5555"
    first = format_status(remote).splitlines()[0]
    assert first == "policy     act served at tcp://10.0.0.2:5555, from its /b/pick (model.xml)"
    bare = gather(info(engine={}), stats())
    assert [bare[k] for k in ("bundle", "program", "engine", "device", "precision", "threads", "cpus_allowed")] == [
        None
    ] * 7


def test_gather_copies_what_it_hands_on() -> None:
    requests = {"infer": 1}
    arm = dict(ARM)
    s = gather(info(), stats(requests=requests, arm=arm))
    s["requests"]["infer"] = 99
    s["arm"]["healthy"] = False
    assert requests == {"infer": 1} and arm["healthy"] is True


def test_the_report_line_by_line() -> None:
    text = format_status(gather(info(), stats()))
    assert text.splitlines() == [
        "policy     act from /b/pick (model.xml)",
        "engine     openvino on CPU/f32, 3 threads, CPUs allowed [1, 2, 3], inference ran on CPU 1 (6x), CPU 3 (4x)",
        "uptime     3600 s; clients in the last minute: 2",
        "requests   infer=10 ping=2; errors queue_full=1",
        "queue      1/4 (max 3), in flight 1",
        "latency    total  p50 5.0 p90 6.5 p99 7.25 max 8.0 ms (last 10)",
        "latency    queue  p50 0.1 p90 0.2 p99 0.3 max 0.4 ms (last 10)",
        "arm        feetech: ok; e-stop released",
        "temps °C   shoulder_pan 31, gripper 38",
    ]


@pytest.mark.parametrize(
    ("gate", "line"),
    [
        (
            {"passed": 2, "runs": 16, "done": False, "failure": None},
            "gate       2 of 16 parity replays passed; nothing is served before all",
        ),
        ({"passed": 16, "runs": 16, "done": True, "failure": None}, "gate       passed, all 16 parity replays"),
        (
            {"passed": 6, "runs": 16, "done": True, "failure": "the parity gate failed after the daemon was ready: x"},
            "gate       FAILED, serving nothing until the policy is loaded again: the parity gate failed after the "
            "daemon was ready: x",
        ),
    ],
)
def test_a_staged_parity_gate_has_a_line_after_the_engine(gate: dict[str, Any], line: str) -> None:
    s = gather(info(), stats(verification={"checks": 1, "gate": gate}))
    assert s["gate"] == gate and s["gate"] is not gate
    lines = format_status(s).splitlines()
    assert lines[2] == line and lines[3].startswith("uptime")


def test_every_request_kind_and_error_code_by_name() -> None:
    s = gather(info(), stats(requests={"stats": 1, "hello": 3, "infer": 9}, errors={"queue_full": 1, "bad_input": 2}))
    assert format_status(s).splitlines()[3] == "requests   hello=3 infer=9 stats=1; errors bad_input=2 queue_full=1"


def test_the_control_loops_requests_and_errors_are_named_in_the_counts() -> None:
    s = gather(
        info(),
        stats(
            requests={"infer": 5, "stats": 1},
            errors={"superseded": 1, "busy": 2},
            local_requests={"infer": 3},
            local_errors={"superseded": 1},
            inference_cpus={2: 3},
        ),
    )
    assert (s["local_requests"], s["local_errors"]) == ({"infer": 3}, {"superseded": 1})
    lines = format_status(s).splitlines()
    assert lines[1].endswith("inference ran on CPU 2 (3x)")
    assert lines[3] == (
        "requests   infer=5 (3 from the control loop) stats=1; errors busy=2 superseded=1 (1 from the control loop)"
    )
    older = {k: v for k, v in s.items() if not k.startswith("local_")}  # a map made before they were counted
    assert format_status(older).splitlines()[3] == "requests   infer=5 stats=1; errors busy=2 superseded=1"


def test_a_fresh_daemon_without_an_arm() -> None:
    s = gather(info(), stats(requests={}, errors={}, inference_cpus={}, latency_ms={}, arm=None, uptime_s=0.4))
    assert format_status(s).splitlines() == [
        "policy     act from /b/pick (model.xml)",
        "engine     openvino on CPU/f32, 3 threads, CPUs allowed [1, 2, 3], inference ran on no CPU yet (no inference)",
        "uptime     0 s; clients in the last minute: 2",
        "requests   none; errors none",
        "queue      1/4 (max 3), in flight 1",
        "arm        none",
    ]


@pytest.mark.parametrize(
    ("arm", "lines"),
    [
        (
            {"kind": "sim", "healthy": False, "last_error": "port gone", "estop": True, "estop_reason": "button"},
            ["arm        sim: FAILING: port gone; e-stop ENGAGED: button", "temps °C   unknown"],
        ),
        (
            {"kind": "sim", "healthy": True, "estop": True, "estop_reason": "", "temperature_c": {}},
            ["arm        sim: ok; e-stop ENGAGED: no reason given", "temps °C   unknown"],
        ),
        (
            {"kind": "sim", "healthy": True, "estop": False, "temperature_c": None},
            ["arm        sim: ok; e-stop released", "temps °C   unknown"],
        ),
    ],
    ids=["failing and engaged", "engaged without a reason", "no temperatures"],
)
def test_the_arms_health_and_estop(arm: dict[str, Any], lines: list[str]) -> None:
    assert format_status(gather(info(), stats(arm=arm))).splitlines()[-2:] == lines
