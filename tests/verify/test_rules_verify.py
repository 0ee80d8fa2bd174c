"""Every rule (asd, local, margin, threshold, fly, fly-bounded) in the batched verifier == the pure reference, row by
row, each row under its own rule in one batch; every rule with budget 0 or its gate 0 == strict."""

from __future__ import annotations

import math
import random

import pytest
import torch
from reference_oracle import node_margins, node_regrets, reference_outputs, rule_ids

from sglang_asd.policy import RULE_NAMES, RULES
from sglang_asd.testing import make_round, sglang_strict_result
from sglang_asd.verify import asd_verify
from sglang_asd.verify.rules import rows_on

FIELDS = ["predict", "accept_index", "num_correct_drafts", "spent", "num_exceptions", "exception_mask",
          "exception_regret", "target_token", "num_suffix_tokens"]


def with_rules(rnd, seed, rules=None):
    """Give every row a rule (random unless given) and a gate that suits it: margin and threshold
    rows get per-token limits on the 1/8 grid, so that exact boundaries occur."""
    rng = random.Random(seed)
    bs = rnd.candidates.shape[0]
    rules = rules or [rng.choice(RULE_NAMES) for _ in range(bs)]
    gate = rnd.gate.clone()
    cap = rnd.cap.clone()
    for b, r in enumerate(rules):
        if r in ("margin", "threshold") and gate[b] > 0:
            gate[b] = rng.choice([0.125, 0.25, 0.5, 1.0, 2.0])
        if RULES[r].deferred:  # fly: an entropy threshold (top-3 entropy is at most ln 3) and a window
            gate[b] = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])
            cap[b] = rng.choice([0, 1, 1, 2, 3])
    rnd.gate, rnd.cap = gate, cap
    return rules


def check(rnd, rules, target_predict=None, tree_depth_gate=False, exact_floats=True, rules_present=None,
          fly_top_k=None):
    args, kwargs = rnd.args(target_predict=target_predict)
    out = asd_verify(*args, **kwargs, rule=rule_ids(rules), rules_present=rules_present,
                     tree_depth_gate=tree_depth_gate, fly_top_k=fly_top_k)
    expected = reference_outputs(rnd, target_predict, rules=rules, tree_depth_gate=tree_depth_gate,
                                 fly_top_k=fly_top_k)
    for name in FIELDS:
        got, want = getattr(out, name), expected[name]
        assert got.dtype == want.dtype, name
        if name in ("spent", "exception_regret") and not exact_floats:
            torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
            continue
        if not torch.equal(got, want):
            bs = rnd.candidates.shape[0]
            rows = (got != want).reshape(bs, -1).any(-1).nonzero().flatten()[:5].tolist()
            raise AssertionError(f"{name} differs at rows {rows} (rules {[rules[r] for r in rows]}): "
                                 f"{got.reshape(bs, -1)[rows]} != {want.reshape(bs, -1)[rows]}")
    return out


CONFIGS = [
    ("chain", 0, 1, 1),
    ("chain", 3, 4, 1),
    ("chain", 6, 7, 1),
    ("eagle", 4, 8, 4),
    ("eagle", 5, 10, 3),
    ("random", 4, 9, 0),
    ("random", 2, 12, 0),
]


@pytest.mark.parametrize("shape,K,W,topk", CONFIGS)
def test_mixed_rules_equal_reference_on_grid_logits(shape, K, W, topk):
    exceptions = {r: 0 for r in RULE_NAMES}
    for seed in range(25):
        rnd = make_round(seed=seed, bs=64, W=W, K=K, shape=shape, topk=topk, masked=0.1)
        rules = with_rules(rnd, seed)
        out = check(rnd, rules)
        for b, r in enumerate(rules):
            exceptions[r] += int(out.num_exceptions[b])
    if K >= 3:  # every rule actually admitted exceptions (the agreement is not vacuous)
        assert all(n > 0 for n in exceptions.values()), exceptions


@pytest.mark.parametrize("shape,K,W,topk", [("chain", 5, 6, 1), ("eagle", 5, 10, 3)])
def test_mixed_rules_equal_reference_on_continuous_logits(shape, K, W, topk):
    for seed in range(15):
        rnd = make_round(seed=4000 + seed, bs=64, W=W, K=K, V=50, shape=shape, topk=topk, logits="normal")
        check(rnd, with_rules(rnd, seed), exact_floats=False)


def test_mixed_rules_with_hard_logits_and_caller_target_predict():
    """NaN and all -inf rows; and a given target_predict that is not always the argmax (regret and
    margin are then measured against it, clamped at 0). Not both at once: the oracle's log-softmax
    makes a whole row NaN where the verifier's logit gap is defined between two finite logits."""
    for seed in range(10):
        rnd = make_round(seed=5000 + seed, bs=64, W=8, K=4, shape="eagle", topk=3, logits="hard")
        check(rnd, with_rules(rnd, seed))
        rnd = make_round(seed=5500 + seed, bs=64, W=8, K=4, shape="eagle", topk=3)
        rules = with_rules(rnd, seed)
        gen = torch.Generator().manual_seed(seed)
        tp = rnd.logits.argmax(-1).view(64, 8)
        tp = torch.where(torch.rand(tp.shape, generator=gen) < 0.2, torch.randint(0, 12, tp.shape, generator=gen), tp)
        check(rnd, rules, target_predict=tp.int())


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_each_rule_alone_and_rules_present_narrowed(rule):
    """A batch of one rule, told so (``rules_present``): the same decisions as without the hint."""
    for seed in range(8):
        rnd = make_round(seed=6000 + seed, bs=64, W=10, K=5, shape="eagle", topk=3)
        rules = with_rules(rnd, seed, rules=[rule] * 64)
        check(rnd, rules, rules_present={rule})


@pytest.mark.parametrize("rule", RULE_NAMES)
@pytest.mark.parametrize("shape,K,W,topk", [("chain", 4, 5, 1), ("eagle", 5, 10, 3), ("random", 3, 10, 0)])
def test_budget_zero_or_gate_zero_is_strict_for_every_rule(rule, shape, K, W, topk):
    """Budget 0, or the rule's gate (g, margin, threshold) 0, or (asd, local) cap 0: SGLang's
    strict greedy verify bit for bit, even for regret-0 ties."""
    for seed in range(10):
        rnd = make_round(seed=7000 + seed, bs=48, W=W, K=K, shape=shape, topk=topk, rows="strict")
        if rule in ("margin", "threshold"):  # cap does not switch these rules off: zero B or the gate
            rnd.cap = torch.full_like(rnd.cap, 2)
            off = torch.arange(48) % 2 == 0
            rnd.remaining = torch.where(off, 0.0, 8.0)
            rnd.gate = torch.where(off, 1.0, 0.0)
        if RULES[rule].deferred:  # fly: only B 0 switches it off (threshold 0 is its loosest setting)
            rnd.cap = torch.full_like(rnd.cap, 1)
            rnd.remaining = torch.zeros_like(rnd.remaining)
        assert not rows_on(rnd.remaining, rnd.gate, rnd.cap, rule_ids([rule] * 48)).any()
        args, kwargs = rnd.args()
        out = asd_verify(*args, **kwargs, rule=rule_ids([rule] * 48))
        want = sglang_strict_result(*rnd.strict_links())
        assert torch.equal(out.predict, want[0]) and torch.equal(out.accept_index, want[1])
        assert torch.equal(out.num_correct_drafts, want[2])
        assert not out.exception_mask.any() and not out.spent.any()


@pytest.mark.parametrize("rule", [r for r in RULE_NAMES if not RULES[r].deferred])  # fly: test_fly_verify.py
def test_stop_tokens_and_masked_tokens_are_never_exceptions_under_any_rule(rule):
    bs, K, V = 8, 4, 16
    W = K + 1
    logits = torch.zeros(bs * W, V)
    logits[:, 0] = 0.01  # argmax 0; token 5 masked; token 7 a stop token; token 9 a runner-up near tie
    logits[:, 5] = -math.inf
    candidates = torch.tensor([[0, 5, 5, 5, 5], [0, 7, 7, 7, 7], [0, 9, 9, 9, 9], [0, 9, 5, 9, 9]] * 2)
    next_token = torch.tensor([[1, 2, 3, 4, -1]] * bs)
    next_sibling = torch.full((bs, W), -1)
    huge = torch.full((bs,), 1e30)
    out = asd_verify(candidates, logits, next_token, next_sibling, huge, huge, torch.full((bs,), 99, dtype=torch.int32),
                     K, stop_tokens=torch.tensor([[7, -1]] * bs), rule=rule_ids([rule] * bs))
    assert out.num_correct_drafts.tolist() == [0, 0, 4, 1] * 2
    assert torch.isfinite(out.spent).all()


def test_margin_accepts_only_the_runner_up_and_threshold_any_token_within_it():
    """One position, logits z = [2, 1.5, 1.5, 1, 0] (argmax 0; tokens 1 and 2 tie for second:
    both are runner-ups, margin 0.5). Draft 1, 2 (regret 0.5) and 3 (regret 1): margin 0.5 takes 1
    and 2; threshold 0.5 takes 1 and 2; threshold 1 also 3; margin 1 still not 3 (not a runner-up)."""
    z = torch.tensor([2.0, 1.5, 1.5, 1.0, 0.0])
    logits = z.repeat(2 * 3, 1)  # bs 3, W 2
    candidates = torch.tensor([[0, 1], [0, 2], [0, 3]])
    links = torch.tensor([[1, -1]] * 3), torch.full((3, 2), -1)
    one = torch.ones(3)

    def accepted(rule, limit):
        out = asd_verify(candidates, logits, *links, one, torch.full((3,), limit), torch.zeros(3, dtype=torch.int32),
                         1, rule=rule_ids([rule] * 3))
        return out.num_correct_drafts.tolist()

    assert accepted("margin", 0.5) == [1, 1, 0]
    assert accepted("margin", 1.0) == [1, 1, 0]
    assert accepted("margin", 0.375) == [0, 0, 0]
    assert accepted("threshold", 0.5) == [1, 1, 0]
    assert accepted("threshold", 1.0) == [1, 1, 1]


def test_local_resets_its_limit_every_block_and_asd_does_not():
    """Per round regret 0.5 on every row, budget 1: asd stops after two rounds (its ledger is
    spent), local keeps accepting (the seam never charges it; ``remaining`` stays B)."""
    logits = torch.tensor([[1.0, 0.5, 0.0]]).repeat(4, 1)  # bs 2, W 2: argmax 0, token 1 regret 0.5
    candidates = torch.tensor([[0, 1], [0, 1]])
    links = torch.tensor([[1, -1]] * 2), torch.full((2, 2), -1)
    budget = torch.ones(2)
    remaining = budget.clone()
    rules = rule_ids(["asd", "local"])
    accepted = []
    for _ in range(4):
        out = asd_verify(candidates, logits, *links, remaining, torch.ones(2), torch.full((2,), 2, dtype=torch.int32),
                         1, rule=rules)
        accepted.append(out.num_correct_drafts.tolist())
        remaining = torch.where(rules == 0, remaining - out.spent, budget)  # what the seam charges
    assert accepted == [[1, 1], [1, 1], [0, 1], [0, 1]]


def test_regrets_and_margins_of_the_oracle_agree_with_the_verifier_route():
    """The oracle's float64 log-softmax margins equal the verifier's logit margins on the grid
    (so the runner-up test compares like with like)."""
    from sglang_asd.verify.torch_verify import _target_margin

    rnd = make_round(seed=3, bs=32, W=6, K=5, shape="chain")
    tp = rnd.logits.argmax(-1).view(32, 6)
    finite = torch.isfinite(rnd.logits).all(-1).view(32, 6)
    ours = _target_margin(rnd.logits, tp)
    theirs = torch.tensor(node_margins(rnd, tp))
    assert torch.equal(ours[finite], theirs[finite])
    assert len(node_regrets(rnd, tp)) == 32


# --- NGRAM's gate depth (issue 9): q_i = (the tree's real depth) - i, not K - i ---------------------


def bushy_ngram_round(rule="asd"):
    """An NGRAM-shaped round (W = 8, K = W - 1 = 7, SGLang's loop bound) whose tree is bushy: the
    root has five children, two of which have one child each, so the real depth is 2 < K. Node 1
    (depth 1, draft position 0) is a mismatch with regret 1 under the root's logits; its child
    node 6 is exact. Gate 0.25: with K = 7, q_0 = 7 and 1/7 <= 0.25 passes; with the real depth 2,
    q_0 = 2 and 1/2 > 0.25 fails."""
    parents = [-1, 0, 0, 0, 0, 0, 1, 2]
    V, W, K = 8, 8, 7
    logits = torch.zeros(W, V)
    logits[:, 0] = 1.0  # argmax 0 everywhere: token 3 has regret 1
    candidates = torch.tensor([[0, 3, 5, 6, 7, 2, 0, 4]])
    from sglang_asd.testing import sglang_links

    nt, ns = sglang_links(parents)
    args = (candidates, logits, torch.tensor([nt]), torch.tensor([ns]), torch.tensor([8.0]), torch.tensor([0.25]),
            torch.tensor([2], dtype=torch.int32), K)
    return parents, args, rule_ids([rule])


@pytest.mark.parametrize("rule", ["asd", "local"])
def test_ngram_gate_uses_the_real_tree_depth(rule):
    """Fails before issue 9's fix: with K = draft_token_num - 1 the exception passes the gate."""
    from sglang_asd.policy import ASDConfig, Ledger, RULES, select_tree, tree_depth

    parents, args, rules = bushy_ngram_round(rule)
    assert tree_depth(parents, 7) == 2
    loose = asd_verify(*args, rule=rules)
    real = asd_verify(*args, rule=rules, tree_depth_gate=True)
    assert loose.num_correct_drafts.tolist() == [2] and loose.num_exceptions.tolist() == [1]
    assert real.num_correct_drafts.tolist() == [0] and real.num_exceptions.tolist() == [0]
    # the pure reference says the same
    tokens = args[0][0].tolist()
    tp, regret = [0] * 8, [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    for gate_depth, n in ((None, 2), (2, 0)):
        d = select_tree(tokens, parents, tp, regret, 7, Ledger(8.0, bounded=RULES[rule].ledger),
                        ASDConfig(0.25, 2, rule=rule), gate_depth=gate_depth)
        assert len(d.path) == n


@pytest.mark.parametrize("shape,K,W", [("random", 7, 8), ("random", 5, 12), ("chain", 4, 5)])
def test_tree_depth_gate_equals_reference(shape, K, W):
    """Random (NGRAM-like) trees, mixed rules, nodes outside the tree: the verifier's per-row tree
    depth == the reference's ``tree_depth``; on chains the tree depth is K (no change)."""
    for seed in range(20):
        rnd = make_round(seed=8000 + seed, bs=64, W=W, K=K, shape=shape, orphans=0.1 if shape == "random" else 0.0)
        check(rnd, with_rules(rnd, seed), tree_depth_gate=True)
