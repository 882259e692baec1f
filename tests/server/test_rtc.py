"""Real-time chunking on the wire: a request's leftover and delay become the program's prefix inputs.

The policy here is built in the test: an engine whose chunk shows what the server handed it (the
padded leftover weighted by the prefix weights, plus the guidance cap), so every assembled input can
be checked; LeRobot's own weights are compared where LeRobot is installed. The SmolVLA program itself
is proved in tests/engine/test_lerobot_smolvla_rtc.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq

from runtime.bundle.manifest import (
    Manifest,
    ProgramEntry,
    RtcEntry,
    TensorSpec,
    TestCaseEntry,
    parse_manifest,
)
from runtime.bundle.rtc import SCHEDULES, prefix_weights
from runtime.client import PolicyClient
from runtime.engine.base import Engine, EngineInfo
from runtime.errors import BundleError
from runtime.protocol.codec import decode_reply, decode_request, encode_request
from runtime.protocol.errors import BadInputError
from runtime.protocol.messages import InferRequest, PrefixFields
from runtime.server import PolicyServer, ServerConfig
from runtime.server.rtc import PrefixInputs, prefix_inputs, refuse_on_policy_without

STATE, PREFIX, WEIGHTS, CAP = "observation.state", "rtc.prefix", "rtc.prefix_weights", "rtc.max_guidance_weight"
JOINTS, CHUNK, STEPS = 6, 8, 5  # the policy predicts 8 steps and serves 5
HORIZON, DEFAULT_CAP = 6, 10.0


def rtc_manifest() -> Manifest:
    zeros = "0" * 64
    names = tuple(f"joint_{i}" for i in range(JOINTS))
    return Manifest(
        policy_name="prefix-echo",
        inputs=(
            TensorSpec(STATE, "float32", (JOINTS,), "state"),
            TensorSpec(PREFIX, "float32", (CHUNK, JOINTS), "prefix"),
            TensorSpec(WEIGHTS, "float32", (CHUNK,), "prefix_weights"),
            TensorSpec(CAP, "float32", (1,), "guidance"),
        ),
        outputs=(TensorSpec("action", "float32", (STEPS, JOINTS), "action"),),
        action_output="action",
        chunk_length=STEPS,
        action_names=names,
        control_rate_hz=30.0,
        programs={"CPU": ProgramEntry("CPU", "p.pte", "f32", zeros, "full", "")},
        test_case=TestCaseEntry("test_case.npz", zeros),
        rtc=RtcEntry(PREFIX, WEIGHTS, CAP, CHUNK, HORIZON, "LINEAR", DEFAULT_CAP),
    )


class PrefixEcho(Engine):
    """Step i of the chunk is ``weights[i] * prefix[i] + cap``; every run's inputs are kept."""

    def __init__(self) -> None:
        info = EngineInfo("openvino", "CPU", "f32", 1, (0,), "(test)", "(in memory)", "")
        super().__init__(rtc_manifest(), info)
        self.runs: list[list[np.ndarray]] = []

    def run_validated(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        self.runs.append([a.copy() for a in arrays])
        _, prefix, weights, cap = arrays
        return {"action": (prefix[:STEPS] * weights[:STEPS, None] + cap[0]).astype(np.float32)}


def echo(prefix: np.ndarray, weights: np.ndarray, cap: float) -> np.ndarray:
    padded = np.zeros((CHUNK, JOINTS), np.float32)
    padded[: len(prefix)] = prefix
    return (padded[:STEPS] * weights[:STEPS, None] + np.float32(cap)).astype(np.float32)


def leftover(steps: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=(steps, JOINTS)) * 20).astype(np.float32)


STATE_OBS = {STATE: np.arange(JOINTS, dtype=np.float32)}


# --- the manifest ----------------------------------------------------------------------------


def test_the_rtc_section_round_trips_through_the_manifest() -> None:
    m = rtc_manifest()
    assert parse_manifest(m.to_json()).rtc == m.rtc
    assert [s.name for s in m.observation_inputs] == [STATE]  # clients never send the prefix inputs


def _raw() -> dict[str, Any]:
    return json.loads(json.dumps(rtc_manifest().to_json()))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("rtc"), r"field 'rtc': expected the real-time chunking section of the inputs"),
        (lambda d: d["rtc"].update(chunk_size=4), r"'rtc.chunk_size': expected at least action.chunk_length \(5\)"),
        (lambda d: d["rtc"].update(prefix_input="nope"), r"'rtc.prefix_input': expected an input with role prefix"),
        (
            lambda d: d["inputs"][1].update(shape=[CHUNK, 5]),
            r"field 'rtc.prefix_input': expected an input with role prefix, float32 \[8, 6\], got .*float32 \[8, 5\]",
        ),
        (
            lambda d: d["inputs"][2].update(dtype="float16"),
            r"field 'rtc.weights_input': expected an input with role prefix_weights, float32 \[8\]",
        ),
        (lambda d: d["inputs"][3].update(shape=[2]), r"'rtc.guidance_input': expected an input with role guidance"),
        (lambda d: d["rtc"].update(execution_horizon=0), r"field 'rtc.execution_horizon': expected a positive number"),
        (lambda d: d["rtc"].update(prefix_attention_schedule="linear"), r"field 'rtc.prefix_attention_schedule'"),
        (lambda d: d["rtc"].update(max_guidance_weight=0), r"field 'rtc.max_guidance_weight': expected a positive"),
        (lambda d: d["inputs"][1].update(role="state"), r"'rtc.prefix_input': expected an input with role prefix"),
    ],
)
def test_a_bad_rtc_section_is_refused_naming_the_field(edit: Callable[[dict[str, Any]], Any], message: str) -> None:
    data = _raw()
    edit(data)
    with pytest.raises(BundleError, match=message):
        parse_manifest(data)


def test_a_second_input_with_a_prefix_role_is_refused() -> None:
    data = _raw()
    data["inputs"].append({"name": "another", "dtype": "float32", "shape": [CHUNK], "role": "prefix_weights"})
    with pytest.raises(BundleError, match=r"'rtc.weights_input': expected the one input with role prefix_weights"):
        parse_manifest(data)


# --- the weights and the arrays ----------------------------------------------------------------


def test_weights_follow_lerobots_get_prefix_weights() -> None:
    from runtime.export.lerobot import lerobot_available

    if lerobot_available() is not None:
        pytest.skip(f"needs LeRobot: {lerobot_available()}")
    from runtime.export.lerobot import import_lerobot

    import_lerobot()
    from lerobot.configs.types import RTCAttentionSchedule
    from lerobot.policies.rtc.configuration_rtc import RTCConfig
    from lerobot.policies.rtc.modeling_rtc import RTCProcessor

    for schedule in SCHEDULES:
        processor = RTCProcessor(RTCConfig(prefix_attention_schedule=RTCAttentionSchedule(schedule)))
        for total in (1, 4, 10, 50):
            for steps in range(1, total + 1):
                for horizon in (1, 3, 10, 80):
                    for delay in range(total + 1):
                        want = processor.get_prefix_weights(delay, min(horizon, steps), total).numpy()
                        got = prefix_weights(delay, horizon, total, schedule, steps)
                        np.testing.assert_allclose(got, want, rtol=0, atol=2e-7)


def test_linear_weights_freeze_the_delay_then_decay_to_the_horizon() -> None:
    np.testing.assert_allclose(prefix_weights(2, 6, 8, "LINEAR", 8), [1, 1, 0.8, 0.6, 0.4, 0.2, 0, 0], atol=1e-7)
    # a leftover of 4 caps the horizon at 4
    np.testing.assert_allclose(prefix_weights(2, 6, 8, "LINEAR", 4), [1, 1, 2 / 3, 1 / 3, 0, 0, 0, 0], atol=1e-7)
    assert prefix_weights(0, 6, 8, "ZEROS", 8).tolist() == [0.0] * 8
    assert prefix_weights(9, 6, 8, "LINEAR", 8).tolist() == [1.0] * 6 + [0.0] * 2


def test_the_arrays_pad_the_leftover_and_weight_it_with_the_bundles_settings_or_the_requests() -> None:
    inputs = PrefixInputs(rtc_manifest())
    left = leftover(3)
    padded, weights, cap = inputs.arrays(PrefixFields(left, 1))
    assert padded.shape == (CHUNK, JOINTS) and padded.dtype == np.float32
    np.testing.assert_array_equal(padded[:3], left)
    assert not padded[3:].any()
    np.testing.assert_array_equal(weights, prefix_weights(1, HORIZON, CHUNK, "LINEAR", 3))
    assert cap.tolist() == [DEFAULT_CAP]
    _, weights, cap = inputs.arrays(PrefixFields(left, 0, 2, "exp", 3.5))
    np.testing.assert_array_equal(weights, prefix_weights(0, 2, CHUNK, "EXP", 3))
    assert cap.tolist() == [3.5]
    # no leftover: zero weights (plain sampling), the same read-only arrays each time
    a, b = inputs.arrays(PrefixFields()), inputs.arrays(PrefixFields())
    assert all(x is y for x, y in zip(a, b, strict=True)) and not a[1].any() and not a[0].flags.writeable


# --- serving ---------------------------------------------------------------------------------


@pytest.fixture
def echo_engine() -> PrefixEcho:
    return PrefixEcho()


@pytest.fixture
def served(echo_engine: PrefixEcho, short_tmp: Path) -> Iterator[tuple[PolicyServer, PolicyClient]]:
    cfg = ServerConfig(endpoints=("ipc://p.sock",), canary_interval_s=0)
    with (
        PolicyServer(echo_engine, cfg, runtime_directory=short_tmp) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=10) as client,
    ):
        yield server, client


def test_hello_says_the_policy_takes_a_prefix_with_its_bounds_and_defaults(
    served: tuple[PolicyServer, PolicyClient],
) -> None:
    server, client = served
    info = client.hello()
    assert info.takes_prefix and (info.prefix_steps, info.max_delay) == (CHUNK, STEPS - 1)
    assert info.prefix_defaults == {
        "execution_horizon": HORIZON,
        "prefix_attention_schedule": "LINEAR",
        "max_guidance_weight": DEFAULT_CAP,
    }
    assert [i.name for i in info.inputs] == [STATE] and server.takes_prefix
    wire = server.info.to_wire()["observation"]["prefix"]
    assert wire == {"max_steps": CHUNK, "max_delay": STEPS - 1, **info.prefix_defaults}


def test_a_request_with_a_leftover_gets_its_weights_and_one_without_samples_plainly(
    served: tuple[PolicyServer, PolicyClient], echo_engine: PrefixEcho
) -> None:
    _, client = served
    left = leftover(4)
    got = client.infer(STATE_OBS, prefix=left, delay=2).actions
    np.testing.assert_array_equal(got, echo(left, prefix_weights(2, HORIZON, CHUNK, "LINEAR", 4), DEFAULT_CAP))
    got = client.infer(STATE_OBS, prefix=leftover(CHUNK).astype(np.float64), delay=0, max_guidance_weight=2.0)
    np.testing.assert_array_equal(  # the client sends float32
        got.actions, echo(leftover(CHUNK), prefix_weights(0, HORIZON, CHUNK, "LINEAR", CHUNK), 2.0)
    )
    got = client.infer(STATE_OBS).actions  # no prefix: zero weights
    np.testing.assert_array_equal(got, np.full((STEPS, JOINTS), DEFAULT_CAP, np.float32))
    assert not echo_engine.runs[-1][2].any()
    assert len(echo_engine.runs) == 3


def _refusal(endpoint: str, body: dict[str, Any], observation: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Send a hand-made infer (what PolicyClient would never send) and return the refusal."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    try:
        sock.connect(endpoint)
        frames = encode_request("infer", 9, observation or STATE_OBS, body)
        sock.send_multipart([b"", *frames])
        assert sock.poll(10_000), "no reply"
        reply = decode_reply(sock.recv_multipart()[1:])
        assert not reply.ok and reply.error is not None
        e = reply.error
        return {"code": e.code, "field": e.field, "expected": e.expected, "received": e.received, "message": e.message}
    finally:
        sock.close()
        ctx.term()


NAN_PREFIX = leftover(3)
NAN_PREFIX[1, 2] = np.nan

REFUSALS = [
    # (body, code, field, expected, received)
    ({"prefix": leftover(3).astype(np.float64)}, "bad_input", "prefix", "float32[1..8, 6]", "float64[3, 6]"),
    ({"prefix": leftover(3)[:, :5]}, "bad_input", "prefix", "float32[1..8, 6]", "float32[3, 5]"),
    ({"prefix": leftover(9)}, "bad_input", "prefix", "float32[1..8, 6]", "float32[9, 6]"),
    ({"prefix": leftover(0)}, "bad_input", "prefix", "float32[1..8, 6]", "float32[0, 6]"),
    ({"prefix": leftover(1)[0]}, "bad_input", "prefix", "float32[1..8, 6]", "float32[6]"),
    ({"prefix": NAN_PREFIX}, "bad_input", "prefix", "finite values", "1 non-finite value(s)"),
    ({"prefix": leftover(3), "delay": -1}, "bad_input", "delay", "0..4", "-1"),
    ({"prefix": leftover(3), "delay": STEPS}, "bad_input", "delay", "0..4", "5"),
    ({"delay": 1}, "bad_input", "delay", "a prefix with it", "delay without a prefix"),
    ({"prefix": leftover(3), "execution_horizon": 0}, "bad_input", "execution_horizon", "1..8", "0"),
    ({"execution_horizon": CHUNK + 1}, "bad_input", "execution_horizon", "1..8", "9"),
    (
        {"prefix": leftover(3), "prefix_attention_schedule": "cosine"},
        "bad_input",
        "prefix_attention_schedule",
        "ZEROS | ONES | LINEAR | EXP",
        "cosine",
    ),
    ({"max_guidance_weight": 0.0}, "bad_input", "max_guidance_weight", "> 0", "0.0"),
    ({"max_guidance_weight": float("inf")}, "bad_input", "max_guidance_weight", "> 0", "inf"),
    ({"max_guidance_weight": -1}, "bad_input", "max_guidance_weight", "> 0", "-1.0"),
    ({"delay": "2"}, "bad_request", "body.delay", "int", "str"),
    ({"delay": 2.0}, "bad_request", "body.delay", "int", "float"),
    ({"delay": True}, "bad_request", "body.delay", "int", "bool"),
    ({"execution_horizon": [3]}, "bad_request", "body.execution_horizon", "int", "list"),
    ({"prefix_attention_schedule": 3}, "bad_request", "body.prefix_attention_schedule", "str", "int"),
    ({"max_guidance_weight": "10"}, "bad_request", "body.max_guidance_weight", "float", "str"),
    ({"prefix": 5}, "bad_request", "body.prefix", "map with dtype, shape and frame or data", "int"),
]


def test_every_bad_prefix_field_is_refused_by_name_and_serving_goes_on(
    served: tuple[PolicyServer, PolicyClient], echo_engine: PrefixEcho
) -> None:
    server, client = served
    endpoint = server.bound_endpoints[0]
    for body, code, field, expected, received in REFUSALS:
        got = _refusal(endpoint, body)
        assert (got["code"], got["field"], got["expected"], got["received"]) == (code, field, expected, received), body
    # the program's own prefix inputs are the server's to make
    for name, value in ((PREFIX, np.zeros((CHUNK, JOINTS), np.float32)), (WEIGHTS, np.zeros(CHUNK, np.float32))):
        got = _refusal(endpoint, {}, {**STATE_OBS, name: value})
        assert (got["code"], got["field"]) == ("bad_input", name) and "body.prefix" in got["message"]
    assert not echo_engine.runs  # nothing refused reached the engine
    left = leftover(2)
    got = client.infer(STATE_OBS, prefix=left, delay=1).actions
    np.testing.assert_array_equal(got, echo(left, prefix_weights(1, HORIZON, CHUNK, "LINEAR", 2), DEFAULT_CAP))
    errors = server.snapshot().errors
    assert errors["bad_input"] == sum(1 for r in REFUSALS if r[1] == "bad_input") + 2
    assert errors["bad_request"] == sum(1 for r in REFUSALS if r[1] == "bad_request")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"prefix": leftover(3), "delay": 1}, "prefix"),
        ({"delay": 1}, "delay"),
        ({"execution_horizon": 3}, "execution_horizon"),
        ({"prefix_attention_schedule": "EXP"}, "prefix_attention_schedule"),
        ({"max_guidance_weight": 2.0}, "max_guidance_weight"),
    ],
)
def test_a_policy_without_real_time_chunking_refuses_each_field_by_name(
    make_server: Callable[..., PolicyServer], observation: dict[str, np.ndarray], kwargs: dict[str, Any], field: str
) -> None:
    server = make_server()
    with PolicyClient(server.bound_endpoints[0], timeout_s=10) as client:
        info = client.hello()
        assert not info.takes_prefix and server.info.to_wire()["observation"]["prefix"] is None
        with pytest.raises(BadInputError) as err:
            client.infer(observation, **kwargs)
        assert err.value.field == field and err.value.expected == f"no {field}"
        assert "not exported with real-time chunking" in str(err.value)
        client.infer(observation)  # and it goes on serving


def test_the_control_loop_path_takes_the_prefix_and_reports_a_bad_one(echo_engine: PrefixEcho, short_tmp: Path) -> None:
    import threading

    def submit(server: PolicyServer, rtc: PrefixFields | None) -> Any:
        done = threading.Event()
        result: list[Any] = []

        def on_done(actions: Any, error: str | None) -> None:
            result.append(error if actions is None else actions)
            done.set()

        assert server.submit_local([STATE_OBS[STATE]], on_done, rtc=rtc)
        assert done.wait(10)
        return result[0]

    cfg = ServerConfig(endpoints=("ipc://p.sock",), canary_interval_s=0)
    with PolicyServer(echo_engine, cfg, runtime_directory=short_tmp) as server:
        left = leftover(5)
        got = submit(server, PrefixFields(left, 3, 4))
        np.testing.assert_array_equal(got, echo(left, prefix_weights(3, 4, CHUNK, "LINEAR", 5), DEFAULT_CAP))
        error = submit(server, PrefixFields(left, STEPS))
        assert isinstance(error, str) and error.startswith("bad_input: delay: expected 0..4 steps")
        assert isinstance(submit(server, None), np.ndarray)
        assert len(echo_engine.runs) == 2


def test_the_request_codec_carries_the_prefix_in_a_data_frame_of_its_own() -> None:
    left = leftover(3)
    frames = encode_request("infer", 4, STATE_OBS, {"prefix": left, "delay": 2, "prefix_attention_schedule": "EXP"})
    header = msgpack.unpackb(frames[0])
    assert header["body"]["prefix"] == {"dtype": "float32", "shape": [3, JOINTS], "frame": 1}
    request = decode_request([bytes(f) for f in frames], 1 << 20)
    assert isinstance(request, InferRequest)
    assert request.rtc.given() == ("prefix", "delay", "prefix_attention_schedule")
    assert request.rtc.prefix is not None and np.array_equal(request.rtc.prefix, left)
    assert (request.rtc.delay, request.rtc.prefix_attention_schedule) == (2, "EXP")


def test_the_infer_command_sends_a_prefix_file(
    served: tuple[PolicyServer, PolicyClient],
    echo_engine: PrefixEcho,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from runtime.cli import main

    server, _ = served
    left = leftover(4)
    np.save(tmp_path / "left.npy", left)
    np.savez(tmp_path / "left.npz", prefix=left)
    endpoint = server.bound_endpoints[0]
    for path in ("left.npy", "left.npz"):
        assert main(["infer", "--connect", endpoint, "--json", "--prefix", str(tmp_path / path), "--delay", "2"]) == 0
        out = json.loads(capsys.readouterr().out)
        want = echo(left, prefix_weights(2, HORIZON, CHUNK, "LINEAR", 4), DEFAULT_CAP)
        np.testing.assert_allclose(np.asarray(out["actions"]), want, rtol=1e-6)
    assert main(["infer", "--connect", endpoint, "--delay", "2"]) == 1  # a delay without a prefix: refused
    assert len(echo_engine.runs) == 2


# --- the fields' checks, on the prefix inputs alone ----------------------------------------------


def test_a_policy_without_real_time_chunking_names_the_first_field_sent() -> None:
    assert refuse_on_policy_without(PrefixFields()) is None
    error = refuse_on_policy_without(PrefixFields(delay=2, max_guidance_weight=1.0))
    assert error is not None and str(error) == (
        "delay: this policy takes no previous chunk (it was not exported with real-time chunking); send no delay"
    )
    assert (error.field, error.expected, error.received) == ("delay", "no delay", "delay sent")
    error = refuse_on_policy_without(PrefixFields(prefix_attention_schedule="EXP", max_guidance_weight=1.0))
    assert error is not None and error.field == "prefix_attention_schedule"


def test_prefix_inputs_need_an_rtc_section_and_take_its_settings() -> None:
    plain = rtc_manifest().__class__(**{**rtc_manifest().__dict__, "rtc": None})
    with pytest.raises(ValueError) as err:
        PrefixInputs(plain)
    assert str(err.value) == "PrefixInputs: the manifest has no rtc section"
    assert prefix_inputs(plain) is None
    inputs = prefix_inputs(rtc_manifest())
    assert isinstance(inputs, PrefixInputs)
    assert (inputs.chunk_size, inputs.joints, inputs.max_delay, inputs.execution_horizon) == (CHUNK, JOINTS, 4, HORIZON)
    assert (inputs.schedule, inputs.max_guidance_weight) == ("LINEAR", DEFAULT_CAP)
    assert inputs.defaults == {
        "execution_horizon": HORIZON,
        "prefix_attention_schedule": "LINEAR",
        "max_guidance_weight": DEFAULT_CAP,
    }


def _refused(fields: PrefixFields) -> tuple[str, str | None, str | None, str | None]:
    error = PrefixInputs(rtc_manifest()).error(fields)
    assert error is not None
    return str(error), error.field, error.expected, error.received


def test_each_field_is_taken_at_both_edges_of_its_bound() -> None:
    inputs = PrefixInputs(rtc_manifest())
    for fields in (
        PrefixFields(),
        PrefixFields(leftover(1)),
        PrefixFields(leftover(CHUNK), 0),
        PrefixFields(leftover(2), 4),
        PrefixFields(execution_horizon=1),
        PrefixFields(execution_horizon=CHUNK),
        PrefixFields(prefix_attention_schedule="exp"),
        PrefixFields(prefix_attention_schedule="Zeros"),
        PrefixFields(max_guidance_weight=1e-6),
    ):
        assert inputs.error(fields) is None, fields


def test_a_delay_without_a_prefix_is_refused() -> None:
    assert _refused(PrefixFields(delay=0)) == (
        "delay: a delay says how much of a prefix the robot executes meanwhile; send it with the prefix",
        "delay",
        "a prefix with it",
        "delay without a prefix",
    )


@pytest.mark.parametrize(
    ("prefix", "got"),
    [
        (np.zeros((3, JOINTS), np.float64), "float64[3, 6]"),
        (np.zeros(JOINTS, np.float32), "float32[6]"),
        (np.zeros((1, 3, JOINTS), np.float32), "float32[1, 3, 6]"),
        (np.zeros((3, JOINTS + 1), np.float32), "float32[3, 7]"),
        (np.zeros((3, JOINTS - 1), np.float32), "float32[3, 5]"),
        (np.zeros((0, JOINTS), np.float32), "float32[0, 6]"),
        (np.zeros((CHUNK + 1, JOINTS), np.float32), "float32[9, 6]"),
    ],
)
def test_a_prefix_of_another_type_or_shape_is_refused(prefix: np.ndarray, got: str) -> None:
    assert _refused(PrefixFields(prefix, 1)) == (
        "prefix: expected float32[1..8, 6] (the leftover actions, at most the policy's 8 steps, one value per "
        f"joint in the action's order), got {got}",
        "prefix",
        "float32[1..8, 6]",
        got,
    )


def test_a_prefix_with_values_that_are_not_finite_is_refused_with_their_count() -> None:
    prefix = leftover(3)
    prefix[0, 0], prefix[1, 2], prefix[2, 5] = np.nan, np.inf, -np.inf
    assert _refused(PrefixFields(prefix, 1)) == (
        "prefix: 3 value(s) are NaN or infinite",
        "prefix",
        "finite values",
        "3 non-finite value(s)",
    )


@pytest.mark.parametrize("delay", [-1, 5])
def test_a_delay_past_the_chunk_is_refused(delay: int) -> None:
    assert _refused(PrefixFields(leftover(2), delay)) == (
        f"delay: expected 0..4 steps (a chunk that arrives after all of its 5 steps has none left to execute), "
        f"got {delay}",
        "delay",
        "0..4",
        str(delay),
    )


@pytest.mark.parametrize("horizon", [0, CHUNK + 1])
def test_a_horizon_outside_the_chunk_is_refused(horizon: int) -> None:
    assert _refused(PrefixFields(execution_horizon=horizon)) == (
        f"execution_horizon: expected 1..8 steps, got {horizon}",
        "execution_horizon",
        "1..8",
        str(horizon),
    )


def test_an_unknown_schedule_is_refused_and_shown_cut_short() -> None:
    assert _refused(PrefixFields(prefix_attention_schedule="cosine")) == (
        "prefix_attention_schedule: expected one of ZEROS, ONES, LINEAR, EXP, got 'cosine'",
        "prefix_attention_schedule",
        "ZEROS | ONES | LINEAR | EXP",
        "cosine",
    )
    long = "x" * 64 + "yz"
    assert _refused(PrefixFields(prefix_attention_schedule=long))[3] == "x" * 64


@pytest.mark.parametrize("cap", [0.0, -1.0, math.inf, math.nan])
def test_a_guidance_cap_that_is_not_a_finite_positive_number_is_refused(cap: float) -> None:
    assert _refused(PrefixFields(max_guidance_weight=cap)) == (
        f"max_guidance_weight: expected a finite number > 0, got {cap}",
        "max_guidance_weight",
        "> 0",
        str(cap),
    )


def test_the_first_wrong_field_is_the_one_named() -> None:
    bad_all = PrefixFields(leftover(2).astype(np.float64), 9, 0, "cosine", 0.0)
    assert _refused(bad_all)[1] == "prefix"
    assert _refused(PrefixFields(leftover(2), 9, 0, "cosine", 0.0))[1] == "delay"
    assert _refused(PrefixFields(leftover(2), 1, 0, "cosine", 0.0))[1] == "execution_horizon"
    assert _refused(PrefixFields(leftover(2), 1, 1, "cosine", 0.0))[1] == "prefix_attention_schedule"
    assert _refused(PrefixFields(leftover(2), 1, 1, "EXP", 0.0))[1] == "max_guidance_weight"


# --- the arrays ----------------------------------------------------------------------------------


def test_without_a_prefix_the_weights_are_zero_and_the_cap_the_requests_or_the_bundles() -> None:
    inputs = PrefixInputs(rtc_manifest())
    prefix, weights, cap = inputs.arrays(PrefixFields())
    assert (prefix.shape, prefix.dtype) == ((CHUNK, JOINTS), np.float32)
    assert (weights.shape, weights.dtype) == ((CHUNK,), np.float32)
    assert not prefix.any() and not weights.any()
    assert (cap.dtype, cap.tolist()) == (np.float32, [DEFAULT_CAP])
    assert not any(a.flags.writeable for a in (prefix, weights, cap))
    prefix2, weights2, cap2 = inputs.arrays(PrefixFields(max_guidance_weight=2.5))
    assert prefix2 is prefix and weights2 is weights
    assert (cap2.dtype, cap2.shape, cap2.tolist()) == (np.float32, (1,), [2.5])


def test_a_prefix_without_a_delay_is_weighted_from_step_zero() -> None:
    inputs = PrefixInputs(rtc_manifest())
    padded, weights, cap = inputs.arrays(PrefixFields(leftover(CHUNK)))
    # LINEAR over the bundle's horizon of 6 from a delay of 0, as LeRobot ramps it: (6 - i) / 7
    np.testing.assert_allclose(weights, [6 / 7, 5 / 7, 4 / 7, 3 / 7, 2 / 7, 1 / 7, 0, 0], atol=1e-7)
    np.testing.assert_array_equal(padded, leftover(CHUNK))
    assert cap.tolist() == [DEFAULT_CAP] and cap.dtype == np.float32
    _, weights, _ = inputs.arrays(PrefixFields(leftover(CHUNK), 2, 4, "ones"))
    assert weights.tolist() == [1.0] * 4 + [0.0] * 4
