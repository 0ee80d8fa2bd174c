"""``asd_verify``, the dispatching entry point: the fused Triton kernel (``asd_verify_triton``) when
the logits are on a CUDA device, Triton imports and every row's rule is one the kernel decides (asd,
local: ``rules.ASD_KERNEL_RULES``); the torch verifier (``asd_verify_torch``) everywhere else.
Both give the same outputs bit for bit on the kernel's rules (``tests/verify/test_triton_parity.py``),
so the choice changes speed, never a decision.

The choice depends on the device, on whether Triton imports and on ``rules_present`` (host-known:
the ledger table's view of the rules its rows use), never on tensor values, so it needs no sync.
It is made for the whole batch: a batch with one margin or threshold row runs the torch verifier
for every row (its cost: docs/VERIFY_KERNEL.md). A CUDA device without Triton runs the torch
verifier and says so once in the log.
"""

from __future__ import annotations

import functools
import logging
from typing import AbstractSet, Optional

import torch

from sglang_asd.policy.config import RULE_NAMES
from sglang_asd.verify.output import ASDVerifyOutput
from sglang_asd.verify.rules import needs_torch_path
from sglang_asd.verify.torch_verify import asd_verify_torch

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
    retrieve_next_token: torch.Tensor,  # [bs, W] int64 first child, -1 none
    retrieve_next_sibling: torch.Tensor,  # [bs, W] int64 next sibling, -1 none
    remaining: torch.Tensor,  # [bs] float32 asd: B - spent; other rules: B (0 => strict row)
    gate: torch.Tensor,  # [bs] float32 the rule's gate: g, margin or threshold (0 => strict row)
    cap: torch.Tensor,  # [bs] int32 m, capped rules only (0 => strict row)
    depth: int,  # K (0: SGLang's adaptive zero-step verify, W = 1)
    stop_tokens: Optional[torch.Tensor] = None,  # [bs, T] int64 -1 padded; never exceptions
    target_predict: Optional[torch.Tensor] = None,  # [bs, W] int64 argmax per node, if known
    rule: Optional[torch.Tensor] = None,  # [bs] int32 rule id per row; None: every row asd
    rules_present: Optional[AbstractSet[str]] = None,  # host-known superset of the rules in ``rule``
    tree_depth_gate: bool = False,  # NGRAM: q_i = (row's tree depth) - i instead of K - i
) -> ASDVerifyOutput:
    """The batched verify (docs/CONTRACTS.md); see ``torch_verify.asd_verify_torch``."""
    torch_only = rule is not None and needs_torch_path(rules_present if rules_present is not None else RULE_NAMES)
    impl = _triton_verify() if logits.is_cuda and not torch_only else None
    if impl is None:
        return asd_verify_torch(candidates, logits, retrieve_next_token, retrieve_next_sibling, remaining, gate,
                                cap, depth, stop_tokens=stop_tokens, target_predict=target_predict, rule=rule,
                                rules_present=rules_present, tree_depth_gate=tree_depth_gate)
    return impl(candidates, logits, retrieve_next_token, retrieve_next_sibling, remaining, gate, cap, depth,
                stop_tokens=stop_tokens, target_predict=target_predict, tree_depth_gate=tree_depth_gate)
