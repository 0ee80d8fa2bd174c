"""``sglang_asd.verify.asd_verify`` dispatch: CPU logits run the torch verifier without asking
for Triton; CUDA logits run the fused kernel (same outputs); a Triton that does not import
leaves the torch verifier, logged once."""

from __future__ import annotations

import dataclasses
import logging
import sys

import pytest
import torch

from sglang_asd.testing import make_round
from sglang_asd.verify import ASDVerifyOutput, asd_verify, dispatch
from sglang_asd.verify.torch_verify import asd_verify_torch


def assert_same(out: ASDVerifyOutput, ref: ASDVerifyOutput):
    for f in dataclasses.fields(ref):
        a, b = getattr(out, f.name), getattr(ref, f.name)
        assert a.device == b.device and a.dtype == b.dtype and torch.equal(a, b), f.name


@pytest.mark.parametrize("given_argmax", [False, True])
def test_cpu_logits_run_the_torch_verifier_and_never_ask_for_triton(monkeypatch, given_argmax):
    calls = []

    def torch_spy(*args, **kwargs):
        calls.append(kwargs)
        return asd_verify_torch(*args, **kwargs)

    monkeypatch.setattr(dispatch, "_triton_verify", lambda: pytest.fail("Triton looked up for CPU logits"))
    monkeypatch.setattr(dispatch, "asd_verify_torch", torch_spy)
    rnd = make_round(seed=1, bs=3, W=5, K=3, V=32, shape="random", logits="hard")
    args, kwargs = rnd.args(target_predict=given_argmax)
    out = asd_verify(*args, **kwargs)
    assert len(calls) == 1
    assert calls[0].keys() == {"stop_tokens", "target_predict", "rule", "rules_present", "tree_depth_gate", "scope"}
    assert calls[0]["stop_tokens"] is rnd.stop_tokens
    assert (calls[0]["target_predict"] is kwargs["target_predict"]) if given_argmax else calls[0]["target_predict"] is None
    assert_same(out, asd_verify_torch(*args, **kwargs))


def test_triton_that_does_not_import_is_logged_once_and_leaves_torch(monkeypatch, caplog):
    dispatch._triton_verify.cache_clear()
    monkeypatch.setitem(sys.modules, "sglang_asd.verify.triton_verify", None)  # import raises ImportError
    try:
        with caplog.at_level(logging.WARNING, logger=dispatch.__name__):
            assert dispatch._triton_verify() is None
            assert dispatch._triton_verify() is None
        assert len(caplog.records) == 1 and "Triton is not importable" in caplog.records[0].getMessage()
    finally:
        dispatch._triton_verify.cache_clear()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the Triton branch runs only on CUDA logits")
@pytest.mark.parametrize("given_argmax", [False, True])
def test_cuda_logits_run_the_triton_kernel_with_the_same_outputs(monkeypatch, given_argmax):
    pytest.importorskip("triton")
    from sglang_asd.verify import triton_verify

    calls, real = [], triton_verify.asd_verify_triton

    def triton_spy(*args, **kwargs):
        calls.append(args[1].device)
        return real(*args, **kwargs)

    dispatch._triton_verify.cache_clear()
    monkeypatch.setattr(triton_verify, "asd_verify_triton", triton_spy)
    try:
        rnd = make_round(seed=2, bs=4, W=6, K=3, V=4096, shape="eagle", logits="normal", dtype=torch.bfloat16,
                         device="cuda")
        args, kwargs = rnd.args(target_predict=given_argmax)
        out = asd_verify(*args, **kwargs)
    finally:
        dispatch._triton_verify.cache_clear()
    assert len(calls) == 1 and calls[0].type == "cuda"
    assert_same(out, asd_verify_torch(*args, **kwargs))
