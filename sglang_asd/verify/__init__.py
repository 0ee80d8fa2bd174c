"""Batched ASD verify (torch only at import; no sglang).

    from sglang_asd.verify import asd_verify, ASDVerifyOutput, strict_verify

``asd_verify`` is the entry point the SGLang seams call; its signature is the contract in
docs/CONTRACTS.md. It dispatches (``dispatch.py``) on the logits' device: the fused Triton
kernel (``triton_verify.py``) for CUDA, the plain torch verifier (``torch_verify.py``, the
reference both are tested against) elsewhere. ``strict_verify`` is SGLang's greedy verify in
torch, the baseline for benchmarks and an oracle for tests.
"""

from sglang_asd.verify.dispatch import asd_verify, verify_backend
from sglang_asd.verify.output import ASDVerifyOutput
from sglang_asd.verify.strict_verify import strict_verify

__all__ = ["ASDVerifyOutput", "asd_verify", "strict_verify", "verify_backend"]
