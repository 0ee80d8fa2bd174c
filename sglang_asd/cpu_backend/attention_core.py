"""What the two paged attention ops (``attention_ops.py``) share: the masked softmax and the
gathers of keys and values from the paged pools, in plain torch.

Layout: keys and values are gathered head-major (``[B, Hkv, N, D]`` float32, one copy from the
pool) and the G query heads of a KV head go as G * M rows of one matmul (``attend``), so no K/V
tensor is copied per query head. Scores and the softmax run in float32; a query with no visible
key (and no sink) gets zeros.
"""

from __future__ import annotations

from typing import Optional

import torch

# Upper bound on float32 elements of one score block, to keep long prefills in memory.
SCORE_BLOCK_ELEMS = 1 << 24


def attend(
    q: torch.Tensor,  # [B, M, H, Dk]
    k: torch.Tensor,  # [B, Hkv, N, Dk] float32
    v: torch.Tensor,  # [B, Hkv, N, Dv] float32
    visible: torch.Tensor,  # [B, M, N] bool
    sm_scale: float,
    logit_cap: Optional[float],
    sinks: Optional[torch.Tensor],  # [H]
) -> torch.Tensor:  # [B, M, H, Dv] float32
    """Softmax attention of each query over its visible keys, in float32 (``logit_cap``, ``sinks``:
    ``attention_ops``' masking rules)."""
    B, M, H, Dk = q.shape
    Hkv, N = k.shape[1], k.shape[2]
    G = H // Hkv
    # The G query heads of a KV head go as G * M rows of one matmul against that head's keys
    # (broadcasting K over G would copy it G times).
    qg = q.float().reshape(B, M, Hkv, G, Dk).permute(0, 2, 3, 1, 4).reshape(B, Hkv, G * M, Dk)
    s = torch.matmul(qg, k.transpose(2, 3)).view(B, Hkv, G, M, N) * sm_scale
    if logit_cap is not None and logit_cap > 0:
        s = logit_cap * torch.tanh(s / logit_cap)
    s = s.masked_fill(~visible.reshape(B, 1, 1, M, N), float("-inf"))
    m = s.amax(-1, keepdim=True)  # [B, Hkv, G, M, 1]
    if sinks is not None:
        sink = sinks.float().reshape(1, Hkv, G, 1, 1)
        m = torch.maximum(m, sink)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    p = torch.exp(s - m)
    denom = p.sum(-1, keepdim=True)
    if sinks is not None:
        denom = denom + torch.exp(sink - m)
    o = torch.matmul(p.view(B, Hkv, G * M, N), v).view(B, Hkv, G, M, -1)
    o = torch.where(denom > 0, o / denom.clamp_min(torch.finfo(torch.float32).tiny), torch.zeros_like(o))
    return o.permute(0, 3, 1, 2, 4).reshape(B, M, H, -1)


def gather_kv(
    buffer: torch.Tensor,  # [num_slots, Hkv, D]
    req_to_token: torch.Tensor,  # [rows, width]
    rows: torch.Tensor,  # [B] int64
    start: torch.Tensor,  # [B] int64 first position
    lens: torch.Tensor,  # [B] int64
    width: int,  # N >= max(lens)
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # ([B, Hkv, N, D] float32, [B, N] valid)
    """Positions ``[start, start + lens)`` of each row, head-major, padded to ``width`` (padding masked)."""
    col = torch.arange(width)
    valid = col < lens.unsqueeze(1)
    cols = (start.unsqueeze(1) + col).clamp(max=req_to_token.shape[1] - 1)
    slots = req_to_token[rows.unsqueeze(1), cols].to(torch.int64)
    slots = torch.where(valid, slots, torch.zeros_like(slots))  # padding reads slot 0 (masked)
    # head-major and float32 in one copy, so the matmuls read each head's keys as one matrix
    kv = buffer[slots].transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
    if scale != 1.0:
        kv = kv * scale
    return kv, valid


def row_kv(buffer: torch.Tensor, req_to_token: torch.Tensor, row: int, start: int, n: int, scale: float):
    """Positions ``[start, start + n)`` of pool row ``row`` as ``[n, Hkv, D]`` float32 (token-major)."""
    kv = buffer[req_to_token[row, start : start + n].to(torch.int64)].float()
    return kv * scale if scale != 1.0 else kv


def write_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, key: torch.Tensor, value: torch.Tensor, loc: torch.Tensor
) -> None:
    """Store the new tokens' key and value at their slots ``loc``."""
    loc = loc.reshape(-1).to(torch.int64)
    k_cache[loc] = key.reshape(loc.numel(), *k_cache.shape[1:]).to(k_cache.dtype)
    # MLA pools hand out V as a view into the K buffer; writing K already wrote it. (MHA pools
    # may carve K and V out of one allocation, so compare address ranges, not storages.)
    if not _overlaps(k_cache, v_cache):
        v_cache[loc] = value.reshape(loc.numel(), *v_cache.shape[1:]).to(v_cache.dtype)


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory two tensors can address overlaps."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + _span_bytes(b) and b0 < a0 + _span_bytes(a)


def _span_bytes(t: torch.Tensor) -> int:
    """Bytes from the first to one past the last element a (strided) tensor can address."""
    if t.numel() == 0:
        return 0
    return (sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1) * t.element_size()
