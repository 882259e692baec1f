"""A minimal factory for ``lerobot-runtime export --factory examples/tiny_policy.py:make_tiny_policy``.

A factory returns the model and its named example inputs, in forward-argument order. Inputs are the
program's exact shapes (no batch dimension): here a 32x32 RGB frame and the 6 joint positions.
"""

import torch
from torch import nn


class TinyPolicy(nn.Module):
    def __init__(self, chunk: int = 10, joints: int = 6) -> None:
        super().__init__()
        self.chunk, self.joints = chunk, joints
        self.conv = nn.Conv2d(3, 8, 3, stride=2)
        self.fc = nn.Linear(8 * 15 * 15 + joints, chunk * joints)

    def forward(self, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        x = image.permute(2, 0, 1).unsqueeze(0).float() / 255.0
        feats = torch.relu(self.conv(x)).flatten()
        return self.fc(torch.cat([feats, state])).reshape(self.chunk, self.joints)


def make_tiny_policy() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    example = {
        "observation.images.front": torch.randint(0, 256, (32, 32, 3), dtype=torch.uint8),
        "observation.state": torch.randn(6),
    }
    return TinyPolicy().eval(), example
