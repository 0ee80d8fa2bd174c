"""asd_sampled_verify == the pure walk (policy.sampled_walk.sample_block), row by row, on seeded
chains and trees: path, bonus, every relaxation receipt, and spent; spent <= remaining always."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sampled_cases import make_sampled_round


def assert_matches_reference(rnd, thresholds=(1.0, 1.0)):
    predicts, accept_index, num, out = rnd.verify(*thresholds)
    W = rnd.W
    for b in range(rnd.bs):
        decision, ledger = rnd.reference(b, *thresholds)
        n = int(num[b])
        path = tuple(int(g) - b * W for g in accept_index[b, 1:n + 1])
        assert path == decision.path, b
        assert int(predicts[int(accept_index[b, n])]) == decision.bonus, b
        for i, token in enumerate(decision.accepted):
            assert int(predicts[int(accept_index[b, i])]) == token
        relaxed = {r.position: r for r in decision.relaxed}
        for i in range(rnd.K):
            r = relaxed.get(i)
            assert bool(out.relaxed[b, i]) == (r is not None), (b, i)
            if r is None:
                assert int(out.relaxed_token[b, i]) == -1 and float(out.relaxed_charge[b, i]) == 0.0
                continue
            assert int(out.relaxed_token[b, i]) == r.token
            assert float(out.relaxed_q[b, i]) == pytest.approx(r.q, rel=1e-7)
            assert float(out.relaxed_accept_prob[b, i]) == pytest.approx(r.accept_prob, rel=1e-6)
            assert float(out.relaxed_charge[b, i]) == pytest.approx(r.charge, rel=1e-6)
            assert bool(out.relaxed_accepted[b, i]) == r.accepted
        assert int(out.num_relaxed[b]) == len(decision.relaxed)
        assert float(out.spent[b]) == pytest.approx(decision.spent, rel=1e-6, abs=1e-12)
        assert ledger.spent <= ledger.budget
    assert (out.spent <= rnd.remaining).all()
    return out


@pytest.mark.parametrize("shape,K", [("chain", 1), ("chain", 5), ("tree", 3), ("tree", 5)])
@pytest.mark.parametrize("seed", range(5))
def test_verifier_equals_reference(shape, K, seed):
    rnd = make_sampled_round(100 + seed, bs=48, K=K, shape=shape, reverse_siblings=seed % 2 == 1)
    out = assert_matches_reference(rnd)
    if seed == 0:
        assert out.relaxed.any() and (~out.relaxed_accepted & out.relaxed).any() or K == 1


def test_verifier_equals_reference_with_thresholds():
    assert_matches_reference(make_sampled_round(9, bs=48, K=4, shape="tree"), thresholds=(0.6, 0.8))


def test_the_cases_exercise_every_branch():
    """Across the seeded cases: relaxed and accepted, relaxed and rejected, a rejected relaxed
    child followed by an accepted sibling, cap and budget both binding."""
    seen = {"accepted": 0, "rejected": 0, "sibling_after": 0, "cap": 0}
    for seed in range(5):
        rnd = make_sampled_round(100 + seed, bs=48, K=5, shape="tree")
        predicts, accept_index, num, out = rnd.verify()
        seen["accepted"] += int((out.relaxed & out.relaxed_accepted).sum())
        lost = out.relaxed & ~out.relaxed_accepted
        seen["rejected"] += int(lost.sum())
        position = torch.arange(rnd.K)
        seen["sibling_after"] += int((lost & (position < num[:, None])).sum())
        seen["cap"] += int((out.num_relaxed == rnd.cap).sum())
    assert all(v > 0 for v in seen.values()), seen


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), K=st.integers(0, 5), shape=st.sampled_from(["chain", "tree"]),
       peaked=st.sampled_from([0.5, 2.0, 6.0]), budget=st.sampled_from(["mixed", "ample"]))
def test_hypothesis_reference_and_budget(seed, K, shape, peaked, budget):
    rnd = make_sampled_round(seed, bs=8, K=K, shape=shape, peaked=peaked, budget=budget)
    out = assert_matches_reference(rnd)
    assert (out.relaxed_charge.sum(dim=1) <= rnd.remaining + 1e-6).all()
    assert (out.num_relaxed <= rnd.cap).all()
