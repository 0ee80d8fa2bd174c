"""Summary statistics for benchmark results: percentiles, medians, means. Standard library only.

``percentile`` interpolates linearly between order statistics (numpy's default ``"linear"``
method): for ``n`` sorted values the q-th percentile sits at rank ``(n - 1) * q / 100``.
Empty inputs give ``None`` rather than a number, so a report never shows a made-up value.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

PERCENTILES = (50, 90, 99)


def _finite(values: Iterable[Optional[float]]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def percentile(values: Iterable[Optional[float]], q: float) -> Optional[float]:
    """The q-th percentile (0 <= q <= 100) of the finite values, or None if there are none."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    xs = sorted(_finite(values))
    if not xs:
        return None
    rank = (len(xs) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def median(values: Iterable[Optional[float]]) -> Optional[float]:
    return percentile(values, 50)


def mean(values: Iterable[Optional[float]]) -> Optional[float]:
    xs = _finite(values)
    return sum(xs) / len(xs) if xs else None


def summarize(values: Iterable[Optional[float]], percentiles: Sequence[float] = PERCENTILES) -> dict:
    """``{"n", "mean", "min", "max", "p50", "p90", "p99"}`` over the finite values."""
    xs = _finite(values)
    out = {"n": len(xs), "mean": mean(xs), "min": min(xs) if xs else None, "max": max(xs) if xs else None}
    for q in percentiles:
        out[f"p{q:g}"] = percentile(xs, q)
    return out


def ratio(numerator: Optional[float], denominator: Optional[float]) -> Optional[float]:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def drift(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """Relative disagreement of two measurements of the same thing: ``|a - b| / mean(a, b)``."""
    if a is None or b is None or a + b == 0:
        return None
    return abs(a - b) / ((a + b) / 2.0)
