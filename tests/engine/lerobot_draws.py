"""LeRobot's own inference with its random draws replayed from given standard normals.

The reference side of the TD-MPC and VQ-BeT parity tests: ``torch.randn``/``randn_like`` return the
given normals in order, ``randint`` and ``multinomial`` turn one normal each into the integer or
category through its uniform Phi(x), as the exporter's draws do (written here on their own, so a
slip in either shows as a mismatch).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any
from unittest import mock


@contextlib.contextmanager
def replayed_draws(
    randn: Sequence[Any] = (),
    randint: Sequence[Any] = (),
    multinomial: Sequence[Any] = (),
    margins: list[float] | None = None,
) -> Iterator[None]:
    """``margins``, when given, gets each categorical draw's distance (in probability) from the nearest
    boundary between categories: how far the probabilities may move before another category is drawn."""
    import torch

    normals, integers, categories = list(randn), list(randint), list(multinomial)

    def phi(x: Any) -> Any:
        return 0.5 * (1 + torch.erf(x / math.sqrt(2)))

    def f_randn(*size: Any, **_: Any) -> Any:
        x = normals.pop(0)
        assert tuple(x.shape) == tuple(size), (tuple(x.shape), size)
        return x.clone()

    def f_randn_like(t: Any, **_: Any) -> Any:
        x = normals.pop(0)
        assert x.shape == t.shape, (x.shape, t.shape)
        return x.clone()

    def f_randint(low: int, high: int, size: Any, **_: Any) -> Any:
        x = integers.pop(0)
        assert tuple(x.shape) == tuple(size)
        return (low + torch.floor(phi(x) * (high - low))).clamp(low, high - 1).long()

    def f_multinomial(p: Any, num_samples: int, **_: Any) -> Any:
        assert num_samples == 1
        x = categories.pop(0).reshape(-1, 1)
        assert x.shape[0] == p.shape[0]
        cdf = torch.cumsum(p, -1)
        threshold = phi(x) * cdf[:, -1:]
        if margins is not None:
            margins.append(float(((cdf - threshold).abs() / cdf[:, -1:]).min()))
        return (cdf < threshold).long().sum(-1, keepdim=True).clamp(max=p.shape[-1] - 1)

    with (
        mock.patch("torch.randn", f_randn),
        mock.patch("torch.randn_like", f_randn_like),
        mock.patch("torch.randint", f_randint),
        mock.patch("torch.multinomial", f_multinomial),
    ):
        yield
    assert not normals and not integers and not categories, "LeRobot made fewer draws than given"
