"""Monte-Carlo on a tiny vocabulary: the committed token at a verify node is distributed as p at
budget 0 and as p' = a delta_x + (1 - a) p(. | != x) at a relaxed node, chains and trees (the
relaxed child not first among its siblings). N seeded draws per case; each token's count must lie
within 5 standard deviations sqrt(N p (1 - p)) of N p (a token of probability 0 never appears)."""

from __future__ import annotations

import math

import pytest
import torch

from sglang_asd.policy.sampled_walk import committed_distribution
from sglang_asd.verify.sampled_verify import asd_sampled_verify

N = 100_000
P = [0.05, 0.35, 0.0, 0.4, 0.15, 0.05]  # V = 6, one token cut (top-k / top-p)


def _committed(tokens, power, budget, floor=0.3, seed=0):
    """Draw N verifies of one node (the root) with ``tokens`` as its children; -> [V] counts of
    the token committed right after the root, and the verifier's receipts of row 0."""
    W = len(tokens) + 1
    V = len(P)
    gen = torch.Generator().manual_seed(seed)
    probs = torch.tensor(P, dtype=torch.float32).expand(N, W, V).contiguous()
    next_token = torch.full((N, W), -1, dtype=torch.long)
    next_sibling = torch.full((N, W), -1, dtype=torch.long)
    next_token[:, 0] = 1
    for n in range(1, W - 1):
        next_sibling[:, n] = n + 1
    candidates = torch.tensor([0] + tokens).expand(N, W).contiguous()
    predicts = torch.zeros(N * W, dtype=torch.int32)
    accept_index = torch.full((N, 2), -1, dtype=torch.int32)
    num = torch.empty(N, dtype=torch.int32)
    out = asd_sampled_verify(
        predicts, accept_index, num, candidates, torch.arange(N * W).view(N, W), next_token, next_sibling,
        torch.rand(N, W, generator=gen), torch.rand(N, generator=gen), probs,
        torch.full((N,), budget), torch.full((N,), floor), torch.full((N,), 2, dtype=torch.int32),
        torch.full((N,), power))
    committed = predicts.view(N, W)[:, 0].long()
    return torch.bincount(committed, minlength=V).tolist(), out


def _assert_law(counts, law):
    for v, (c, pv) in enumerate(zip(counts, law)):
        if pv == 0:
            assert c == 0, (v, counts)
            continue
        sigma = math.sqrt(N * pv * (1 - pv))
        assert abs(c - N * pv) <= 5 * sigma + 1, (v, c, N * pv, sigma)


@pytest.mark.parametrize("tokens", [[3], [1], [4, 3, 0], [1, 3, 5]])
def test_budget_zero_commits_p(tokens):
    counts, out = _committed(tokens, power=0.0, budget=0.0)
    assert not out.relaxed.any()
    _assert_law(counts, P)


@pytest.mark.parametrize("power", [0.0, 0.5, 0.8])
@pytest.mark.parametrize("tokens,relaxed", [([3], 3), ([1], 1), ([4, 3, 0], 3), ([1, 3, 5], 3), ([5, 1], 1)])
def test_relaxed_node_commits_p_prime(tokens, relaxed, power):
    counts, out = _committed(tokens, power=power, budget=8.0, seed=1)
    q = P[relaxed]
    a = q ** power
    assert out.relaxed[:, 0].all() and (out.relaxed_token[:, 0] == relaxed).all()  # the largest q above the floor
    assert torch.allclose(out.relaxed_accept_prob[:, 0], torch.tensor(a, dtype=torch.float32))
    _assert_law(counts, committed_distribution(P, relaxed, a))


def test_below_the_floor_or_duplicate_siblings_stay_exact():
    counts, out = _committed([4, 0], power=0.0, budget=8.0)  # q = 0.15, 0.05 < floor 0.3
    assert not out.relaxed.any()
    _assert_law(counts, P)
    _, out = _committed([3, 1, 3], power=0.0, budget=8.0)  # a shared token: never relaxed
    assert not out.relaxed.any()


def test_a_charge_over_the_budget_is_not_taken():
    _, out = _committed([3], power=0.0, budget=-math.log(0.4) * 0.99)  # -log q just over the budget
    assert not out.relaxed.any() and (out.spent == 0).all()
    _, out = _committed([3], power=0.0, budget=-math.log(0.4) * 1.01)
    assert out.relaxed.all() and torch.allclose(out.spent, torch.tensor(-math.log(0.4), dtype=torch.float32))


P_CHAIN = [[0.1, 0.5, 0.2, 0.0, 0.2], [0.3, 0.05, 0.45, 0.15, 0.05], [0.25, 0.25, 0.1, 0.2, 0.2]]  # p at nodes 0, 1, 2
X_CHAIN = [1, 2]  # draft tokens at depths 1, 2: q = 0.5, 0.45


def _block_law(a1, a2):
    """The committed block's law for the 2-token chain: {(tokens...): probability}, a_i = q_i when
    node i - 1 is not relaxed; KL of this law between two settings is the chain rule's sum."""
    (p0, p1, p2), (x1, x2) = P_CHAIN, X_CHAIN
    law = {(b,): (1 - a1) * p0[b] / (1 - p0[x1]) for b in range(5) if b != x1}
    law.update({(x1, b): a1 * (1 - a2) * p1[b] / (1 - p1[x2]) for b in range(5) if b != x2})
    law.update({(x1, x2, b): a1 * a2 * p2[b] for b in range(5)})
    return law


@pytest.mark.parametrize("budget,relaxes_second", [(0.2, True), (0.15, False)])  # charges 0.088, 0.099
def test_two_level_chain_law_and_the_chain_rule(budget, relaxes_second):
    """A 2-token chain (power 0.5): node 0 is relaxed; node 1 only if the budget left after node 0's
    charge covers its own. The empirical law of the committed block matches the analytic one, and
    the block's KL from exact sampling equals the expected charge (the chain rule), <= budget."""
    V, W = 5, 3
    gen = torch.Generator().manual_seed(4)
    probs = torch.tensor(P_CHAIN, dtype=torch.float32).expand(N, W, V).contiguous()
    next_token = torch.tensor([1, 2, -1]).expand(N, W).contiguous()
    candidates = torch.tensor([0] + X_CHAIN).expand(N, W).contiguous()
    predicts = torch.zeros(N * W, dtype=torch.int32)
    accept_index = torch.full((N, W), -1, dtype=torch.int32)
    num = torch.empty(N, dtype=torch.int32)
    out = asd_sampled_verify(
        predicts, accept_index, num, candidates, torch.arange(N * W).view(N, W), next_token,
        torch.full((N, W), -1, dtype=torch.long), torch.rand(N, W, generator=gen), torch.rand(N, generator=gen),
        probs, torch.full((N,), budget), torch.full((N,), 0.3), torch.full((N,), 2, dtype=torch.int32),
        torch.full((N,), 0.5))
    q1, q2 = P_CHAIN[0][X_CHAIN[0]], P_CHAIN[1][X_CHAIN[1]]
    a1, a2 = q1 ** 0.5, (q2 ** 0.5 if relaxes_second else q2)
    assert out.relaxed[:, 0].all()
    assert bool(out.relaxed[:, 1].any()) == relaxes_second
    assert torch.equal(out.relaxed[:, 1], (num >= 1) & relaxes_second)  # node 1 is walked only after x1

    bonus = predicts.view(N, W).gather(1, num.long()[:, None]).squeeze(1)
    code = torch.where(num == 0, bonus, torch.where(num == 1, 5 + bonus, 10 + bonus)).long()
    counts = torch.bincount(code, minlength=15).tolist()
    law = _block_law(a1, a2)
    expected = [law.get((b,), 0.0) for b in range(5)] + [law.get((X_CHAIN[0], b), 0.0) for b in range(5)] \
        + [law.get((X_CHAIN[0], X_CHAIN[1], b), 0.0) for b in range(5)]
    _assert_law(counts, expected)

    exact = _block_law(q1, q2)
    kl = sum(pq * math.log(pq / exact[k]) for k, pq in law.items() if pq > 0)
    c1 = a1 * math.log(a1 / q1) + (1 - a1) * math.log((1 - a1) / (1 - q1))
    c2 = a2 * math.log(a2 / q2) + (1 - a2) * math.log((1 - a2) / (1 - q2)) if relaxes_second else 0.0
    assert kl == pytest.approx(c1 + a1 * c2, rel=1e-9)  # E[charge]: node 1 is charged only when reached
    assert kl <= budget and (out.spent <= budget).all()
