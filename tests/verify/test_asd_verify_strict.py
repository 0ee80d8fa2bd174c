"""Strict rows (budget 0, gate 0 or cap 0) == SGLang's verify_tree_greedy, bit for bit.

Three implementations must agree: a line-by-line port of SGLang's kernel (plain Python,
``sglang_asd.testing.verify_tree_greedy_port``), ``strict_verify`` (the torch baseline) and
``asd_verify`` on strict rows. Logits on a 1/8 grid give many argmax ties; drafts often
duplicate a sibling's token.
"""

from __future__ import annotations

import pytest
import torch

from sglang_asd.testing import make_round, sglang_strict_result, strict_verify
from sglang_asd.verify import asd_verify


def assert_same(got, want, what):
    for name, g, w in zip(("predict", "accept_index", "num_correct_drafts"), got, want):
        assert g.dtype == w.dtype, (what, name)
        assert torch.equal(g, w), (what, name)


CASES = [
    dict(shape="chain", K=1, W=2),
    dict(shape="chain", K=4, W=5),
    dict(shape="chain", K=7, W=8),
    dict(shape="eagle", K=3, W=6, topk=2),
    dict(shape="eagle", K=5, W=10, topk=3),
    dict(shape="eagle", K=6, W=16, topk=4),
    dict(shape="random", K=3, W=10),
    dict(shape="random", K=5, W=12, orphans=0.15),  # nodes SGLang's builder dropped
    dict(shape="eagle", K=4, W=8, topk=4, reverse_siblings=True),  # sibling order != index order
    dict(shape="random", K=2, W=12, reverse_siblings=True),
]


@pytest.mark.parametrize("params", CASES, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_strict_rows_equal_sglang(params):
    for seed in range(25):
        rnd = make_round(seed=seed, bs=64, rows="strict", **params)
        want = sglang_strict_result(*rnd.strict_links())
        args, kwargs = rnd.args()
        out = asd_verify(*args, **kwargs)
        assert_same((out.predict, out.accept_index, out.num_correct_drafts), want, "asd_verify")
        assert_same(strict_verify(*rnd.strict_links()), want, "strict_verify")
        assert not out.exception_mask.any() and not out.spent.any() and not out.num_suffix_tokens.any()


def test_strict_rows_in_a_mixed_batch_equal_sglang():
    """ASD rows next to strict rows do not change the strict rows."""
    for seed in range(20):
        rnd = make_round(seed=500 + seed, bs=64, W=10, K=5, shape="eagle", topk=3)
        strict_rows = (rnd.remaining <= 0) | (rnd.gate <= 0) | (rnd.cap <= 0)
        assert strict_rows.any() and not strict_rows.all()
        want = sglang_strict_result(*rnd.strict_links())
        args, kwargs = rnd.args()
        out = asd_verify(*args, **kwargs)
        assert torch.equal(out.accept_index[strict_rows], want[1][strict_rows])
        assert torch.equal(out.num_correct_drafts[strict_rows], want[2][strict_rows])
        assert torch.equal(out.predict.view(64, 10)[strict_rows], want[0].view(64, 10)[strict_rows])


def test_strict_verify_equals_sglang_with_given_target_predict():
    rnd = make_round(seed=9, bs=64, W=8, K=4, shape="eagle", topk=3, rows="strict")
    tp = rnd.logits.argmax(-1).view(64, 8)
    got = strict_verify(*rnd.strict_links(), target_predict=tp)
    assert_same(got, sglang_strict_result(*rnd.strict_links()), "strict_verify(target_predict)")


@pytest.mark.parametrize("bs", [1, 8, 64])
@pytest.mark.parametrize("given_argmax", [False, True])
def test_depth_zero_is_a_strict_no_op_row(bs, given_argmax):
    """SGLang's adaptive zero-step verify (W = 1, K = 0, at bs >= 8 by default): every row,
    ASD rows included, accepts the root alone and emits its argmax, exactly as SGLang does."""
    rnd = make_round(seed=bs, bs=bs, W=1, K=0, V=50, shape="chain", logits="hard", rows="asd")
    args, kwargs = rnd.args(target_predict=given_argmax)
    out = asd_verify(*args, **kwargs)
    want = sglang_strict_result(*rnd.strict_links())
    assert_same((out.predict, out.accept_index, out.num_correct_drafts), want, "asd_verify at depth 0")
    assert torch.equal(out.predict, rnd.logits.argmax(-1).int())  # the bonus: the root's argmax
    assert torch.equal(out.accept_index, torch.arange(bs, dtype=torch.int32)[:, None])
    assert not out.num_correct_drafts.any() and not out.num_exceptions.any() and not out.num_suffix_tokens.any()
    assert torch.equal(out.spent, torch.zeros(bs))
    for name in ("exception_mask", "exception_regret", "target_token"):
        assert getattr(out, name).shape == (bs, 0), name


@pytest.mark.parametrize("field", ["remaining", "gate", "cap"])
def test_each_zero_knob_alone_is_strict_even_for_regret_zero_ties(field):
    """Drafts that are argmax ties (regret 0) but not the argmax itself: strict rejects them."""
    bs, K, W, V = 32, 4, 5, 8
    logits = torch.zeros(bs * W, V)  # all tied: argmax = token 0, every other token has regret 0
    candidates = torch.full((bs, W), 3)
    next_token = torch.tensor([[1, 2, 3, 4, -1]] * bs)
    next_sibling = torch.full((bs, W), -1)
    knobs = dict(remaining=torch.full((bs,), 8.0), gate=torch.full((bs,), 0.25),
                 cap=torch.full((bs,), 2, dtype=torch.int32))
    knobs[field] = torch.zeros_like(knobs[field])
    out = asd_verify(candidates, logits, next_token, next_sibling, knobs["remaining"], knobs["gate"], knobs["cap"], K)
    assert not out.num_correct_drafts.any()
    assert torch.equal(out.accept_index[:, 0], torch.arange(bs, dtype=torch.int32) * W)
    # With all three knobs on, the same ties are exceptions (cap 2 => two of them).
    knobs[field] = {"remaining": torch.full((bs,), 8.0), "gate": torch.full((bs,), 0.25),
                    "cap": torch.full((bs,), 2, dtype=torch.int32)}[field]
    out = asd_verify(candidates, logits, next_token, next_sibling, knobs["remaining"], knobs["gate"], knobs["cap"], K)
    assert torch.equal(out.num_correct_drafts, torch.full((bs,), 2, dtype=torch.int32))
    assert torch.equal(out.spent, torch.zeros(bs))
