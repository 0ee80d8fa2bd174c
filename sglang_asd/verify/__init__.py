"""Batched ASD verify (torch only, no sglang).

    from sglang_asd.verify import asd_verify, ASDVerifyOutput, strict_verify

``asd_verify`` is the entry point the SGLang seams call; its signature is the contract in
docs/CONTRACTS.md. Today it is the plain torch implementation (``torch_verify``). A fused
kernel with the same signature plugs in here: bind ``asd_verify`` to a small dispatcher that
picks the kernel for the tensors' device and falls back to nothing silently.
"""

from sglang_asd.verify.output import ASDVerifyOutput
from sglang_asd.verify.strict_verify import strict_verify
from sglang_asd.verify.torch_verify import asd_verify

# Dispatch: the fused Triton kernel for CUDA logits, the torch verifier elsewhere (same outputs).
from sglang_asd.verify.dispatch import asd_verify, verify_backend  # noqa: E402,F811

__all__ = ["ASDVerifyOutput", "asd_verify", "strict_verify", "verify_backend"]
