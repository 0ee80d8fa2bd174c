"""Batched ASD verify (torch only at import; no sglang).

    from sglang_asd.verify import asd_verify, ASDVerifyOutput

``asd_verify`` (``dispatch.py``) is the entry point the SGLang seams call; its signature is the
contract in docs/CONTRACTS.md. Each row has its acceptance rule (asd, local, margin, threshold), as
data (``rules.py``). It dispatches on the logits' device and the rules in use: the fused Triton
kernel (``triton_verify.asd_verify_triton``) for CUDA when every row is asd or local, the plain
torch verifier (``torch_verify.asd_verify_torch``, every rule, the reference both are tested
against) otherwise. The kernel's compiled variants are modelled in ``variants.py`` (keys, shapes,
enumeration); ``warmup.py`` compiles and loads every one a server can use, at start-up. Imports
run one way: ``warmup`` -> ``triton_verify`` -> ``variants``. Test and benchmark aids (seeded
rounds, SGLang's strict verify) are in ``sglang_asd.testing``.

Tree links are spelled ``retrieve_*``, as SGLang's Python spells them (``EagleVerifyInput``,
``verify_tree_greedy_func``); ``retrive_*`` is only the ``sgl_kernel`` op schema's spelling
(``sglang_asd.cpu_backend.spec_tree_ops``).
"""

from sglang_asd.verify.dispatch import asd_verify
from sglang_asd.verify.output import ASDVerifyOutput

__all__ = ["ASDVerifyOutput", "asd_verify"]
