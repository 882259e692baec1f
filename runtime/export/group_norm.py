"""GroupNorm in a form OpenVINO 2025.4.1's CPU compiler does not crash on.

``torch.nn.GroupNorm`` becomes OpenVINO's ``GroupNormalization`` op, which the CPU plugin's snippets
tokenizer fuses into a JIT subgraph. When the normalised tensor's producer is an elementwise op whose
output also reaches an elementwise consumer of the GroupNorm (a ResNet basic block:
``relu -> conv -> GroupNorm -> add(relu)``), that tokenizer dereferences a bad pointer and
``compile_model`` dies with a segmentation fault (openvino 2025.4.1, CPU, f32; reproduced with
``docs/repro/openvino_groupnorm_segfault.py``). LeRobot's Diffusion Policy has exactly that shape: its
ResNet encoder swaps every BatchNorm for a GroupNorm.

The same arithmetic written as per-group mean and variance (mean and mean square deviation over
each group, then the per-channel affine) lowers to reductions and elementwise ops, which the CPU
plugin compiles and runs correctly (max difference 5e-7 on the encoder) and no slower. Lowering now
compiles CPU programs without snippets (``runtime/export/compile_precision.py``, for reasons of its
own), which avoids the crash too; the rewrite stays so that the program does not depend on that
property wherever its portable graph is compiled.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

log = logging.getLogger(__name__)


class GroupNormByStatistics(nn.Module):
    """``nn.GroupNorm`` computed from explicit per-group statistics; shares the original's parameters."""

    def __init__(self, norm: nn.GroupNorm) -> None:
        super().__init__()
        self.num_groups = norm.num_groups
        self.eps = norm.eps
        self.weight = norm.weight  # None when affine=False
        self.bias = norm.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[:2]
        dtype = x.dtype
        # bf16/f16 activations (an export traced under autocast): statistics in float32, as PyTorch's
        # own group_norm kernel accumulates them; a float32 model gets no cast at all
        groups = (x if dtype == torch.float32 else x.float()).reshape(n, self.num_groups, -1)
        # mean and mean square deviation as plain reductions: var_mean is not a core ATen op
        centred = groups - groups.mean(dim=-1, keepdim=True)
        var = (centred * centred).mean(dim=-1, keepdim=True)
        y = (centred * torch.rsqrt(var + self.eps)).reshape(x.shape)
        per_channel = (1, c) + (1,) * (x.dim() - 2)
        if self.weight is not None:
            y = y * self.weight.reshape(per_channel)
        if self.bias is not None:  # each on its own, as F.group_norm takes them
            y = y + self.bias.reshape(per_channel)
        return y if dtype == torch.float32 else y.to(dtype)


def replace_group_norm(module: nn.Module) -> int:
    """Swap every ``nn.GroupNorm`` under ``module`` (in place) for :class:`GroupNormByStatistics`; how many."""
    count = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.GroupNorm):
                setattr(parent, name, GroupNormByStatistics(child))
                count += 1
    if count:
        log.info(
            "%d GroupNorm layer(s) written as per-group mean and variance: OpenVINO 2025.4.1's CPU compiler "
            "crashes on GroupNormalization after a residual elementwise op",
            count,
        )
    return count
