"""One summary of latency samples for every benchmark and ``check``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def summarize(samples_ms: Sequence[float], digits: int = 4) -> dict[str, float]:
    """median, p90, p99, mean and min of ``samples_ms`` (milliseconds), rounded to ``digits``."""
    a = np.asarray(samples_ms, dtype=np.float64)
    return {
        "median": round(float(np.median(a)), digits),
        "p90": round(float(np.percentile(a, 90)), digits),
        "p99": round(float(np.percentile(a, 99)), digits),
        "mean": round(float(a.mean()), digits),
        "min": round(float(a.min()), digits),
    }
