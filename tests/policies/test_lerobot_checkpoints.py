"""The checkpoints the suite writes with LeRobot's classes: weight matrices at a trained network's scale."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def std(weight: torch.Tensor) -> float:
    return float(weight.detach().std())


def test_weights_are_redrawn_at_a_trained_scale_and_the_rest_is_kept() -> None:
    from runtime.policies.lerobot_checkpoints import scale_like_trained

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.LayerNorm(512), torch.nn.Conv2d(8, 64, 3))
    bias, norm = model[0].bias.detach().clone(), model[1].weight.detach().clone()
    init_std = std(model[0].weight)
    scale_like_trained(model, seed=3)
    # std 1/sqrt(fan_in): 1/16 for the linear layer, 1/sqrt(8*3*3) for the kernel; PyTorch's init is sqrt(3) smaller
    assert std(model[0].weight) == pytest.approx(1 / 16, rel=0.02)
    assert std(model[2].weight) == pytest.approx(1 / 72**0.5, rel=0.05)
    assert std(model[0].weight) == pytest.approx(init_std * 3**0.5, rel=0.05)
    assert torch.equal(model[0].bias, bias) and torch.equal(model[1].weight, norm)
    # seeded: the same seed draws the same weights
    again = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.LayerNorm(512), torch.nn.Conv2d(8, 64, 3))
    scale_like_trained(again, seed=3)
    assert torch.equal(again[0].weight, model[0].weight)
