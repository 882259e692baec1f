"""LeRobot checkpoints written by LeRobot's own ``save_pretrained``, for tests and benchmarks.

Random weights, SO-101-like features (one camera by default, or front and wrist; 6 joint positions)
and normalisation statistics of the magnitudes a real SO-101 dataset has (joint positions of tens of
degrees), so relative and absolute errors differ as they do in real use. Sizes: ``tiny`` (small enough
that an export takes seconds, for tests) and ``default`` (LeRobot's own defaults for the family, for
benchmarks; ``act`` is the older name of the same). Needs LeRobot (see runtime.export.lerobot).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from runtime.export.lerobot import import_lerobot

SO101_ACTION_NAMES = (
    "shoulder_pan.pos",
    "shoulder_lift.pos",
    "elbow_flex.pos",
    "wrist_flex.pos",
    "wrist_roll.pos",
    "gripper.pos",
)
Size = Literal["tiny", "default", "act"]
PolicyType = Literal["act", "diffusion", "tdmpc", "vqbet"]
# "trained": every weight matrix redrawn at the scale a trained network's have (std 1/sqrt(fan_in)),
# which is what its numerical spread depends on; "init": the modules' own initialisation (smaller).
Weights = Literal["trained", "init"]


def scale_like_trained(module: Any, seed: int) -> None:
    """Redraw every weight matrix and convolution kernel of ``module`` from N(0, 1/fan_in), as trained ones
    are scaled (initialisers draw them smaller: transformers' 0.02, PyTorch's uniform 1/sqrt(3 fan_in));
    norms, biases and buffers keep their values."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            if param.dim() >= 2:
                fan_in = param[0].numel()
                param.copy_(torch.randn(param.shape, generator=gen) / fan_in**0.5)


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


def _tdmpc(torch: Any, inputs: dict[str, Any], outputs: dict[str, Any], size: Size) -> Any:
    from lerobot.policies.tdmpc.configuration_tdmpc import TDMPCConfig
    from lerobot.policies.tdmpc.modeling_tdmpc import TDMPCPolicy

    shape: dict[str, Any] = (
        {
            "horizon": 4,
            "n_action_steps": 4,  # the whole plan per request, as a chunk
            "n_action_repeats": 1,
            "latent_dim": 16,
            "mlp_dim": 32,
            "image_encoder_hidden_dim": 8,
            "state_encoder_hidden_dim": 32,
            "n_gaussian_samples": 32,
            "n_pi_samples": 8,
            "n_elites": 8,
            "cem_iterations": 2,
            "q_ensemble_size": 5,  # > 2: the terminal value's random pick of two Q functions is drawn
        }
        if size == "tiny"
        else {}  # LeRobot's defaults: horizon 5, 512 Gaussian + 51 policy samples, 6 CEM iterations
    )
    policy = TDMPCPolicy(TDMPCConfig(input_features=inputs, output_features=outputs, device="cpu", **shape))
    # LeRobot zeroes the reward and Q heads' last layers at init, so an untrained model values every
    # trajectory at 0 and CEM's elites are a tie; random heads give the planner something to rank.
    for head in (policy.model._reward, *policy.model._Qs):
        torch.nn.init.normal_(head[-1].weight, std=0.5)
        torch.nn.init.normal_(head[-1].bias, std=0.1)
    return policy


def _vqbet(torch: Any, inputs: dict[str, Any], outputs: dict[str, Any], size: Size, n_obs_steps: int | None) -> Any:
    from lerobot.policies.vqbet.configuration_vqbet import VQBeTConfig
    from lerobot.policies.vqbet.modeling_vqbet import VQBeTPolicy

    shape: dict[str, Any] = (
        {
            "n_obs_steps": 2,
            "n_action_pred_token": 2,
            "action_chunk_size": 3,
            "crop_shape": (80, 112),
            "spatial_softmax_num_keypoints": 16,
            "vqvae_n_embed": 8,
            "vqvae_embedding_dim": 32,
            "vqvae_enc_hidden_dim": 32,
            "gpt_block_size": 32,
            "gpt_input_dim": 64,
            "gpt_output_dim": 64,
            "gpt_n_layer": 2,
            "gpt_n_head": 2,
            "gpt_hidden_dim": 64,
        }
        if size == "tiny"
        else {"crop_shape": (420, 560)}  # LeRobot's defaults otherwise: 5 frames, GPT 8x512, 16 codes
    )
    if n_obs_steps is not None:
        shape["n_obs_steps"] = n_obs_steps
    cfg = VQBeTConfig(
        input_features=inputs, output_features=outputs, pretrained_backbone_weights=None, device="cpu", **shape
    )
    policy = VQBeTPolicy(cfg)
    # a trained checkpoint's residual VQ is frozen ("discretized"); LeRobot warns at inference otherwise
    policy.vqbet.action_head.vqvae_model.discretized.fill_(True)
    return policy


def write_checkpoint(
    out: str | Path,
    policy_type: PolicyType = "act",
    size: Size = "tiny",
    *,
    image_hw: tuple[int, int] | None = None,
    seed: int = 0,
    cameras: tuple[str, ...] = ("front",),
    n_obs_steps: int | None = None,
    weights: Weights | None = None,
) -> Path:
    """Write a checkpoint directory as LeRobot's training does: policy, preprocessor, postprocessor.

    ``cameras``: the image features, ``observation.images.<name>`` each (an SO-101 setup records
    ``front`` and ``wrist``); ``n_obs_steps``: the frames a VQ-BeT looks at (the size's own otherwise).
    ``weights``: ``trained`` scale (the default for ACT) or the modules' ``init`` (the default for the
    others, whose planners and codebooks the tests read at that scale)."""
    import_lerobot()
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.factory import make_pre_post_processors

    # LeRobot's TD-MPC runs only with its camera named observation.image (see runtime.export.lerobot.tdmpc)
    names = ("observation.image",) if policy_type == "tdmpc" else tuple(f"observation.images.{c}" for c in cameras)
    # TD-MPC's encoder takes square images only; 84x84 is what LeRobot's TD-MPC datasets have
    default_hw = (64, 64) if size == "tiny" else (84, 84)
    if policy_type != "tdmpc":
        default_hw = (96, 128) if size == "tiny" else (480, 640)
    h, w = image_hw or default_hw
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
    elif policy_type == "tdmpc":
        policy = _tdmpc(torch, inputs, outputs, size)
        cfg = policy.config
    elif policy_type == "vqbet":
        policy = _vqbet(torch, inputs, outputs, size, n_obs_steps)
        cfg = policy.config
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
    if (weights or ("trained" if policy_type == "act" else "init")) == "trained":
        scale_like_trained(policy, seed)
    pre, post = make_pre_post_processors(cfg, dataset_stats=_stats(torch, names, 6, seed))
    path = Path(out)
    policy.save_pretrained(path)
    pre.save_pretrained(path)
    post.save_pretrained(path)
    return path


if __name__ == "__main__":
    # python -m runtime.policies.lerobot_checkpoints OUT_DIR [act|diffusion|tdmpc|vqbet] [tiny|default] [front,wrist]
    # (run by the Python of the LeRobot release that is to write it)
    import sys

    args = sys.argv[1:]
    if not args:
        raise SystemExit(
            "usage: python -m runtime.policies.lerobot_checkpoints OUT_DIR [act|diffusion|tdmpc|vqbet] "
            "[tiny|default] [front,wrist]"
        )
    kind = args[1] if len(args) > 1 else "act"
    size = args[2] if len(args) > 2 else "default"
    cams = tuple(args[3].split(",")) if len(args) > 3 else ("front",)
    print(write_checkpoint(args[0], kind, size, cameras=cams))  # type: ignore[arg-type]
