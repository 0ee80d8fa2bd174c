"""What the two paged attention ops (``attention_ops.py``) share: the masked softmax and the
gathers of keys and values from the paged pools, in plain torch.

Layout: keys and values are gathered head-major (``[B, Hkv, N, D]``, one copy from the pool) and
the G query heads of a KV head share that head's keys (GQA), so no K/V tensor is copied per query
head. A query with no visible key (and no sink) gets zeros.

Two kernels compute the masked softmax (``SGLANG_ASD_CPU_ATTENTION``, read in ``env.py``; the
choice is made once, when the ops are registered, and held in :data:`FUSED`):

- ``fused`` (default): torch's ``scaled_dot_product_attention``, one call over keys and values in
  the pool's dtype (bf16 on the served models). Scores, the running maximum and the denominator
  accumulate in float32 inside torch's kernel; for a bf16 or fp16 pool the probabilities are
  rounded to that dtype before they weight the values, as GPU flash kernels do. A pool read with a
  scale (fp8) is gathered in float32 first (:func:`kv_dtype`) and attended the same way in float32.
- ``reference``: every step spelled out in float32 (:func:`attend_reference`); also what the
  fused choice falls back to for logit caps and sinks.

Why the fused kernel is the default: in a served Qwen pair it decodes 24 requests of 256 tokens
about 8% faster (the audits' setting) and one request at a time as fast as the reference; figures
in docs/measurements/cpu_attention/NOTES.md. Both kernels are tested against a
dense float64 softmax (``tests/cpu_backend/test_cpu_backend_attention.py``) and against each other
(``tests/cpu_backend/test_cpu_attention_kernels.py``).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

# Upper bound on float32 elements of one score block, to keep long prefills in memory.
SCORE_BLOCK_ELEMS = 1 << 24

# Whether ``attend`` uses torch's fused kernel (``SGLANG_ASD_CPU_ATTENTION=fused``, the default);
# set by ``_registry.register_ops`` from the environment.
FUSED = True
_FUSED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def fused_applies(logit_cap: Optional[float], sinks: Optional[torch.Tensor]) -> bool:
    """Whether ``attend`` takes the fused kernel for these masking rules."""
    return FUSED and sinks is None and not (logit_cap is not None and logit_cap > 0)


def kv_dtype(
    k_pool: torch.Tensor, v_pool: torch.Tensor, key_scale: float, value_scale: float,
    logit_cap: Optional[float], sinks: Optional[torch.Tensor],
) -> torch.dtype:  # fmt: skip
    """The dtype to gather keys and values in: the pools' own where the fused kernel reads them as
    stored, float32 otherwise (the reference kernel, scaled or fp8 pools)."""
    if (fused_applies(logit_cap, sinks) and key_scale == 1.0 and value_scale == 1.0
            and k_pool.dtype == v_pool.dtype and k_pool.dtype in _FUSED_DTYPES):
        return k_pool.dtype
    return torch.float32


def attend(
    q: torch.Tensor,  # [B, M, H, Dk]
    k: torch.Tensor,  # [B, Hkv, N, Dk]
    v: torch.Tensor,  # [B, Hkv, N, Dv], k's dtype
    visible: torch.Tensor,  # [B, M, N] bool
    sm_scale: float,
    logit_cap: Optional[float],
    sinks: Optional[torch.Tensor],  # [H]
) -> torch.Tensor:  # [B, M, H, Dv], k's dtype (fused) or float32 (reference)
    """Softmax attention of each query over its visible keys (``logit_cap``, ``sinks``:
    ``attention_ops``' masking rules), by the kernel :func:`fused_applies` picks."""
    if not fused_applies(logit_cap, sinks):
        return attend_reference(q, k, v, visible, sm_scale, logit_cap, sinks)
    # Query head h reads KV head h // G under enable_gqa, the grouping of attend_reference. A query
    # row with no visible key comes out as zeros (torch's CPU kernel; tested).
    o = F.scaled_dot_product_attention(
        q.transpose(1, 2).to(k.dtype), k, v, attn_mask=visible.unsqueeze(1), scale=sm_scale, enable_gqa=True
    )
    return o.transpose(1, 2)


def attend_reference(
    q: torch.Tensor,  # [B, M, H, Dk]
    k: torch.Tensor,  # [B, Hkv, N, Dk]
    v: torch.Tensor,  # [B, Hkv, N, Dv]
    visible: torch.Tensor,  # [B, M, N] bool
    sm_scale: float,
    logit_cap: Optional[float],
    sinks: Optional[torch.Tensor],  # [H]
) -> torch.Tensor:  # [B, M, H, Dv] float32
    """The masked softmax step by step in float32: the reference kernel."""
    B, M, H, Dk = q.shape
    Hkv, N = k.shape[1], k.shape[2]
    G = H // Hkv
    k, v = k.float(), v.float()
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
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:  # ([B, Hkv, N, D] dtype, [B, N] valid)
    """Positions ``[start, start + lens)`` of each row, head-major, padded to ``width`` (padding
    masked), in ``dtype`` (:func:`kv_dtype`)."""
    col = torch.arange(width)
    valid = col < lens.unsqueeze(1)
    cols = (start.unsqueeze(1) + col).clamp(max=req_to_token.shape[1] - 1)
    slots = req_to_token[rows.unsqueeze(1), cols].to(torch.int64)
    slots = torch.where(valid, slots, torch.zeros_like(slots))  # padding reads slot 0 (masked)
    # head-major and in dtype in one copy, so the kernels read each head's keys as one matrix
    kv = buffer[slots].transpose(1, 2).to(dtype, memory_format=torch.contiguous_format)
    if scale != 1.0:
        kv = kv * scale
    return kv, valid


def row_kv(
    buffer: torch.Tensor, req_to_token: torch.Tensor, row: int, start: int, n: int, scale: float,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:  # fmt: skip
    """Positions ``[start, start + n)`` of pool row ``row`` as ``[n, Hkv, D]`` in ``dtype`` (token-major)."""
    kv = buffer[req_to_token[row, start : start + n].to(torch.int64)].to(dtype)
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
