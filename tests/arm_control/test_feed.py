"""The feed between the loop and the policy: the joints plus the newest frame of each stream go in,
validated; a missing or refused part is a reason, never a request; stale streams and a failed
self-check block the policy. A manifest made in the test and stand-ins for the streams and the
worker: no sockets, no engine."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from runtime.arm_control.feed import StreamFeed, describe_stale
from runtime.bundle.interface import PolicyInterface
from runtime.bundle.manifest import parse_manifest
from runtime.control.feed import Blocked, state_input
from runtime.errors import ConfigError

SHA = "0" * 64
NAMES = ["a", "b", "c"]
BASE: dict[str, Any] = {
    "format": "lerobot-runtime-bundle",
    "format_version": 1,
    "policy": {"name": "p"},
    "inputs": [
        {"name": "cam", "dtype": "uint8", "shape": [2, 2, 3], "role": "image"},
        {"name": "joints", "dtype": "float32", "shape": [3], "role": "state"},
    ],
    "outputs": [{"name": "action", "dtype": "float32", "shape": [4, 3], "role": "action"}],
    "action": {"output": "action", "chunk_length": 4, "names": NAMES},
    "control_rate_hz": 30,
    "programs": {"CPU": {"file": "p.pte", "precision": "f32", "sha256": SHA, "delegation": "full"}},
    "test_case": {"file": "t.npz", "sha256": SHA},
}


def _interface(inputs: list[dict[str, Any]] | None = None) -> PolicyInterface:
    data = copy.deepcopy(BASE)
    if inputs is not None:
        data["inputs"] = inputs
    return PolicyInterface.of_manifest(parse_manifest(data))


@dataclass
class Part:
    array: np.ndarray


@dataclass
class StreamConfig:
    max_age_ms: float


class Streams:
    def __init__(self, **parts: np.ndarray | None) -> None:
        self.parts = dict(parts)
        self.names = tuple(parts)
        self.configs = {n: StreamConfig(250.0) for n in parts}
        self.stale_now: list[tuple[str, float | None]] = []
        self.asked_at: list[float] = []

    def latest(self, name: str) -> Part | None:
        a = self.parts[name]
        return None if a is None else Part(a)

    def stale(self, now: float) -> list[tuple[str, float | None]]:
        self.asked_at.append(now)
        return self.stale_now


class Inference:
    def __init__(self, accept: bool = True) -> None:
        self.submitted: list[tuple[list[np.ndarray], bool]] = []
        self.prefixes: list[Any] = []
        self.observed: list[tuple[list[np.ndarray], bool]] = []
        self.accept = accept
        self.failed: str | None = None
        self.gate: str | None = None
        self.lost: str | None = None

    def submit(self, inputs: list[np.ndarray], on_done: Any, *, reset: bool = False, prefix: Any = None) -> bool:
        self.submitted.append((inputs, reset))
        self.prefixes.append(prefix)
        self.on_done = on_done
        return self.accept

    def observe(self, inputs: list[np.ndarray], *, reset: bool = False) -> None:
        self.observed.append((inputs, reset))

    def failure(self) -> str | None:
        return self.failed

    def pending(self) -> str | None:
        return self.gate

    def unreachable(self) -> str | None:
        return self.lost


FRAME = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)


def test_the_state_input_is_the_one_with_role_state() -> None:
    assert state_input(_interface()) == "joints"


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            [{"name": "cam", "dtype": "uint8", "shape": [2, 2, 3], "role": "image"}],
            "the control loop fills exactly one input with role 'state' from the joints; the policy has 0 (none)",
        ),
        (
            [
                {"name": "j1", "dtype": "float32", "shape": [3], "role": "state"},
                {"name": "j2", "dtype": "float32", "shape": [3], "role": "state"},
            ],
            "the control loop fills exactly one input with role 'state' from the joints; the policy has 2 (j1, j2)",
        ),
        (
            [{"name": "joints", "dtype": "float32", "shape": [4], "role": "state"}],
            "state input joints: expected float32[3] (one value per joint), the policy takes float32[4]",
        ),
        (
            [{"name": "joints", "dtype": "uint8", "shape": [3], "role": "state"}],
            "state input joints: expected float32[3] (one value per joint), the policy takes uint8[3]",
        ),
    ],
)
def test_a_policy_whose_state_the_loop_cannot_fill_is_refused(inputs: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        state_input(_interface(inputs))
    assert str(err.value) == message


def test_an_input_without_a_stream_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as err:
        StreamFeed(Inference(), _interface())
    assert str(err.value) == (
        "the policy input(s) cam have no source: add a [[control.streams]] entry "
        "(input = NAME, endpoint = where its producer publishes) for each"
    )
    with pytest.raises(ConfigError, match="the policy input"):
        StreamFeed(Inference(), _interface(), Streams(other=FRAME))  # type: ignore[arg-type]


def test_a_state_only_policy_needs_no_stream() -> None:
    inference = Inference()
    feed = StreamFeed(inference, _interface([{"name": "joints", "dtype": "float32", "shape": [3], "role": "state"}]))
    assert feed.submit(np.array([1.0, 2.0, 3.0]), lambda a, r: None) is True
    ((arrays, reset),) = inference.submitted
    assert reset is False
    assert len(arrays) == 1 and arrays[0].dtype == np.float32
    np.testing.assert_array_equal(arrays[0], [1.0, 2.0, 3.0])
    assert feed.blocked(5.0) is None
    assert feed.lost() is None


def test_a_submit_sends_the_joints_and_the_newest_frame_in_the_policys_input_order() -> None:
    inference = Inference(accept=False)
    feed = StreamFeed(inference, _interface(), Streams(cam=FRAME))  # type: ignore[arg-type]
    done: list[Any] = []
    assert feed.submit(np.array([0.5, -1.0, 2.0], np.float64), lambda a, r: done.append((a, r)), reset=True) is False
    ((arrays, reset),) = inference.submitted
    assert reset is True
    np.testing.assert_array_equal(arrays[0], FRAME)
    assert arrays[1].dtype == np.float32
    np.testing.assert_array_equal(arrays[1], np.array([0.5, -1.0, 2.0], np.float32))
    assert done == []  # the worker answers, not the feed: with the caller's callback
    inference.on_done(np.ones((4, 3)), None)
    assert len(done) == 1 and done[0][1] is None
    assert feed.last_error == "" and feed.counters == {}


def test_no_frame_yet_is_a_reason_given_to_the_caller_and_nothing_is_submitted() -> None:
    inference = Inference()
    feed = StreamFeed(inference, _interface(), Streams(cam=None))  # type: ignore[arg-type]
    done: list[Any] = []
    assert feed.submit(np.zeros(3), lambda a, r: done.append((a, r))) is True
    assert done == [(None, "observation refused: nothing received yet on stream cam")]
    assert feed.last_error == "nothing received yet on stream cam"
    assert inference.submitted == []
    assert feed.counters["observation_errors"] == 0  # nothing was refused: nothing came


def test_a_frame_of_the_wrong_shape_is_refused_and_counted() -> None:
    inference = Inference()
    feed = StreamFeed(inference, _interface(), Streams(cam=np.zeros((3, 2, 3), np.uint8)))  # type: ignore[arg-type]
    done: list[Any] = []
    assert feed.submit(np.zeros(3), lambda a, r: done.append((a, r))) is True
    assert done == [(None, "observation refused: input 'cam': expected shape [2, 2, 3], got [3, 2, 3]")]
    assert feed.last_error == "input 'cam': expected shape [2, 2, 3], got [3, 2, 3]"
    assert feed.counters["observation_errors"] == 1
    feed.observe(np.zeros(3))
    assert feed.counters == {"observation_errors": 2}
    assert inference.submitted == [] and inference.observed == []


def test_observe_adds_to_the_history_without_asking() -> None:
    inference = Inference()
    feed = StreamFeed(inference, _interface(), Streams(cam=FRAME))  # type: ignore[arg-type]
    feed.observe(np.ones(3), reset=True)
    feed.observe(np.ones(3))
    assert [r for _, r in inference.observed] == [True, False]
    np.testing.assert_array_equal(inference.observed[0][0][0], FRAME)
    assert inference.observed[0][0][1].dtype == np.float32
    assert feed.counters["observations"] == 2
    assert inference.submitted == []
    empty = StreamFeed(inference, _interface(), Streams(cam=None))  # type: ignore[arg-type]
    empty.observe(np.ones(3))
    assert empty.counters["observations"] == 0 and len(inference.observed) == 2


def test_stale_streams_block_naming_each_with_its_age_and_limit() -> None:
    streams = Streams(cam=FRAME, wrist=FRAME)
    inputs = [
        {"name": "cam", "dtype": "uint8", "shape": [2, 2, 3], "role": "image"},
        {"name": "wrist", "dtype": "uint8", "shape": [2, 2, 3], "role": "image"},
        {"name": "joints", "dtype": "float32", "shape": [3], "role": "state"},
    ]
    inference = Inference()
    feed = StreamFeed(inference, _interface(inputs), streams)  # type: ignore[arg-type]
    assert feed.blocked(1.5) is None
    streams.stale_now = [("cam", 900.4), ("wrist", None)]
    inference.failed = "parity drifted"  # the streams are named first
    assert feed.blocked(2.5) == Blocked(
        "stale:cam,wrist",
        "stale observation stream: cam (900 ms old > 250 ms), wrist (nothing received yet)",
        ("cam", "wrist"),
    )
    assert streams.asked_at == [1.5, 2.5]


def test_a_failed_self_check_blocks_as_untrusted() -> None:
    inference = Inference()
    feed = StreamFeed(inference, _interface(), Streams(cam=FRAME))  # type: ignore[arg-type]
    inference.failed = ""
    assert feed.blocked(0.0) is None
    inference.failed = "canary error 0.4 > 0.075"
    assert feed.blocked(0.0) == Blocked("untrusted", "policy not trusted: canary error 0.4 > 0.075")


def test_the_rest_of_the_parity_gate_blocks_until_it_passed_and_a_failure_comes_first() -> None:
    inference = Inference()
    feed = StreamFeed(inference, _interface(), Streams(cam=FRAME))  # type: ignore[arg-type]
    inference.gate = "the parity gate is still running: 2 of 16 replays passed"
    assert feed.blocked(0.0) == Blocked(
        "gate", "policy not proven yet: the parity gate is still running: 2 of 16 replays passed"
    )
    inference.failed = "the parity gate failed after the daemon was ready: ..."
    assert feed.blocked(0.0) is not None and feed.blocked(0.0).key == "untrusted"  # type: ignore[union-attr]
    inference.failed, inference.gate = None, None
    assert feed.blocked(0.0) is None


def test_an_unreachable_policy_blocks_before_anything_about_it_is_asked() -> None:
    inference = Inference()
    feed = StreamFeed(inference, _interface(), Streams(cam=FRAME))  # type: ignore[arg-type]
    inference.lost, inference.failed = "the policy at tcp://h:1: no reply to ping request 4", "it failed"
    assert feed.blocked(0.0) == Blocked(
        "unreachable", "policy unreachable: the policy at tcp://h:1: no reply to ping request 4"
    )
    inference.lost = None
    assert feed.blocked(0.0).key == "untrusted"  # type: ignore[union-attr]


def test_describe_stale_uses_each_streams_own_limit() -> None:
    streams = Streams(cam=FRAME, wrist=FRAME)
    streams.configs["wrist"] = StreamConfig(33.5)
    assert describe_stale([("wrist", 40.6), ("cam", None)], streams) == (  # type: ignore[arg-type]
        "wrist (41 ms old > 33.5 ms), cam (nothing received yet)"
    )
    assert describe_stale([], streams) == ""  # type: ignore[arg-type]


def test_every_input_without_a_stream_is_named() -> None:
    inputs = [
        {"name": "cam", "dtype": "uint8", "shape": [2, 2, 3], "role": "image"},
        {"name": "wrist", "dtype": "uint8", "shape": [2, 2, 3], "role": "image"},
        {"name": "joints", "dtype": "float32", "shape": [3], "role": "state"},
    ]
    with pytest.raises(ConfigError, match=r"^the policy input\(s\) cam, wrist have no source: "):
        StreamFeed(Inference(), _interface(inputs))
