"""An ACT-style policy: convolutional image encoder + transformer encoder/decoder -> action chunk.

The layout follows ACT (Zhao et al., 2023) as LeRobot ships it: a ResNet-style backbone turns the
camera image into a grid of feature tokens, a projected joint-state token joins them, a transformer
encoder mixes them and a decoder with one learned query per future step emits the chunk of joint
targets. Pre-processing (uint8 HWC -> normalised float CHW) is part of the graph, so the exported
program takes the camera frame exactly as a driver delivers it and OpenVINO fuses the conversion.

Attention is written out (linear projections, scaled dot product, softmax) rather than taken from
``nn.MultiheadAttention`` so the exported graph is plain, portable aten ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

IMAGE_INPUT = "observation.images.front"
STATE_INPUT = "observation.state"
ACTION_OUTPUT = "action"


@dataclass(frozen=True)
class ACTConfig:
    image_hw: tuple[int, int] = (480, 640)
    state_dim: int = 6
    action_dim: int = 6
    chunk_length: int = 100
    # ResNet18: four stages of two basic blocks, 64-128-256-512 channels.
    stage_channels: tuple[int, ...] = (64, 128, 256, 512)
    blocks_per_stage: int = 2
    dim: int = 512
    heads: int = 8
    encoder_layers: int = 4
    decoder_layers: int = 1
    feedforward: int = 3200
    # > 0: the chunk is a smooth ramp from the present joint state to a pose the network picks within
    # this many degrees of the joints' centre (50 % for a last, gripper, joint), so a policy with random
    # weights still commands reachable, smooth motion that follows the camera (the demo moves the arm).
    reach_deg: float = 0.0


# The built-in demo: small enough to export in a few seconds and run in about a millisecond.
DEMO_CONFIG = ACTConfig(
    image_hw=(96, 128),
    stage_channels=(16, 32, 64),
    blocks_per_stage=1,
    dim=64,
    heads=4,
    encoder_layers=2,
    decoder_layers=1,
    feedforward=128,
    reach_deg=40.0,
)
ACT_CONFIG = ACTConfig()


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.down(x))


class Backbone(nn.Module):
    def __init__(self, cfg: ACTConfig) -> None:
        super().__init__()
        c0 = cfg.stage_channels[0]
        self.stem = nn.Sequential(
            nn.Conv2d(3, c0, 7, 2, 3, bias=False),
            nn.BatchNorm2d(c0),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        layers: list[nn.Module] = []
        cin = c0
        for i, cout in enumerate(cfg.stage_channels):
            for b in range(cfg.blocks_per_stage):
                layers.append(BasicBlock(cin, cout, 2 if (b == 0 and i > 0) else 1))
                cin = cout
        self.stages = nn.Sequential(*layers)
        self.out_channels = cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem(x))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        m = ctx.shape[1]
        h = self.heads
        q = self.q(x).reshape(b, n, h, d // h).transpose(1, 2)
        k = self.k(ctx).reshape(b, m, h, d // h).transpose(1, 2)
        v = self.v(ctx).reshape(b, m, h, d // h).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) * (1.0 / math.sqrt(d // h)), dim=-1)
        return self.out((att @ v).transpose(1, 2).reshape(b, n, d))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ACTConfig) -> None:
        super().__init__()
        self.att = Attention(cfg.dim, cfg.heads)
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.ff = nn.Sequential(nn.Linear(cfg.dim, cfg.feedforward), nn.ReLU(), nn.Linear(cfg.feedforward, cfg.dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.att(x, x))
        return self.norm2(x + self.ff(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ACTConfig) -> None:
        super().__init__()
        self.self_att = Attention(cfg.dim, cfg.heads)
        self.cross_att = Attention(cfg.dim, cfg.heads)
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.norm3 = nn.LayerNorm(cfg.dim)
        self.ff = nn.Sequential(nn.Linear(cfg.dim, cfg.feedforward), nn.ReLU(), nn.Linear(cfg.feedforward, cfg.dim))

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.self_att(x, x))
        x = self.norm2(x + self.cross_att(x, memory))
        return self.norm3(x + self.ff(x))


class ACTPolicy(nn.Module):
    """``forward(image uint8 [H, W, 3], state float32 [state_dim]) -> action float32 [chunk, action_dim]``."""

    mean: torch.Tensor
    inv_std: torch.Tensor
    centre: torch.Tensor

    def __init__(self, cfg: ACTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).reshape(1, 3, 1, 1) * 255.0)
        self.register_buffer("inv_std", 1.0 / (torch.tensor([0.229, 0.224, 0.225]).reshape(1, 3, 1, 1) * 255.0))
        self.backbone = Backbone(cfg)
        self.proj = nn.Conv2d(self.backbone.out_channels, cfg.dim, 1)
        h, w = cfg.image_hw
        stride = 4 * 2 ** (len(cfg.stage_channels) - 1)
        n_tokens = math.ceil(h / stride) * math.ceil(w / stride) + 1
        self.pos = nn.Parameter(torch.randn(1, n_tokens, cfg.dim) * 0.02)
        self.state_proj = nn.Linear(cfg.state_dim, cfg.dim)
        self.encoder = nn.Sequential(*[EncoderLayer(cfg) for _ in range(cfg.encoder_layers)])
        self.decoder = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.decoder_layers)])
        self.queries = nn.Parameter(torch.randn(1, cfg.chunk_length, cfg.dim) * 0.02)
        self.head = nn.Linear(cfg.dim, cfg.action_dim)
        centre = torch.zeros(cfg.action_dim)
        centre[-1] = 50.0
        self.register_buffer("centre", centre)

    def forward(self, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        x = image.permute(2, 0, 1).unsqueeze(0).to(torch.float32)
        x = (x - self.mean) * self.inv_std
        feats = self.proj(self.backbone(x)).flatten(2).transpose(1, 2)  # [1, tokens, dim]
        tokens = torch.cat([self.state_proj(state.reshape(1, 1, -1)), feats], dim=1) + self.pos
        memory = self.encoder(tokens)
        q = self.queries
        for layer in self.decoder:
            q = layer(q, memory)
        out = self.head(q)[0]
        if self.cfg.reach_deg > 0:
            return self._ramp(out, state)
        return out

    def _ramp(self, out: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        target = self.centre + self.cfg.reach_deg * torch.tanh(out.mean(dim=0) * 4.0)
        t = torch.arange(1, out.shape[0] + 1, dtype=state.dtype).reshape(-1, 1) / out.shape[0]
        return state.reshape(1, -1) + (target - state).reshape(1, -1) * t


def _make(cfg: ACTConfig, seed: int) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(seed)
    model = ACTPolicy(cfg).eval()
    # Non-trivial BatchNorm statistics, so folding them is really exercised.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d) and m.running_mean is not None and m.running_var is not None:
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    gen = torch.Generator().manual_seed(seed + 1)
    h, w = cfg.image_hw
    example = {
        IMAGE_INPUT: torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=gen),
        STATE_INPUT: torch.randn(cfg.state_dim, generator=gen),
    }
    return model, example


def make_demo_policy() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The built-in demo policy (seeded random weights) and named example inputs."""
    return _make(DEMO_CONFIG, seed=0)


def make_act_policy() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The ACT-size benchmark policy: ResNet18-style backbone at 480x640, 4+1 transformer layers, chunk 100."""
    return _make(ACT_CONFIG, seed=0)
