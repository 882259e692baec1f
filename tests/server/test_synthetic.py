"""The synthetic policy the server's tests serve: its shapes, weights, numpy reference, manifest and engine.

A tiny policy (a 4x8 image pooled in 2x2 blocks, a chunk of 2) is compiled in the test; the reference
is worked out here with loops, not with the module's own numpy.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from runtime.bundle.manifest import ProgramEntry, TensorSpec, TestCaseEntry
from runtime.errors import InferenceError
from runtime.server.synthetic import (
    ACT,
    ACTION,
    DEMO,
    IMAGE,
    JOINTS,
    STATE,
    SyntheticEngine,
    SyntheticPolicy,
    example_observation,
    reference_actions,
    synthetic_manifest,
)

TINY = SyntheticPolicy((4, 8, 3), chunk=2, block=2, seed=3)


def test_names_and_the_two_built_in_policies() -> None:
    assert (IMAGE, STATE, ACTION) == ("observation.images.front", "observation.state", "action")
    assert JOINTS == ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
    assert (DEMO.image_shape, DEMO.chunk, DEMO.block, DEMO.seed) == ((96, 128, 3), 100, 8, 0)
    assert (ACT.image_shape, ACT.chunk, ACT.block, ACT.seed) == ((480, 640, 3), 100, 16, 0)
    assert SyntheticPolicy((8, 8, 1)) == SyntheticPolicy((8, 8, 1), 100, 8, 0)


def test_features_are_the_pooled_pixels_and_the_joints() -> None:
    assert TINY.features == 2 * 4 * 3 + 6
    assert DEMO.features == 12 * 16 * 3 + 6
    assert ACT.features == 30 * 40 * 3 + 6


def test_weights_are_seeded_scaled_normals_and_a_small_bias() -> None:
    w, b = TINY.weights()
    assert (w.shape, w.dtype, b.shape, b.dtype) == ((30, 12), np.float32, (12,), np.float32)
    rng = np.random.default_rng(3)
    want_w = rng.standard_normal((30, 12)) / math.sqrt(30)
    want_b = 0.1 * rng.standard_normal(12)
    np.testing.assert_allclose(w, want_w, rtol=1e-6)
    np.testing.assert_allclose(b, want_b, rtol=1e-6)
    again = TINY.weights()
    np.testing.assert_array_equal(again[0], w)  # the same every time
    other, _ = SyntheticPolicy((4, 8, 3), chunk=2, block=2, seed=4).weights()
    assert not np.allclose(other, w)


def _by_hand(policy: SyntheticPolicy, image: np.ndarray, state: np.ndarray) -> np.ndarray:
    h, w, c = policy.image_shape
    k = policy.block
    x = []
    for i in range(h // k):
        for j in range(w // k):
            for ch in range(c):
                block = [float(image[i * k + a, j * k + b, ch]) for a in range(k) for b in range(k)]
                x.append(sum(block) / len(block) / 255.0)
    x += [float(s) for s in state]
    weights, bias = policy.weights()
    out = np.zeros((policy.chunk, len(JOINTS)))
    for step in range(policy.chunk):
        for joint in range(len(JOINTS)):
            col = step * len(JOINTS) + joint
            out[step, joint] = math.tanh(sum(x[f] * float(weights[f, col]) for f in range(len(x))) + float(bias[col]))
    return out


def test_the_reference_pools_blocks_of_the_image_and_adds_the_state() -> None:
    image = np.arange(4 * 8 * 3, dtype=np.uint8).reshape(4, 8, 3) * 2
    state = np.array([0.5, -1.0, 2.0, 0.0, 1.5, -0.25], np.float32)
    got = reference_actions(TINY, {IMAGE: image, STATE: state})
    assert got.shape == (2, 6) and got.dtype == np.float32
    np.testing.assert_allclose(got, _by_hand(TINY, image, state), rtol=0, atol=1e-5)


def test_an_example_observation_is_a_seeded_image_and_state() -> None:
    obs = example_observation(TINY, seed=5)
    assert sorted(obs) == [IMAGE, STATE]
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, size=(4, 8, 3), dtype=np.uint8)
    state = rng.standard_normal(6).astype(np.float32)
    assert obs[IMAGE].dtype == np.uint8 and obs[STATE].dtype == np.float32
    np.testing.assert_array_equal(obs[IMAGE], image)
    np.testing.assert_array_equal(obs[STATE], state)
    default = np.random.default_rng(0).integers(0, 256, (4, 8, 3), dtype=np.uint8)
    np.testing.assert_array_equal(example_observation(TINY)[IMAGE], default)
    # a large image spans the whole byte range
    big = example_observation(DEMO)[IMAGE]
    assert (big.min(), big.max()) == (0, 255)


def test_the_manifest_describes_the_policy() -> None:
    m = synthetic_manifest(TINY, "2099.1")
    zeros = "0" * 64
    assert m.policy_name == "synthetic-4x8"
    assert m.inputs == (
        TensorSpec("observation.images.front", "uint8", (4, 8, 3), "image"),
        TensorSpec("observation.state", "float32", (6,), "state"),
    )
    assert m.outputs == (TensorSpec("action", "float32", (2, 6), "action"),)
    assert (m.action_output, m.chunk_length, m.action_names, m.control_rate_hz) == ("action", 2, JOINTS, 30.0)
    assert m.programs == {"CPU": ProgramEntry("CPU", "synthetic.pte", "f32", zeros, "full", "2099.1")}
    assert m.test_case == TestCaseEntry("test_case.npz", zeros)
    assert m.description == "built in code by runtime.server.synthetic"
    assert m.language is None and m.rtc is None


@pytest.fixture
def tiny_engine() -> SyntheticEngine:
    # built in each test that takes it (a compile of a fraction of a second), so each one runs the build
    return SyntheticEngine(TINY, threads=1)


def test_the_engine_computes_the_reference(tiny_engine: SyntheticEngine) -> None:
    for seed in (0, 1):
        obs = example_observation(TINY, seed)
        got = tiny_engine.infer(obs)
        assert sorted(got) == [ACTION]
        assert got[ACTION].shape == (2, 6) and got[ACTION].dtype == np.float32
        np.testing.assert_allclose(got[ACTION], _by_hand(TINY, obs[IMAGE], obs[STATE]), rtol=0, atol=1e-5)


def test_the_engine_says_what_it_is(tiny_engine: SyntheticEngine) -> None:
    import openvino as ov

    info = tiny_engine.info
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    assert (info.engine, info.device, info.precision, info.threads, info.cpus) == ("openvino", "CPU", "f32", 1, cpus)
    assert (info.bundle, info.program, info.openvino_version) == ("(synthetic)", "(in memory)", ov.get_version())
    assert tiny_engine.policy == TINY
    assert tiny_engine.manifest == synthetic_manifest(TINY, ov.get_version())
    compiled = tiny_engine._request.get_compiled_model()
    assert compiled.get_property("INFERENCE_NUM_THREADS") == 1
    assert str(compiled.get_property("INFERENCE_PRECISION_HINT")) == "<Type: 'float32'>"
    names = [sorted(p.get_names()) for p in compiled.inputs]
    assert names == [[IMAGE], [STATE]]
    assert [p.get_element_type() for p in compiled.inputs] == [ov.Type.u8, ov.Type.f32]
    assert compiled.get_property("NETWORK_NAME") == "synthetic_policy"
    assert compiled.outputs[0].get_names() == {ACTION}


def test_the_engine_takes_a_thread_per_cpu_it_may_run_on_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def affinity(pid: int) -> set[int]:
        asked.append(pid)
        return {3, 1}

    monkeypatch.setattr(os, "sched_getaffinity", affinity)
    engine = SyntheticEngine(TINY)
    assert asked == [0]
    assert (engine.info.threads, engine.info.cpus) == (2, (1, 3))
    # (OpenVINO itself caps the threads it starts at the CPUs the process may really run on)
    monkeypatch.undo()
    assert SyntheticEngine().policy == DEMO


def test_a_failed_run_is_an_inference_error_with_openvinos_reason(tiny_engine: SyntheticEngine) -> None:
    class Failing:
        def infer(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("Exception from src/inference: broken")

    engine = SyntheticEngine(TINY, threads=1)
    engine._request = Failing()  # type: ignore[assignment]
    with pytest.raises(InferenceError) as err:
        engine.infer(example_observation(TINY))
    assert str(err.value).startswith("OpenVINO inference failed")
    assert err.value.backend_reason == "Exception from src/inference: broken"
    assert isinstance(err.value.__cause__, RuntimeError)
