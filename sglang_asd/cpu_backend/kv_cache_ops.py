"""KV-cache slot bookkeeping ops of the ``sgl_kernel`` CPU build, in plain torch.

Vocabulary: a *slot* is one row of a KV buffer (``out_cache_loc`` values);
``req_to_token[r, p]`` (int32, ``[max_num_reqs, pool_len]``) is the slot of
position ``p`` of the request in pool row ``r``.

Semantics follow sgl-kernel's ``csrc/cpu`` kernels and the Triton kernels in
``sglang/kernels/ops/speculative/cache_locs.py``, ``.../eagle.py`` and
``sglang/srt/mem_cache/allocation.py`` (same names without ``_cpu``).
Every op is vectorized; none loops over tokens in Python.
"""

from __future__ import annotations

import ctypes
from typing import Optional

import torch


def _segments(start: torch.Tensor, end: torch.Tensor):
    """Flatten the ragged segments ``[start[i], end[i])`` of a batch.

    Returns ``(seg, pos, total)``: for every flat element its batch row and its
    position inside the row, and the number of elements.
    """
    start = start.reshape(-1).to(torch.int64)
    lens = end.reshape(-1).to(torch.int64) - start
    if lens.numel() and bool((lens < 0).any()):
        raise ValueError(f"end_offset must be >= start_offset, got lengths {lens.tolist()}")
    total = int(lens.sum()) if lens.numel() else 0
    seg = torch.repeat_interleave(torch.arange(lens.numel()), lens)
    first = torch.cumsum(lens, 0) - lens  # exclusive prefix sum
    pos = start[seg] + (torch.arange(total) - first[seg])
    return seg, pos, total


def _check_room(name: str, out: torch.Tensor, total: int) -> None:
    if total > out.numel():
        raise ValueError(f"{name}: out_cache_loc has {out.numel()} entries but offsets require {total}")


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,  # [bs] int32/int64
    req_to_token: torch.Tensor,  # [max_num_reqs, pool_len] int32, written
    start_offset: torch.Tensor,  # [bs]
    end_offset: torch.Tensor,  # [bs]
    out_cache_loc: torch.Tensor,  # [sum(end - start)] int64
    pool_len: int,
) -> None:
    """``req_to_token[rpi[i], start[i]:end[i]] = out_cache_loc[prefix[i]:prefix[i+1]]``."""
    seg, pos, total = _segments(start_offset, end_offset)
    _check_room("assign_req_to_token_pool", out_cache_loc, total)
    if total == 0:
        return
    rows = req_pool_indices.reshape(-1).to(torch.int64)[seg]
    req_to_token.view(-1, pool_len)[rows, pos] = out_cache_loc.reshape(-1)[:total].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,  # [bs]
    req_to_token: torch.Tensor,  # [max_num_reqs, pool_len]
    start_offset: torch.Tensor,  # [bs]
    end_offset: torch.Tensor,  # [bs]
    out_cache_loc: torch.Tensor,  # [>= sum(end - start)] int64, written
    pool_len: int,
) -> None:
    """``out_cache_loc[prefix[i]:prefix[i+1]] = req_to_token[rpi[i], start[i]:end[i]]``; the tail is untouched."""
    seg, pos, total = _segments(start_offset, end_offset)
    _check_room("assign_extend_cache_locs", out_cache_loc, total)
    if total == 0:
        return
    rows = req_pool_indices.reshape(-1).to(torch.int64)[seg]
    out_cache_loc.view(-1)[:total] = req_to_token.view(-1, pool_len)[rows, pos].to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,  # [bs]
    req_to_token: torch.Tensor,  # [max_num_reqs, pool_len] int32
    seq_lens: torch.Tensor,  # [bs]
    out_cache_loc: torch.Tensor,  # [bs * topk * num_steps] int64, written
    pool_len: int,
    topk: int,
    num_steps: int,
) -> None:
    """Row ``i`` of ``out_cache_loc.view(bs, topk*num_steps)`` = ``req_to_token[rpi[i], seq_lens[i] + j]``."""
    bs = req_pool_indices.numel()
    copy_len = topk * num_steps
    if out_cache_loc.numel() != bs * copy_len:
        raise ValueError(
            f"assign_draft_cache_locs_contiguous: out_cache_loc must have bs*topk*num_steps="
            f"{bs * copy_len} entries, got {out_cache_loc.numel()}"
        )
    if bs == 0 or copy_len == 0:
        return
    rows = req_pool_indices.reshape(-1, 1).to(torch.int64)
    cols = seq_lens.reshape(-1, 1).to(torch.int64) + torch.arange(copy_len)
    out_cache_loc.view(bs, copy_len)[:] = req_to_token.view(-1, pool_len)[rows, cols].to(out_cache_loc.dtype)


def build_draft_decode_metadata_cpu(
    req_to_token: torch.Tensor,  # [max_num_reqs, pool_len] int32
    req_pool_indices: torch.Tensor,  # [num_seqs]
    seq_lens: torch.Tensor,  # [num_seqs]
    topk: int,
    num_steps: int,
    pool_len: int,
) -> torch.Tensor:  # [num_seqs * topk, pool_len] int32
    """Per-candidate ``req_to_token`` for multi-step draft decode.

    Row ``b*topk + k`` holds request ``b``'s committed prefix ``[0, sl)``
    followed by candidate ``k``'s draft slots, which
    ``assign_draft_cache_locs_contiguous`` laid out at ``sl + k*num_steps``.
    Only the first ``sl + num_steps`` entries of a row are meaningful (the
    rest are zero here).
    """
    num_seqs = req_pool_indices.numel()
    out = torch.zeros((num_seqs * topk, pool_len), dtype=req_to_token.dtype)
    if num_seqs == 0 or topk == 0:
        return out
    sl = seq_lens.reshape(-1).to(torch.int64)
    width = min(int(sl.max()) + num_steps, pool_len)
    col = torch.arange(width)  # [width]
    sl_rows = sl.repeat_interleave(topk).unsqueeze(1)  # [num_seqs*topk, 1]
    cand = torch.arange(topk).repeat(num_seqs).unsqueeze(1)  # [num_seqs*topk, 1]
    src = torch.where(col < sl_rows, col, col + cand * num_steps)
    valid = col < sl_rows + num_steps
    src = torch.where(valid, src, 0)
    rows = req_pool_indices.reshape(-1).to(torch.int64).repeat_interleave(topk).unsqueeze(1)
    gathered = req_to_token.view(-1, pool_len)[rows, src]
    out[:, :width] = torch.where(valid, gathered, torch.zeros((), dtype=out.dtype))
    return out


def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor,  # [bs, S] or flat, -1 = rejected
    out_cache_loc: torch.Tensor,  # [bs * W] int64
    accept_out_cache_loc: torch.Tensor,  # [>= num_accepted] int64, written
    size: Optional[int] = None,
) -> None:
    """Compact the accepted tokens' slots: ``out[:n] = out_cache_loc[accept_index[accept_index > -1]]``.

    ``size`` (older wrappers pass it) limits the scan to the first ``size``
    entries of the flattened ``accept_index``.
    """
    flat = accept_index.reshape(-1)
    if size is not None:
        flat = flat[:size]
    src = flat[flat > -1].to(torch.int64)
    if src.numel() == 0:
        return
    if int(src.max()) >= out_cache_loc.numel():
        raise IndexError(
            f"fill_accept_out_cache_loc: accept_index {int(src.max())} out of range for "
            f"{out_cache_loc.numel()} cache locations"
        )
    accept_out_cache_loc.view(-1)[: src.numel()] = out_cache_loc.reshape(-1)[src].to(accept_out_cache_loc.dtype)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,  # [num_buffers] uint64, base address of each K/V buffer
    strides: torch.Tensor,  # [num_buffers] int64, bytes per slot row
    tgt_loc: torch.Tensor,  # [n] slot indices
    src_loc: torch.Tensor,  # [n] slot indices
) -> None:
    """``buf[tgt_loc[i], :] = buf[src_loc[i], :]`` for every buffer, gather-then-scatter.

    The pool hands over raw base addresses (``MHATokenToKVPool.data_ptrs``),
    so each buffer is viewed as ``[rows, stride]`` bytes over exactly the rows
    the copy touches. All source rows are read before any target row is
    written, so overlapping ``tgt_loc``/``src_loc`` are safe.
    """
    n = tgt_loc.numel()
    if src_loc.numel() != n:
        raise ValueError(f"copy_all_layer_kv_cache: tgt_loc has {n} entries, src_loc {src_loc.numel()}")
    if n == 0 or data_ptrs.numel() == 0:
        return
    tgt = tgt_loc.reshape(-1).to(torch.int64)
    src = src_loc.reshape(-1).to(torch.int64)
    if bool((tgt < 0).any()) or bool((src < 0).any()):
        raise ValueError("copy_all_layer_kv_cache: negative slot index")
    rows = int(torch.maximum(tgt.max(), src.max())) + 1
    for ptr, stride in zip(data_ptrs.view(torch.int64).tolist(), strides.tolist()):
        if ptr == 0 or stride <= 0:
            raise ValueError(f"copy_all_layer_kv_cache: bad buffer (ptr={ptr:#x}, stride={stride})")
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(ptr & 0xFFFFFFFFFFFFFFFF)
        buf = torch.frombuffer(raw, dtype=torch.uint8).view(rows, stride)
        buf[tgt] = buf[src]


# name -> (schema, implementation); registered under torch.ops.sgl_kernel by _registry.
OPS = {
    "assign_req_to_token_pool_cpu": (
        "(Tensor req_pool_indices, Tensor(a!) req_to_token, Tensor start_offset, Tensor end_offset, "
        "Tensor out_cache_loc, int pool_len) -> ()",
        assign_req_to_token_pool_cpu,
    ),
    "assign_extend_cache_locs_cpu": (
        "(Tensor req_pool_indices, Tensor req_to_token, Tensor start_offset, Tensor end_offset, "
        "Tensor(a!) out_cache_loc, int pool_len) -> ()",
        assign_extend_cache_locs_cpu,
    ),
    "assign_draft_cache_locs_contiguous_cpu": (
        "(Tensor req_pool_indices, Tensor req_to_token, Tensor seq_lens, Tensor(a!) out_cache_loc, "
        "int pool_len, int topk, int num_steps) -> ()",
        assign_draft_cache_locs_contiguous_cpu,
    ),
    "build_draft_decode_metadata_cpu": (
        "(Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, int topk, int num_steps, "
        "int pool_len) -> Tensor",
        build_draft_decode_metadata_cpu,
    ),
    "fill_accept_out_cache_loc_cpu": (
        "(Tensor accept_index, Tensor out_cache_loc, Tensor(a!) accept_out_cache_loc, int? size=None) -> ()",
        fill_accept_out_cache_loc_cpu,
    ),
    "copy_all_layer_kv_cache_cpu": (
        "(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, Tensor src_loc) -> ()",
        copy_all_layer_kv_cache_cpu,
    ),
}
