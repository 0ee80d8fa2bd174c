"""asd_sampled_verify at budget 0 == SGLang's target-only tree sampling (the stand-in port of its
kernel) bit for bit, given the same coins: chains and trees, default and server thresholds, rows
switched off by remaining, floor or cap, and exact rows beside relaxed rows in one batch."""

from __future__ import annotations

import pytest
import torch
from sampled_cases import make_sampled_round

CASES = [("chain", 1), ("chain", 4), ("tree", 3), ("tree", 5)]


def _assert_same(got, want, rows=slice(None)):
    predicts, accept_index, num = got[:3]
    w_predicts, w_accept_index, w_num = want
    W = predicts.numel() // num.numel()
    assert torch.equal(num[rows], w_num[rows])
    assert torch.equal(accept_index[rows], w_accept_index[rows])
    assert torch.equal(predicts.view(-1, W)[rows], w_predicts.view(-1, W)[rows])


@pytest.mark.parametrize("shape,K", CASES)
@pytest.mark.parametrize("seed", range(6))
def test_budget_zero_is_sglang_bit_for_bit(shape, K, seed):
    rnd = make_sampled_round(seed, bs=48, K=K, shape=shape, budget="zero", reverse_siblings=seed % 2 == 1)
    got = rnd.verify()
    _assert_same(got, rnd.standin())
    assert torch.equal(got[3].spent, torch.zeros(rnd.bs)) and not got[3].relaxed.any()


@pytest.mark.parametrize("off", ["remaining", "floor", "cap"])
def test_any_zero_row_input_is_exact(off):
    rnd = make_sampled_round(11, bs=64, K=4, shape="tree", budget="ample")
    zero = torch.zeros_like(getattr(rnd, off))
    got = rnd.verify(**{off: zero})
    _assert_same(got, rnd.standin())
    assert not got[3].relaxed.any()


@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (0.6, 1.0), (1.0, 0.5), (0.4, 0.7)])
def test_budget_zero_matches_server_thresholds(thresholds):
    rnd = make_sampled_round(5, bs=64, K=4, shape="tree", budget="zero")
    _assert_same(rnd.verify(*thresholds), rnd.standin(*thresholds))


def test_zero_step_verify():
    rnd = make_sampled_round(3, bs=16, K=0, shape="chain", budget="ample")
    _assert_same(rnd.verify(), rnd.standin())


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_exact_rows_beside_relaxed_rows(shape):
    rnd = make_sampled_round(7, bs=96, K=4, shape=shape, budget="mixed")
    got = rnd.verify()
    assert got[3].relaxed.any(), "the case should relax some rows"
    exact = rnd.remaining == 0
    assert exact.any()
    _assert_same(got, rnd.standin(), rows=exact)
    unrelaxed = ~got[3].relaxed.any(dim=1)  # rows with a budget that relaxed nothing walk as SGLang does too
    _assert_same(got, rnd.standin(), rows=unrelaxed)


@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_a_tight_sibling_bound_changes_nothing(shape):
    rnd = make_sampled_round(13, bs=64, K=4, shape=shape, budget="mixed")
    bound = rnd.max_children()
    assert shape == "tree" or bound == 1
    full, tight = rnd.verify(), rnd.verify(max_children=bound)
    for a, b in zip(full[:3], tight[:3]):
        assert torch.equal(a, b)
    for name in ("spent", "relaxed", "relaxed_token", "relaxed_charge", "relaxed_accepted"):
        assert torch.equal(getattr(full[3], name), getattr(tight[3], name)), name
    for no_bound in (0, -1):  # below 1: no bound, the full loop
        assert all(torch.equal(a, b) for a, b in zip(rnd.verify(max_children=no_bound)[:3], full[:3]))
