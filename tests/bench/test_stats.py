import math

import pytest

from sglang_asd.bench import stats


def test_percentile_matches_linear_interpolation():
    xs = [15, 20, 35, 40, 50]
    assert stats.percentile(xs, 0) == 15
    assert stats.percentile(xs, 100) == 50
    assert stats.percentile(xs, 50) == 35
    assert stats.percentile(xs, 40) == pytest.approx(29.0)  # rank 1.6 -> 20 + 0.6 * 15
    assert stats.percentile(xs, 90) == pytest.approx(46.0)  # rank 3.6 -> 40 + 0.6 * 10
    assert stats.percentile(list(range(1, 101)), 99) == pytest.approx(99.01)


def test_percentile_ignores_order_none_and_nonfinite():
    assert stats.percentile([3, None, 1, float("nan"), 2, float("inf")], 50) == 2
    assert stats.percentile([7], 99) == 7


def test_empty_gives_none_not_zero():
    assert stats.percentile([], 50) is None
    assert stats.percentile([None], 90) is None
    assert stats.mean([]) is None
    s = stats.summarize([])
    assert s["n"] == 0 and s["p50"] is None and s["p99"] is None and s["mean"] is None


def test_percentile_rejects_bad_q():
    with pytest.raises(ValueError, match="got 101"):
        stats.percentile([1, 2], 101)


def test_summarize_keys_and_values():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0])
    assert s == {"n": 4, "mean": 2.5, "min": 1.0, "max": 4.0, "p50": 2.5,
                 "p90": pytest.approx(3.7), "p99": pytest.approx(3.97)}


def test_ratio_and_drift():
    assert stats.ratio(110, 100) == pytest.approx(1.1)
    assert stats.ratio(1, 0) is None and stats.ratio(None, 1) is None
    assert stats.drift(100, 100) == 0
    assert stats.drift(90, 110) == pytest.approx(0.2)
    assert stats.drift(None, 1) is None
    assert math.isclose(stats.median([5, 1, 3]), 3)


# ---------------------------------------------------------------- intervals and tests


@pytest.mark.parametrize("lost,gained,p", [
    (0, 0, 1.0),                 # no discordant pairs: no evidence either way
    (0, 5, 2 / 32),              # 2 * C(5,0) / 2^5 = 0.0625
    (5, 0, 2 / 32),              # symmetric
    (1, 9, 2 * 11 / 1024),       # 2 * (C(10,0) + C(10,1)) / 2^10 = 0.021484375
    (2, 8, 2 * 56 / 1024),       # 2 * (1 + 10 + 45) / 2^10 = 0.109375
    (3, 3, 1.0),                 # 2 * P(X <= 3 | n=6) = 2 * 42/64 > 1 -> capped at 1
    (0, 1, 1.0),                 # 2 * 1/2
    (0, 10, 2 / 1024),
])
def test_mcnemar_exact_hand_computed(lost, gained, p):
    assert stats.mcnemar_exact(lost, gained) == pytest.approx(p, abs=1e-15)


def test_mcnemar_rejects_bad_counts():
    for bad in (-1, 1.5, True, None):
        with pytest.raises(ValueError, match="lost must be an integer >= 0"):
            stats.mcnemar_exact(bad, 1)


def test_discordant_counts_each_direction():
    ref = [True, True, False, False, True]
    cand = [True, False, True, False, False]
    assert stats.discordant(ref, cand) == (2, 1)
    with pytest.raises(ValueError, match="same length, got 2 and 1"):
        stats.discordant([True, False], [True])


def test_bootstrap_degenerate_cases():
    assert stats.bootstrap_ci([]) is None
    assert stats.bootstrap_ci([None, float("nan")]) is None
    assert stats.bootstrap_ci([3.5]) == (3.5, 3.5)
    assert stats.bootstrap_ci([2.0] * 50, "median") == (2.0, 2.0)
    assert stats.paired_diff_ci([], []) is None
    assert stats.paired_diff_ci([1, 0, 1], [1, 0, 1]) == (0.0, 0.0)     # all pairs agree
    assert stats.mean_diff([], []) is None
    with pytest.raises(ValueError, match="statistic must be one of"):
        stats.bootstrap_ci([1.0, 2.0], "mode")
    with pytest.raises(ValueError, match="level must be in"):
        stats.bootstrap_ci([1.0, 2.0], level=1.0)


def test_bootstrap_two_points_known_distribution():
    # resampled mean of [0, 1] is 0 (p=1/4), 0.5 (1/2) or 1 (1/4): the 2.5/97.5 percentiles are 0 and 1
    assert stats.bootstrap_ci([0.0, 1.0]) == (0.0, 1.0)
    # median of three values resamples to min or max with probability 7/27 each: interval = [min, max]
    assert stats.bootstrap_ci([0.9, 1.0, 1.1], "median") == (0.9, 1.1)


def test_bootstrap_mean_matches_normal_theory():
    # 100 Bernoulli items, 50 right: the 95% interval of the mean is about 0.5 +- 1.96 * 0.05
    lo, hi = stats.bootstrap_ci([1.0] * 50 + [0.0] * 50)
    assert lo == pytest.approx(0.402, abs=0.012) and hi == pytest.approx(0.598, abs=0.012)


def test_paired_diff_ci_is_the_interval_of_the_differences():
    ref = [1.0] * 80 + [0.0] * 20
    cand = [1.0] * 70 + [0.0] * 10 + [0.0] * 20     # 10 items lost, none gained: mean diff -0.1
    assert stats.mean_diff(ref, cand) == pytest.approx(-0.1)
    lo, hi = stats.paired_diff_ci(ref, cand)
    # the differences are Bernoulli(0.1) * -1 over 100 items: sd of the mean = 0.03
    assert lo == pytest.approx(-0.16, abs=0.012) and hi == pytest.approx(-0.04, abs=0.012)
    assert hi < 0  # every discordant pair goes one way: the interval excludes 0
    assert stats.mcnemar_exact(*stats.discordant([bool(x) for x in ref], [bool(x) for x in cand])) < 0.01


def test_bootstrap_is_deterministic_and_seeded():
    xs = [0.8, 1.3, 1.1, 0.95, 1.2, 1.05, 0.99, 1.4]
    assert stats.bootstrap_ci(xs, seed=7) == stats.bootstrap_ci(xs, seed=7)
    assert stats.bootstrap_ci(xs, seed=7) != stats.bootstrap_ci(xs, seed=8)
    lo, hi = stats.bootstrap_ci(xs, "gmean")
    assert lo < stats.geometric_mean(xs) < hi


def test_geometric_mean():
    assert stats.geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert stats.geometric_mean([0.5, 2.0]) == pytest.approx(1.0)   # ratios and their inverses cancel
    assert stats.geometric_mean([]) is None
    assert stats.geometric_mean([0.0, -1.0]) is None
