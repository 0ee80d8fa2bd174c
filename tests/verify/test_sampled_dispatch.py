"""``dispatch.asd_sampled_verify``: CPU probabilities run the torch sampled verifier without asking
for Triton; CUDA float32 probabilities with SGLang's int32 buffers run the fused kernels; a CUDA
call the kernels do not take (other dtypes) runs the torch verifier. The seam calls this one."""

from __future__ import annotations

import pytest
import torch
from sampled_cases import make_sampled_round

from sglang_asd.verify import dispatch, sampled_verify


def call(rnd):
    predicts, accept_index, num = rnd.buffers()
    out = dispatch.asd_sampled_verify(predicts, accept_index, num, rnd.candidates, rnd.retrieve_index,
                                      rnd.next_token, rnd.next_sibling, rnd.coins, rnd.final_coins, rnd.probs,
                                      rnd.remaining, rnd.floor, rnd.cap, rnd.power, rnd.stop_tokens)
    return predicts, accept_index, num, out


def test_the_seam_calls_the_dispatcher():
    from sglang_asd.sglang_seams.step import verify_step  # imports SGLang

    assert verify_step.asd_sampled_verify is dispatch.asd_sampled_verify


def test_cpu_probabilities_run_the_torch_verifier_and_never_ask_for_triton(monkeypatch):
    monkeypatch.setattr(dispatch, "_triton_sampled_verify",
                        lambda: pytest.fail("Triton looked up for CPU probabilities"))
    rnd = make_sampled_round(3, bs=8, K=3, shape="tree")
    got, want = call(rnd), rnd.verify()
    for a, b in zip(got[:3], want[:3]):
        assert torch.equal(a, b)
    assert torch.equal(got[3].spent, want[3].spent) and torch.equal(got[3].relaxed, want[3].relaxed)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_runs_the_fused_kernels(monkeypatch):
    from sglang_asd.verify import triton_sampled_verify as tsv

    calls = []
    real = tsv.asd_sampled_verify_triton
    monkeypatch.setattr(dispatch, "_triton_sampled_verify", lambda: lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(sampled_verify, "asd_sampled_verify", lambda *a: pytest.fail("torch path on CUDA"))
    rnd = make_sampled_round(4, bs=8, K=3, shape="tree")
    for name in ("candidates", "retrieve_index", "next_token", "next_sibling", "coins", "final_coins", "probs",
                 "remaining", "floor", "cap", "power", "stop_tokens"):
        setattr(rnd, name, getattr(rnd, name).cuda())
    rnd.buffers = lambda b=rnd.buffers: tuple(t.cuda() for t in b())
    call(rnd)
    assert calls == [1]
