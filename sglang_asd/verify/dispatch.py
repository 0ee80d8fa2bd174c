"""``asd_verify``, the dispatching entry point: the fused Triton kernel (``asd_verify_triton``) when
the logits are on a CUDA device, Triton imports and every row's rule is one the kernel decides (asd,
local: ``rules.ASD_KERNEL_RULES``); the torch verifier (``asd_verify_torch``) everywhere else.
Both give the same outputs bit for bit on the kernel's rules (``tests/verify/test_triton_parity.py``),
so the choice changes speed, never a decision. A batch holding a scoped row (``verify.scope``,
host-known from the ledger table) runs the torch verifier, greedy and sampled alike: the fused
kernels take no scope yet.

The choice depends on the device, on whether Triton imports and on ``rules_present`` (host-known:
the ledger table's view of the rules its rows use), never on tensor values, so it needs no sync.
It is made for the whole batch: a batch with one margin or threshold row runs the torch verifier
for every row (its cost: docs/VERIFY_KERNEL.md). A CUDA device without Triton runs the torch
verifier and says so once in the log.

``asd_sampled_verify``, the sampling branch's entry point, dispatches the same way: the fused
Triton kernel (``triton_sampled_verify.asd_sampled_verify_triton``) when the target
probabilities are float32 on a CUDA device and the in-place outputs are SGLang's int32 buffers,
the torch verifier (``sampled_verify.asd_sampled_verify``) everywhere else; bit for bit the same
result (``tests/verify/test_sampled_triton_parity.py``). The choice reads dtypes and devices
only: no sync.
"""

from __future__ import annotations

import functools
import logging
from typing import AbstractSet, Optional

import torch

from sglang_asd.policy.config import RULE_NAMES
from sglang_asd.verify import sampled_verify
from sglang_asd.verify.output import ASDVerifyOutput
from sglang_asd.verify.rules import needs_torch_path
from sglang_asd.verify.sampled_verify import SampledVerifyOutput
from sglang_asd.verify.scope import ScopeRows
from sglang_asd.verify.torch_verify import asd_verify_torch

__all__ = ["ASDVerifyOutput", "SampledVerifyOutput", "asd_sampled_verify", "asd_verify"]

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
    scope: Optional[ScopeRows] = None,  # each row's scope (``verify.scope``); None: every position allowed
) -> ASDVerifyOutput:
    """The batched verify (docs/CONTRACTS.md); see ``torch_verify.asd_verify_torch``."""
    torch_only = scope is not None or (
        rule is not None and needs_torch_path(rules_present if rules_present is not None else RULE_NAMES))
    impl = _triton_verify() if logits.is_cuda and not torch_only else None
    if impl is None:
        return asd_verify_torch(candidates, logits, retrieve_next_token, retrieve_next_sibling, remaining, gate,
                                cap, depth, stop_tokens=stop_tokens, target_predict=target_predict, rule=rule,
                                rules_present=rules_present, tree_depth_gate=tree_depth_gate, scope=scope)
    return impl(candidates, logits, retrieve_next_token, retrieve_next_sibling, remaining, gate, cap, depth,
                stop_tokens=stop_tokens, target_predict=target_predict, tree_depth_gate=tree_depth_gate)


@functools.lru_cache(maxsize=1)
def _triton_sampled_verify():
    """The fused sampled entry point, or None when Triton does not import (logged once)."""
    try:
        from sglang_asd.verify.triton_sampled_verify import asd_sampled_verify_triton
    except ImportError as e:
        logger.warning("sglang_asd: Triton is not importable (%s); the sampled verify runs the torch verifier "
                       "on CUDA", e)
        return None
    return asd_sampled_verify_triton


def asd_sampled_verify(
    predicts: torch.Tensor,  # [bs*W] int32, mutable
    accept_index: torch.Tensor,  # [bs, K+1] int32, mutable
    accept_token_num: torch.Tensor,  # [bs] int32, mutable
    candidates: torch.Tensor,  # [bs, W] int64
    retrieve_index: torch.Tensor,  # [bs, W] int64
    retrieve_next_token: torch.Tensor,  # [bs, W] int64
    retrieve_next_sibling: torch.Tensor,  # [bs, W] int64
    uniform_samples: torch.Tensor,  # [bs, W] float32
    uniform_samples_for_final_sampling: torch.Tensor,  # [bs] float32
    target_probs: torch.Tensor,  # [bs, W, V] float32
    remaining: torch.Tensor,  # [bs] float32
    floor: torch.Tensor,  # [bs] float32
    cap: torch.Tensor,  # [bs] int32
    power: torch.Tensor,  # [bs] float32
    stop_tokens: Optional[torch.Tensor] = None,  # [bs, T] int64 -1 padded
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    max_children: Optional[int] = None,
    scope: Optional[ScopeRows] = None,
) -> SampledVerifyOutput:
    """The sampled verify (``sampled_verify.asd_sampled_verify`` documents it): the fused kernel on
    CUDA, the torch verifier elsewhere (and for a batch holding a scoped row)."""
    args = (predicts, accept_index, accept_token_num, candidates, retrieve_index, retrieve_next_token,
            retrieve_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs, remaining,
            floor, cap, power, stop_tokens, threshold_single, threshold_acc, max_children)
    if scope is not None:
        return sampled_verify.asd_sampled_verify(*args, scope=scope)
    fusable = (target_probs.is_cuda and target_probs.dtype == torch.float32 and predicts.is_contiguous()
               and accept_index.is_contiguous()
               and all(t.dtype == torch.int32 for t in (predicts, accept_index, accept_token_num)))
    impl = _triton_sampled_verify() if fusable else None
    if impl is None:
        return sampled_verify.asd_sampled_verify(*args)
    return impl(*args)
