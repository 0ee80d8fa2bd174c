"""Make every tensor-parallel rank take one rank's ASD decision.

Normally not needed: SGLang gathers the vocab-parallel logits so every rank holds the same bits,
and the verifier is a deterministic function of them and of ledger rows that every rank
updates identically (the argument is in ``triton_verify``'s docstring). For a backend whose
logits or drafts may differ across ranks, ``broadcast_decision`` sends the ``src`` rank's whole
decision to the others, the way SGLang syncs sampled token ids across TP ranks
(``Sampler._sync_token_ids_across_tp``). One collective: every field is packed, bit for bit,
into one int32 buffer (fixed size for fixed shapes, no host sync, capturable in a CUDA graph
with NCCL).

``rank_consistent`` is what the verify step calls (``sglang_seams/scheduler/eagle_sample.py``
says which group, if any: SGLang 0.5.23 broadcasts its strict greedy result on ROCm only, where
per-rank drafts can differ; there ASD broadcasts its whole decision, so the ledgers stay
identical across ranks too; on CUDA ranks agree without communication).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.distributed as dist




def _as_words(t: torch.Tensor) -> torch.Tensor:
    """Flat int32 words holding ``t``'s bits (bool as 0/1)."""
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        return t.to(torch.int32)
    return t.view(torch.int32)


def _from_words(words: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if like.dtype == torch.bool:
        return (words != 0).view(like.shape)
    return words.view(like.dtype).view(like.shape)


def broadcast_decision(out, group: Optional[dist.ProcessGroup] = None, src: int = 0):
    """-> the decision of rank ``src`` (its rank inside ``group``; default: the group's first
    rank) on every rank of ``group``, as fresh tensors, of ``out``'s type: a frozen dataclass of
    tensors (``ASDVerifyOutput``, or the sampled verifier's ``SampledVerifyOutput``). Every rank
    must call it with outputs of the same shapes and dtypes (same bs, W, K), as every TP rank does
    in a verify step."""
    names = [f.name for f in dataclasses.fields(out) if getattr(out, f.name) is not None]  # None: on every rank
    # Packing order: int64 fields first so that their int32 words start at an even offset.
    order = sorted(names, key=lambda name: getattr(out, name).dtype != torch.int64)
    packed = torch.cat([_as_words(getattr(out, name)) for name in order])
    global_src = dist.get_global_rank(group, src) if group is not None else src
    dist.broadcast(packed, src=global_src, group=group)
    fields, offset = {}, 0
    for name in order:
        like = getattr(out, name)
        n = like.numel() * (2 if like.dtype == torch.int64 else 1)
        fields[name] = _from_words(packed[offset:offset + n], like)
        offset += n
    return dataclasses.replace(out, **fields)


def rank_consistent(out, group: Optional[dist.ProcessGroup]):
    """-> the decision every rank of ``group`` takes: ``out`` itself with no group (ranks agree by
    construction), else the group's first rank's (``broadcast_decision``)."""
    if group is None:
        return out
    return broadcast_decision(out, group=group, src=0)
