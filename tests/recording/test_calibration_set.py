"""Recorded observations are what the policy takes: they go straight into the demo policy's engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from drivers.calibration import SO101_JOINTS
from runtime.engine.base import Engine
from runtime.recording import DatasetWriter, EpisodeRecorder, RecordingFeatures
from runtime.recording.reader import DatasetReader


def test_recorded_observations_feed_the_policy(demo_engine: Engine, tmp_path: Path) -> None:
    features = RecordingFeatures(fps=30, joint_names=SO101_JOINTS, cameras={"front": (96, 128)})
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:96, 0:128]
    recorded = []
    with EpisodeRecorder(DatasetWriter(tmp_path / "calib", features), features) as recorder:
        recorder.start_episode("calibrate")
        for k in range(8):
            image = np.stack([(x + 9 * k) % 256, (y * 2) % 256, np.full_like(x, 40 * k % 256)], -1).astype(np.uint8)
            state = rng.uniform(-90, 90, 6).astype(np.float32)
            recorder.add_frame(k / 30, state, state, state, {"observation.images.front": image}, "policy", False)
            recorded.append({"observation.images.front": image, "observation.state": state})

    calib = list(DatasetReader(tmp_path / "calib").observations())
    assert len(calib) == 8
    for obs, original in zip(calib, recorded, strict=True):
        out = demo_engine.infer(obs)["action"]  # accepted as is: same names, dtypes and shapes
        np.testing.assert_array_equal(obs["observation.state"], original["observation.state"])
        assert np.isfinite(out).all()
        # the frames went through a lossy codec: the policy's answer moves, but only a little
        ref = demo_engine.infer(original)["action"]
        # (joint targets in degrees, up to ~90 here; measured at most 0.21 apart)
        assert np.abs(out - ref).max() < 1.0


def _dataset(root: Path, episodes: tuple[int, ...], size: tuple[int, int] = (96, 128)) -> list[list[np.ndarray]]:
    """A LeRobot dataset written by the recorder; returns each episode's states."""
    features = RecordingFeatures(fps=30, joint_names=SO101_JOINTS, cameras={"front": size})
    rng = np.random.default_rng(5)
    states: list[list[np.ndarray]] = []
    with EpisodeRecorder(DatasetWriter(root, features), features) as recorder:
        for length in episodes:
            recorder.start_episode("calibrate")
            states.append([])
            for k in range(length):
                image = np.full((*size, 3), (7 * k) % 256, np.uint8)
                state = rng.uniform(-90, 90, 6).astype(np.float32)
                recorder.add_frame(k / 30, state, state, state, {"observation.images.front": image}, "policy", False)
                states[-1].append(state)
            recorder.end_episode()
    return states


def test_a_lerobot_dataset_is_a_calibration_source(demo_bundle: Path, tmp_path: Path) -> None:
    from runtime.bundle.bundle import Bundle
    from runtime.export.quantize import load_observations

    states = _dataset(tmp_path / "ds", (10, 6))
    m = Bundle.open(demo_bundle).manifest
    # 16 frames, at most 8 wanted: every second frame of each episode
    obs = load_observations(tmp_path / "ds", m, max_frames=8)
    expected = [states[0][j] for j in range(0, 10, 2)] + [states[1][j] for j in range(0, 6, 2)][:3]
    assert len(obs) == 8
    for got, want in zip(obs, expected, strict=True):
        np.testing.assert_array_equal(got["observation.state"], want)
        assert got["observation.images.front"].shape == (96, 128, 3)
    # the frames are the recorded ones (a lossy codec: within a few levels), in order
    levels = [float(o["observation.images.front"].mean()) for o in obs[:5]]
    np.testing.assert_allclose(levels, [0, 14, 28, 42, 56], atol=3)


def test_a_policy_with_history_gets_its_frames_from_the_dataset(demo_bundle: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    from runtime.bundle.bundle import Bundle
    from runtime.bundle.manifest import TensorSpec
    from runtime.export.quantize import load_observations

    states = _dataset(tmp_path / "ds", (5,))
    m = Bundle.open(demo_bundle).manifest
    # a policy that looks at the last two observations, as Diffusion Policy's n_obs_steps = 2 does
    two = tuple(TensorSpec(s.name, s.dtype, (2, *s.shape), s.role) for s in m.inputs)
    obs = load_observations(tmp_path / "ds", replace(m, inputs=two, observation_history=2), max_frames=5)
    assert len(obs) == 5
    # at an episode's start the first observation is repeated, as LeRobot's queue does
    np.testing.assert_array_equal(obs[0]["observation.state"], np.stack([states[0][0], states[0][0]]))
    np.testing.assert_array_equal(obs[3]["observation.state"], np.stack([states[0][2], states[0][3]]))
    np.testing.assert_allclose(obs[3]["observation.images.front"].mean(axis=(1, 2, 3)), [14, 21], atol=3)


def test_a_dataset_that_does_not_fit_the_policy_is_refused_naming_the_frame(demo_bundle: Path, tmp_path: Path) -> None:
    from runtime.bundle.bundle import Bundle
    from runtime.errors import ExportError
    from runtime.export.quantize import load_observations

    _dataset(tmp_path / "ds", (4, 4), size=(48, 64))
    with pytest.raises(ExportError) as err:
        load_observations(tmp_path / "ds", Bundle.open(demo_bundle).manifest)
    text = str(err.value)
    assert f"--calibration: {tmp_path / 'ds'} episode 0 frame 0:" in text
    assert "observation.images.front" in text and "[96, 128, 3]" in text and "[48, 64, 3]" in text


def test_quantize_calibrates_on_a_lerobot_dataset(demo_bundle: Path, tmp_path: Path) -> None:
    import json

    from runtime.cli import main

    _dataset(tmp_path / "ds", (8, 8))
    out = tmp_path / "int8"
    args = ["quantize", str(demo_bundle), "--calibration", str(tmp_path / "ds"), "--calibration-frames", "12"]
    assert main([*args, "--out", str(out), "--max-error", "50"]) == 0
    q = json.loads((out / "manifest.json").read_text())["quantization"]
    assert q["calibration"] == str((tmp_path / "ds").resolve())
    # 16 frames, at most 12 wanted: every second one, so 8; 2 held out for the gate, 6 calibrate
    assert q["calibration_observations"] == 6
    assert q["gate"]["held_out_observations"] == 3  # 2 + the bundle's own test case
