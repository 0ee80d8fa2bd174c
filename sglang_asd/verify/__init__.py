"""Batched ASD verify (torch only at import; no sglang).

    from sglang_asd.verify import asd_verify, ASDVerifyOutput

``asd_verify`` is the entry point the SGLang seams call; its signature is the contract in
docs/CONTRACTS.md. It dispatches (``dispatch.py``) on the logits' device: the fused Triton
kernel (``triton_verify.py``) for CUDA, the plain torch verifier (``torch_verify.py``, the
reference both are tested against) elsewhere. ``warmup.py`` compiles and loads every Triton
variant a server can use, at start-up. Test and benchmark aids (seeded rounds, SGLang's strict
verify) are in ``sglang_asd.testing``.
"""

from sglang_asd.verify.dispatch import asd_verify
from sglang_asd.verify.output import ASDVerifyOutput

__all__ = ["ASDVerifyOutput", "asd_verify"]
