"""Observation history and sampling noise: what a client sends -> what the program takes.

Pure logic on a hand-written manifest (the LeRobot Diffusion bundle is served end to end in
tests/engine/test_lerobot_diffusion.py).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from runtime.bundle.manifest import (
    FileEntry,
    LanguageEntry,
    Manifest,
    ProgramEntry,
    TensorSpec,
    TestCaseEntry,
    parse_manifest,
)
from runtime.errors import BundleError
from runtime.server.history import NOISE_PLACEHOLDER, NoiseSource, ObservationHistory

SHA = "0" * 64
DIFFUSION: dict[str, Any] = {
    "format": "lerobot-runtime-bundle",
    "format_version": 1,
    "policy": {"name": "p"},
    "inputs": [
        {"name": "observation.images.front", "dtype": "uint8", "shape": [2, 4, 5, 3], "role": "image"},
        {"name": "observation.state", "dtype": "float32", "shape": [2, 6], "role": "state"},
        {"name": "noise", "dtype": "float32", "shape": [8, 6], "role": "noise"},
    ],
    "outputs": [{"name": "action", "dtype": "float32", "shape": [4, 6], "role": "action"}],
    "action": {"output": "action", "chunk_length": 4, "names": ["a", "b", "c", "d", "e", "f"]},
    "control_rate_hz": 30,
    "programs": {
        "CPU": {"file": "p.pte", "precision": "f32", "sha256": SHA, "delegation": "full", "openvino_version": "x"}
    },
    "test_case": {"file": "t.npz", "sha256": SHA},
    "observation_history": 2,
}


@pytest.fixture
def manifest() -> Manifest:
    return parse_manifest(DIFFUSION)


def frame(t: int) -> list[np.ndarray]:
    """One observation whose every value says which step it was taken at."""
    return [np.full((4, 5, 3), t, np.uint8), np.full(6, float(t), np.float32)]


def steps(program_inputs: list[np.ndarray]) -> list[int]:
    image, state, _ = program_inputs
    assert image.shape == (2, 4, 5, 3) and state.shape == (2, 6)
    assert [int(v) for v in image[:, 0, 0, 0]] == [int(v) for v in state[:, 0]]
    return [int(v) for v in state[:, 0]]


def test_clients_send_one_frame_and_no_noise(manifest: Manifest) -> None:
    assert [(s.name, s.shape) for s in manifest.observation_inputs] == [
        ("observation.images.front", (4, 5, 3)),
        ("observation.state", (6,)),
    ]
    assert [s.name for s in manifest.noise_inputs] == ["noise"]
    assert parse_manifest(json.loads(json.dumps(manifest.to_json()))) == manifest


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("inputs", 1, "shape", [3, 6]), "field 'inputs[1].shape': expected observation_history = 2 frames"),
        (("inputs", 2, "dtype", "float16"), "field 'inputs[2].dtype': expected float32 (a noise input"),
        (("observation_history", None, None, 0), "field 'observation_history': expected a positive number"),
        (("inputs", 0, "role", "camera"), "expected one of image, state, env, other, noise"),
    ],
)
def test_history_and_noise_fields_are_checked(change: tuple[Any, ...], expected: str) -> None:
    data = copy.deepcopy(DIFFUSION)
    key, index, field, value = change
    if index is None:
        data[key] = value
    else:
        data[key][index][field] = value
    with pytest.raises(BundleError, match=r"b/manifest\.json") as err:
        parse_manifest(data, "b/manifest.json")
    assert expected in str(err.value)


def test_first_observation_fills_the_history_then_it_slides(manifest: Manifest) -> None:
    h = ObservationHistory(manifest)
    assert steps(h.assemble("a", frame(1), 0.0)) == [1, 1]  # as LeRobot's populate_queues
    assert steps(h.assemble("a", frame(2), 0.1)) == [1, 2]  # oldest first
    assert steps(h.assemble("a", frame(3), 0.2)) == [2, 3]
    assert h.assemble("a", frame(4), 0.3)[2] is NOISE_PLACEHOLDER  # the worker draws it


def test_each_client_has_its_own_history(manifest: Manifest) -> None:
    h = ObservationHistory(manifest)
    h.assemble("a", frame(1), 0.0)
    assert steps(h.assemble("b", frame(7), 0.0)) == [7, 7]
    assert steps(h.assemble("a", frame(2), 0.1)) == [1, 2]
    assert steps(h.assemble("b", frame(8), 0.1)) == [7, 8]
    assert len(h) == 2


def test_reset_and_gaps_start_a_new_history(manifest: Manifest) -> None:
    h = ObservationHistory(manifest, max_gap_s=1.0)
    h.assemble("a", frame(1), 0.0)
    assert steps(h.assemble("a", frame(2), 0.5, reset=True)) == [2, 2]
    assert steps(h.assemble("a", frame(3), 1.4)) == [2, 3]  # 0.9 s after the last one
    assert steps(h.assemble("a", frame(4), 2.6)) == [4, 4]  # 1.2 s: frames that far apart are not a history
    assert h.resets == 3
    h.forget("a")
    assert steps(h.assemble("a", frame(5), 2.7)) == [5, 5]


def test_the_longest_silent_client_is_forgotten_first(manifest: Manifest) -> None:
    h = ObservationHistory(manifest, max_clients=2)
    h.assemble("a", frame(1), 0.0)
    h.assemble("b", frame(1), 1.0)
    h.assemble("a", frame(2), 2.0)
    h.assemble("c", frame(1), 3.0)  # evicts b, heard from last at 1.0
    assert len(h) == 2
    assert steps(h.assemble("a", frame(3), 4.0)) == [2, 3]
    assert steps(h.assemble("b", frame(5), 4.0)) == [5, 5]


def test_expired_histories_go_before_live_ones() -> None:
    h = ObservationHistory(parse_manifest(DIFFUSION), max_gap_s=1.0, max_clients=3)
    for client, t in (("a", 0.0), ("b", 0.1), ("c", 1.5)):
        h.assemble(client, frame(1), t)
    h.assemble("d", frame(1), 1.8)  # a and b are past the gap: both go, c stays
    assert len(h) == 2
    assert steps(h.assemble("c", frame(2), 1.9)) == [1, 2]


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("history_max_gap_s", -1.0, "server.history_max_gap_s: expected 0 (never restart) or seconds > 0, got -1.0"),
        ("history_max_gap_s", float("nan"), "server.history_max_gap_s"),
        ("noise_seed", -3, "server.noise_seed: expected an integer in [0, 2**64), got -3"),
    ],
)
def test_server_config_names_a_bad_history_or_noise_key(key: str, value: Any, expected: str) -> None:
    from runtime.errors import ConfigError
    from runtime.server.config import ServerConfig

    with pytest.raises(ConfigError) as err:
        ServerConfig(**{key: value})
    assert expected in str(err.value)


def test_a_policy_without_history_takes_the_frame_as_sent() -> None:
    data = copy.deepcopy(DIFFUSION)
    del data["observation_history"]
    data["inputs"] = [
        {"name": "observation.state", "dtype": "float32", "shape": [6], "role": "state"},
    ]
    m = parse_manifest(data)
    h = ObservationHistory(m)
    state = np.arange(6, dtype=np.float32)
    assert h.assemble("a", [state], 0.0)[0] is state
    assert not h.needed and not NoiseSource(m).needed


def test_seeded_noise_is_reproducible_and_fresh_per_request(manifest: Manifest) -> None:
    def draws(seed: int | None) -> list[np.ndarray]:
        noise = NoiseSource(manifest, seed)
        out = []
        for t in range(3):
            inputs = ObservationHistory(manifest).assemble("a", frame(t), 0.0)
            noise.fill(inputs)
            assert steps(inputs) == [t, t]  # only the noise slot changes
            out.append(inputs[2])
        return out

    a, b = draws(7), draws(7)
    rng = np.random.default_rng(7)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == np.float32 and x.shape == (8, 6)
        np.testing.assert_array_equal(x, y)
        # the documented sequence: the seeded Generator's standard normals, one draw per inference
        np.testing.assert_array_equal(x, rng.standard_normal((8, 6), dtype=np.float32))
    assert np.abs(a[0] - a[1]).max() > 0.1
    assert np.abs(draws(None)[0] - draws(None)[0]).max() > 0.1


def mixed_manifest() -> Manifest:
    """Every kind of input, the server's own between the client's, the mask before the tokens."""
    zeros = "0" * 64
    spec = TensorSpec
    return Manifest(
        policy_name="mixed",
        inputs=(
            spec("mask", "bool", (4,), "language"),
            spec("observation.state", "float32", (2, 6), "state"),
            spec("tokens", "int64", (4,), "language"),
            spec("weights", "float32", (8,), "prefix_weights"),
            spec("observation.extra", "float32", (3,), "other"),  # no history: the newest frame only
            spec("noise", "float32", (8, 6), "noise"),
            spec("cap", "float32", (1,), "guidance"),
            spec("observation.env", "float32", (2, 2), "env"),
            spec("prefix", "float32", (8, 6), "prefix"),
        ),
        outputs=(spec("action", "float32", (4, 6), "action"),),
        action_output="action",
        chunk_length=4,
        action_names=tuple("abcdef"),
        control_rate_hz=30.0,
        programs={"CPU": ProgramEntry("CPU", "p.pte", "f32", zeros, "full", "")},
        test_case=TestCaseEntry("t.npz", zeros),
        observation_history=2,
        language=LanguageEntry(FileEntry("tokenizer.json", zeros), "tokens", "mask", 4),
    )


def mixed_frame(t: int) -> list[np.ndarray]:
    return [np.full(6, t, np.float32), np.full(3, t, np.float32), np.full(2, t, np.float32)]


def test_each_input_takes_its_place_in_manifest_order_from_the_frames_the_task_and_the_prefix() -> None:
    h = ObservationHistory(mixed_manifest())
    tokens, mask = np.arange(4), np.ones(4, bool)
    prefix, weights, cap = np.zeros((8, 6), np.float32), np.ones(8, np.float32), np.full(1, 10.0, np.float32)
    h.assemble("a", mixed_frame(1), 0.0, language=(tokens, mask), prefix=(prefix, weights, cap))
    out = h.assemble("a", mixed_frame(2), 0.1, language=(tokens, mask), prefix=(prefix, weights, cap))
    assert len(out) == 9
    assert out[0] is mask and out[2] is tokens
    assert out[3] is weights and out[6] is cap and out[8] is prefix
    assert out[5] is NOISE_PLACEHOLDER
    assert out[1].shape == (2, 6) and [float(v) for v in out[1][:, 0]] == [1.0, 2.0]  # oldest first
    assert out[7].shape == (2, 2) and [float(v) for v in out[7][:, 0]] == [1.0, 2.0]
    assert out[4].shape == (3,) and float(out[4][0]) == 2.0
    assert h.needed


def test_a_language_or_chunking_policy_refuses_to_assemble_without_its_task_or_prefix() -> None:
    h = ObservationHistory(mixed_manifest())
    lang = (np.arange(4), np.ones(4, bool))
    rtc = (np.zeros((8, 6), np.float32), np.ones(8, np.float32), np.ones(1, np.float32))
    with pytest.raises(ValueError) as err:
        h.assemble("a", mixed_frame(1), 0.0, language=lang[:1], prefix=rtc)
    assert str(err.value) == "assemble: a language policy's inputs need the task's tokens and mask"
    with pytest.raises(ValueError) as err:
        h.assemble("a", mixed_frame(1), 0.0, language=(*lang, lang[0]), prefix=rtc)
    assert "task's tokens and mask" in str(err.value)
    with pytest.raises(ValueError) as err:
        h.assemble("a", mixed_frame(1), 0.0, language=lang, prefix=rtc[:2])
    assert str(err.value) == "assemble: a real-time chunking policy's inputs need its leftover, weights and cap"
    assert len(h) == 0  # nothing was kept of a refused frame


def test_a_policy_without_history_keeps_nothing_but_one_with_server_inputs_is_still_needed() -> None:
    m = dataclasses.replace(mixed_manifest(), observation_history=1)
    m = dataclasses.replace(
        m,
        inputs=tuple(dataclasses.replace(s, shape=s.shape[1:]) if s.role in ("state", "env") else s for s in m.inputs),
    )
    h = ObservationHistory(m)
    lang = (np.arange(4), np.ones(4, bool))
    rtc = (np.zeros((8, 6), np.float32), np.ones(8, np.float32), np.ones(1, np.float32))
    frame_1 = mixed_frame(1)
    out = h.assemble("a", frame_1, 0.0, language=lang, prefix=rtc)
    assert out[1] is frame_1[0] and out[7] is frame_1[2]
    h.observe("a", frame_1, 0.0)
    assert len(h) == 0 and h.resets == 0  # no frames to keep for anyone
    assert h.needed  # noise, tokens and prefix are still the server's to fill


def test_observe_adds_a_frame_without_assembling(manifest: Manifest) -> None:
    h = ObservationHistory(manifest)
    h.observe("a", frame(1), 0.0)
    h.observe("a", frame(2), 0.1)
    assert steps(h.assemble("a", frame(3), 0.2)) == [2, 3]
    h.observe("b", frame(5), 0.2, reset=True)
    h.observe("a", frame(4), 0.3, reset=True)
    assert steps(h.assemble("a", frame(6), 0.4)) == [4, 6]
    assert h.resets == 3  # a, b, a's reset


def test_a_frame_exactly_max_gap_s_after_the_last_one_continues_the_history(manifest: Manifest) -> None:
    h = ObservationHistory(manifest, max_gap_s=0.5)
    h.assemble("a", frame(1), 0.0)
    assert steps(h.assemble("a", frame(2), 0.5)) == [1, 2]
    assert steps(h.assemble("a", frame(3), 1.0 + 1e-9)) == [3, 3]


def test_at_the_bound_a_history_exactly_max_gap_s_old_is_not_expired() -> None:
    h = ObservationHistory(parse_manifest(DIFFUSION), max_gap_s=1.0, max_clients=3)
    for client, t in (("a", 0.0), ("b", 0.0), ("c", 0.5)):
        h.assemble(client, frame(1), t)
    h.assemble("d", frame(1), 1.0)  # a and b are exactly 1 s old: live; one goes for d, not both
    assert len(h) == 3


def test_expired_histories_are_kept_until_the_bound_is_reached() -> None:
    h = ObservationHistory(parse_manifest(DIFFUSION), max_gap_s=1.0, max_clients=3)
    h.assemble("a", frame(1), 0.0)
    h.assemble("b", frame(1), 5.0)  # a expired, but there is room: nobody is dropped
    assert len(h) == 2
    h.assemble("b", frame(2), 5.1, reset=True)
    assert len(h) == 2


def test_forgetting_a_client_never_seen_is_harmless(manifest: Manifest) -> None:
    h = ObservationHistory(manifest)
    h.assemble("a", frame(1), 0.0)
    h.forget("nobody")
    assert len(h) == 1


def test_the_noise_source_counts_its_draws_and_keeps_its_seed(manifest: Manifest) -> None:
    noise = NoiseSource(manifest, 11)
    assert (noise.seed, noise.draws) == (11, 0)
    for _ in range(3):
        noise.fill(ObservationHistory(manifest).assemble("a", frame(0), 0.0))
    assert noise.draws == 3
    assert NoiseSource(manifest).seed is None


def test_observed_frames_count_as_heard_for_the_gap(manifest: Manifest) -> None:
    h = ObservationHistory(manifest, max_gap_s=0.5)
    h.observe("a", frame(1), 0.0)
    h.observe("a", frame(2), 0.4)
    assert steps(h.assemble("a", frame(3), 0.8)) == [2, 3]  # 0.4 s after the last observed frame
    h.observe("a", frame(4), 1.5)  # 0.7 s: starts over
    assert steps(h.assemble("a", frame(5), 1.6)) == [4, 5]
