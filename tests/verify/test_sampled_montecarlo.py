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
