"""Diffusion Policy's graph against LeRobot's own sampling: noise as an input, history as frames.

Lowering it crashes OpenVINO 2025.4.1's CPU compiler, so export refuses it; the graph itself (what
``torch.export`` traces) is proved here in eager mode against LeRobot's ``predict_action_chunk`` with
the same noise and the same two observations in its queues.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from runtime.bundle.lerobot import lerobot_available
from runtime.errors import ExportError

REASON = lerobot_available()
pytestmark = [pytest.mark.export, pytest.mark.skipif(REASON is not None, reason=f"needs LeRobot: {REASON}")]


@pytest.fixture(scope="module")
def diffusion_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from runtime.policies.lerobot_checkpoints import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("lerobot") / "diffusion", "diffusion", "tiny")


def test_graph_matches_lerobot_sampling_with_history(diffusion_checkpoint: Path) -> None:
    import torch
    from lerobot.policies.utils import populate_queues, prepare_observation_for_inference

    from runtime.bundle.lerobot import lerobot_export_plan, load_checkpoint, read_checkpoint

    factory, kwargs = lerobot_export_plan(diffusion_checkpoint)
    graph, example = factory()
    assert {k: tuple(v.shape) for k, v in example.items()} == {
        "observation.images.front": (2, 96, 128, 3),  # n_obs_steps frames, oldest first
        "observation.state": (2, 6),
        "noise": (8, 6),  # the horizon's initial sample, supplied per request
    }
    with torch.no_grad():
        got = graph(*example.values()).numpy()

    loaded = load_checkpoint(read_checkpoint(diffusion_checkpoint))
    policy = loaded.policy
    policy.reset()
    batch: dict[str, object] = {}
    for t in range(2):
        obs = {k: example[k][t].numpy().copy() for k in ("observation.images.front", "observation.state")}
        batch = dict(loaded.preprocessor(prepare_observation_for_inference(obs, torch.device("cpu"))))
        batch.pop("action", None)
        batch["observation.images"] = torch.stack([batch[k] for k in policy.config.image_features], dim=-4)  # type: ignore[misc]
        policy._queues = populate_queues(policy._queues, batch)  # type: ignore[arg-type]
    with torch.no_grad():
        want = loaded.postprocessor(policy.predict_action_chunk(batch, noise=example["noise"].unsqueeze(0)))[0]
    assert got.shape == (4, 6)  # n_action_steps from step n_obs_steps - 1 of the horizon
    scale = np.asarray(kwargs["action_scale"])
    assert (np.abs(got - want.numpy()) / scale).max() < 1e-5
    # the noise is an input that matters: another noise, another chunk
    example["noise"] = torch.randn(8, 6, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert np.abs(graph(*example.values()).numpy() - got).max() > 1e-3


def test_export_refuses_with_the_reason(diffusion_checkpoint: Path, tmp_path: Path) -> None:
    from runtime.bundle.lerobot import export_lerobot

    with pytest.raises(ExportError, match="Diffusion Policy: the inference graph is built"):
        export_lerobot(diffusion_checkpoint, tmp_path / "b")
    assert not (tmp_path / "b").exists()
