"""Batched ASD verify (torch only at import; no sglang).

    from sglang_asd.verify import asd_verify, ASDVerifyOutput

``asd_verify`` is the entry point the SGLang seams call; its signature is the contract in
docs/CONTRACTS.md. Each row has its acceptance rule (asd, local, margin, threshold), as data
(``rules.py``). It dispatches (``dispatch.py``) on the logits' device and the rules in use: the
fused Triton kernel (``triton_verify.py``) for CUDA when every row is asd or local, the plain
torch verifier (``torch_verify.py``, every rule, the reference both are tested against)
otherwise. ``warmup.py`` compiles and loads every Triton variant a server can use, at start-up. Test and benchmark aids (seeded rounds, SGLang's strict
verify) are in ``sglang_asd.testing``.
"""

from sglang_asd.verify.dispatch import asd_verify
from sglang_asd.verify.output import ASDVerifyOutput

__all__ = ["ASDVerifyOutput", "asd_verify"]
