"""Small statistics helpers (no numpy): percentiles, medians, spreads."""

from __future__ import annotations

import math
from typing import Iterable, Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of already sorted values, linear between
    closest ranks. ``nan`` for no values."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    if n == 1:
        return float(sorted_values[0])
    pos = (n - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


def summarize(values: Iterable[float]) -> dict[str, float]:
    """``n``, ``mean``, ``min``, ``p50``, ``p95``, ``p99``, ``p99.9``, ``max`` of
    ``values`` (in whatever unit they are)."""
    v = sorted(values)
    if not v:
        return {"n": 0}
    return {
        "n": len(v), "mean": sum(v) / len(v), "min": v[0],
        "p50": percentile(v, 50), "p95": percentile(v, 95), "p99": percentile(v, 99),
        "p99.9": percentile(v, 99.9), "max": v[-1],
    }


def median(values: Iterable[float]) -> float:
    v = sorted(x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x)))
    return percentile(v, 50) if v else math.nan


def spread(values: Iterable[float]) -> tuple[float, float]:
    """(min, max) of the finite values; ``(nan, nan)`` when there are none."""
    v = [x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return (min(v), max(v)) if v else (math.nan, math.nan)
