"""Paged attention ops of the ``sgl_kernel`` CPU build, in plain torch.

``IntelAMXAttnBackend`` (``sglang/srt/layers/attention/intel_amx_backend.py``)
calls ``torch.ops.sgl_kernel.decode_attention_cpu`` / ``extend_attention_cpu``
with the argument lists below. Keys and values live in paged pools
(``k_buffer[slot]``: ``[num_slots, Hkv, Dk]``, ``v_buffer[slot]``:
``[num_slots, Hkv, Dv]``); ``req_to_token[req_pool_indices[b], p]`` is the slot
of position p of row b. Query heads share KV heads in groups (GQA:
``H = Hkv * G``).

Masking rules (as SGLang's Triton and torch_native backends apply them), with
q and k absolute positions in the row:
- causal: ``k <= q``; non-causal (encoder-only): every key;
- ``sliding_window_size`` (the backend passes ``layer.sliding_window_size + 1``,
  so 0 means none): keep ``q - k < sliding_window_size`` (``|q - k|`` when
  non-causal), never for cross-attention;
- ``tree_mask`` (speculative verify, QLEN layout ``[sum(L_b * L_b)]`` bool,
  or FULL layout ``[sum((P_b + L_b) * L_b)]``): replaces the causal rule among
  the ``L_b`` extend tokens; the prefix stays visible;
- ``logit_cap > 0``: ``s = cap * tanh(s / cap)`` after scaling;
- ``sinks`` ``[H]``: one extra logit per head that joins the softmax
  denominator and contributes no value;
- ``encoder_lens``: cross-attention reads positions ``[0, enc_len)``, self
  attention ``[enc_len, enc_len + seq_len)`` (torch_native's convention).
Scores and the softmax accumulate in float32 (``attention_core``: the fused kernel rounds the
probabilities to a bf16/fp16 pool's dtype before they weight the values, the reference kernel does
not); the output is cast to ``o``'s dtype. A row with no visible key (and no sink) gets zeros.

The masked softmax and the gathers from the paged pools are ``attention_core.py``'s. Extend calls whose rows have a few new tokens each (speculative verify,
draft extend) run all rows as one padded batch; ragged prefills, long chunks and cross-attention
go row by row (``_batch_fits``). Both paths compute the same masked softmax; they can differ in
the last float32 bits (other matmul shapes, so another summation order).
"""

from __future__ import annotations

from typing import Optional

import torch

from .attention_core import SCORE_BLOCK_ELEMS, attend, gather_kv, kv_dtype, row_kv, write_kv

def decode_attention_cpu(
    query: torch.Tensor,  # [bs, H, Dk]
    k_cache: torch.Tensor,  # [num_slots, Hkv, Dk], written at loc when key is given
    v_cache: torch.Tensor,  # [num_slots, Hkv, Dv], written at loc when value is given
    key_scale: float,
    value_scale: float,
    output: torch.Tensor,  # [bs, H, Dv], written
    key: Optional[torch.Tensor],  # [bs, Hkv, Dk] new token's key, or None (already in cache)
    value: Optional[torch.Tensor],  # [bs, Hkv, Dv]
    loc: torch.Tensor,  # [bs] slot of the new token
    attn_logits: torch.Tensor,  # [bs, H, splits, Dv+1] scratch of the C++ kernel, unused here
    req_to_token: torch.Tensor,  # [rows, width]
    req_pool_indices: torch.Tensor,  # [bs]
    seq_lens: torch.Tensor,  # [bs] tokens to attend, including the new one
    sm_scale: float,
    logit_cap: Optional[float],
    is_cross_attention: bool,
    sliding_window_size: int,
    encoder_lens: Optional[torch.Tensor],  # [bs]
    sinks: Optional[torch.Tensor],  # [H]
) -> None:
    """One query token per row; first stores (key, value) at ``loc``, then attends to the row's cache."""
    if key is not None and value is not None:
        write_kv(k_cache, v_cache, key, value, loc)
    bs = seq_lens.numel()
    if bs == 0:
        return
    seq = seq_lens.reshape(-1).to(torch.int64)
    start = torch.zeros_like(seq)
    end = seq
    if encoder_lens is not None:
        enc = encoder_lens.reshape(-1).to(torch.int64)
        start, end = (torch.zeros_like(enc), enc) if is_cross_attention else (enc, enc + seq)
    if sliding_window_size > 0 and not is_cross_attention:
        start = torch.maximum(start, end - sliding_window_size)
    lens = (end - start).clamp(min=0)
    rows = req_pool_indices.reshape(-1).to(torch.int64)
    n_max = max(int(lens.max()), 1)
    H, Dk = query.shape[1], query.shape[2]
    chunk = max(1, SCORE_BLOCK_ELEMS // (n_max * max(H, k_cache.shape[1] * Dk)))
    dtype = kv_dtype(k_cache, v_cache, key_scale, value_scale, logit_cap, sinks)
    for b0 in range(0, bs, chunk):
        sl = slice(b0, min(bs, b0 + chunk))
        n = max(int(lens[sl].max()), 1)
        k, valid = gather_kv(k_cache, req_to_token, rows[sl], start[sl], lens[sl], n, key_scale, dtype)
        v, _ = gather_kv(v_cache, req_to_token, rows[sl], start[sl], lens[sl], n, value_scale, dtype)
        o = attend(query[sl].unsqueeze(1), k, v, valid.unsqueeze(1), sm_scale, logit_cap, sinks)
        output[sl] = o.squeeze(1).to(output.dtype)


def _tree_mask_offsets(tree_mask: torch.Tensor, prefix: torch.Tensor, ext: torch.Tensor):
    """Start offset of each row's block and whether the layout is FULL (prefix columns included)."""
    qlen_sizes = ext * ext
    full_sizes = (prefix + ext) * ext
    if tree_mask.numel() == int(qlen_sizes.sum()):
        return torch.cumsum(qlen_sizes, 0) - qlen_sizes, False
    if tree_mask.numel() == int(full_sizes.sum()):
        return torch.cumsum(full_sizes, 0) - full_sizes, True
    raise ValueError(
        f"tree_mask has {tree_mask.numel()} entries; expected sum(L*L)={int(qlen_sizes.sum())} (QLEN) "
        f"or sum((P+L)*L)={int(full_sizes.sum())} (FULL)"
    )


def extend_attention_cpu(
    q_extend: torch.Tensor,  # [num_tokens, H, Dk]
    k_extend: Optional[torch.Tensor],  # [num_tokens, Hkv, Dk]; None: read from the cache
    v_extend: Optional[torch.Tensor],  # [num_tokens, Hkv, Dv]
    o_extend: torch.Tensor,  # [num_tokens, H, Dv], written
    k_buffer: torch.Tensor,  # [num_slots, Hkv, Dk]
    v_buffer: torch.Tensor,  # [num_slots, Hkv, Dv]
    key_scale: float,
    value_scale: float,
    req_to_token: torch.Tensor,  # [rows, width]
    req_pool_indices: torch.Tensor,  # [bs]
    seq_lens: torch.Tensor,  # [bs] prefix + extend
    extend_seq_lens: torch.Tensor,  # [bs] L_b
    extend_start_loc: torch.Tensor,  # [bs] first row of b in q/k/v/o_extend
    max_len_extend: Optional[int],
    sm_scale: float,
    logit_cap: Optional[float],
    is_cross_attention: bool,
    sliding_window_size: int,
    encoder_lens: Optional[torch.Tensor],  # [bs]
    sinks: Optional[torch.Tensor],  # [H]
    tree_mask: Optional[torch.Tensor],  # bool, see module docstring
    is_causal: bool,
) -> None:
    """Prefill / chunked prefill / speculative verify: the L_b new tokens of each row attend
    to the row's P_b = seq_len - L_b cached prefix tokens and to each other.

    The extend K/V come from ``k_extend``/``v_extend`` (the backend has already stored them in
    the cache too) or, when those are None (KV-shared layers), from the cache at positions
    ``[P_b, P_b + L_b)``. ``max_len_extend`` only sizes the C++ kernel's blocking; unused here.
    """
    bs = seq_lens.numel()
    if bs == 0:
        return
    seq = seq_lens.reshape(-1).to(torch.int64)
    ext = extend_seq_lens.reshape(-1).to(torch.int64)
    qstart = extend_start_loc.reshape(-1).to(torch.int64)
    prefix = seq - ext
    if bool((prefix < 0).any()):
        raise ValueError(f"extend_attention_cpu: seq_lens {seq.tolist()} shorter than extend_seq_lens {ext.tolist()}")
    enc = encoder_lens.reshape(-1).to(torch.int64) if encoder_lens is not None else torch.zeros_like(seq)
    rows = req_pool_indices.reshape(-1).to(torch.int64)
    window = sliding_window_size if (sliding_window_size > 0 and not is_cross_attention) else 0
    flat_mask, mask_off, mask_full = None, None, False
    if tree_mask is not None and not is_cross_attention:
        mask_off, mask_full = _tree_mask_offsets(tree_mask, prefix, ext)
        flat_mask = tree_mask.reshape(-1).to(torch.bool)
    args = (q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, key_scale, value_scale, req_to_token, rows,
            prefix, ext, qstart, enc, window, flat_mask, mask_off, mask_full, sm_scale, logit_cap, sinks, is_causal)
    if not is_cross_attention and _batch_fits(q_extend.shape[1], prefix, ext, window):
        _extend_batched(*args)
    else:
        _extend_rows(*args, is_cross_attention)


# Largest padding overhead (padded score elements / ragged ones) at which the rows go as one batch;
# below _BATCH_ALWAYS padded elements per head the per-row op overhead dominates whatever the padding.
_BATCH_PAD_RATIO = 2.0
_BATCH_ALWAYS = 1 << 16


def _prefix_start(prefix: torch.Tensor, window: int) -> torch.Tensor:
    """First prefix position a row's first query can see: with a window, keys k > P - window."""
    return (prefix - window + 1).clamp(min=0) if window else torch.zeros_like(prefix)


def _batch_fits(H: int, prefix: torch.Tensor, ext: torch.Tensor, window: int) -> bool:
    """Whether all rows go through ``_extend_batched``: one score block in memory, little padding."""
    kv = prefix - _prefix_start(prefix, window) + ext  # keys per row
    padded = ext.numel() * int(ext.max()) * (int((kv - ext).max()) + int(ext.max()))
    ragged = int((ext * kv).sum())
    return padded * H <= SCORE_BLOCK_ELEMS and padded <= max(_BATCH_PAD_RATIO * ragged, _BATCH_ALWAYS)


def _extend_batched(
    q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, key_scale, value_scale, req_to_token, rows,
    prefix, ext, qstart, enc, window, flat_mask, mask_off, mask_full, sm_scale, logit_cap, sinks, is_causal,
) -> None:  # fmt: skip
    """All rows in one ``attend``, padded to the longest: the speculative verify and draft-extend
    shapes (a few new tokens per row, similar prefixes), where a Python loop over rows would cost
    more than the arithmetic. Each row's keys are its positions ``[p0, P + L)`` gathered from the
    cache in one pass, the extend columns then overwritten by ``k_extend``/``v_extend`` when given
    (exactly what ``_extend_rows`` attends to); padded keys are masked, padded queries dropped."""
    B, M = ext.numel(), int(ext.max())
    if M == 0:
        return
    p0 = _prefix_start(prefix, window)
    plen = prefix - p0
    kv_len = plen + ext
    N = int(kv_len.max())
    dtype = kv_dtype(k_buffer, v_buffer, key_scale, value_scale, logit_cap, sinks)
    k, kv_valid = gather_kv(k_buffer, req_to_token, rows, enc + p0, kv_len, N, key_scale, dtype)
    v, _ = gather_kv(v_buffer, req_to_token, rows, enc + p0, kv_len, N, value_scale, dtype)
    i = torch.arange(M)
    ext_valid = i < ext.unsqueeze(1)  # [B, M]: real queries
    tok = torch.where(ext_valid, qstart.unsqueeze(1) + i, torch.zeros_like(i))  # row of q/k/v/o_extend
    if k_extend is not None and v_extend is not None:
        b_idx = torch.arange(B).unsqueeze(1).expand(B, M)[ext_valid]
        col = (plen.unsqueeze(1) + i)[ext_valid]
        src = tok[ext_valid]
        k.transpose(1, 2)[b_idx, col] = k_extend[src].to(k.dtype)
        v.transpose(1, 2)[b_idx, col] = v_extend[src].to(v.dtype)

    qi = i.view(1, M, 1)
    e = torch.arange(N).view(1, 1, N) - plen.view(B, 1, 1)  # extend index of each key column (< 0: prefix)
    is_ext = (e >= 0) & kv_valid.unsqueeze(1)  # [B, 1, N]
    if flat_mask is not None:
        stride = (prefix + ext) if mask_full else ext  # row length of the mask block
        skip = prefix if mask_full else torch.zeros_like(prefix)  # FULL blocks start with the prefix columns
        idx = mask_off.view(B, 1, 1) + qi * stride.view(B, 1, 1) + skip.view(B, 1, 1) + e
        in_block = is_ext & ext_valid.unsqueeze(2)
        ext_vis = flat_mask[torch.where(in_block, idx, torch.zeros_like(idx))] & in_block
    else:
        ext_vis = is_ext & (e <= qi) if is_causal else is_ext
    visible = ext_vis | (kv_valid.unsqueeze(1) & (e < 0))  # the prefix is always visible
    if window:  # query P + i, key P + e: distance i - e
        dist = qi - e
        visible = visible & ((dist < window) if (is_causal or flat_mask is not None) else (dist.abs() < window))
    o = attend(q_extend[tok], k, v, visible.expand(B, M, N), sm_scale, logit_cap, sinks)
    o_extend[tok[ext_valid]] = o[ext_valid].to(o_extend.dtype)


def _extend_rows(
    q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, key_scale, value_scale, req_to_token, rows,
    prefix, ext, qstart, enc, window, flat_mask, mask_off, mask_full, sm_scale, logit_cap, sinks, is_causal,
    is_cross_attention: bool,
) -> None:  # fmt: skip
    """One row at a time, query blocks bounded in memory: ragged prefills, long chunks, cross-attention."""
    H = q_extend.shape[1]
    dtype = kv_dtype(k_buffer, v_buffer, key_scale, value_scale, logit_cap, sinks)
    for b in range(ext.numel()):  # rows have ragged lengths; everything inside is vectorized
        L, P, q0, row = int(ext[b]), int(prefix[b]), int(qstart[b]), int(rows[b])
        if L == 0:
            continue
        qpos = torch.arange(P, P + L)
        if is_cross_attention:
            n = int(enc[b])
            k = row_kv(k_buffer, req_to_token, row, 0, n, key_scale, dtype)
            v = row_kv(v_buffer, req_to_token, row, 0, n, value_scale, dtype)
            kpos = torch.arange(n)

            def visible_fn(qp, kp):
                return torch.ones(qp.numel(), kp.numel(), dtype=torch.bool)

        else:
            off = int(enc[b])
            # with a window, the first query (position P) only sees keys k > P - window
            p0 = max(0, P - window + 1) if window else 0
            kp = row_kv(k_buffer, req_to_token, row, off + p0, P - p0, key_scale, dtype)
            vp = row_kv(v_buffer, req_to_token, row, off + p0, P - p0, value_scale, dtype)
            if k_extend is not None and v_extend is not None:
                ke, ve = k_extend[q0 : q0 + L].to(dtype), v_extend[q0 : q0 + L].to(dtype)
            else:  # KV-shared layers: the extend K/V are already in the cache
                ke = row_kv(k_buffer, req_to_token, row, off + P, L, key_scale, dtype)
                ve = row_kv(v_buffer, req_to_token, row, off + P, L, value_scale, dtype)
            k, v = torch.cat([kp, ke], 0), torch.cat([vp, ve], 0)
            kpos = torch.arange(p0, P + L)
            tree = None
            if mask_off is not None:
                base = int(mask_off[b])
                if mask_full:
                    tree = flat_mask[base : base + (P + L) * L].view(L, P + L)[:, P:]
                else:
                    tree = flat_mask[base : base + L * L].view(L, L)

            def visible_fn(qp, kp, P=P, tree=tree):
                if tree is not None:
                    ext_vis = tree[qp - P][:, (kp - P).clamp(min=0)]
                elif is_causal:
                    ext_vis = kp.view(1, -1) <= qp.view(-1, 1)
                else:
                    ext_vis = torch.ones(qp.numel(), kp.numel(), dtype=torch.bool)
                vis = ext_vis | (kp < P).view(1, -1)  # the prefix is always visible
                if window:
                    dist = qp.view(-1, 1) - kp.view(1, -1)
                    vis &= (dist < window) if (is_causal or tree is not None) else (dist.abs() < window)
                return vis

        n_keys = max(k.shape[0], 1)
        block = max(1, SCORE_BLOCK_ELEMS // (n_keys * H))
        for m0 in range(0, L, block):
            m1 = min(L, m0 + block)
            vis = visible_fn(qpos[m0:m1], kpos)
            o = attend(
                q_extend[q0 + m0 : q0 + m1].unsqueeze(0),
                k.transpose(0, 1).unsqueeze(0),
                v.transpose(0, 1).unsqueeze(0),
                vis.unsqueeze(0),
                sm_scale,
                logit_cap,
                sinks,
            )
            o_extend[q0 + m0 : q0 + m1] = o[0].to(o_extend.dtype)


OPS = {
    "decode_attention_cpu": (
        "(Tensor query, Tensor(a!) k_cache, Tensor(b!) v_cache, float key_scale, float value_scale, "
        "Tensor(c!) output, Tensor? key, Tensor? value, Tensor loc, Tensor attn_logits, Tensor req_to_token, "
        "Tensor req_pool_indices, Tensor seq_lens, float sm_scale, float? logit_cap, bool is_cross_attention, "
        "int sliding_window_size, Tensor? encoder_lens, Tensor? sinks) -> ()",
        decode_attention_cpu,
    ),
    "extend_attention_cpu": (
        "(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, Tensor(a!) o_extend, Tensor k_buffer, "
        "Tensor v_buffer, float key_scale, float value_scale, Tensor req_to_token, Tensor req_pool_indices, "
        "Tensor seq_lens, Tensor extend_seq_lens, Tensor extend_start_loc, int? max_len_extend, float sm_scale, "
        "float? logit_cap, bool is_cross_attention, int sliding_window_size, Tensor? encoder_lens, "
        "Tensor? sinks, Tensor? tree_mask, bool is_causal) -> ()",
        extend_attention_cpu,
    ),
}
