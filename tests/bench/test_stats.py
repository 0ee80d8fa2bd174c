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
