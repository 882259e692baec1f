"""VQ-BeT in the exported graph: LeRobot's own model in rollout mode, its code sampling as an input.

``predict_action_chunk`` runs ``VQBeTModel(batch, rollout=True)`` on the queued observations: the
ResNet encoder, the GPT over observation and action-query tokens, then the head, which samples one
residual-VQ code per layer and query token from the softmax of its logits (``torch.multinomial``),
decodes it and adds the predicted offset. The program runs that code as it is; the code sampling reads
``noise.codes`` (standard normals, [query tokens, VQ layers], drawn by the server per request) through
runtime.export.lerobot.draws, so with the same noise the chunk is LeRobot's.

The graph takes ``n_obs_steps`` frames of each observation input (the server keeps the history, as
LeRobot's queues do) and serves the whole ``action_chunk_size`` chunk, as ``select_action`` executes it.
"""

from __future__ import annotations

from typing import Final

import torch

from runtime.export.lerobot.draws import Draws, drawing_from
from runtime.export.lerobot.family import Family

OBS_IMAGES: Final = "observation.images"
OBS_STATE: Final = "observation.state"
NOISE_CODES: Final = "noise.codes"


class VqbetFamily(Family):
    policy_type = "vqbet"
    policy_class = ("lerobot.policies.vqbet.modeling_vqbet", "VQBeTPolicy")

    def _query_tokens(self) -> int:
        cfg = self.policy.config
        # the head samples a code for every action-query token: one per observation step, plus the future ones
        return int(cfg.n_obs_steps + cfg.n_action_pred_token - 1)

    def noise_inputs(self) -> dict[str, tuple[int, ...]]:
        layers = int(self.policy.vqbet.action_head.vqvae_model.vqvae_num_layers)
        return {NOISE_CODES: (self._query_tokens(), layers)}

    def _draws(self, noise: torch.Tensor) -> Draws:
        where = f"VQ-BeT policy {self.checkpoint.path}"
        if self.policy.config.sequentially_select:
            # the primary code of every token first, then the secondary ones given the primary
            return Draws(where, multinomial=[noise[:, 0], noise[:, 1]])
        return Draws(where, multinomial=[noise.reshape(-1)])  # rows (token, layer), as the head flattens them

    def predict(self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor]) -> torch.Tensor:
        from lerobot.policies.vqbet import modeling_vqbet

        cfg = self.policy.config
        if cfg.n_obs_steps == 1:  # the graph's inputs then have no frame axis; LeRobot's queues add one
            batch = {k: v.unsqueeze(1) for k, v in batch.items()}
        model_batch = {
            OBS_STATE: batch[OBS_STATE],
            # as select_action stacks the cameras of each frame: (batch, frames, cameras, C, H, W)
            OBS_IMAGES: torch.stack([batch[k] for k in cfg.image_features], dim=-4),
        }
        with drawing_from(modeling_vqbet, self._draws(noise[NOISE_CODES])):
            actions: torch.Tensor = self.policy.vqbet(model_batch, rollout=True)
        return actions[:, : cfg.action_chunk_size]


FAMILY = VqbetFamily
