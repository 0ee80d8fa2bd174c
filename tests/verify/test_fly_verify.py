"""FLy (``asd_rule: fly`` / ``fly-bounded``): its entropy, its window, and the batched verifier
against the pure reference computed vLLM's way (``policy.fly.select_chain_fly``) on chains and
path by path (``select_tree_fly``) on trees."""

from __future__ import annotations

import math
import random

import pytest
import torch
from reference_oracle import fly_entropies, node_regrets, rule_ids
from test_rules_verify import check, with_rules

from sglang_asd.policy import ASDConfig, Ledger
from sglang_asd.policy.fly import fly_window, select_chain_fly, select_tree_fly, top_k_entropy
from sglang_asd.testing import make_round
from sglang_asd.verify import asd_verify
from sglang_asd.verify.rules import rows_on
from sglang_asd.verify.torch_verify import _top_k_entropy


def test_entropy_is_the_top_k_of_the_full_softmax_not_renormalised():
    """z = log [0.4, 0.3, 0.2, 0.1]: top-3 entropy -(0.4 ln 0.4 + 0.3 ln 0.3 + 0.2 ln 0.2), the
    0.1 left out and the three not renormalised; top-1 is -0.4 ln 0.4."""
    p = [0.4, 0.3, 0.2, 0.1]
    z = [math.log(x) for x in p]
    want3 = -sum(x * math.log(x) for x in p[:3])
    assert top_k_entropy(z, 3) == pytest.approx(want3, abs=1e-12)
    assert top_k_entropy(z, 1) == pytest.approx(-0.4 * math.log(0.4), abs=1e-12)
    got = _top_k_entropy(torch.tensor([z, z]), torch.tensor([3, 1]))
    assert got[:, 0].tolist() == pytest.approx([want3, -0.4 * math.log(0.4)], abs=1e-6)


def test_batched_entropy_equals_the_float64_definition():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 40, generator=gen) * 3
    logits[3, :5] = -math.inf
    top_k = torch.randint(1, 9, (16,), generator=gen)
    got = _top_k_entropy(logits, top_k).view(-1)  # [16 rows of 4 nodes]
    want = [top_k_entropy(row.tolist(), int(top_k[i // 4])) for i, row in enumerate(logits.double())]
    assert got.tolist() == pytest.approx(want, abs=1e-5)


def test_default_window_is_min_6_k_minus_1_at_least_1():
    assert [fly_window(0, k) for k in (1, 2, 4, 7, 8, 16)] == [1, 1, 3, 6, 6, 6]
    assert fly_window(2, 8) == 2


def _chain(seed, K, V=8):
    rng = random.Random(seed)
    argmax = [rng.randrange(V) for _ in range(K + 1)]
    draft = [a if rng.random() < 0.6 else rng.randrange(V) for a in argmax[:K]]
    regret = [0.0 if d == a else rng.choice([0.25, 0.5, 1.0, math.inf]) for d, a in zip(draft, argmax)]
    entropy = [rng.choice([0.1, 0.3, 0.5, 1.0]) for _ in range(K + 1)]
    stops = frozenset({rng.randrange(V)}) if rng.random() < 0.3 else frozenset()
    return draft, argmax, regret, entropy, stops


@pytest.mark.parametrize("rule", ["fly", "fly-bounded"])
def test_the_path_rule_equals_vllms_prepass_on_chains(rule):
    """``select_tree_fly`` (paths) == ``select_chain_fly`` (vLLM's pre-pass, then the greedy walk)."""
    deferred = 0
    for seed in range(3000):
        rng = random.Random(-seed)
        K = rng.randrange(1, 9)
        draft, argmax, regret, entropy, stops = _chain(seed, K)
        config = ASDConfig(rule=rule, fly_entropy_threshold=rng.choice([0.0, 0.3, 0.5]),
                           fly_window_size=rng.choice([0, 1, 2, 3]))
        budget = rng.choice([0.0, 0.3, 1.0, 8.0])
        bounded = rule == "fly-bounded"
        a = select_chain_fly(draft, argmax, regret, entropy, Ledger(budget, bounded=bounded), config, stops)
        b = select_tree_fly([0] + draft, list(range(-1, K)), argmax, [0.0] + regret, entropy, K,
                            Ledger(budget, bounded=bounded), config, stops)
        assert (a.accepted, a.exceptions, a.bonus) == (b.accepted, b.exceptions, b.bonus), seed
        assert a.spent == b.spent
        if bounded:
            assert a.spent <= budget
        deferred += len(a.exceptions)
    assert deferred > 100


def test_window_semantics_by_hand():
    """K = 5, window 2. A mismatch at 0 followed by two exact tokens is deferred; one followed by a
    second mismatch inside its window is not (the block ends at it); a mismatch whose window would
    run past the block's end (position 3 or 4 here) is never deferred; entropy == threshold passes."""
    argmax = [1, 1, 1, 1, 1, 1]
    config = ASDConfig(rule="fly", fly_entropy_threshold=0.5, fly_window_size=2)
    high = [0.5] * 6

    def accepted(draft, entropy=high):
        regret = [0.0 if d == 1 else 0.7 for d in draft]
        return select_chain_fly(draft, argmax, regret, entropy, Ledger(1.0, bounded=False), config).accepted

    assert accepted([2, 1, 1, 1, 1]) == (2, 1, 1, 1, 1)
    assert accepted([2, 1, 2, 1, 1]) == ()  # the second mismatch sits in the first one's window
    assert accepted([2, 1, 1, 2, 1]) == (2, 1, 1)  # position 3: 3 + 2 >= K, its window does not fit
    assert accepted([2, 1, 1, 1, 2]) == (2, 1, 1, 1)
    assert accepted([2, 1, 1, 1, 1], [0.49] + high[1:]) == ()  # entropy below the threshold
    # Two deferrals in one block, W exact tokens apart (K = 7: positions 0 and 3).
    argmax7 = [1] * 8
    draft = [2, 1, 1, 2, 1, 1, 1]
    d = select_chain_fly(draft, argmax7, [0.0 if t == 1 else 0.7 for t in draft], [0.5] * 8,
                         Ledger(1.0, bounded=False), config)
    assert d.accepted == tuple(draft) and d.exceptions == (0, 3) and d.spent == pytest.approx(1.4)


def test_fly_bounded_stops_where_the_ledger_would_be_passed():
    argmax = [1] * 8
    draft = [2, 1, 1, 2, 1, 1, 1]
    regret = [0.0 if t == 1 else 0.7 for t in draft]
    config = ASDConfig(rule="fly-bounded", fly_entropy_threshold=0.0, fly_window_size=2)
    ledger = Ledger(1.0, bounded=True)
    d = select_chain_fly(draft, argmax, regret, [1.0] * 8, ledger, config)
    assert d.accepted == (2, 1, 1) and d.spent == pytest.approx(0.7) and ledger.remaining == pytest.approx(0.3)


def _fly_rounds(shape, K, W, topk, seeds, **kw):
    for seed in seeds:
        rnd = make_round(seed=seed, bs=64, W=W, K=K, shape=shape, topk=topk, **kw)
        rules = with_rules(rnd, seed, rules=[random.Random(seed).choice(["fly", "fly-bounded", "asd"])
                                             for _ in range(64)])
        yield rnd, rules


@pytest.mark.parametrize("shape,K,W,topk", [("chain", 4, 5, 1), ("chain", 7, 8, 1), ("eagle", 5, 10, 3),
                                            ("random", 4, 12, 0)])
def test_batched_verifier_equals_the_reference_with_per_row_top_k(shape, K, W, topk):
    deferred = 0
    for rnd, rules in _fly_rounds(shape, K, W, topk, range(9000, 9015)):
        top_k = torch.tensor([random.Random(b).choice([1, 2, 3, 5, 32]) for b in range(64)])
        out = check(rnd, rules, fly_top_k=top_k, rules_present={"fly", "fly-bounded", "asd"})
        deferred += int(out.num_exceptions[torch.tensor([r != "asd" for r in rules])].sum())
    assert deferred > 20


def test_batched_chain_equals_vllms_prepass():
    """Chains: the verifier's accepted length, exceptions and spend == ``select_chain_fly``."""
    K = 6
    for seed in range(12):
        rnd = make_round(seed=9500 + seed, bs=64, W=K + 1, K=K, shape="chain", topk=1)
        rules = with_rules(rnd, seed, rules=["fly" if b % 2 else "fly-bounded" for b in range(64)])
        args, kwargs = rnd.args()
        out = asd_verify(*args, **kwargs, rule=rule_ids(rules))
        tp = rnd.logits.argmax(-1).view(64, K + 1)
        regrets, entropies = node_regrets(rnd, tp), fly_entropies(rnd)
        for b in range(64):
            config = ASDConfig(rule=rules[b], fly_entropy_threshold=float(rnd.gate[b]),
                               fly_window_size=int(rnd.cap[b]))
            d = select_chain_fly(rnd.candidates[b, 1:].tolist(), tp[b].tolist(), regrets[b][1:], entropies[b],
                                 Ledger(float(rnd.remaining[b]), bounded=rules[b] == "fly-bounded"), config,
                                 frozenset(rnd.stop_tokens[b].tolist()) - {-1})
            assert int(out.num_correct_drafts[b]) == len(d.accepted), (seed, b)
            assert out.exception_mask[b].nonzero().flatten().tolist() == list(d.exceptions)
            assert float(out.spent[b]) == pytest.approx(d.spent, rel=1e-6)


def test_stop_and_masked_tokens_are_never_deferred_and_budget_zero_is_strict():
    bs, K, V = 4, 3, 16
    W = K + 1
    logits = torch.zeros(bs * W, V)
    logits[:, 0] = 0.01  # argmax 0, near-uniform: entropy of the top 3 ~ 3 ln(16) / 16 > 0
    logits[:, 5] = -math.inf  # masked
    # rows: 9 deferred (window 2 exact after it); a masked 5; a stop token 7; the row with B = 0
    candidates = torch.tensor([[0, 9, 0, 0], [0, 5, 0, 0], [0, 7, 0, 0], [0, 9, 0, 0]])
    links = torch.tensor([[1, 2, 3, -1]] * bs), torch.full((bs, W), -1)
    remaining = torch.tensor([8.0, 8.0, 8.0, 0.0])
    out = asd_verify(candidates, logits, *links, remaining, torch.zeros(bs), torch.full((bs,), 2, dtype=torch.int32),
                     K, stop_tokens=torch.tensor([[7, -1]] * bs), rule=rule_ids(["fly"] * bs))
    assert out.num_correct_drafts.tolist() == [3, 0, 0, 0]
    assert out.exception_mask[0].tolist() == [True, False, False]
    assert out.exception_regret[0, 0].item() == pytest.approx(0.01)
    assert rows_on(remaining, torch.zeros(bs), torch.zeros(bs, dtype=torch.int32), rule_ids(["fly"] * bs)).tolist() == \
        [True, True, True, False]


def test_tree_prefers_a_path_whose_window_completes():
    """Root argmax 0, children 1 (exact chain of depth 1 only) and 2 (mismatch, then two exact):
    with window 2 the deferral path (depth 3) wins; with window 3 it cannot complete (K = 3)."""
    tokens = [0, 0, 2, 0, 0]
    parents = [-1, 0, 0, 2, 3]
    argmax = [0, 4, 0, 0, 0]  # node 1's child would need 4; node 2's children are exact
    regret = [0.0, 0.0, 0.5, 0.0, 0.0]
    entropy = [1.0] * 5
    for window, path in ((2, (2, 3, 4)), (3, (1,))):
        config = ASDConfig(rule="fly", fly_entropy_threshold=0.3, fly_window_size=window)
        d = select_tree_fly(tokens, parents, argmax, regret, entropy, 3, Ledger(1.0, bounded=False), config)
        assert d.path == path
