"""Per-episode and whole-dataset statistics in LeRobot's layout (what normalisers are built from).

Every non-string column gets ``min``, ``max``, ``mean``, ``std``, ``count`` and the quantiles
``q01``..``q99``, per dimension. Camera statistics are per colour channel, scaled to [0, 1], shaped
(3, 1, 1). Vector quantiles are exact (``numpy.quantile`` over the episode); camera quantiles come
from a 256-bin histogram, exact for uint8 pixels. Episodes combine as LeRobot combines them: means
and variances weighted by count, extremes of extremes, quantiles averaged by count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from runtime.recording.layout import QUANTILE_KEYS, QUANTILES

Stats = dict[str, npt.NDArray[Any]]

# Camera statistics look at every frame, but at a stride that keeps the long side under this many
# pixels: a 640x480 frame is read at 160x120, which costs little on the writer thread.
_IMAGE_STATS_MAX_SIDE_PX = 200


def column_stats(values: npt.NDArray[Any]) -> Stats:
    """Statistics of one column over an episode: ``values`` is (frames,) or (frames, dims)."""
    data = values.reshape(len(values), -1)
    as_float = data.astype(np.float64)
    stats: Stats = {
        # extremes keep the column's own type (int64 indices stay integers, flags stay bools)
        "min": data.min(axis=0),
        "max": data.max(axis=0),
        "mean": as_float.mean(axis=0),
        "std": as_float.std(axis=0),
        "count": np.array([len(data)], dtype=np.int64),
    }
    quantiles = np.quantile(as_float, QUANTILES, axis=0)
    for key, q in zip(QUANTILE_KEYS, quantiles, strict=True):
        stats[key] = q
    return stats


class ImageStats:
    """Running per-channel statistics of one camera's uint8 frames over an episode."""

    def __init__(self) -> None:
        self._hist = np.zeros((3, 256), dtype=np.int64)
        self._frames = 0

    def add(self, image: npt.NDArray[np.uint8]) -> None:
        step = max(1, -(-max(image.shape[:2]) // _IMAGE_STATS_MAX_SIDE_PX))
        sample = image[::step, ::step]
        for c in range(3):
            self._hist[c] += np.bincount(sample[..., c].ravel(), minlength=256)
        self._frames += 1

    def result(self) -> Stats:
        if self._frames == 0:
            raise ValueError("no frames were added")
        levels = np.arange(256, dtype=np.float64) / 255.0
        pixels = self._hist.sum(axis=1).astype(np.float64)
        mean = (self._hist * levels).sum(axis=1) / pixels
        var = (self._hist * levels**2).sum(axis=1) / pixels - mean**2
        nonzero = self._hist > 0
        lo = np.array([levels[np.flatnonzero(nonzero[c])[0]] for c in range(3)])
        hi = np.array([levels[np.flatnonzero(nonzero[c])[-1]] for c in range(3)])
        cdf = np.cumsum(self._hist, axis=1)
        stats: Stats = {
            "min": lo,
            "max": hi,
            "mean": mean,
            "std": np.sqrt(np.maximum(var, 0.0)),
            "count": np.array([self._frames], dtype=np.int64),
        }
        for key, q in zip(QUANTILE_KEYS, QUANTILES, strict=True):
            # the first level whose cumulative share reaches q
            stats[key] = np.array([levels[int(np.searchsorted(cdf[c], q * cdf[c, -1], side="left"))] for c in range(3)])
        return {k: v if k == "count" else v.reshape(3, 1, 1) for k, v in stats.items()}


def combine(episodes: Sequence[Mapping[str, Stats]]) -> dict[str, Stats]:
    """Dataset statistics from per-episode statistics (feature -> stat -> array)."""
    out: dict[str, Stats] = {}
    keys = {k for ep in episodes for k in ep}
    for key in keys:
        parts = [ep[key] for ep in episodes if key in ep]
        counts = np.array([int(p["count"][0]) for p in parts], dtype=np.float64)
        total = counts.sum()
        means = np.stack([np.asarray(p["mean"], dtype=np.float64) for p in parts])
        variances = np.stack([np.asarray(p["std"], dtype=np.float64) ** 2 for p in parts])
        w = counts.reshape(-1, *([1] * (means.ndim - 1)))
        mean = (means * w).sum(axis=0) / total
        # parallel variance: within-episode spread plus the spread of the episode means
        variance = ((variances + (means - mean) ** 2) * w).sum(axis=0) / total
        stats: Stats = {
            "min": np.min(np.stack([p["min"] for p in parts]), axis=0),
            "max": np.max(np.stack([p["max"] for p in parts]), axis=0),
            "mean": mean,
            "std": np.sqrt(np.maximum(variance, 0.0)),
            "count": np.array([int(total)], dtype=np.int64),
        }
        for q in QUANTILE_KEYS:
            stats[q] = (np.stack([np.asarray(p[q], dtype=np.float64) for p in parts]) * w).sum(axis=0) / total
        out[key] = stats
    return out


def to_json(stats: Mapping[str, Stats]) -> dict[str, dict[str, Any]]:
    """Nested lists, as ``meta/stats.json`` holds them."""
    return {key: {name: np.asarray(v).tolist() for name, v in s.items()} for key, s in stats.items()}


def from_json(data: Mapping[str, Mapping[str, Any]]) -> dict[str, Stats]:
    return {key: {name: np.asarray(v) for name, v in s.items()} for key, s in data.items()}
