"""The sampled verifier's sibling bound (``max_children``, EAGLE's topk) on drafts narrower than topk.

SGLang serves an EAGLE tree whose ``--speculative-eagle-topk`` is larger than
``--speculative-num-draft-tokens - 1`` (e.g. topk 4 with 4 draft tokens): the seam passes that topk as
the bound, and no node of W has more than W - 1 children. The verifier must take such a bound
as it comes (min(topk, W - 1) sibling steps) and decide exactly what the unbounded walk decides,
which is the pure reference's decision and, at budget 0, SGLang's own kernel's.
"""

from __future__ import annotations

import random

import pytest
import torch
from sampled_cases import make_sampled_round
from test_sampled_reference import assert_matches_reference

from sglang_asd.testing.trees import eagle_draft, eagle_parents
from sglang_asd.verify.sampled_verify import sibling_steps

FIELDS = ("spent", "num_relaxed", "relaxed", "relaxed_token", "relaxed_q", "relaxed_accept_prob", "relaxed_charge",
          "relaxed_accepted")

# (topk, num_steps, W = num_draft_tokens): every topk > W - 1, the draft widths SGLang accepts with it
WIDE_TOPK = [(4, 3, 4), (4, 3, 2), (8, 2, 5), (3, 1, 3), (4, 1, 2), (16, 4, 6)]


def _eagle_trees(seed: int, bs: int, topk: int, depth: int, W: int) -> list:
    """``bs`` parent arrays as SGLang's EAGLE builds them (``testing.trees.eagle_draft``)."""
    parent_list, selected = eagle_draft(bs, topk, depth, W, torch.Generator().manual_seed(seed))
    return [eagle_parents(parent_list[b].tolist(), selected[b].tolist(), topk) for b in range(bs)]


def _star(W: int) -> list:
    """The root with W - 1 children: the most children a node of W can have."""
    return [-1] + [0] * (W - 1)


@pytest.mark.parametrize("W,bound,steps", [(4, 4, 3), (4, 3, 3), (4, 2, 2), (2, 4, 1), (2, 1, 1), (1, 4, 0),
                                           (6, None, 5), (6, 0, 5), (6, -1, 5), (1, None, 0)])
def test_sibling_steps_clamp_to_the_draft_width(W, bound, steps):
    assert sibling_steps(W, bound) == steps


@pytest.mark.parametrize("topk,depth,W", WIDE_TOPK)
@pytest.mark.parametrize("seed", range(3))
def test_a_topk_wider_than_the_draft_is_the_unbounded_walk(topk, depth, W, seed):
    """topk > W - 1: no error, and the same tokens, path and receipts as the unbounded walk, which
    equals the pure reference row by row (mixed budgets: exact, tight and ample rows)."""
    rng = random.Random(seed)
    parents = _eagle_trees(seed, 40, topk, depth, W) + [_star(W)] * 8
    rng.shuffle(parents)
    rnd = make_sampled_round(200 + seed, K=depth, parents=parents, budget="mixed")
    bounded, unbounded = rnd.verify(max_children=topk), rnd.verify()
    for got, want in zip(bounded[:3], unbounded[:3]):
        assert torch.equal(got, want)
    for name in FIELDS:
        assert torch.equal(getattr(bounded[3], name), getattr(unbounded[3], name)), name
    assert_matches_reference(rnd)
    assert rnd.max_children() == W - 1, "the case must hold a node with W - 1 children"


@pytest.mark.parametrize("topk,depth,W", WIDE_TOPK)
def test_a_topk_wider_than_the_draft_at_budget_zero_is_sglang(topk, depth, W):
    """Budget 0 with the wide bound: SGLang's kernel (the stand-in port) bit for bit."""
    parents = _eagle_trees(7, 40, topk, depth, W) + [_star(W)] * 8
    rnd = make_sampled_round(7, K=depth, parents=parents, budget="zero")
    got, want = rnd.verify(max_children=topk), rnd.standin()
    for a, b in zip(got[:3], want):
        assert torch.equal(a, b)
    assert not got[3].relaxed.any()


def test_a_tight_bound_on_a_star_matters():
    """The bound is what the loop runs: a bound below the star's W - 1 children can leave a later
    child untried (why the seam passes topk, never less), so the clamp is what keeps wide bounds exact."""
    W, depth = 5, 1
    rnd = make_sampled_round(3, K=depth, parents=[_star(W)] * 256, budget="zero")
    exact = rnd.standin()
    assert all(torch.equal(a, b) for a, b in zip(rnd.verify(max_children=W - 1)[:3], exact))
    assert all(torch.equal(a, b) for a, b in zip(rnd.verify(max_children=64)[:3], exact))
    assert not all(torch.equal(a, b) for a, b in zip(rnd.verify(max_children=1)[:3], exact))
