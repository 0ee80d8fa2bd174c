"""The asd-sampled rule in pure Python: config validation, the KL charge against a direct sum over
the vocabulary, the relaxed-child choice, the ledger, and spent <= budget over many blocks."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_asd.policy.sampled import (
    KLLedger,
    SampledConfig,
    accept_probability,
    binary_kl,
    choose_relaxed_child,
)
from sglang_asd.policy.sampled_walk import committed_distribution, kl_divergence, sample_block


@pytest.mark.parametrize("field,value,message", [
    ("floor", 1.5, "asd_sampled_floor must be in (0, 1], got 1.5"),
    ("floor", 0, "asd_sampled_floor must be in (0, 1], got 0"),
    ("floor", float("nan"), "asd_sampled_floor must be in (0, 1], got nan"),
    ("floor", True, "asd_sampled_floor must be in (0, 1], got True"),
    ("power", 1.0, "asd_sampled_power must be in [0, 1), got 1.0"),
    ("power", -0.1, "asd_sampled_power must be in [0, 1), got -0.1"),
    ("power", "0.5", "asd_sampled_power must be in [0, 1), got '0.5'"),
    ("max_relaxed_per_block", -1, "asd_sampled_max_relaxed_per_block must be an integer >= 0, got -1"),
    ("max_relaxed_per_block", 1.0, "asd_sampled_max_relaxed_per_block must be an integer >= 0, got 1.0"),
])
def test_config_rejects_with_field_and_value(field, value, message):
    with pytest.raises(ValueError) as err:
        SampledConfig(**{field: value})
    assert str(err.value) == message


def test_config_from_mapping_is_strict():
    assert SampledConfig.from_mapping({"floor": 0.5, "power": 0.25}) == SampledConfig(0.5, 0.25, 2)
    with pytest.raises(ValueError, match="unknown sampled ASD setting"):
        SampledConfig.from_mapping({"flor": 0.5})
    assert SampledConfig().parameters() == {"rule": "asd-sampled", "version": "asd-sampled-1", "floor": 0.3,
                                            "power": 0.5, "max_relaxed_per_block": 2}


@pytest.mark.parametrize("seed", range(20))
def test_charge_is_kl_over_the_vocabulary(seed):
    rng = random.Random(seed)
    V = rng.randrange(2, 9)
    weights = [rng.random() ** 3 for _ in range(V)]
    p = [w / sum(weights) for w in weights]
    x = max(range(V), key=lambda v: p[v])
    for power in (0.0, 0.3, 0.7, 0.95):
        a = accept_probability(p[x], power)
        if p[x] == 1:
            continue
        direct = kl_divergence(committed_distribution(p, x, a), p)
        assert binary_kl(a, p[x]) == pytest.approx(direct, rel=1e-9, abs=1e-15)
    assert binary_kl(1.0, p[x]) == pytest.approx(-math.log(p[x]))
    assert binary_kl(p[x], p[x]) == 0.0


def test_binary_kl_domain():
    with pytest.raises(ValueError):
        binary_kl(0.2, 0.5)  # a < q is not a relaxation
    with pytest.raises(ValueError):
        binary_kl(1.0, 0.0)


FULL = SampledConfig(power=0.0)  # a = 1: charge -log q


def _choose(children, remaining=8.0, block_charge=0.0, relaxed_before=0, config=FULL, stops=frozenset()):
    return choose_relaxed_child(children, remaining=remaining, block_charge=block_charge,
                                relaxed_before=relaxed_before, config=config, stop_tokens=stops)


def test_choice_takes_the_largest_q_above_the_floor():
    children = [(1, 10, 0.2), (2, 11, 0.45), (3, 12, 0.3)]
    k, a, charge = _choose(children)
    assert (k, a) == (1, 1.0) and charge == pytest.approx(-math.log(0.45))
    assert _choose([(1, 10, 0.4), (2, 11, 0.4)])[0] == 0  # ties: first in sibling order
    assert _choose(children, stops={11})[0] == 2  # never into a stop token
    assert _choose([(1, 10, 0.2)]) is None  # below the floor
    assert _choose([(1, 10, 0.0)], config=SampledConfig(floor=1e-9, power=0.0)) is None  # masked (p = 0)
    assert _choose([(1, 10, 1.0)]) is None  # q = 1: a = q, nothing to relax
    assert _choose([(1, 10, 0.5), (2, 11, 0.3), (3, 10, 0.1)]) is None  # a shared token


def test_choice_respects_cap_and_budget():
    children = [(1, 10, 0.5)]
    assert _choose(children, relaxed_before=2) is None
    assert _choose(children, config=SampledConfig(power=0.0, max_relaxed_per_block=0)) is None
    assert _choose(children, remaining=0.0) is None
    assert _choose(children, remaining=0.69) is None  # -log 0.5 = 0.693
    assert _choose(children, remaining=1.0, block_charge=0.4) is None
    assert _choose(children, remaining=0.7) is not None


def test_ledger_books_and_refuses_overdraft():
    ledger = KLLedger(1.0)
    with pytest.raises(ValueError, match="asd_budget must be a finite number >= 0, got -1"):
        KLLedger(-1)
    from sglang_asd.policy.sampled import RelaxedNode

    assert ledger.charge([RelaxedNode(0, 1, 5, 0.5, 1.0, 0.6, True)]) == 0.6
    with pytest.raises(ValueError, match="exceeds the remaining budget"):
        ledger.charge([RelaxedNode(1, 2, 6, 0.5, 1.0, 0.6, False)])
    assert ledger.spent == 0.6 and len(ledger.relaxed) == 1


def _chain_block(rng, K, V):
    weights = [[rng.random() ** 2 for _ in range(V)] for _ in range(K + 1)]
    probs = [[w / sum(row) for w in row] for row in weights]
    tokens = [0] + [max(range(V), key=lambda v: probs[i][v]) if rng.random() < 0.7 else rng.randrange(V)
                    for i in range(K)]
    next_token = list(range(1, K + 1)) + [-1]
    return tokens, next_token, [-1] * (K + 1), probs, [rng.random() for _ in range(K + 1)], rng.random()


@settings(max_examples=200, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), budget=st.floats(0, 5), floor=st.floats(0.05, 1), power=st.floats(0, 0.99),
       cap=st.integers(0, 4))
def test_spent_never_exceeds_the_budget(seed, budget, floor, power, cap):
    rng = random.Random(seed)
    ledger = KLLedger(budget)
    config = SampledConfig(floor=floor, power=power, max_relaxed_per_block=cap)
    for _ in range(8):
        K = rng.randrange(0, 5)
        decision = sample_block(*_chain_block(rng, K, 5), K, ledger, config)
        assert len(decision.relaxed) <= cap
        assert all(r.q >= floor * (1 - 1e-6) and r.accept_prob > r.q for r in decision.relaxed)
        assert ledger.spent <= ledger.budget
    assert ledger.spent == pytest.approx(sum(r.charge for r in ledger.relaxed), abs=1e-9)


def test_budget_zero_walk_accepts_with_probability_q():
    """A one-token chain, budget 0: x accepted iff coin < q; budget 8: always (a = 1)."""
    probs = [[0.1, 0.6, 0.3], [0.2, 0.2, 0.6]]
    for coin, budget, accepted in [(0.59, 0.0, True), (0.61, 0.0, False), (0.99, 8.0, True)]:
        decision = sample_block([0, 1], [1, -1], [-1, -1], probs, [coin, 0.5], 0.5, 1, KLLedger(budget), FULL)
        assert decision.accepted == ((1,) if accepted else ())
        if not accepted:
            assert decision.bonus != 1  # the bonus is drawn from p without the rejected token
