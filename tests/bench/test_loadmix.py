import random

import pytest

from sglang_asd.bench.client import parse_budgets
from sglang_asd.bench.loadmix import budget_value, choice_of, parse_mix, pick


def test_parse_budget_mix():
    assert parse_mix("0:0.5,8:0.5", budget_value, "--budget-mix") == [(0.0, 0.5), (8.0, 0.5)]
    assert parse_mix("0, 8:3", budget_value, "--budget-mix") == [(0.0, 1.0), (8.0, 3.0)]


@pytest.mark.parametrize("spec,needle", [
    ("-1:1", "got -1"), ("x:1", "bad entry 'x:1'"), ("0:-2", "got '-2'"), ("0:0", "positive weight"),
    ("", "positive weight"), ("inf:1", "bad entry"),
])
def test_parse_budget_mix_errors(spec, needle):
    with pytest.raises(ValueError, match=needle):
        parse_mix(spec, budget_value, "--budget-mix")


def test_api_mix_rejects_unknown_route():
    with pytest.raises(ValueError, match="must be one of"):
        parse_mix("generate:1,foo:1", choice_of(("generate", "chat")), "--api-mix")


def test_pick_follows_weights():
    rng = random.Random(0)
    mix = [(0.0, 0.9), (8.0, 0.1)]
    draws = [pick(rng, mix) for _ in range(2000)]
    assert 0.85 < draws.count(0.0) / len(draws) < 0.95


def test_parse_budgets():
    assert parse_budgets("0,2,8,2") == [0.0, 2.0, 8.0]
    for bad in ("-1", "a", "", "nan", "inf"):
        with pytest.raises(ValueError, match="budgets"):
            parse_budgets(bad)
