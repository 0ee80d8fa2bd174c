"""asd_verify == the pure reference (select_tree / select_chain), row by row, on seeded cases."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from reference_oracle import node_regrets, reference_outputs

from sglang_asd.policy import ASDConfig, Ledger, select_chain
from sglang_asd.testing import make_round
from sglang_asd.verify import asd_verify

FIELDS = [
    "predict",
    "accept_index",
    "num_correct_drafts",
    "spent",
    "num_exceptions",
    "exception_mask",
    "exception_regret",
    "target_token",
    "num_suffix_tokens",
]


def assert_matches_reference(rnd, target_predict=None, exact_floats=True):
    """Every output field equal. On grid logits (multiples of 1/8) every regret and sum is exact
    in both routes, so ``torch.equal`` throughout. On continuous logits the reference's regrets
    (float64 log-softmax gaps) and sums (float64) differ from the verifier's float32 logit
    gaps by rounding: ``spent`` and ``exception_regret`` are compared to 1e-6 relative there."""
    args, kwargs = rnd.args(target_predict=target_predict)
    out = asd_verify(*args, **kwargs)
    expected = reference_outputs(rnd, target_predict)
    for name in FIELDS:
        got = getattr(out, name)
        assert got.dtype == expected[name].dtype, name
        if name in ("spent", "exception_regret") and not exact_floats:
            torch.testing.assert_close(got, expected[name], rtol=1e-6, atol=0)
            continue
        if not torch.equal(got, expected[name]):
            bs = rnd.candidates.shape[0]
            rows = (got != expected[name]).reshape(bs, -1).any(-1).nonzero().flatten()[:5].tolist()
            raise AssertionError(f"{name} differs at rows {rows}: {got.reshape(bs, -1)[rows]} != {expected[name].reshape(bs, -1)[rows]}")
    return out


# shape, K, W, topk: chains (W = K + 1), EAGLE topk trees, arbitrary trees; 30 seeds x 64 rows each.
CONFIGS = [
    ("chain", 0, 1, 1),  # SGLang's adaptive zero-step verify: the root alone
    ("chain", 1, 2, 1),
    ("chain", 3, 4, 1),
    ("chain", 5, 6, 1),
    ("chain", 7, 8, 1),
    ("eagle", 3, 6, 2),
    ("eagle", 4, 8, 4),
    ("eagle", 5, 10, 3),
    ("eagle", 6, 16, 4),
    ("random", 4, 9, 0),
    ("random", 2, 12, 0),
]


@pytest.mark.parametrize("shape,K,W,topk", CONFIGS)
def test_batched_equals_reference_on_grid_logits(shape, K, W, topk):
    for seed in range(30):
        assert_matches_reference(make_round(seed=seed, bs=64, W=W, K=K, shape=shape, topk=topk))


@pytest.mark.parametrize("shape,K,W,topk", [("chain", 5, 6, 1), ("eagle", 5, 10, 3)])
def test_batched_equals_reference_on_continuous_logits(shape, K, W, topk):
    # Continuous values: the decisions agree off measure-zero gate boundaries; these seeds are
    # fixed, so the test is deterministic.
    for seed in range(20):
        rnd = make_round(seed=1000 + seed, bs=64, W=W, K=K, V=50, shape=shape, topk=topk, logits="normal")
        assert_matches_reference(rnd, exact_floats=False)


def test_batched_equals_reference_with_caller_target_predict():
    """A given target_predict is used as is (no pass over V); regret is relative to it."""
    for seed in range(10):
        rnd = make_round(seed=2000 + seed, bs=64, W=8, K=4, shape="eagle", topk=3)
        gen = torch.Generator().manual_seed(seed)
        tp = rnd.logits.argmax(-1).view(64, 8)
        flip = torch.rand(tp.shape, generator=gen) < 0.2
        tp = torch.where(flip, torch.randint(0, 12, tp.shape, generator=gen), tp)
        assert_matches_reference(rnd, target_predict=tp.int())


def test_nan_logits_are_never_exceptions_and_outputs_stay_finite():
    rnd = make_round(seed=7, bs=64, W=8, K=4, shape="eagle", topk=3)
    gen = torch.Generator().manual_seed(7)
    rnd.logits[torch.rand(rnd.logits.shape, generator=gen) < 0.05] = math.nan
    out = assert_matches_reference(rnd)
    assert torch.isfinite(out.spent).all() and torch.isfinite(out.exception_regret).all()


def test_select_chain_equals_batched_on_chains():
    """The chain scan (select_chain) and the batched verifier agree on chains."""
    K = 5
    rnd = make_round(seed=11, bs=256, W=K + 1, K=K, shape="chain")
    args, kwargs = rnd.args()
    out = asd_verify(*args, **kwargs)
    tp = rnd.logits.argmax(-1).view(256, K + 1)
    regrets = node_regrets(rnd, tp)
    for b in range(256):
        decision = select_chain(
            draft=rnd.candidates[b, 1:].tolist(),
            target_argmax=tp[b].tolist(),
            regret=regrets[b][1:],
            ledger=Ledger(budget=float(rnd.remaining[b])),
            config=ASDConfig(gate=float(rnd.gate[b]), max_exceptions_per_block=int(rnd.cap[b])),
            stop_tokens=frozenset(rnd.stop_tokens[b].tolist()) - {-1},
        )
        n = len(decision.accepted)
        assert int(out.num_correct_drafts[b]) == n
        assert out.exception_mask[b].nonzero().flatten().tolist() == list(decision.exceptions)
        assert float(out.spent[b]) == decision.spent
        assert int(out.predict[b * (K + 1) + n]) == decision.bonus


def test_bf16_logits_match_reference_on_their_float32_values():
    rnd = make_round(seed=3, bs=64, W=8, K=4, shape="eagle", topk=3)
    low = dataclasses.replace(rnd, logits=rnd.logits.bfloat16())  # the 1/8 grid is exact in bf16
    args, kwargs = low.args()
    out = asd_verify(*args, **kwargs)
    expected = reference_outputs(rnd)
    for name in FIELDS:
        assert torch.equal(getattr(out, name), expected[name]), name
