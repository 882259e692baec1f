"""LeRobot checkpoints written by LeRobot's own ``save_pretrained``, for tests and benchmarks.

Random weights, SO-101-like features (one camera by default, or front and wrist; 6 joint positions)
and normalisation statistics of the magnitudes a real SO-101 dataset has (joint positions of tens of
degrees), so relative and absolute errors differ as they do in real use. Needs LeRobot (see runtime.bundle.lerobot).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from runtime.bundle.lerobot import import_lerobot

SO101_ACTION_NAMES = (
    "shoulder_pan.pos",
    "shoulder_lift.pos",
    "elbow_flex.pos",
    "wrist_flex.pos",
    "wrist_roll.pos",
    "gripper.pos",
)
Size = Literal["tiny", "act"]


def _stats(torch: Any, cameras: tuple[str, ...], dim: int, seed: int) -> dict[str, dict[str, Any]]:
    g = torch.Generator().manual_seed(seed)
    return {
        **{
            camera: {
                "mean": torch.rand(3, 1, 1, generator=g) * 0.2 + 0.4,
                "std": torch.rand(3, 1, 1, generator=g) * 0.1 + 0.2,
                "min": torch.zeros(3, 1, 1),
                "max": torch.ones(3, 1, 1),
            }
            for camera in cameras
        },
        "observation.state": {
            "mean": torch.randn(dim, generator=g) * 30,
            "std": torch.rand(dim, generator=g) * 20 + 5,
            "min": torch.full((dim,), -100.0),
            "max": torch.full((dim,), 100.0),
        },
        "action": {
            "mean": torch.randn(dim, generator=g) * 30,
            "std": torch.rand(dim, generator=g) * 20 + 5,
            "min": torch.full((dim,), -100.0),
            "max": torch.full((dim,), 100.0),
        },
    }


def write_checkpoint(
    out: str | Path,
    policy_type: Literal["act", "diffusion"] = "act",
    size: Size = "tiny",
    *,
    image_hw: tuple[int, int] | None = None,
    seed: int = 0,
    cameras: tuple[str, ...] = ("front",),
) -> Path:
    """Write a checkpoint directory as LeRobot's training does: policy, preprocessor, postprocessor.

    ``cameras``: the image features, ``observation.images.<name>`` each (an SO-101 setup records
    ``front`` and ``wrist``)."""
    import_lerobot()
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_pre_post_processors

    names = tuple(f"observation.images.{c}" for c in cameras)
    h, w = image_hw or ((96, 128) if size == "tiny" else (480, 640))
    inputs = {
        **{camera: PolicyFeature(FeatureType.VISUAL, (3, h, w)) for camera in names},
        "observation.state": PolicyFeature(FeatureType.STATE, (6,)),
    }
    outputs = {"action": PolicyFeature(FeatureType.ACTION, (6,))}
    torch.manual_seed(seed)
    if policy_type == "act":
        from lerobot.policies.act.configuration_act import ACTConfig
        from lerobot.policies.act.modeling_act import ACTPolicy

        shape: dict[str, Any] = (
            {"dim_model": 64, "n_heads": 4, "dim_feedforward": 128, "n_encoder_layers": 1, "chunk_size": 20}
            if size == "tiny"
            else {"chunk_size": 100}  # LeRobot's defaults: ResNet18, 512-wide, 4+1 layers
        )
        cfg: Any = ACTConfig(
            input_features=inputs,
            output_features=outputs,
            pretrained_backbone_weights=None,  # no download: random weights
            n_action_steps=shape["chunk_size"],
            device="cpu",
            **shape,
        )
        policy: Any = ACTPolicy(cfg)
    else:
        from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
        from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

        shape = (
            {
                "down_dims": (32, 64),
                "horizon": 8,
                "n_action_steps": 4,
                "num_inference_steps": 2,  # each step is a copy of the U-Net in the program: lowering time
                "crop_shape": (80, 112),
                "diffusion_step_embed_dim": 32,
                "spatial_softmax_num_keypoints": 16,
            }
            if size == "tiny"
            else {"num_inference_steps": 10, "crop_shape": (420, 560)}
        )
        cfg = DiffusionConfig(
            input_features=inputs,
            output_features=outputs,
            pretrained_backbone_weights=None,
            noise_scheduler_type="DDIM",
            device="cpu",
            **shape,
        )
        policy = DiffusionPolicy(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=_stats(torch, names, 6, seed))
    path = Path(out)
    policy.save_pretrained(path)
    pre.save_pretrained(path)
    post.save_pretrained(path)
    return path


if __name__ == "__main__":
    # python -m runtime.policies.lerobot_checkpoints OUT_DIR [act|diffusion] [tiny|act] [CAMERA,CAMERA...]
    import sys

    args = sys.argv[1:]
    if not args:
        raise SystemExit(
            "usage: python -m runtime.policies.lerobot_checkpoints OUT_DIR [act|diffusion] [tiny|act] [front,wrist]"
        )
    kind = args[1] if len(args) > 1 else "act"
    size = args[2] if len(args) > 2 else "act"
    cams = tuple(args[3].split(",")) if len(args) > 3 else ("front",)
    print(write_checkpoint(args[0], kind, size, cameras=cams))  # type: ignore[arg-type]
