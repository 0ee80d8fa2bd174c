"""Statistics for benchmark results. Standard library only, deterministic (seeded).

- summaries: ``percentile`` (linear interpolation between order statistics, numpy's default
  ``"linear"`` method: for ``n`` sorted values the q-th percentile sits at rank
  ``(n - 1) * q / 100``), ``median``, ``mean``, ``geometric_mean``, ``summarize``;
- the speed benchmark's arithmetic: ``ratio``, ``drift``;
- intervals and tests: ``bootstrap_ci`` (percentile bootstrap of a mean, median or geometric
  mean, e.g. a speed ratio over repeats or prompts), ``paired_diff_ci`` (paired bootstrap of a
  mean difference, e.g. accuracy or length of the same items under two arms), ``clustered_diff_ci``
  (the same with pairs in clusters, resampled whole: an item's seeded samples), ``discordant`` and
  ``mcnemar_exact`` (exact two-sided McNemar test on the discordant pairs).

Empty inputs give ``None`` rather than a number, so a report never shows a made-up value.
"""

from __future__ import annotations

import math
import random
import statistics
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


def geometric_mean(values: Iterable[Optional[float]]) -> Optional[float]:
    """``exp(mean(log x))`` over the finite positive values (the mean of ratios), or None."""
    xs = [x for x in _finite(values) if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# ---------------------------------------------------------------- intervals and tests
# Percentile bootstrap (Efron): resample the units (items, prompts, repeats) with replacement
# ``n_boot`` times, compute the statistic on each resample, and take the (1-level)/2 and
# (1+level)/2 percentiles of those values. A private ``random.Random(seed)`` makes every interval
# reproducible run to run; nothing here touches the global random state.

STATISTICS = {"mean": mean, "median": median, "gmean": geometric_mean}
N_BOOT = 10000
LEVEL = 0.95


def _check_level(level: float, n_boot: int) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")


def bootstrap_ci(values: Sequence[Optional[float]], statistic: str = "mean", level: float = LEVEL,
                 n_boot: int = N_BOOT, seed: int = 0) -> Optional[tuple[float, float]]:
    """Percentile-bootstrap interval of ``statistic`` ("mean", "median" or "gmean") over the
    finite values, or None when there are none. With one value (or all equal) it is that value."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {sorted(STATISTICS)}, got {statistic!r}")
    _check_level(level, n_boot)
    xs = _finite(values)
    if statistic == "gmean":
        xs = [x for x in xs if x > 0]
    if not xs:
        return None
    if min(xs) == max(xs):
        v = STATISTICS[statistic](xs)
        return (v, v)
    if statistic == "gmean":  # the geometric mean is the mean on the log scale
        lo, hi = bootstrap_ci([math.log(x) for x in xs], "mean", level, n_boot, seed)
        return (math.exp(lo), math.exp(hi))
    rng = random.Random(seed)
    n = len(xs)
    if statistic == "mean":
        draws = [sum(rng.choices(xs, k=n)) / n for _ in range(n_boot)]
    else:
        draws = [_sorted_median(sorted(rng.choices(xs, k=n))) for _ in range(n_boot)]
    return _percentile_pair(draws, level)


def _sorted_median(xs: list[float]) -> float:
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2.0


def _percentile_pair(draws: list[float], level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2.0 * 100.0
    return (percentile(draws, tail), percentile(draws, 100.0 - tail))


def paired_diff_ci(reference: Sequence[float], candidate: Sequence[float], level: float = LEVEL,
                   n_boot: int = N_BOOT, seed: int = 0) -> Optional[tuple[float, float]]:
    """Paired-bootstrap interval of ``mean(candidate) - mean(reference)``: the pairs (same item
    under both arms) are resampled together. None for no pairs. Inputs are aligned by index."""
    if len(reference) != len(candidate):
        raise ValueError(f"paired samples must have the same length, got {len(reference)} and {len(candidate)}")
    diffs = [float(c) - float(r) for r, c in zip(reference, candidate)]
    return bootstrap_ci(diffs, "mean", level=level, n_boot=n_boot, seed=seed)


def clustered_diff_ci(reference: Sequence[float], candidate: Sequence[float], clusters: Sequence,
                      level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0) -> Optional[tuple[float, float]]:
    """Paired-bootstrap interval of ``mean(candidate - reference)`` when pairs come in clusters
    (``clusters[i]`` names pair i's: the seeded samples of one item are not independent): each
    resample draws clusters with replacement, every pair of a drawn cluster with it, and takes the
    mean over the pairs drawn. When every cluster holds one pair it is ``paired_diff_ci``, the same
    interval from the same draws."""
    if not len(reference) == len(candidate) == len(clusters):
        raise ValueError(f"paired samples and clusters must have the same length, got {len(reference)}, "
                         f"{len(candidate)} and {len(clusters)}")
    if len(set(clusters)) == len(clusters):
        return paired_diff_ci(reference, candidate, level=level, n_boot=n_boot, seed=seed)
    _check_level(level, n_boot)
    groups: dict = {}
    for r, c, k in zip(reference, candidate, clusters):
        groups.setdefault(k, []).append(float(c) - float(r))
    diffs = [d for ds in groups.values() for d in ds]
    if min(diffs) == max(diffs):
        return (diffs[0], diffs[0])
    sums = [(sum(ds), len(ds)) for ds in groups.values()]
    rng = random.Random(seed)
    draws = []
    for _ in range(n_boot):
        picked = rng.choices(sums, k=len(sums))
        draws.append(sum(t for t, _ in picked) / sum(n for _, n in picked))
    return _percentile_pair(draws, level)


def mean_diff(reference: Sequence[float], candidate: Sequence[float]) -> Optional[float]:
    """``mean(candidate - reference)`` over aligned pairs, or None for no pairs."""
    if len(reference) != len(candidate):
        raise ValueError(f"paired samples must have the same length, got {len(reference)} and {len(candidate)}")
    return mean(float(c) - float(r) for r, c in zip(reference, candidate))


def discordant(reference: Sequence[bool], candidate: Sequence[bool]) -> tuple[int, int]:
    """``(lost, gained)``: items right under the reference and wrong under the candidate, and
    the other way round (McNemar's b and c)."""
    if len(reference) != len(candidate):
        raise ValueError(f"paired samples must have the same length, got {len(reference)} and {len(candidate)}")
    lost = sum(1 for r, c in zip(reference, candidate) if r and not c)
    gained = sum(1 for r, c in zip(reference, candidate) if c and not r)
    return lost, gained


def mcnemar_exact(lost: int, gained: int) -> float:
    """Exact two-sided McNemar p-value: under "no effect" each of the ``n = lost + gained``
    discordant pairs goes either way with probability 1/2, so
    ``p = min(1, 2 * P(Binomial(n, 1/2) <= min(lost, gained)))``; 1.0 when n = 0."""
    for name, v in (("lost", lost), ("gained", gained)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    n = lost + gained
    if n == 0:
        return 1.0
    k = min(lost, gained)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


# ---------------------------------------------------------------- score intervals


def z_of(level: float) -> float:
    """The standard normal quantile of a two-sided ``level`` interval (1.96 at 0.95)."""
    _check_level(level, 1)
    return statistics.NormalDist().inv_cdf(0.5 + level / 2.0)


def wilson_ci(k: int, n: int, level: float = LEVEL) -> Optional[tuple[float, float]]:
    """Wilson score interval of a proportion ``k / n`` (None for n = 0). Unlike a bootstrap it is
    not empty at 0 or n successes: all of 4 agreeing gives [0.51, 1] at 95%, of 400 [0.990, 1]."""
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return None
    z = z_of(level)
    centre = (k + z * z / 2.0) / (n + z * z)
    half = z * math.sqrt(k * (n - k) / n + z * z / 4.0) / (n + z * z)
    return (max(0.0, centre - half), min(1.0, centre + half))


def paired_proportion_diff_ci(lost: int, gained: int, n: int, level: float = LEVEL) -> Optional[tuple[float, float]]:
    """Tango's score interval (Stat. Med. 1998) of ``p(candidate right) - p(reference right)`` over
    ``n`` paired binary outcomes, of which ``lost`` are right only under the reference and ``gained``
    right only under the candidate; None for n = 0.

    The interval is every difference d that a score test does not reject: with ``p`` the maximum-
    likelihood probability of a lost pair under the constraint that the difference is d,
    ``|gained - lost - n d| <= z sqrt(n (2p + d - d^2))``. It is the recommended interval for paired
    proportions where discordant pairs are few (Fagerland, Lydersen and Laake, 2013), and unlike a
    bootstrap it has a width when there are none: with no discordant pair among n it is
    ``+-z^2 / (n + z^2)`` (0.49 at n = 4, 0.037 at n = 100, at 95%)."""
    for name, v in (("lost", lost), ("gained", gained), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
    if lost + gained > n:
        raise ValueError(f"lost + gained must be <= n, got {lost} + {gained} > {n}")
    if n == 0:
        return None
    z = z_of(level)
    b, c = gained, lost
    observed = (b - c) / n

    def score(d: float) -> float:
        # the constrained MLE of p(lost) solves 2n p^2 - B p - c d (1 - d) = 0 (its positive root)
        big_b = (b + c) - d * (2 * n - b + c)
        p = (big_b + math.sqrt(max(0.0, big_b * big_b + 8.0 * n * c * d * (1.0 - d)))) / (4.0 * n)
        var = n * (2.0 * p + d - d * d)
        num = b - c - n * d
        if var <= 1e-300:
            return 0.0 if abs(num) < 1e-12 else math.copysign(math.inf, num)
        return num / math.sqrt(var)

    def bound(lo: float, hi: float, target: float) -> float:
        # score() decreases in d: bisect for score(d) = target on [lo, hi]
        for _ in range(200):
            mid = (lo + hi) / 2.0
            if score(mid) > target:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2.0

    lower = -1.0 if score(-1.0 + 1e-12) <= z else bound(-1.0 + 1e-12, observed, z)
    upper = 1.0 if score(1.0 - 1e-12) >= -z else bound(observed, 1.0 - 1e-12, -z)
    return (lower, upper)
