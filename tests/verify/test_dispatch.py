"""``sglang_asd.verify.asd_verify`` dispatch: Triton for CUDA logits, torch elsewhere, same outputs."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import sglang_asd.verify as verify
from sglang_asd.verify.cases import make_round
from sglang_asd.verify.torch_verify import asd_verify as torch_asd_verify


def test_cpu_logits_run_the_torch_verifier():
    assert verify.verify_backend(torch.device("cpu")) == "torch"
    rnd = make_round(3, 5, 3, 32, tree=True, seed=1, hard=True)
    args, kwargs = rnd.args()
    out, ref = verify.asd_verify(*args, **kwargs), torch_asd_verify(*args, **kwargs)
    for f in dataclasses.fields(ref):
        assert torch.equal(getattr(out, f.name), getattr(ref, f.name)), f.name


def test_package_exports_are_kept():
    assert {"ASDVerifyOutput", "asd_verify", "strict_verify", "verify_backend"} <= set(verify.__all__)
    assert verify.asd_verify.__module__ == "sglang_asd.verify.dispatch"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_logits_run_the_triton_kernel_with_the_same_outputs():
    pytest.importorskip("triton")
    assert verify.verify_backend(torch.device("cuda")) == "triton"
    rnd = make_round(4, 6, 3, 4096, tree=True, seed=2, device="cuda", dtype=torch.bfloat16)
    args, kwargs = rnd.args()
    out, ref = verify.asd_verify(*args, **kwargs), torch_asd_verify(*args, **kwargs)
    for f in dataclasses.fields(ref):
        assert torch.equal(getattr(out, f.name), getattr(ref, f.name)), f.name
