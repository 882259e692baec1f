"""The summaries of latency samples every benchmark reports: ``summarize`` (median, p90, p99, mean, min)
and ``pcts`` (p50, p99, max; None where there is nothing to measure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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


def pcts(values: Iterable[float], *, absolute: bool = False) -> dict[str, float | None]:
    """p50/p99/max of ``values`` (ms; of their size with ``absolute``), rounded; None where there is
    nothing to measure. NaN values are left out."""
    a = np.asarray(list(values), dtype=np.float64)
    a = a[np.isfinite(a)]
    if absolute:
        a = np.abs(a)
    if not len(a):
        return {"p50": None, "p99": None, "max": None}
    return {
        "p50": round(float(np.percentile(a, 50)), 3),
        "p99": round(float(np.percentile(a, 99)), 3),
        "max": round(float(a.max()), 3),
    }
