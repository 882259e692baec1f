"""LeRobot SmolVLA: exported from its checkpoint and served with a task, against LeRobot's own pipeline.

The reference is LeRobot's inference as its robot loop runs it: the observation and the task through
``prepare_observation_for_inference`` and the preprocessor (newline, tokenizer, normalisation), then
``predict_action_chunk`` with the same flow noise, then the postprocessor. The checkpoint is tiny
(runtime.policies.smolvla_checkpoint: a SmolVLM-like VLM a few dozen wide, a byte-level BPE
tokenizer trained in code, random weights), its config names the VLM by hub id and the export finds
it with --vlm-dir, offline. Errors are compared in normalised units (the action's std: SmolVLA's
MEAN_STD normalisation). The bundle is exported once per session.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.export.lerobot import lerobot_available
from tests.engine.arithmetic import bundle_tolerance

REASON = lerobot_available() or (
    None
    if importlib.util.find_spec("transformers") and importlib.util.find_spec("num2words")
    else "SmolVLA needs transformers and num2words (the smolvla extra)"
)
pytestmark = [pytest.mark.export, pytest.mark.skipif(REASON is not None, reason=f"needs LeRobot's SmolVLA: {REASON}")]

IMAGE, STATE, NOISE = "observation.images.front", "observation.state", "noise"
TOKENS, MASK = "observation.language.tokens", "observation.language.attention_mask"
CHUNK, STEPS, MAX_ACTION, MAX_TOKENS = 10, 5, 32, 16  # the tiny checkpoint's chunk_size, n_action_steps...
TASKS = (
    "Pick up the red cube and place it in the box.",
    "",  # only the newline LeRobot appends
    "   ",
    "Nimm den Würfel ☕ — schnell!",  # unicode, bytes the corpus never had
    "Cafe\u0301 cre\u0300me",  # decomposed accents: the tokenizer's NFC normalisation
    "Stack the blue block on top of the green block, then push the sponge towards the sink and fold the cloth.",
)


class LeRobotPipeline:
    """LeRobot's own inference on the checkpoint: preprocessor, predict_action_chunk, postprocessor."""

    def __init__(self, checkpoint: Path, vlm: Path) -> None:
        from runtime.export.lerobot import load_checkpoint, read_checkpoint

        self.loaded = load_checkpoint(read_checkpoint(checkpoint), vlm_dir=vlm)
        self.policy = self.loaded.policy
        self.vlm = vlm

    def batch(self, observation: dict[str, np.ndarray], task: str) -> dict[str, Any]:
        import torch
        from lerobot.policies.utils import prepare_observation_for_inference

        obs = prepare_observation_for_inference(
            {k: v.copy() for k, v in observation.items()}, torch.device("cpu"), task=task
        )
        return dict(self.loaded.preprocessor(obs))

    def tokens(self, task: str) -> tuple[np.ndarray, np.ndarray]:
        b = self.batch(observation(0), task)
        return b[TOKENS][0].numpy(), b[MASK][0].numpy()

    def step(self, observation: dict[str, np.ndarray], task: str, noise: np.ndarray) -> np.ndarray:
        import torch

        self.policy.reset()
        batch = self.batch(observation, task)
        with torch.no_grad():
            chunk = self.policy.predict_action_chunk(batch, noise=torch.from_numpy(noise).unsqueeze(0))
            return np.asarray(self.loaded.postprocessor(chunk)[0, :STEPS].numpy())


@pytest.fixture(scope="module")
def lerobot(smolvla_checkpoint: Path, smolvla_vlm: Path) -> LeRobotPipeline:
    return LeRobotPipeline(smolvla_checkpoint, smolvla_vlm)


@pytest.fixture(scope="module")
def tolerance(smolvla_bundle: Path) -> float:
    """The f32 tolerance the bundle's gate holds it to, measured at export."""
    return bundle_tolerance(smolvla_bundle, "f32")


@pytest.fixture(scope="module")
def scale(smolvla_bundle: Path) -> np.ndarray:
    from tests.engine.arithmetic import action_scale

    return action_scale(smolvla_bundle)


@pytest.fixture(scope="module")
def tokenizer(smolvla_bundle: Path) -> Any:
    from runtime.bundle.bundle import Bundle
    from runtime.bundle.tokenizer import TaskTokenizer

    b = Bundle.open(smolvla_bundle)
    lang = b.manifest.language
    assert lang is not None
    return TaskTokenizer(b.tokenizer_file(), max_length=lang.max_length, append_newline=lang.append_newline)


def observation(t: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(300 + t)
    return {
        IMAGE: rng.integers(0, 256, (96, 128, 3), dtype=np.uint8),
        STATE: (rng.normal(size=6) * 30).astype(np.float32),
    }


def noises(seed: int, n: int) -> list[np.ndarray]:
    """What a server with ``noise_seed = seed`` draws for its first ``n`` inferences."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((CHUNK, MAX_ACTION), dtype=np.float32) for _ in range(n)]


def normalised_error(got: np.ndarray, want: np.ndarray, scale: np.ndarray) -> float:
    from tests.engine import arithmetic

    return arithmetic.normalised_error(got, want, scale, (STEPS, 6))


# --- the tokenizer ---------------------------------------------------------------------------


def test_graph_is_lerobots_pipeline_with_tasks_and_noise(smolvla_checkpoint: Path, lerobot: LeRobotPipeline) -> None:
    """The module torch.export traces, in eager mode, against LeRobot's own pipeline: no export."""
    import torch

    from runtime.export.lerobot import lerobot_export_plan

    factory, kwargs = lerobot_export_plan(smolvla_checkpoint, vlm_dir=lerobot.vlm)
    graph, example = factory()
    scale = np.asarray(kwargs["action_scale"])
    # the checkpoint names its VLM by hub id: the tokenizer step is pointed at the local VLM instead
    names = [getattr(s, "tokenizer_name", None) for s in lerobot.loaded.preprocessor.steps]
    assert str(Path(lerobot.vlm).resolve()) in names
    chunks = []
    for t, (task, noise) in enumerate(zip(TASKS[:2], noises(3, 2), strict=True)):
        obs = observation(t)
        ids, mask = lerobot.tokens(task)
        inputs = {IMAGE: obs[IMAGE], STATE: obs[STATE], TOKENS: ids, MASK: mask, "noise": noise}
        assert list(example) == list(inputs)
        with torch.no_grad():
            got = graph(*(torch.from_numpy(np.ascontiguousarray(v)) for v in inputs.values())).numpy()
        want = lerobot.step(obs, task, noise)
        assert got.shape == want.shape
        assert normalised_error(got, want, scale) < 1e-4
        assert np.abs(want).max() > 5  # un-normalised actions of real magnitude
        chunks.append(got)
    assert np.abs(chunks[1] - chunks[0]).max() > 1e-3  # the task, the observation and the noise matter


@pytest.mark.parametrize("task", TASKS)
def test_tokens_are_lerobots_for_every_kind_of_task(lerobot: LeRobotPipeline, tokenizer: Any, task: str) -> None:
    """Same ids and mask as LeRobot's preprocessor (newline, truncation); LeRobot pads to the longest
    (one task: no padding), the bundle to max length with the pad token, masked out."""
    want_ids, want_mask = lerobot.tokens(task)
    ids, mask = tokenizer.encode(task)
    assert ids.dtype == np.int64 and mask.dtype == np.bool_ and ids.shape == mask.shape == (MAX_TOKENS,)
    n = len(want_ids)
    assert 1 <= n <= MAX_TOKENS
    np.testing.assert_array_equal(ids[:n], want_ids)
    np.testing.assert_array_equal(mask[:n], want_mask)
    from lerobot.processor import TokenizerProcessorStep

    step = next(s for s in lerobot.loaded.preprocessor.steps if isinstance(s, TokenizerProcessorStep))
    pad = step.input_tokenizer.pad_token_id
    assert not mask[n:].any() and (ids[n:] == pad).all()


def test_long_tasks_are_truncated_as_lerobot_does(lerobot: LeRobotPipeline, tokenizer: Any) -> None:
    long_task = " ".join(["Pick up the red cube and place it in the box."] * 6)
    want_ids, want_mask = lerobot.tokens(long_task)
    assert len(want_ids) == MAX_TOKENS  # LeRobot truncates to max_length
    ids, mask = tokenizer.encode(long_task)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(mask, want_mask)
    assert mask.all()


def test_tokens_equal_lerobots_padding_to_max_length(smolvla_vlm: Path, tokenizer: Any) -> None:
    """A checkpoint whose preprocessor pads to max_length gets exactly the bundle's ids and mask."""
    from lerobot.processor import TokenizerProcessorStep

    step = TokenizerProcessorStep(
        tokenizer_name=str(smolvla_vlm), max_length=MAX_TOKENS, padding="max_length", padding_side="right"
    )
    for task in TASKS:
        want = step._tokenize_text([task + "\n"])
        ids, mask = tokenizer.encode(task)
        np.testing.assert_array_equal(ids, want["input_ids"][0].numpy())
        np.testing.assert_array_equal(mask, want["attention_mask"][0].numpy().astype(bool))


def test_the_task_cache_is_bounded_and_encodes_each_task_once(smolvla_bundle: Path, tokenizer: Any) -> None:
    from runtime.bundle.bundle import Bundle
    from runtime.server.tasks import TaskEncoder

    encoder = TaskEncoder(Bundle.open(smolvla_bundle).manifest, smolvla_bundle, cache_size=2)
    for task in ("a", "b", "a", "a", "b"):
        ids, _ = encoder.encode(task)
        np.testing.assert_array_equal(ids, tokenizer.encode(task)[0])
    assert encoder.encoded == 2 and len(encoder) == 2
    encoder.encode("c")  # past the bound: the least recently used ("a") goes
    encoder.encode("b")
    encoder.encode("a")
    assert encoder.encoded == 4 and len(encoder) == 2


# --- the program -----------------------------------------------------------------------------


def test_manifest_lists_the_tokenizer_and_the_inputs_the_server_fills(smolvla_bundle: Path) -> None:
    import hashlib

    from runtime.bundle.bundle import Bundle

    m = Bundle.open(smolvla_bundle, verify_all=True).manifest
    assert [(s.name, s.dtype, s.shape, s.role) for s in m.inputs] == [
        (IMAGE, "uint8", (96, 128, 3), "image"),
        (STATE, "float32", (6,), "state"),
        (TOKENS, "int64", (MAX_TOKENS,), "language"),
        (MASK, "bool", (MAX_TOKENS,), "language"),
        (NOISE, "float32", (CHUNK, MAX_ACTION), "noise"),
    ]
    assert [s.name for s in m.observation_inputs] == [IMAGE, STATE]  # what clients send
    lang = m.language
    assert lang is not None and lang.max_length == MAX_TOKENS and lang.append_newline and lang.max_task_bytes == 512
    data = (smolvla_bundle / lang.tokenizer.file).read_bytes()
    assert hashlib.sha256(data).hexdigest() == lang.tokenizer.sha256
    assert m.outputs[0].shape == (STEPS, 6) and m.source["policy_type"] == "smolvla"
    assert m.programs["CPU"].delegation == "full"  # one OpenVINO delegate: both engines run it


def test_a_tampered_tokenizer_is_refused_by_name(smolvla_bundle: Path, tmp_path: Path) -> None:
    import shutil

    from runtime.bundle.bundle import Bundle
    from runtime.errors import BundleError

    copy = tmp_path / "b"
    shutil.copytree(smolvla_bundle, copy)
    with (copy / "tokenizer.json").open("a") as f:
        f.write(" ")
    with pytest.raises(BundleError, match=r"tokenizer\.json: sha256 .* language\.tokenizer"):
        Bundle.open(copy).tokenizer_file()


def test_a_vlm_directory_transformers_cannot_load_is_named_with_its_reason(
    smolvla_checkpoint: Path, smolvla_vlm: Path, tmp_path: Path
) -> None:
    import shutil

    from runtime.errors import ExportError
    from runtime.export.lerobot import load_checkpoint, read_checkpoint

    broken = tmp_path / "vlm"
    broken.mkdir()
    shutil.copy(smolvla_vlm / "config.json", broken / "config.json")  # its processor and tokenizer missing
    with pytest.raises(ExportError) as err:
        load_checkpoint(read_checkpoint(smolvla_checkpoint), vlm_dir=broken)
    assert str(err.value).startswith(f"{smolvla_checkpoint}: loading the policy failed: ")


def test_export_refuses_a_vlm_it_cannot_find_offline(smolvla_checkpoint: Path, tmp_path: Path) -> None:
    from runtime.errors import ExportError
    from runtime.export.lerobot import lerobot_export_plan

    with pytest.raises(ExportError, match=r"vlm_model_name.*HuggingFaceTB/SmolVLM2.*--vlm-dir"):
        lerobot_export_plan(smolvla_checkpoint)
    with pytest.raises(ExportError, match=r"--vlm-dir: .* holds no config\.json"):
        lerobot_export_plan(smolvla_checkpoint, vlm_dir=tmp_path)


@pytest.mark.parametrize("engine_name", ["openvino", "executorch"])
def test_exported_program_matches_lerobot_with_tasks_and_noise(
    smolvla_bundle: Path, lerobot: LeRobotPipeline, tokenizer: Any, scale: np.ndarray, engine_name: str
) -> None:
    from tests.engine.arithmetic import load_on_this_cpu

    loaded, report = load_on_this_cpu(smolvla_bundle, engine_name)
    try:
        assert report.parity.ok and "action std" in report.parity.units
        chunks = []
        for t, (task, noise) in enumerate(zip(TASKS[:3], noises(3, 3), strict=True)):
            obs = observation(t)
            ids, mask = tokenizer.encode(task)
            got = loaded.run_validated([obs[IMAGE], obs[STATE], ids, mask, noise])["action"]
            want = lerobot.step(obs, task, noise)
            assert normalised_error(got, want, scale) < bundle_tolerance(smolvla_bundle, loaded.info.precision)
            assert np.abs(want).max() > 5  # un-normalised actions of real magnitude
            chunks.append(got)
        # the task is an input that matters: same observation and noise, another task, another chunk
        obs, noise = observation(0), noises(3, 1)[0]
        other = loaded.run_validated([obs[IMAGE], obs[STATE], *tokenizer.encode("Fold the cloth."), noise])["action"]
        assert np.abs(other - chunks[0]).max() > 1e-3
    finally:
        loaded.close()


# --- serving ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(smolvla_bundle: Path) -> Iterator[Any]:
    from tests.engine.arithmetic import load_on_this_cpu

    loaded, _ = load_on_this_cpu(smolvla_bundle, "openvino")
    yield loaded
    loaded.close()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lrt-") as d:  # ipc paths must fit in 107 bytes
        yield Path(d)


def _server(engine: Any, tmp_path: Path, **config: Any) -> Any:
    from runtime.server import PolicyServer, ServerConfig

    cfg = ServerConfig(endpoints=("ipc://p.sock",), canary_interval_s=0, **config)
    return PolicyServer(engine, cfg, runtime_directory=tmp_path)


def test_served_chunks_follow_the_task_as_lerobot_does(
    engine: Any, lerobot: LeRobotPipeline, scale: np.ndarray, tolerance: float, short_tmp: Path
) -> None:
    from runtime.client import PolicyClient

    drawn = iter(noises(11, 4))
    with (
        _server(engine, short_tmp, noise_seed=11) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=20) as client,
    ):
        info = client.hello()
        assert info.takes_task and info.max_task_bytes == 512
        assert [i.name for i in info.inputs] == [IMAGE, STATE] and info.noise_inputs == (NOISE,)
        for t, task in enumerate((TASKS[0], TASKS[3], TASKS[0], TASKS[5])):
            want = lerobot.step(observation(t), task, next(drawn))
            got = client.infer(observation(t), task=task).actions
            assert normalised_error(got, want, scale) < tolerance
        assert server.tasks is not None and server.tasks.encoded == 3  # the repeated task was cached


def _raw_infer(endpoint: str, header: bytes, frames: list[Any]) -> dict[str, Any]:
    """Send a hand-made request (what PolicyClient would never send) and decode the reply."""
    import zmq

    from runtime.protocol.codec import decode_reply

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    try:
        sock.connect(endpoint)
        sock.send_multipart([b"", header, *frames])
        assert sock.poll(20_000), "no reply"
        reply = decode_reply(sock.recv_multipart()[1:])
        assert not reply.ok and reply.error is not None
        e = reply.error
        return {"code": e.code, "field": e.field, "expected": e.expected, "received": e.received, "message": e.message}
    finally:
        sock.close()
        ctx.term()


def test_bad_tasks_are_refused_by_name_and_serving_goes_on(
    engine: Any, lerobot: LeRobotPipeline, scale: np.ndarray, tolerance: float, short_tmp: Path
) -> None:
    import msgpack

    from runtime.client import PolicyClient
    from runtime.protocol.codec import encode_request
    from runtime.protocol.errors import BadInputError

    obs = observation(0)
    with (
        _server(engine, short_tmp, noise_seed=5) as server,
        PolicyClient(server.bound_endpoints[0], timeout_s=20) as client,
    ):
        with pytest.raises(BadInputError) as err:
            client.infer(obs)
        assert err.value.field == "task" and err.value.received == "nothing"
        assert "language policy" in str(err.value)
        with pytest.raises(BadInputError) as err:
            client.infer(obs, task="é" * 257)  # 514 bytes in UTF-8, 257 characters
        assert err.value.field == "task" and err.value.received == "514 bytes"
        assert err.value.expected == "at most 512 bytes in UTF-8"
        ids, mask = np.zeros(MAX_TOKENS, np.int64), np.ones(MAX_TOKENS, bool)
        with pytest.raises(BadInputError) as err:  # tokens are the server's to make
            client.infer({**obs, TOKENS: ids, MASK: mask}, task="x")
        assert err.value.field == TOKENS and "send the task string" in str(err.value)

        endpoint = server.bound_endpoints[0]
        frames = encode_request("infer", 7, obs, {"task": 42})
        got = _raw_infer(endpoint, frames[0], frames[1:])
        assert (got["code"], got["field"], got["received"]) == ("bad_request", "body.task", "int")
        frames = encode_request("infer", 8, obs, {"task": "XXXXXXXX"})
        header = frames[0].replace(b"XXXXXXXX", b"ab\xff\xfecdef")  # a str whose bytes are not UTF-8
        assert msgpack.unpackb(frames[0])["body"]["task"] == "XXXXXXXX"
        got = _raw_infer(endpoint, header, frames[1:])
        assert (got["code"], got["field"], got["expected"]) == ("bad_request", "body.task", "a UTF-8 string")
        # nothing refused drew noise or reached the engine: the first good request gets the first draw
        want = lerobot.step(obs, TASKS[0], noises(5, 1)[0])
        assert normalised_error(client.infer(obs, task=TASKS[0]).actions, want, scale) < tolerance


def test_control_loop_path_takes_the_task(
    engine: Any, lerobot: LeRobotPipeline, scale: np.ndarray, tolerance: float, short_tmp: Path
) -> None:
    """``submit_local(inputs, on_done, reset=..., task=...)``: the loop's task reaches the program; a
    missing one is reported through on_done, and the server goes on."""

    def submit(server: Any, obs: dict[str, np.ndarray], task: str | None) -> Any:
        done = threading.Event()
        result: list[Any] = []

        def on_done(actions: Any, error: str | None) -> None:
            result.append(error if actions is None else actions)
            done.set()

        assert server.submit_local([obs[IMAGE], obs[STATE]], on_done, reset=True, task=task)
        assert done.wait(30)
        return result[0]

    drawn = iter(noises(21, 2))
    with _server(engine, short_tmp, noise_seed=21) as server:
        assert server.takes_task
        error = submit(server, observation(0), None)
        assert isinstance(error, str) and error.startswith("bad_input: task: ") and "language policy" in error
        for t, task in enumerate((TASKS[0], TASKS[4])):
            server.observe_local([observation(t)[IMAGE], observation(t)[STATE]], task=task)
            want = lerobot.step(observation(t), task, next(drawn))
            got = submit(server, observation(t), task)
            assert isinstance(got, np.ndarray), got
            assert normalised_error(got, want, scale) < tolerance


@pytest.mark.timeout(900)  # NNCF calibration and a second lowering: minutes on two shared cores
def test_int8_bundle_keeps_the_tokenizer_and_follows_the_task(
    smolvla_bundle: Path, tokenizer: Any, tmp_path: Path
) -> None:
    """quantize carries the language section and its tokenizer over; the INT8 program reads the task."""
    from runtime.bundle.bundle import Bundle
    from runtime.export.quantize import quantize_bundle
    from runtime.server.tasks import TaskEncoder
    from tests.engine.arithmetic import load_on_this_cpu

    calib = tmp_path / "calib"
    calib.mkdir()
    for i in range(8):
        ids, mask = tokenizer.encode(TASKS[i % len(TASKS)])
        obs = observation(10 + i)
        np.savez(calib / f"{i}.npz", **{IMAGE: obs[IMAGE], STATE: obs[STATE], TOKENS: ids, MASK: mask})
    out = quantize_bundle(smolvla_bundle, calib, tmp_path / "int8", max_error=float("inf"))
    m = Bundle.open(out.path, verify_all=True).manifest
    assert m.language == Bundle.open(smolvla_bundle).manifest.language and m.programs["CPU"].precision == "int8"
    encoder = TaskEncoder(m, out.path)
    loaded, report = load_on_this_cpu(out.path, "openvino")
    try:
        assert report.parity.ok
        obs, noise = observation(0), noises(3, 1)[0]
        a, b = (
            loaded.run_validated([obs[IMAGE], obs[STATE], *encoder.encode(task), noise])["action"]
            for task in (TASKS[0], "Fold the cloth.")
        )
        assert np.abs(a - b).max() > 1e-3
    finally:
        loaded.close()


def test_the_infer_command_sends_the_task(engine: Any, short_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from runtime.cli import main

    with _server(engine, short_tmp, noise_seed=1) as server:
        endpoint = server.bound_endpoints[0]
        assert main(["infer", "--connect", endpoint, "--json", "--task", TASKS[0]]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["task"] == TASKS[0] and np.asarray(out["actions"]).shape == (STEPS, 6)
        assert main(["infer", "--connect", endpoint]) == 2  # a language policy: no task, not sent
        assert server.snapshot().requests.get("infer", 0) == 1


def test_a_checkpoints_tokenizer_named_by_hub_id_is_taken_from_the_local_vlm(
    smolvla_checkpoint: Path, smolvla_vlm: Path, tmp_path: Path
) -> None:
    """A trained checkpoint's preprocessor names its tokenizer by hub id; export runs offline, so the
    tokenizer step is pointed at the local VLM."""
    import json
    import shutil

    from runtime.export.lerobot import load_checkpoint, read_checkpoint
    from tests.engine.conftest import SMOLVLA_HUB_VLM

    checkpoint = tmp_path / "smolvla"
    shutil.copytree(smolvla_checkpoint, checkpoint)
    pre = json.loads((checkpoint / "policy_preprocessor.json").read_text())
    named = 0
    for step in pre["steps"]:
        if "tokenizer_name" in step.get("config", {}):
            step["config"]["tokenizer_name"] = SMOLVLA_HUB_VLM
            named += 1
    assert named == 1
    (checkpoint / "policy_preprocessor.json").write_text(json.dumps(pre))
    loaded = load_checkpoint(read_checkpoint(checkpoint), vlm_dir=smolvla_vlm)
    names = [getattr(s, "tokenizer_name", None) for s in loaded.preprocessor.steps]
    assert str(smolvla_vlm.resolve()) in names and SMOLVLA_HUB_VLM not in names
