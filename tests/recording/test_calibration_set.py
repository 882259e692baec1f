"""Recorded observations are what the policy takes: they go straight into the demo policy's engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
