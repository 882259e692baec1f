"""The torch module that ``torch.export`` sees for a LeRobot policy: observation in, joint targets out.

Inputs are unbatched and in the checkpoint's feature order, named as LeRobot names them
(``observation.images.front``, ``observation.state``): cameras as ``uint8`` [H, W, 3], the rest as
float32, then the family's language inputs (a task's tokens, filled by the server), then its noise
inputs, then its prefix inputs (real-time chunking: the previous chunk's leftover in the action's
units, its per-step weights and the guidance cap). Policies that look at ``n_obs_steps > 1`` observations take
each observation input with that many frames first ([n_obs_steps, H, W, 3]); the server keeps the
history (see runtime.server.history).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from runtime.export.lerobot.family import Family
from runtime.export.lerobot.loader import LoadedCheckpoint


class LeRobotGraph(nn.Module):
    """LeRobot's inference pipeline for one observation, as one traceable module."""

    def __init__(self, family: Family, n_action_steps: int) -> None:
        super().__init__()
        loaded = family.loaded
        ckpt = loaded.checkpoint
        self.family = family
        # registered here so torch.export lifts their weights and statistics
        self.policy = loaded.policy
        self.normalizer = loaded.normalizer
        self.unnormalizer = loaded.unnormalizer
        self.names = [f.name for f in ckpt.inputs]
        self.language_names = list(family.language_inputs())
        self.noise_names = list(family.noise_inputs())
        self.prefix_roles = {name: role for name, (_, role) in family.prefix_inputs().items()}
        self.images = {f.name for f in ckpt.inputs if f.type == "VISUAL"}
        self.n_action_steps = n_action_steps
        self.first_step = family.first_step()

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        batch: dict[str, Any] = {}
        for name, x in zip(self.names, inputs[: len(self.names)], strict=True):
            if name in self.images:
                # as prepare_observation_for_inference: float in [0, 1], channels first
                n = x.dim()  # positive axes: OpenVINO's converter refuses negative permutation axes
                x = (x.to(torch.float32) / 255).permute(*range(n - 3), n - 1, n - 3, n - 2)
            batch[name] = x.unsqueeze(0)
        batch = self.normalizer._normalize_observation(batch, inverse=False)
        rest = inputs[len(self.names) :]
        for name, x in zip(self.language_names, rest[: len(self.language_names)], strict=True):
            batch[name] = x.unsqueeze(0)  # tokens and their mask: not normalised
        rest = rest[len(self.language_names) :]
        noise = dict(zip(self.noise_names, rest[: len(self.noise_names)], strict=True))
        prefix = dict(zip(self.prefix_roles, rest[len(self.noise_names) :], strict=True))
        actions = self.family.predict_guided(batch, noise, prefix) if prefix else self.family.predict(batch, noise)
        actions = self.unnormalizer._normalize_action(actions, inverse=True)
        out: torch.Tensor = actions[0, self.first_step : self.first_step + self.n_action_steps]
        return out


def example_inputs(family: Family, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded inputs of the program's shapes: the bundle's test case.

    State and environment inputs are drawn around the normalisation statistics, so the normalised
    values the network sees are of order one, as in real use; noise inputs are standard normals, as
    the server draws them.
    """
    loaded: LoadedCheckpoint = family.loaded
    ckpt = loaded.checkpoint
    gen = torch.Generator().manual_seed(seed)
    frames = (ckpt.n_obs_steps,) if ckpt.n_obs_steps > 1 else ()
    out: dict[str, torch.Tensor] = {}
    stats = loaded.normalizer._tensor_stats
    for f in ckpt.inputs:
        if f.type == "VISUAL":
            c, h, w = f.shape
            out[f.name] = torch.randint(0, 256, (*frames, h, w, c), dtype=torch.uint8, generator=gen)
            continue
        x = torch.randn(*frames, *f.shape, generator=gen)
        s = stats.get(f.name, {})
        if "mean" in s and "std" in s:
            x = x * s["std"].float() + s["mean"].float()
        elif "min" in s and "max" in s:
            x = s["min"].float() + (x.clamp(-2, 2) + 2) / 4 * (s["max"] - s["min"]).float()
        out[f.name] = x.contiguous()
    out.update(family.example_language())
    for name, shape in family.noise_inputs().items():
        out[name] = torch.randn(*shape, generator=gen)
    out.update(family.example_prefix())
    return out
