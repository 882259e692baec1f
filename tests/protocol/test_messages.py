"""The typed messages of protocol version 1: the kinds a server may list, the requests' defaults,
and every reply map the server sends (``hello``'s and ``stats``'s bodies, as docs/protocol.md
writes them), field by field."""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.protocol.messages import (
    CONTROL_KINDS,
    KINDS,
    MAX_REQUEST_ID,
    PREFIX_FIELDS,
    PROTOCOL_VERSION,
    RESERVED_KIND_PREFIXES,
    SUPPORTED_VERSIONS,
    TELEOP_KINDS,
    ZERO_TIMING,
    ActionChunk,
    ControlRequest,
    InferRequest,
    Percentiles,
    PolicyInfo,
    Pong,
    PrefixFields,
    StatsSnapshot,
    TeleopRequest,
    TensorInfo,
    Timing,
)

# docs/protocol.md, the request header's `kind`
DOCUMENTED_KINDS = [
    "hello",
    "infer",
    "ping",
    "stats",
    "control.start",
    "control.stop",
    "control.estop",
    "control.release",
    "control.status",
    "control.dump",
    "control.teleop",
    "teleop.open",
    "teleop.target",
    "teleop.take_over",
    "teleop.hand_back",
    "teleop.episode_start",
    "teleop.episode_stop",
    "teleop.episode_discard",
    "teleop.close",
]


def test_version_one_and_a_uint64_request_id() -> None:
    assert PROTOCOL_VERSION == 1
    assert SUPPORTED_VERSIONS == (1,)
    assert MAX_REQUEST_ID == 18446744073709551615


def test_the_kinds_are_the_documented_ones_in_their_order() -> None:
    assert list(KINDS) == DOCUMENTED_KINDS
    assert tuple(k for k in DOCUMENTED_KINDS if k.startswith("control.")) == CONTROL_KINDS
    assert tuple(k for k in DOCUMENTED_KINDS if k.startswith("teleop.")) == TELEOP_KINDS
    assert RESERVED_KIND_PREFIXES == ("session.",)
    assert not any(k.startswith(RESERVED_KIND_PREFIXES) for k in KINDS)


def test_timing_defaults_to_zero() -> None:
    assert (ZERO_TIMING.queue_ms, ZERO_TIMING.infer_ms, ZERO_TIMING.total_ms) == (0.0, 0.0, 0.0)
    assert Timing() == ZERO_TIMING


def test_request_defaults() -> None:
    infer = InferRequest(3, {})
    assert (infer.kind, infer.reset, infer.task, infer.rtc) == ("infer", False, None, PrefixFields())
    control = ControlRequest(4, "control.stop")
    assert (control.who, control.reason, control.latch, control.task) == ("", "", 0, "")
    teleop = TeleopRequest(5, "teleop.close")
    assert (teleop.session, teleop.who, teleop.seq, teleop.positions, teleop.task) == ("", "", 0, (), "")


def test_prefix_fields_given_are_the_ones_present_in_wire_order() -> None:
    assert PREFIX_FIELDS == ("prefix", "delay", "execution_horizon", "prefix_attention_schedule", "max_guidance_weight")
    assert PrefixFields().given() == ()
    # zero and an empty string are values, not absences
    assert PrefixFields(delay=0).given() == ("delay",)
    assert PrefixFields(max_guidance_weight=0.0, prefix_attention_schedule="").given() == (
        "prefix_attention_schedule",
        "max_guidance_weight",
    )
    every = PrefixFields(np.zeros((2, 6), np.float32), 1, 2, "LINEAR", 5.0)
    assert every.given() == PREFIX_FIELDS


def test_a_tensor_on_the_wire() -> None:
    assert TensorInfo("img", "uint8", (4, 4, 3)).to_wire() == {
        "name": "img",
        "dtype": "uint8",
        "shape": [4, 4, 3],
        "role": "other",
    }
    assert TensorInfo("action", "float32", (10, 6), "action").to_wire()["role"] == "action"


def info(**changes: Any) -> PolicyInfo:
    fields: dict[str, Any] = {
        "protocol_version": 1,
        "server_version": "0.1.0",
        "policy_name": "demo_act",
        "inputs": (TensorInfo("observation.state", "float32", (6,), "state"),),
        "outputs": (TensorInfo("action", "float32", (10, 6), "action"),),
        "action_output": "action",
        "chunk_length": 10,
        "action_names": ("a", "b", "c", "d", "e", "f"),
        "control_rate_hz": 30.0,
        "engine": {"engine": "openvino", "device": "CPU", "precision": "f32"},
        "versions": {"openvino": "2025.4.1"},
        "kinds": ("hello", "infer"),
        "max_message_bytes": 1 << 20,
        "queue_depth": 4,
    }
    fields.update(changes)
    return PolicyInfo(**fields)


def test_hello_of_a_policy_without_task_or_prefix() -> None:
    i = info()
    assert (i.arm, i.history_frames, i.noise_inputs, i.max_task_bytes, i.prefix_steps, i.max_delay) == (
        None,
        1,
        (),
        0,
        0,
        0,
    )
    assert i.prefix_defaults == {}
    assert (i.takes_task, i.takes_prefix) == (False, False)
    assert i.to_wire() == {
        "protocol_version": 1,
        "server_version": "0.1.0",
        "policy": {"name": "demo_act"},
        "inputs": [{"name": "observation.state", "dtype": "float32", "shape": [6], "role": "state"}],
        "outputs": [{"name": "action", "dtype": "float32", "shape": [10, 6], "role": "action"}],
        "action": {"output": "action", "chunk_length": 10, "names": ["a", "b", "c", "d", "e", "f"]},
        "control_rate_hz": 30.0,
        "engine": {"engine": "openvino", "device": "CPU", "precision": "f32"},
        "versions": {"openvino": "2025.4.1"},
        "kinds": ["hello", "infer"],
        "limits": {"max_message_bytes": 1 << 20, "queue_depth": 4},
        "arm": None,
        "observation": {"history_frames": 1, "server_drawn": [], "task": None, "prefix": None},
    }


def test_hello_of_a_language_policy_with_real_time_chunking_and_an_arm() -> None:
    arm = {"kind": "feetech", "healthy": True}
    i = info(
        arm=arm,
        history_frames=2,
        noise_inputs=("noise",),
        max_task_bytes=512,
        prefix_steps=50,
        max_delay=49,
        prefix_defaults={"execution_horizon": 10, "prefix_attention_schedule": "LINEAR", "max_guidance_weight": 10.0},
    )
    assert (i.takes_task, i.takes_prefix) == (True, True)
    wire = i.to_wire()
    assert wire["arm"] == arm and wire["arm"] is not arm
    assert wire["observation"] == {
        "history_frames": 2,
        "server_drawn": ["noise"],
        "task": {"required": True, "max_bytes": 512},
        "prefix": {
            "max_steps": 50,
            "max_delay": 49,
            "execution_horizon": 10,
            "prefix_attention_schedule": "LINEAR",
            "max_guidance_weight": 10.0,
        },
    }


def test_a_task_or_a_prefix_of_one_is_taken_and_of_zero_is_not() -> None:
    assert info(max_task_bytes=1).takes_task is True
    assert info(max_task_bytes=1).to_wire()["observation"]["task"] == {"required": True, "max_bytes": 1}
    assert info(max_task_bytes=0).takes_task is False
    assert info(prefix_steps=1).takes_prefix is True
    assert info(prefix_steps=1).to_wire()["observation"]["prefix"] == {"max_steps": 1, "max_delay": 0}
    assert info(prefix_steps=0, max_delay=3).takes_prefix is False
    assert info(prefix_steps=0, max_delay=3).to_wire()["observation"]["prefix"] is None


def test_hello_copies_its_maps() -> None:
    engine = {"engine": "openvino", "device": "CPU"}
    versions = {"openvino": "2025.4.1"}
    wire = info(engine=engine, versions=versions).to_wire()
    assert wire["engine"] == engine and wire["engine"] is not engine
    assert wire["versions"] == versions and wire["versions"] is not versions


def test_device_and_precision_come_from_the_engine_and_are_empty_without_it() -> None:
    i = info(engine={"device": "GPU.0", "precision": "bf16"})
    assert (i.device, i.precision) == ("GPU.0", "bf16")
    assert (info(engine={}).device, info(engine={}).precision) == ("", "")
    assert info(engine={"device": 0}).device == "0"


def test_replies_default_to_no_round_trip_time() -> None:
    chunk = ActionChunk(7, np.zeros((1, 6), np.float32), ZERO_TIMING)
    assert chunk.round_trip_ms == 0.0
    assert Pong(7, 1.5, ZERO_TIMING).round_trip_ms == 0.0


def test_percentiles_on_the_wire() -> None:
    assert Percentiles().to_wire() == {"count": 0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    assert Percentiles(5, 1.0, 2.0, 3.0, 4.0).to_wire() == {"count": 5, "p50": 1.0, "p90": 2.0, "p99": 3.0, "max": 4.0}


def snapshot(**changes: Any) -> StatsSnapshot:
    fields: dict[str, Any] = {
        "uptime_s": 10.5,
        "requests": {"infer": 5, "ping": 2},
        "errors": {"bad_input": 1},
        "replies_ok": 6,
        "queue_depth": 1,
        "queue_depth_max": 3,
        "queue_capacity": 4,
        "in_flight": 2,
    }
    fields.update(changes)
    return StatsSnapshot(**fields)


def test_stats_of_a_policy_server_with_nothing_optional() -> None:
    s = snapshot()
    assert (s.latency_ms, s.arm, s.clients, s.inference_cpus, s.engine, s.verification) == ({}, None, 0, {}, {}, {})
    assert s.to_wire() == {
        "uptime_s": 10.5,
        "requests": {"infer": 5, "ping": 2},
        "errors": {"bad_input": 1},
        "replies_ok": 6,
        "queue": {"depth": 1, "depth_max": 3, "capacity": 4, "in_flight": 2},
        "latency_ms": {},
        "arm": None,
        "clients": 0,
        "inference_cpus": {},
        "engine": {},
        "verification": {},
        "local_requests": {},
        "local_errors": {},
    }


def test_stats_with_every_field() -> None:
    arm = {"kind": "feetech", "healthy": True}
    s = snapshot(
        latency_ms={"total": Percentiles(5, 1.0, 2.0, 3.0, 4.0)},
        arm=arm,
        clients=3,
        inference_cpus={1: 40, 3: 2},
        engine={"device": "CPU"},
        verification={"checks": 7, "failed": False},
        local_requests={"infer": 4},
        local_errors={"superseded": 1},
    )
    wire = s.to_wire()
    assert wire["latency_ms"] == {"total": {"count": 5, "p50": 1.0, "p90": 2.0, "p99": 3.0, "max": 4.0}}
    assert wire["arm"] == arm and wire["arm"] is not arm
    # msgpack maps from a CPU number: the keys go as strings
    assert wire["inference_cpus"] == {"1": 40, "3": 2}
    assert (wire["clients"], wire["engine"], wire["verification"]) == (
        3,
        {"device": "CPU"},
        {"checks": 7, "failed": False},
    )
    assert (wire["local_requests"], wire["local_errors"]) == ({"infer": 4}, {"superseded": 1})
