"""Export checks that come before the slow steps, batch-of-one models, and no partial bundles."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runtime.errors import ExportError
from runtime.export.lerobot import read_checkpoint

pytestmark = pytest.mark.export
TINY = str(Path(__file__).resolve().parents[2] / "examples" / "tiny_policy.py") + ":make_tiny_policy"


def _batched_policy() -> tuple[Any, dict[str, Any]]:
    """A LeRobot-shaped model: batch first, float image in [0, 1] as (1, 3, H, W), chunk (1, 10, 6)."""
    import torch
    from torch import nn

    class Batched(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, stride=4)
            self.fc = nn.Linear(4 * 4 * 4 + 6, 60)

        def forward(self, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
            feats = torch.relu(self.conv(image)).flatten(1)
            return (self.fc(torch.cat([feats, state], dim=1)) * 40).reshape(-1, 10, 6)

    torch.manual_seed(0)
    return Batched().eval(), {
        "observation.image": torch.rand(1, 3, 16, 16),
        "observation.state": torch.randn(1, 6),
    }


def test_batch_of_one_exports_unbatched(tmp_path: Path) -> None:
    from runtime.engine.config import EngineConfig
    from runtime.engine.loader import LoadReport, load_engine
    from runtime.export.export import export_bundle

    bundle = export_bundle(_batched_policy, tmp_path / "b", policy_name="batched")
    m = bundle.manifest
    assert m.model_batch == 1
    assert [(i.name, i.shape, i.role) for i in m.inputs] == [
        ("observation.image", (3, 16, 16), "image"),  # a float camera in [0, 1] is an image too
        ("observation.state", (6,), "state"),
    ]
    assert m.action_spec.shape == (10, 6)
    case = bundle.test_case()
    # outputs of magnitude ~40: the parity scale makes the f32 tolerance relative to them
    assert np.abs(case.outputs["action"]).max() > 5
    assert min(case.scale["action"]) > 1
    report = LoadReport()
    engine = load_engine(EngineConfig(bundle=str(bundle.path), engine="openvino", warmup_runs=0), report=report)
    assert report.parity is not None and report.parity.ok
    assert engine.infer(case.inputs)["action"].shape == (10, 6)
    engine.close()


def test_batch_mismatch_is_refused_before_torch_export(tmp_path: Path) -> None:
    import torch

    from runtime.export.export import export_bundle

    class StateUnbatched(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
            return self.inner(image, state.unsqueeze(0))  # type: ignore[no-any-return]

    def bad() -> tuple[Any, dict[str, Any]]:
        model, example = _batched_policy()
        example["observation.state"] = example["observation.state"][0]
        return StateUnbatched(model), example

    t = time.perf_counter()
    with pytest.raises(ExportError) as err:
        export_bundle(bad, tmp_path / "b")
    assert time.perf_counter() - t < 60  # refused after the eager run, long before lowering
    assert "input 'observation.state'" in str(err.value) and "has shape [6]" in str(err.value)
    assert not (tmp_path / "b").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".b.")]


def test_failed_export_leaves_no_partial_bundle_and_keeps_the_old_one(tmp_path: Path) -> None:
    import torch
    from torch import nn

    from runtime.export.export import export_bundle

    out = tmp_path / "b"
    export_bundle(TINY, out, policy_name="tiny")
    before = (out / "manifest.json").read_text()

    class DataDependent(nn.Module):
        def forward(self, state: torch.Tensor) -> torch.Tensor:
            if state.sum() > 0:  # torch.export refuses a branch on a tensor's value
                return state.reshape(1, 6).repeat(10, 1)
            return -state.reshape(1, 6).repeat(10, 1)

    with pytest.raises(ExportError, match=r"torch\.export failed"):
        export_bundle(lambda: (DataDependent(), {"observation.state": torch.ones(6)}), out)
    assert (out / "manifest.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_eager_failure_is_an_export_error(tmp_path: Path) -> None:
    from runtime.export.export import export_bundle

    def broken() -> tuple[Any, dict[str, Any]]:
        model, example = _batched_policy()
        example["observation.state"] = example["observation.state"].expand(2, 6).contiguous()
        return model, example

    with pytest.raises(ExportError, match="the eager run failed: RuntimeError: Sizes of tensors must match"):
        export_bundle(broken, tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_image_inputs_must_name_inputs(tmp_path: Path) -> None:
    from runtime.export.export import export_bundle

    with pytest.raises(ExportError, match=r"--image-inputs: observation\.images\.wrist is not an input"):
        export_bundle(TINY, tmp_path / "b", image_inputs=("observation.images.wrist",))


@pytest.mark.parametrize(
    ("roles", "expected"),
    [({"observation.wrist": "noise"}, "'observation.wrist': 'noise'"), ({"observation.state": "seed"}, "'seed'")],
)
def test_input_roles_must_name_inputs_and_roles(tmp_path: Path, roles: dict[str, str], expected: str) -> None:
    from runtime.export.export import export_bundle

    with pytest.raises(ExportError, match="input roles: expected an input") as err:
        export_bundle(_batched_policy, tmp_path / "b", input_roles=roles)
    assert expected in str(err.value) and "image, state, env, other, noise" in str(err.value)
    assert not (tmp_path / "b").exists()


def test_tolerance_option_is_parsed_and_checked() -> None:
    from runtime.export.export import parse_tolerance

    assert parse_tolerance("f32=1e-4, bf16=0.05") == {"f32": 1e-4, "bf16": 0.05}
    with pytest.raises(ExportError, match="got 'f64=1'"):
        parse_tolerance("f64=1")
    with pytest.raises(ExportError, match="got 'f32=-1'"):
        parse_tolerance("f32=-1")


# --- reading a checkpoint directory (no LeRobot needed) --------------------------------------


def _checkpoint(tmp_path: Path, **config: Any) -> Path:
    cfg: dict[str, Any] = {
        "type": "act",
        "n_obs_steps": 1,
        "chunk_size": 100,
        "n_action_steps": 100,
        "input_features": {
            "observation.images.front": {"type": "VISUAL", "shape": [3, 480, 640]},
            "observation.state": {"type": "STATE", "shape": [6]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [6]}},
    }
    cfg.update(config)
    d = tmp_path / "ckpt"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    for f in ("model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"):
        (d / f).write_text("{}")
    return d


def test_checkpoint_is_read_without_lerobot(tmp_path: Path) -> None:
    ckpt = read_checkpoint(_checkpoint(tmp_path))
    assert ckpt.policy_type == "act" and ckpt.chunk_size == 100
    assert [(f.name, f.type) for f in ckpt.inputs] == [
        ("observation.images.front", "VISUAL"),
        ("observation.state", "STATE"),
    ]
    assert ckpt.action.shape == (6,)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"type": "pi0"},
            "field 'type': expected a supported policy type (act, diffusion, tdmpc, vqbet, smolvla), got 'pi0'",
        ),
        ({"chunk_size": 0}, "field 'chunk_size': expected a positive integer, got 0"),
        (
            {"input_features": {"observation.images.front": {"type": "VISUAL", "shape": [1, 48, 64]}}},
            "field 'input_features.observation.images.front.shape': expected [3, height, width]",
        ),
        ({"output_features": {}}, "field 'output_features'"),
    ],
)
def test_bad_checkpoint_config_is_named(tmp_path: Path, change: dict[str, Any], expected: str) -> None:
    with pytest.raises(ExportError) as err:
        read_checkpoint(_checkpoint(tmp_path, **change))
    assert expected in str(err.value)
    assert "config.json" in str(err.value)


def test_missing_checkpoint_file_is_named(tmp_path: Path) -> None:
    d = _checkpoint(tmp_path)
    (d / "policy_postprocessor.json").unlink()
    with pytest.raises(ExportError, match=r"lacks policy_postprocessor\.json"):
        read_checkpoint(d)
