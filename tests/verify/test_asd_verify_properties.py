"""Invariants of asd_verify on seeded batches: gates, ledger, masks, stop tokens, outputs."""

from __future__ import annotations

import math

import pytest
import torch
from reference_oracle import node_regrets

from sglang_asd.policy import ASDConfig, Ledger, select_tree
from sglang_asd.testing import make_round, strict_verify
from sglang_asd.verify import asd_verify

SHAPES = [("chain", 5, 6, 1), ("eagle", 5, 10, 3), ("random", 4, 12, 0)]


@pytest.mark.parametrize("shape,K,W,topk", SHAPES)
def test_gates_hold_on_every_exception(shape, K, W, topk):
    for seed in range(20):
        rnd = make_round(seed=100 + seed, bs=64, W=W, K=K, shape=shape, topk=topk, masked=0.2)
        args, kwargs = rnd.args()
        out = asd_verify(*args, **kwargs)
        strict = strict_verify(*rnd.strict_links())
        assert (out.num_correct_drafts >= strict[2]).all()  # ASD never accepts less than strict
        assert (out.num_exceptions <= rnd.cap).all()  # block cap
        assert (out.spent <= rnd.remaining).all()  # ledger
        assert torch.isfinite(out.exception_regret).all()  # masked (-inf) tokens are never exceptions
        suffix_value = K - torch.arange(K, dtype=torch.float32)
        assert (out.exception_regret / suffix_value <= rnd.gate[:, None]).all()  # regret gate
        strict_rows = (rnd.remaining <= 0) | (rnd.gate <= 0) | (rnd.cap <= 0)
        assert not out.exception_mask[strict_rows].any()
        # Exceptions are mismatches, never stop tokens.
        W_ = rnd.candidates.shape[1]
        nodes = (out.accept_index[:, 1:].long() - torch.arange(64)[:, None] * W_).clamp(min=0)
        drafted = rnd.candidates.gather(1, nodes)
        assert (drafted != out.target_token)[out.exception_mask].all()
        is_stop = (drafted[:, :, None] == rnd.stop_tokens[:, None, :]).any(-1)
        assert not (is_stop & out.exception_mask).any()
        assert torch.equal(out.num_exceptions, out.exception_mask.sum(1, dtype=torch.int32))


def test_spent_never_exceeds_budget_over_many_rounds():
    """40 rounds per request: the verifier (charging remaining) and the reference Ledger agree,
    and spent <= budget at every moment."""
    bs, K, W = 32, 5, 10
    budgets = [0.0, 0.25, 1.0, 2.0, 8.0, 64.0] * 5 + [8.0, 8.0]
    ledgers = [Ledger(budget=b) for b in budgets]
    remaining = torch.tensor(budgets, dtype=torch.float32)
    for round_ in range(40):
        rnd = make_round(seed=3000 + round_, bs=bs, W=W, K=K, shape="eagle", topk=3)
        rnd.remaining = remaining
        rnd.gate = torch.full((bs,), 0.5)
        rnd.cap = torch.full((bs,), 2, dtype=torch.int32)
        args, kwargs = rnd.args()
        out = asd_verify(*args, **kwargs)
        regrets = node_regrets(rnd, rnd.logits.argmax(-1).view(bs, W))
        tp = rnd.logits.argmax(-1).view(bs, W).tolist()
        for b in range(bs):
            decision = select_tree(rnd.candidates[b].tolist(), rnd.parents[b], tp[b], regrets[b], K, ledgers[b],
                                   ASDConfig(gate=0.5, max_exceptions_per_block=2),
                                   frozenset(rnd.stop_tokens[b].tolist()) - {-1})
            assert decision.spent == float(out.spent[b])
            assert len(decision.path) == int(out.num_correct_drafts[b])
            assert 0 <= ledgers[b].spent <= ledgers[b].budget
        remaining = remaining - out.spent
        assert (remaining >= 0).all()
        assert remaining.tolist() == [lg.remaining for lg in ledgers]
    assert sum(lg.num_exceptions for lg in ledgers) > 50  # the budgets were actually used
    assert any(lg.remaining < 0.25 for lg in ledgers if lg.budget == 2.0)


def test_masked_and_stop_tokens_are_never_exceptions_even_with_everything_allowed():
    bs, K, V = 8, 4, 16
    W = K + 1
    logits = torch.zeros(bs * W, V)
    logits[:, 0] = 0.01  # argmax 0 everywhere; token 5 masked, token 7 a stop token, token 9 a near tie
    logits[:, 5] = -math.inf
    candidates = torch.tensor([[0, 5, 5, 5, 5], [0, 7, 7, 7, 7], [0, 9, 9, 9, 9], [0, 9, 5, 9, 9]] * 2)
    next_token = torch.tensor([[1, 2, 3, 4, -1]] * bs)
    next_sibling = torch.full((bs, W), -1)
    huge = torch.full((bs,), 1e30)
    out = asd_verify(candidates, logits, next_token, next_sibling, huge, huge, torch.full((bs,), 99, dtype=torch.int32),
                     K, stop_tokens=torch.tensor([[7, -1]] * bs))
    assert out.num_correct_drafts.tolist() == [0, 0, 4, 1] * 2
    assert out.num_exceptions.tolist() == [0, 0, 4, 1] * 2


def test_outputs_are_fresh_tensors_with_the_contract_dtypes():
    rnd = make_round(seed=5, bs=16, W=8, K=4, shape="eagle", topk=3)
    args, kwargs = rnd.args(target_predict=True)
    inputs = [*args[:7], kwargs["stop_tokens"], kwargs["target_predict"]]
    out = asd_verify(*args, **kwargs)
    storages = {t.untyped_storage().data_ptr() for t in inputs}
    assert out.scope_skipped is None  # computed only when a scope is given
    outputs = [getattr(out, name) for name in out.__dataclass_fields__ if name != "scope_skipped"]
    for t in outputs:
        assert t.untyped_storage().data_ptr() not in storages
    assert len({t.untyped_storage().data_ptr() for t in outputs}) == len(outputs)
    dtypes = dict(predict=torch.int32, accept_index=torch.int32, num_correct_drafts=torch.int32, spent=torch.float32,
                  num_exceptions=torch.int32, exception_mask=torch.bool, exception_regret=torch.float32,
                  target_token=torch.int64, num_suffix_tokens=torch.int32)
    shapes = dict(predict=(16 * 8,), accept_index=(16, 5), num_correct_drafts=(16,), spent=(16,), num_exceptions=(16,),
                  exception_mask=(16, 4), exception_regret=(16, 4), target_token=(16, 4), num_suffix_tokens=(16,))
    for name, dtype in dtypes.items():
        assert getattr(out, name).dtype == dtype, name
        assert tuple(getattr(out, name).shape) == shapes[name], name


def test_an_idle_batch():
    # bs = 0 (depth 0 is in test_asd_verify_strict.py).
    empty = torch.zeros((0, 4), dtype=torch.int64)
    out = asd_verify(empty, torch.zeros((0, 7)), empty, empty, torch.zeros(0), torch.zeros(0),
                     torch.zeros(0, dtype=torch.int32), 3)
    assert out.accept_index.shape == (0, 4) and out.predict.shape == (0,)
