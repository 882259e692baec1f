"""LeRobot's random draws inside a policy, served from noise inputs the server draws per request.

A program holds no random generator, and a request should be reproducible from the server's seed;
so where LeRobot's inference calls ``torch.randn`` (or ``randn_like``, ``randint``, ``multinomial``),
the traced graph reads a slice of a standard-normal input instead. Integer and categorical draws are
made from a standard normal ``x`` through its uniform ``u = Phi(x)``: ``randint(lo, hi)`` is
``lo + floor(u * (hi - lo))`` and ``multinomial(p, 1)`` the inverse of ``p``'s cumulative sum at
``u`` (each has exactly the distribution torch's own draw has; torch's generator is simply not the
source). LeRobot's own code runs unchanged: its module's ``torch`` name is swapped, for the call, for
a view of torch whose draw functions read the inputs in the order LeRobot makes the draws.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import torch

from runtime.errors import ExportError


def uniform(x: torch.Tensor) -> torch.Tensor:
    """The standard normal's CDF: standard normals to uniforms on (0, 1)."""
    return 0.5 * (1 + torch.erf(x / math.sqrt(2)))


def integers(low: int, high: int, x: torch.Tensor) -> torch.Tensor:
    """Uniform integers in [low, high) from standard normals, as ``torch.randint`` draws them."""
    u = uniform(x)
    return (low + torch.floor(u * (high - low))).clamp(low, high - 1).to(torch.long)


def categorical(probs: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """One index per row of ``probs`` (rows, choices) from one standard normal per row: (rows, 1)."""
    cdf = torch.cumsum(probs, dim=-1)
    # multinomial takes unnormalised weights: compare u with the cumulative share, not the sum
    threshold = uniform(x).reshape(-1, 1) * cdf[:, -1:]
    # counted in float (exact for any number of categories a policy has): an int64 sum inside the
    # OpenVINO delegate is computed in 32 bits, which the lowering checks warn about
    index = (cdf < threshold).to(probs.dtype).sum(dim=-1, keepdim=True).to(torch.long)
    return index.clamp(max=probs.shape[-1] - 1)


class Draws:
    """The draws LeRobot's code will make, by kind, each a tensor of the shape LeRobot asks for."""

    def __init__(self, where: str, *, index_copies: int = 1, **kinds: Sequence[torch.Tensor]) -> None:
        self.where = where
        # a categorical draw comes back as [rows, index_copies], the index repeated (see TD-MPC's use)
        self.index_copies = index_copies
        self._queues = {k: list(v) for k, v in kinds.items()}
        self._made = dict.fromkeys(kinds, 0)

    def take(self, kind: str, shape: Sequence[int]) -> torch.Tensor:
        queue = self._queues.get(kind)
        if not queue:
            raise ExportError(
                f"{self.where}: LeRobot's code made one more {kind} draw than the {self._made.get(kind, 0)} "
                "the exporter provides noise for; the policy's inference differs from what this LeRobot "
                "version's exporter knows (check the LeRobot version, runtime.export.lerobot.torchvision_shim)"
            )
        x = queue.pop(0)
        if tuple(x.shape) != tuple(shape):
            raise ExportError(
                f"{self.where}: {kind} draw {self._made[kind]}: expected shape {list(x.shape)}, LeRobot asked "
                f"for {list(shape)}; the exporter's noise layout no longer matches LeRobot's code"
            )
        self._made[kind] += 1
        return x

    def check_all_taken(self) -> None:
        left = {k: len(v) for k, v in self._queues.items() if v}
        if left:
            raise ExportError(
                f"{self.where}: LeRobot's code made fewer draws than the exporter provides noise for "
                f"(left over: {left}); the noise layout no longer matches this LeRobot version's code"
            )


class _TorchWithDraws:
    """``torch`` as a LeRobot module sees it while traced: everything torch's, but the draws."""

    def __init__(self, draws: Draws) -> None:
        self._draws = draws

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def empty(self, *size: Any, **kwargs: Any) -> torch.Tensor:
        # an uninitialised tensor is _empty_dim_order in the edge program, an op OpenVINO's partitioner
        # leaves on ExecuTorch's kernels; LeRobot writes every element before reading it, so zeros
        # are the same computation
        return torch.zeros(*size, **kwargs)

    def randn(self, *size: Any, **_: Any) -> torch.Tensor:
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        return self._draws.take("randn", shape)

    def randn_like(self, x: torch.Tensor, **_: Any) -> torch.Tensor:
        return self._draws.take("randn", tuple(x.shape)).to(x.dtype)

    def randint(self, low: int, high: int, size: Sequence[int], **_: Any) -> torch.Tensor:
        return integers(low, high, self._draws.take("randint", tuple(size)))

    def multinomial(self, probs: torch.Tensor, num_samples: int, **_: Any) -> torch.Tensor:
        if num_samples != 1:
            raise ExportError(f"{self._draws.where}: multinomial with num_samples={num_samples}; expected 1")
        index = categorical(probs, self._draws.take("multinomial", (probs.shape[0],)))
        return index.repeat(1, self._draws.index_copies) if self._draws.index_copies > 1 else index


@contextlib.contextmanager
def drawing_from(module: ModuleType, draws: Draws) -> Iterator[None]:
    """Within the block, ``module``'s random draws read ``draws``; all of them must be taken."""
    real = module.torch
    module.torch = _TorchWithDraws(draws)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module.torch = real  # type: ignore[attr-defined]
    draws.check_all_taken()
