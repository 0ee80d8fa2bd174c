"""Invariants of asd_verify on seeded batches: gates, ledger, masks, stop tokens, outputs."""

from __future__ import annotations

import math

import pytest
import torch
from asd_cases import make_case, node_regrets

from sglang_asd.policy import ASDConfig, Ledger, select_tree
from sglang_asd.verify import asd_verify, strict_verify

SHAPES = [("chain", 5, 6, 1), ("eagle", 5, 10, 3), ("random", 4, 12, 0)]


@pytest.mark.parametrize("shape,K,W,topk", SHAPES)
def test_gates_hold_on_every_exception(shape, K, W, topk):
    for seed in range(20):
        case = make_case(100 + seed, 64, K, W, shape=shape, topk=topk, masked=0.2)
        out = asd_verify(*case.verify_args(), stop_tokens=case.stop_tokens)
        strict = strict_verify(case.candidates, case.logits, case.next_token, case.next_sibling, K)
        assert (out.num_correct_drafts >= strict[2]).all()  # ASD never accepts less than strict
        assert (out.num_exceptions <= case.cap).all()  # block cap
        assert (out.spent <= case.remaining).all()  # ledger
        assert torch.isfinite(out.exception_regret).all()  # masked (-inf) tokens are never exceptions
        suffix_value = K - torch.arange(K, dtype=torch.float32)
        assert (out.exception_regret / suffix_value <= case.gate[:, None]).all()  # regret gate
        strict_rows = (case.remaining <= 0) | (case.gate <= 0) | (case.cap <= 0)
        assert not out.exception_mask[strict_rows].any()
        # Exceptions are mismatches, never stop tokens.
        W_ = case.candidates.shape[1]
        nodes = (out.accept_index[:, 1:].long() - torch.arange(64)[:, None] * W_).clamp(min=0)
        drafted = case.candidates.gather(1, nodes)
        assert (drafted != out.target_token)[out.exception_mask].all()
        is_stop = (drafted[:, :, None] == case.stop_tokens[:, None, :]).any(-1)
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
        case = make_case(3000 + round_, bs, K, W, shape="eagle", topk=3)
        case.remaining = remaining
        case.gate = torch.full((bs,), 0.5)
        case.cap = torch.full((bs,), 2, dtype=torch.int32)
        out = asd_verify(*case.verify_args(), stop_tokens=case.stop_tokens)
        regrets = node_regrets(case, case.logits.argmax(-1).view(bs, W))
        tp = case.logits.argmax(-1).view(bs, W).tolist()
        for b in range(bs):
            decision = select_tree(case.candidates[b].tolist(), case.parents[b], tp[b], regrets[b], K, ledgers[b],
                                   ASDConfig(gate=0.5, max_exceptions_per_block=2),
                                   frozenset(case.stop_tokens[b].tolist()) - {-1})
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
    case = make_case(5, 16, 4, 8, shape="eagle", topk=3)
    tp = case.logits.argmax(-1).view(16, 8)
    inputs = [*case.verify_args()[:7], case.stop_tokens, tp]
    out = asd_verify(*case.verify_args(), stop_tokens=case.stop_tokens, target_predict=tp)
    storages = {t.untyped_storage().data_ptr() for t in inputs}
    outputs = [getattr(out, name) for name in out.__dataclass_fields__]
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


def test_degenerate_shapes():
    # W = 1, K = 0: only the root; the bonus is its argmax.
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])
    one = torch.ones(2)
    out = asd_verify(torch.zeros((2, 1), dtype=torch.int64), logits, torch.full((2, 1), -1), torch.full((2, 1), -1),
                     one, one, torch.ones(2, dtype=torch.int32), 0)
    assert out.predict.tolist() == [1, 0] and out.accept_index.tolist() == [[0], [1]]
    assert out.exception_mask.shape == (2, 0)
    # bs = 0 (an idle batch).
    empty = torch.zeros((0, 4), dtype=torch.int64)
    out = asd_verify(empty, torch.zeros((0, 7)), empty, empty, torch.zeros(0), torch.zeros(0),
                     torch.zeros(0, dtype=torch.int32), 3)
    assert out.accept_index.shape == (0, 4) and out.predict.shape == (0,)
