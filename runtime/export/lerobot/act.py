"""ACT in the exported graph: LeRobot's own ``predict_action_chunk``, unchanged.

ACT is deterministic at inference (the VAE's latent is zero when no action is given), so the graph
is the policy's forward pass with nothing drawn.
"""

from __future__ import annotations

import torch

from runtime.export.lerobot.family import Family


class ActFamily(Family):
    policy_type = "act"
    policy_class = ("lerobot.policies.act.modeling_act", "ACTPolicy")

    def predict(self, batch: dict[str, torch.Tensor], noise: dict[str, torch.Tensor]) -> torch.Tensor:
        out: torch.Tensor = self.policy.predict_action_chunk(batch)
        return out


FAMILY = ActFamily
