"""Observation history and sampling noise: what a client sends -> what the program takes.

Pure logic on a hand-written manifest (the LeRobot Diffusion bundle is served end to end in
tests/engine/test_lerobot_diffusion.py).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest

from runtime.bundle.manifest import Manifest, parse_manifest
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
