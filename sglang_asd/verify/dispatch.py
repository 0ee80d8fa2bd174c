"""``asd_verify``: the fused Triton kernel when the logits are on a CUDA device and Triton
imports, the torch verifier everywhere else. Both give the same outputs bit for bit
(``tests/verify/test_triton_parity.py``), so the choice changes speed, never a decision.

The choice depends on the device and on whether Triton imports, never on tensor values, so it
is fixed for a process and safe under CUDA graph capture. A CUDA device without Triton runs
the torch verifier and says so once in the log.
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

import torch

from sglang_asd.verify.output import ASDVerifyOutput
from sglang_asd.verify.torch_verify import asd_verify as torch_asd_verify

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _triton_verify():
    """The Triton entry point, or None when Triton does not import (logged once)."""
    try:
        from sglang_asd.verify.triton_verify import asd_verify_triton
    except ImportError as e:
        logger.warning("sglang_asd: Triton is not importable (%s); ASD verify runs the torch verifier on CUDA", e)
        return None
    return asd_verify_triton


def asd_verify(
    candidates: torch.Tensor,  # [bs, W] int64 draft token per node (node 0 = root, ignored)
    logits: torch.Tensor,  # [bs*W, V] float final logits (after penalties/bias/grammar mask)
    retrive_next_token: torch.Tensor,  # [bs, W] int64 first child, -1 none
    retrive_next_sibling: torch.Tensor,  # [bs, W] int64 next sibling, -1 none
    remaining: torch.Tensor,  # [bs] float32 ledger remaining budget (0 => strict row)
    gate: torch.Tensor,  # [bs] float32 g (0 => strict row)
    cap: torch.Tensor,  # [bs] int32 m (0 => strict row)
    depth: int,  # K (0: SGLang's adaptive zero-step verify, W = 1)
    stop_tokens: Optional[torch.Tensor] = None,  # [bs, T] int64 -1 padded; never exceptions
    target_predict: Optional[torch.Tensor] = None,  # [bs, W] int64 argmax per node, if known
) -> ASDVerifyOutput:
    """The batched ASD verify (docs/CONTRACTS.md); see ``torch_verify.asd_verify``."""
    impl = _triton_verify() if logits.is_cuda else None
    if impl is None:
        impl = torch_asd_verify
    return impl(candidates, logits, retrive_next_token, retrive_next_sibling, remaining, gate, cap, depth,
                stop_tokens=stop_tokens, target_predict=target_predict)
