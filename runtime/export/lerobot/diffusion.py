"""Diffusion Policy's sampling loop in a form ``torch.export`` and OpenVINO accept.

LeRobot's ``conditional_sample`` iterates over the scheduler's timesteps as tensors, and diffusers'
DDIM ``step`` then branches on a tensor (``if prev_timestep >= 0``), which ``torch.export`` refuses as
a data-dependent guard. The same loop with the timesteps as Python ints unrolls into a static graph
and computes the same numbers. The initial sample (LeRobot draws it with ``torch.randn``) is an input
instead: sampling noise has no place in a program, and a fixed noise makes a request reproducible.
DDPM draws fresh noise inside every step; it is refused with the way out (DDIM).
"""

from __future__ import annotations

from typing import Any, Final

import torch

from runtime.errors import ExportError
from runtime.export.lerobot.family import Family
from runtime.export.lerobot.loader import LoadedCheckpoint

OBS_IMAGES: Final = "observation.images"
NOISE_INPUT: Final = "noise"  # the initial sample, filled per request by the server


def check_scheduler(policy: Any) -> None:
    name = type(policy.diffusion.noise_scheduler).__name__
    if name != "DDIMScheduler":
        raise ExportError(
            f"Diffusion Policy with the {name}: its step draws fresh noise inside the graph, which a program "
            "cannot hold; export a policy configured with noise_scheduler_type='DDIM' (LeRobot can switch a "
            "trained DDPM model to DDIM sampling by editing config.json)"
        )


def timesteps(policy: Any) -> list[int]:
    """The sampling timesteps as Python ints; computed before tracing (a tensor's values cannot be read in it)."""
    check_scheduler(policy)
    diffusion = policy.diffusion
    diffusion.noise_scheduler.set_timesteps(diffusion.num_inference_steps)
    return [int(t) for t in diffusion.noise_scheduler.timesteps]


def sample_actions(policy: Any, batch: dict[str, torch.Tensor], noise: torch.Tensor, steps: list[int]) -> torch.Tensor:
    """LeRobot's ``generate_actions`` without its slicing: the full horizon, (1, horizon, action_dim)."""
    cfg = policy.config
    diffusion = policy.diffusion
    if cfg.image_features:
        batch = dict(batch)
        batch[OBS_IMAGES] = torch.stack([batch[k] for k in cfg.image_features], dim=-4)
    global_cond = diffusion._prepare_global_conditioning(batch)
    scheduler = diffusion.noise_scheduler
    sample = noise
    for t in steps:  # Python ints: the loop unrolls and the DDIM branch on the timestep is static
        step = torch.full(sample.shape[:1], t, dtype=torch.long)
        model_output = diffusion.unet(sample, step, global_cond=global_cond)
        sample = scheduler.step(model_output, t, sample).prev_sample
    return sample


class DiffusionFamily(Family):
    policy_type = "diffusion"
    policy_class = ("lerobot.policies.diffusion.modeling_diffusion", "DiffusionPolicy")

    def __init__(self, loaded: LoadedCheckpoint) -> None:
        super().__init__(loaded)
        self.timesteps: list[int] = []

    def check(self) -> None:
        check_scheduler(self.policy)
        self.timesteps = timesteps(self.policy)

    def first_step(self) -> int:
        # LeRobot's Diffusion Policy executes steps n_obs_steps-1 .. +n_action_steps of its horizon
        return self.checkpoint.n_obs_steps - 1

    def noise_inputs(self) -> dict[str, tuple[int, ...]]:
        return {NOISE_INPUT: (self.checkpoint.chunk_size, self.checkpoint.action.shape[0])}

    def predict(self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor]) -> torch.Tensor:
        return sample_actions(self.policy, batch, noise[NOISE_INPUT].unsqueeze(0), self.timesteps)


FAMILY = DiffusionFamily
