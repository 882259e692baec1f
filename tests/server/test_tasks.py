"""The task field on the wire: policies without language refuse one; the codec reads and refuses tasks."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from runtime.bundle.manifest import FileEntry, LanguageEntry, Manifest
from runtime.errors import BundleError, InputValidationError
from runtime.protocol.codec import decode_reply, decode_request, encode_request, policy_info_from_reply
from runtime.protocol.errors import BadRequestError
from runtime.protocol.messages import InferRequest
from runtime.server.tasks import CACHE_SIZE, FIELD, TaskEncoder, task_error
from tests.bundle.manifests import small_manifest


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
        assert server.submit_local(
            [obs[s.name] for s in demo_engine.manifest.observation_inputs], lambda a, e: done.append(e), task="x"
        )
        assert done and done[0].startswith("bad_input: task: this policy takes no task")


def test_hello_from_a_server_before_tasks_says_no_task() -> None:
    body = {
        "protocol_version": 1,
        "server_version": "0",
        "policy": {"name": "p"},
        "inputs": [],
        "outputs": [],
        "action": {"output": "action", "chunk_length": 1, "names": ["a"]},
        "control_rate_hz": 30.0,
        "engine": {},
        "versions": {},
        "kinds": [],
        "limits": {"max_message_bytes": 1, "queue_depth": 1},
        "observation": {"history_frames": 1, "server_drawn": []},
    }
    header = msgpack.packb({"v": 1, "id": 1, "kind": "hello", "ok": True, "body": body})
    info = policy_info_from_reply(decode_reply([header]))
    assert not info.takes_task
    body["observation"]["task"] = {"required": True, "max_bytes": 300}
    header = msgpack.packb({"v": 1, "id": 1, "kind": "hello", "ok": True, "body": body})
    assert policy_info_from_reply(decode_reply([header])).max_task_bytes == 300


def test_task_refusals_word_for_word() -> None:
    assert (CACHE_SIZE, FIELD) == (64, "task")
    messages = [
        (task_error(False, "x", 0), "task: this policy takes no task (it is not a language policy); send no task"),
        (
            task_error(True, None, 40),
            'task: this policy is a language policy and needs a task string with every observation (e.g. "pick up '
            'the red cube")',
        ),
        (task_error(True, 3, 40), "task: expected a UTF-8 string, got int"),
        (task_error(True, "\ud800", 40), "task: not valid Unicode text (lone surrogates)"),
        (task_error(True, "é" * 20 + "x", 40), "task: 41 bytes in UTF-8, over this policy's limit of 40"),
    ]
    for error, message in messages:
        assert isinstance(error, InputValidationError) and str(error) == message and error.field == "task"
    refused = task_error(True, None, 40)
    assert refused is not None and refused.expected == "a UTF-8 string of at most 40 bytes"
    refused = task_error(True, b"x", 40)
    assert refused is not None and refused.expected == "a UTF-8 string of at most 40 bytes"
    assert refused.received == "bytes"
    refused = task_error(True, "é" * 20 + "x", 40)
    assert refused is not None and (refused.expected, refused.received) == ("at most 40 bytes in UTF-8", "41 bytes")
    refused = task_error(False, 7, 0)
    assert refused is not None and refused.received == "int task"
    # the bound is on bytes, not characters: 20 two-byte characters are exactly 40
    assert task_error(True, "é" * 20, 40) is None and task_error(True, "", 40) is None


# --- the encoder and its cache, on a word-level tokenizer made here ---------------------------

VOCAB = {"<pad>": 0, "<unk>": 1, "pick": 2, "up": 3, "the": 4, "cube": 5, "cube\n": 6, "red": 7}


def _definition(max_length: int) -> str:
    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="removed")  # "cube\n" stays one word
    tok.enable_truncation(max_length)
    tok.enable_padding(length=max_length, pad_id=0, pad_token="<pad>")
    return str(tok.to_str())


def _language_bundle(
    path: Path, max_length: int = 5, append_newline: bool = False, max_task_bytes: int = 512
) -> Manifest:
    text = _definition(max_length).encode()
    (path / "tokenizer.json").write_bytes(text)
    language = LanguageEntry(
        FileEntry("tokenizer.json", hashlib.sha256(text).hexdigest()),
        "tokens",
        "mask",
        max_length,
        append_newline=append_newline,
        max_task_bytes=max_task_bytes,
    )
    return small_manifest(language=language)


def test_an_encoder_needs_a_language_policy(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as err:
        TaskEncoder(small_manifest(), tmp_path)
    assert str(err.value) == "TaskEncoder: the manifest has no language section"


def test_the_encoder_takes_the_bundles_tokenizer_and_settings(tmp_path: Path) -> None:
    encoder = TaskEncoder(_language_bundle(tmp_path, max_length=4, max_task_bytes=40), str(tmp_path))
    assert (encoder.max_bytes, encoder.cache_size, encoder.encoded, len(encoder)) == (40, 64, 0, 0)
    ids, mask = encoder.encode("pick up the")
    assert ids.tolist() == [2, 3, 4, 0] and mask.tolist() == [True, True, True, False]
    assert encoder.encode("pick up the red cube")[0].tolist() == [2, 3, 4, 7]  # truncated at max_length
    newline = TaskEncoder(_language_bundle(tmp_path, append_newline=True), tmp_path)
    assert newline.encode("the cube")[0].tolist() == [4, 6, 0, 0, 0]
    plain = TaskEncoder(_language_bundle(tmp_path, append_newline=False), tmp_path)
    assert plain.encode("the cube")[0].tolist() == [4, 5, 0, 0, 0]


def test_an_altered_tokenizer_is_refused(tmp_path: Path) -> None:
    manifest = _language_bundle(tmp_path)
    (tmp_path / "tokenizer.json").write_text(_definition(6))
    with pytest.raises(BundleError, match=r"does not match the manifest.s language\.tokenizer\.sha256"):
        TaskEncoder(manifest, tmp_path)


def test_a_repeated_task_is_a_lookup_of_the_same_read_only_arrays(tmp_path: Path) -> None:
    encoder = TaskEncoder(_language_bundle(tmp_path), tmp_path)
    ids, mask = encoder.encode("pick up the cube")
    assert not ids.flags.writeable and not mask.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        ids[0] = 9
    again = encoder.encode("pick up the cube")
    assert again[0] is ids and again[1] is mask
    assert (encoder.encoded, len(encoder)) == (1, 1)
    encoder.encode("the cube")
    assert (encoder.encoded, len(encoder)) == (2, 2)


def test_the_cache_keeps_the_most_recently_used_tasks(tmp_path: Path) -> None:
    encoder = TaskEncoder(_language_bundle(tmp_path), tmp_path, cache_size=2)
    assert encoder.cache_size == 2
    first, _ = encoder.encode("pick")
    encoder.encode("up")
    assert encoder.encode("pick")[0] is first  # a hit makes "pick" the newest
    encoder.encode("the")  # pushes out "up", the least recently used
    assert (encoder.encoded, len(encoder)) == (3, 2)
    assert encoder.encode("pick")[0] is first
    assert encoder.encoded == 3
    encoder.encode("up")  # tokenized again
    assert (encoder.encoded, len(encoder)) == (4, 2)
    assert encoder.encode("pick")[0] is first  # "the" went, not "pick"
    assert encoder.encoded == 4
