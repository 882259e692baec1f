"""The task field on the wire: policies without language refuse one; the codec reads and refuses tasks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from runtime.protocol.codec import decode_reply, decode_request, encode_request, policy_info_from_reply
from runtime.protocol.errors import BadRequestError
from runtime.protocol.messages import InferRequest
from runtime.server.tasks import task_error


def _decode(frames: list[Any]) -> Any:
    return decode_request([f if isinstance(f, bytes) else memoryview(f).tobytes() for f in frames], 1 << 20)


def test_the_codec_carries_a_task_and_none_when_absent() -> None:
    obs = {"x": np.zeros(3, np.float32)}
    req = _decode(encode_request("infer", 1, obs, {"task": "pick up the cube ☕"}))
    assert isinstance(req, InferRequest) and req.task == "pick up the cube ☕"
    assert _decode(encode_request("infer", 2, obs)).task is None


@pytest.mark.parametrize(("value", "received"), [(7, "int"), (b"bytes", "bytes"), (["a"], "list")])
def test_a_task_that_is_not_a_string_is_refused_by_field(value: Any, received: str) -> None:
    with pytest.raises(BadRequestError) as err:
        _decode(encode_request("infer", 3, {"x": np.zeros(3, np.float32)}, {"task": value}))
    assert (err.value.field, err.value.received, err.value.request_id) == ("body.task", received, 3)


def test_a_task_that_is_not_utf8_is_refused_naming_the_field() -> None:
    frames = encode_request("infer", 4, {"x": np.zeros(3, np.float32)}, {"task": "AAAA"})
    frames[0] = frames[0].replace(b"AAAA", b"A\xc3\x28A")  # an invalid two-byte sequence
    with pytest.raises(BadRequestError) as err:
        _decode(frames)
    assert err.value.field == "body.task" and err.value.expected == "a UTF-8 string"
    assert "not valid UTF-8" in str(err.value)


def test_task_checks_name_what_was_wrong() -> None:
    assert task_error(False, None, 0) is None and task_error(True, "ok", 512) is None
    assert task_error(True, "é" * 256, 512) is None  # exactly 512 bytes
    cases = [
        (task_error(False, "x", 0), "no task", "str task"),
        (task_error(True, None, 512), "a UTF-8 string of at most 512 bytes", "nothing"),
        (task_error(True, 3, 512), "a UTF-8 string of at most 512 bytes", "int"),
        (task_error(True, "é" * 257, 512), "at most 512 bytes in UTF-8", "514 bytes"),
        (task_error(True, "\ud800", 512), "a UTF-8 string", "a string with lone surrogates"),
    ]
    for error, expected, received in cases:
        assert error is not None and error.field == "task"
        assert (error.expected, error.received) == (expected, received)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lrt-") as d:
        yield Path(d)


def test_a_policy_without_language_refuses_a_task_and_keeps_serving(demo_engine: Any, short_tmp: Path) -> None:
    from runtime.client import PolicyClient
    from runtime.protocol.errors import BadInputError
    from runtime.server import PolicyServer, ServerConfig

    cfg = ServerConfig(endpoints=("ipc://p.sock",), canary_interval_s=0)
    obs = {s.name: np.zeros(s.shape, s.dtype) for s in demo_engine.manifest.observation_inputs}
    with (
        PolicyServer(demo_engine, cfg, runtime_directory=short_tmp) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=20) as client,
    ):
        info = client.hello()
        assert not info.takes_task and info.max_task_bytes == 0 and not server.takes_task
        with pytest.raises(BadInputError) as err:
            client.infer(obs, task="pick up the cube")
        assert (err.value.field, err.value.expected) == ("task", "no task")
        assert client.infer(obs).actions.shape == demo_engine.manifest.action_spec.shape

        done: list[Any] = []
        assert server.submit_local([obs[s.name] for s in demo_engine.manifest.observation_inputs],
                                   lambda a, e: done.append(e), task="x")
        assert done and done[0].startswith("bad_input: task: this policy takes no task")


def test_hello_from_a_server_before_tasks_says_no_task() -> None:
    body = {
        "protocol_version": 1, "server_version": "0", "policy": {"name": "p"}, "inputs": [], "outputs": [],
        "action": {"output": "action", "chunk_length": 1, "names": ["a"]}, "control_rate_hz": 30.0,
        "engine": {}, "versions": {}, "kinds": [], "limits": {"max_message_bytes": 1, "queue_depth": 1},
        "observation": {"history_frames": 1, "server_drawn": []},
    }
    header = msgpack.packb({"v": 1, "id": 1, "kind": "hello", "ok": True, "body": body})
    info = policy_info_from_reply(decode_reply([header]))
    assert not info.takes_task
    body["observation"]["task"] = {"required": True, "max_bytes": 300}
    header = msgpack.packb({"v": 1, "id": 1, "kind": "hello", "ok": True, "body": body})
    assert policy_info_from_reply(decode_reply([header])).max_task_bytes == 300
