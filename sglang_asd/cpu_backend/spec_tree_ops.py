"""Speculative-decoding tree ops of the ``sgl_kernel`` CPU build, in plain torch.

Vocabulary (docs/CONTRACTS.md): ``bs`` rows, ``W`` = draft_token_num nodes per
row including the root (node 0 = the last committed token), ``S`` accept slots.
A *global* node id is ``b*W + i`` (what ``retrive_index`` holds).

Tree encoding shared by every op (the ``sgl_kernel`` op schema's spelling "retrive"; SGLang's
Python and sglang_asd's own code say "retrieve"):
``retrive_next_token[b, i]`` = first child of node i, ``retrive_next_sibling[b, i]``
= next sibling, -1 for none; children are listed in increasing node order.

Semantics follow sgl-kernel's ``csrc/cpu/speculative_decoding.cpp`` and the
Triton versions in ``sglang/kernels/ops/speculative/{spec_tree,reconstruct_tree,
eagle,multi_layer_eagle}.py``. Loops run over tree depth or sibling hops with the
whole batch vectorized, never over tokens.
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch

from .kv_cache_ops import _segments

FULL_MASK = 0
QLEN_ONLY = 1


def _first_true(mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Index of the first True along ``dim``, -1 where there is none."""
    if mask.shape[dim] == 0:
        return torch.full(mask.sum(dim).shape, -1, dtype=torch.int64)
    idx = mask.to(torch.int8).argmax(dim)  # argmax returns the first maximal index
    return torch.where(mask.any(dim), idx, torch.full_like(idx, -1))


def _links_from_parents(parent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(first child, next sibling) per node from ``parent`` ([bs, W], < 0 = no parent)."""
    W = parent.shape[1]
    node = torch.arange(W)
    # child[b, p, j]: node j is a child of node p
    child = parent.unsqueeze(1) == node.view(1, W, 1)
    next_token = _first_true(child, 2)
    # sib[b, i, j]: j > i shares i's (valid) parent
    sib = (parent.unsqueeze(2) == parent.unsqueeze(1)) & (node.view(1, 1, W) > node.view(1, W, 1))
    sib &= (parent >= 0).unsqueeze(2)
    next_sibling = _first_true(sib, 2)
    return next_token, next_sibling


def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,  # [bs, topk*(depth-1)+1] (or [bs, 0] when depth == 1)
    selected_index: torch.Tensor,  # [bs, W-1]
    verified_seq_len: torch.Tensor,  # [bs] committed prefix length
    tree_mask: torch.Tensor,  # bool, written: QLEN_ONLY [bs*W*W]; FULL_MASK [sum(seq_len)*W + bs*W*W]
    positions: torch.Tensor,  # [bs*W], written
    retrive_index: torch.Tensor,  # [bs, W], written
    retrive_next_token: torch.Tensor,  # [bs, W], written
    retrive_next_sibling: torch.Tensor,  # [bs, W], written
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """Build EAGLE's verify tree from the draft's top-k selection.

    Node ``i >= 1`` is ``selected_index[b, i-1]``; its branch is
    ``selected_index // topk``; branch 0 hangs off the root, branch ``t > 0``
    off the node whose selected_index equals ``parent_list[b, t]``. A node
    attends to the root, its ancestors and itself; ``positions`` = seq_len +
    depth. FULL_MASK writes only each row's W tree columns (the caller fills
    the seq_len prefix columns with True); QLEN_ONLY overwrites the whole
    ``[bs, W, W]`` mask. ``retrive_*`` are fully written (-1 for none).
    """
    if tree_mask_mode not in (FULL_MASK, QLEN_ONLY):
        raise ValueError(
            "build_tree_kernel_efficient_cpu: tree_mask_mode must be 0 (FULL_MASK) or 1 (QLEN_ONLY), "
            f"got {tree_mask_mode}"
        )
    bs, W = verified_seq_len.numel(), draft_token_num
    if bs == 0:
        return
    if selected_index.shape != (bs, W - 1):
        raise ValueError(f"selected_index must be [bs, W-1]=[{bs}, {W - 1}], got {tuple(selected_index.shape)}")
    seq_len = verified_seq_len.reshape(-1).to(torch.int64)
    sel = selected_index.to(torch.int64)  # [bs, W-1]
    branch = torch.div(sel, topk, rounding_mode="floor")
    if parent_list.numel():
        parent_tok = parent_list.to(torch.int64).gather(1, branch.clamp(max=parent_list.shape[1] - 1))
    else:
        parent_tok = torch.full_like(sel, -1)
    # position in selected_index of the parent token (first match), -1 if absent
    found = _first_true(sel.unsqueeze(1) == parent_tok.unsqueeze(2), 2)  # [bs, W-1]
    # parent node of node i>=1: 0 = root, j+1 = node of sel position j, -1 = malformed
    parent = torch.where(branch > 0, torch.where(found >= 0, found + 1, -1), 0)
    if bool((parent < 0).any()):
        warnings.warn("build_tree_kernel_efficient_cpu: invalid eagle tree, a parent node is missing")
    parent = torch.cat([torch.full((bs, 1), -1, dtype=torch.int64), parent], 1)  # [bs, W]

    next_token, next_sibling = _links_from_parents(parent)
    rows = torch.arange(bs).unsqueeze(1)
    retrive_index.copy_((rows * W + torch.arange(W)).view_as(retrive_index))
    retrive_next_token.copy_(next_token.view_as(retrive_next_token))
    retrive_next_sibling.copy_(next_sibling.view_as(retrive_next_sibling))

    # Walk every node root-ward (at most `depth` steps), marking itself and its ancestors.
    mask = torch.zeros((bs, W, W), dtype=torch.bool)
    mask[:, :, 0] = True
    steps = torch.zeros((bs, W), dtype=torch.int64)
    cur = torch.arange(W).expand(bs, W).clone()
    active = cur > 0
    bidx = rows.expand(bs, W)
    tidx = torch.arange(W).expand(bs, W)
    for _ in range(depth):
        if not bool(active.any()):
            break
        steps += active.to(torch.int64)
        mask[bidx[active], tidx[active], cur[active]] = True
        nxt = parent.gather(1, cur)
        active &= nxt > 0  # stop at a root child (0) or a malformed link (-1)
        cur = torch.where(active, nxt, cur)
    positions.copy_((seq_len.unsqueeze(1) + steps).view_as(positions))

    flat_mask = tree_mask.view(-1)
    if tree_mask_mode == QLEN_ONLY:
        if flat_mask.numel() != bs * W * W:
            raise ValueError(f"QLEN_ONLY tree_mask must have bs*W*W={bs * W * W} entries, got {flat_mask.numel()}")
        flat_mask.copy_(mask.view(-1))
        return
    # FULL_MASK: request b's block starts at b*W*W + sum_{c<b} seq_len[c]*W and has
    # W rows of (seq_len[b] + W) columns; write the W tree columns of each row.
    need = int(seq_len.sum()) * W + bs * W * W
    if flat_mask.numel() != need:
        raise ValueError(
            f"FULL_MASK tree_mask must have sum(seq_len)*W + bs*W*W={need} entries, got {flat_mask.numel()}"
        )
    base = torch.arange(bs) * W * W + (torch.cumsum(seq_len, 0) - seq_len) * W
    node = torch.arange(W)
    idx = (
        base.view(bs, 1, 1)
        + (seq_len + W).view(bs, 1, 1) * node.view(1, W, 1)
        + seq_len.view(bs, 1, 1)
        + node.view(1, 1, W)
    )
    flat_mask[idx.view(-1)] = mask.view(-1)


def verify_tree_greedy_cpu(
    predicts: torch.Tensor,  # [bs*W] int32, written at the accepted path
    accept_index: torch.Tensor,  # [bs, S] int32, caller pre-fills -1
    accept_token_num: torch.Tensor,  # [bs] int32, written: accepted drafts (bonus excluded)
    candidates: torch.Tensor,  # [bs, W] draft token per node
    retrive_index: torch.Tensor,  # [bs, W] global node ids
    retrive_next_token: torch.Tensor,  # [bs, W]
    retrive_next_sibling: torch.Tensor,  # [bs, W]
    target_predict: torch.Tensor,  # [bs, W] target argmax per node (indexed by global id)
) -> None:
    """Greedy tree verification: follow the longest root path whose drafts equal the target argmax.

    From node ``last`` (the root first), scan its children in sibling order
    for one whose draft equals ``target_predict[last]``; accept the first
    match and continue from it, for up to ``S - 1`` steps. Writes
    ``predicts[last] = target_predict[last]`` along the path (the bonus token
    at the final node), the accepted global ids into ``accept_index`` (root
    first) and the number of accepted drafts into ``accept_token_num``.
    """
    bs, W = candidates.shape
    S = accept_index.shape[1]
    if bs == 0:
        return
    rows = torch.arange(bs)
    ridx = retrive_index.to(torch.int64)
    nxt_tok = retrive_next_token.to(torch.int64)
    nxt_sib = retrive_next_sibling.to(torch.int64)
    cand = candidates.to(torch.int64)
    target_flat = target_predict.reshape(-1).to(torch.int64)
    pred_flat = predicts.view(-1)

    last = ridx[:, 0].clone()  # global id of the last accepted node
    accept_index[:, 0] = last.to(accept_index.dtype)
    num = torch.zeros(bs, dtype=torch.int64)
    cur = torch.zeros(bs, dtype=torch.int64)  # local id of the last accepted node
    active = torch.ones(bs, dtype=torch.bool)
    for _ in range(1, S):
        target = target_flat[last]
        probe = torch.where(active, nxt_tok[rows, cur], -1)
        matched = torch.zeros(bs, dtype=torch.bool)
        while True:  # sibling hops, all rows at once
            live = probe >= 0
            if not bool(live.any()):
                break
            p = probe.clamp(min=0)
            hit = live & (cand[rows, p] == target)
            if bool(hit.any()):
                hr = rows[hit]
                pred_flat[last[hit]] = target[hit].to(pred_flat.dtype)
                num[hit] += 1
                accept_index[hr, num[hit]] = ridx[hr, p[hit]].to(accept_index.dtype)
                last = torch.where(hit, ridx[rows, p], last)
                cur = torch.where(hit, p, cur)
                matched |= hit
            probe = torch.where(live & ~hit, nxt_sib[rows, p], -1)
        active &= matched
        if not bool(active.any()):
            break
    accept_token_num.copy_(num.to(accept_token_num.dtype).view_as(accept_token_num))
    pred_flat[last] = target_flat[last].to(pred_flat.dtype)


def reconstruct_indices_from_tree_mask(
    tree_mask: torch.Tensor,  # [bs*W*W] bool; mask[b, i, j]: node j is an ancestor of (or is) node i
    verified_seq_len: torch.Tensor,  # [bs]
    positions: torch.Tensor,  # [bs*W], written: seq_len + number of strict ancestors
    retrive_index: torch.Tensor,  # [bs, W], written: b*W + i
    retrive_next_token: torch.Tensor,  # [bs, W], written
    retrive_next_sibling: torch.Tensor,  # [bs, W], written
    batch_size: int,
    draft_token_num: int,
) -> None:
    """Recover tree links from a QLEN-layout ancestor mask (NGRAM).

    parent(i) = the largest strict ancestor j < i (else -1); first child and
    next sibling follow from the parents (a node without a parent has no
    siblings).
    """
    bs, W = batch_size, draft_token_num
    if bs == 0:
        return
    if tree_mask.numel() != bs * W * W:
        raise ValueError(f"tree_mask must have bs*W*W={bs * W * W} entries, got {tree_mask.numel()}")
    node = torch.arange(W)
    anc = tree_mask.reshape(bs, W, W).to(torch.bool) & (node.view(1, 1, W) < node.view(1, W, 1))
    depth = anc.sum(2)
    parent = torch.where(anc.any(2), (anc * node).argmax(2), -1)
    next_token, next_sibling = _links_from_parents(parent)
    seq_len = verified_seq_len.reshape(-1, 1).to(torch.int64)
    positions.copy_((seq_len + depth).view(-1).view_as(positions))
    retrive_index.copy_((torch.arange(bs).unsqueeze(1) * W + node).view_as(retrive_index))
    retrive_next_token.copy_(next_token.view_as(retrive_next_token))
    retrive_next_sibling.copy_(next_sibling.view_as(retrive_next_sibling))


def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor,  # [bs, accept_stride]
    accept_lens: torch.Tensor,  # [bs] accepted tokens incl. the bonus
    bonus_tokens: torch.Tensor,  # [bs], written
    accept_stride: int,
) -> None:
    """``bonus_tokens[b] = accept_tokens.flat[b*accept_stride + accept_lens[b] - 1]``."""
    bs = accept_lens.numel()
    if bs == 0:
        return
    idx = torch.arange(bs) * accept_stride + accept_lens.reshape(-1).to(torch.int64) - 1
    bonus_tokens.view(-1).copy_(accept_tokens.reshape(-1)[idx].to(bonus_tokens.dtype))


def rotate_input_ids_cpu(
    input_ids: torch.Tensor,  # [num_tokens] int64, rotated in place
    extend_start_loc: torch.Tensor,  # [bs]
    extend_seq_lens: torch.Tensor,  # [bs]
    topk_index: torch.Tensor,  # [bs] new draft token per request
    select_index: Optional[torch.Tensor] = None,  # [bs] slot for the new token, else the segment end
) -> None:
    """Shift each request's segment left by one and write its new token at the end (multi-layer EAGLE)."""
    bs = extend_seq_lens.numel()
    if bs == 0:
        return
    start = extend_start_loc.reshape(-1).to(torch.int64)
    lens = extend_seq_lens.reshape(-1).to(torch.int64)
    shift = (lens - 1).clamp(min=0)
    _, pos, total = _segments(start, start + shift)
    ids = input_ids.view(-1)
    if total:
        ids[pos] = ids[pos + 1]  # the gather copies before the scatter
    has = lens > 0
    if bool(has.any()):
        dst = select_index.reshape(-1).to(torch.int64) if select_index is not None else start + lens - 1
        ids[dst[has]] = topk_index.reshape(-1)[has].to(ids.dtype)


OPS = {
    "build_tree_kernel_efficient_cpu": (
        "(Tensor parent_list, Tensor selected_index, Tensor verified_seq_len, Tensor(a!) tree_mask, "
        "Tensor(b!) positions, Tensor(c!) retrive_index, Tensor(d!) retrive_next_token, "
        "Tensor(e!) retrive_next_sibling, int topk, int depth, int draft_token_num, int tree_mask_mode) -> ()",
        build_tree_kernel_efficient_cpu,
    ),
    "verify_tree_greedy_cpu": (
        "(Tensor(a!) predicts, Tensor(b!) accept_index, Tensor(c!) accept_token_num, Tensor candidates, "
        "Tensor retrive_index, Tensor retrive_next_token, Tensor retrive_next_sibling, Tensor target_predict) -> ()",
        verify_tree_greedy_cpu,
    ),
    "reconstruct_indices_from_tree_mask": (
        "(Tensor tree_mask, Tensor verified_seq_len, Tensor(a!) positions, Tensor(b!) retrive_index, "
        "Tensor(c!) retrive_next_token, Tensor(d!) retrive_next_sibling, int batch_size, int draft_token_num) -> ()",
        reconstruct_indices_from_tree_mask,
    ),
    "fill_bonus_tokens_cpu": (
        "(Tensor accept_tokens, Tensor accept_lens, Tensor(a!) bonus_tokens, int accept_stride) -> ()",
        fill_bonus_tokens_cpu,
    ),
    "rotate_input_ids_cpu": (
        "(Tensor(a!) input_ids, Tensor extend_start_loc, Tensor extend_seq_lens, Tensor topk_index, "
        "Tensor? select_index=None) -> ()",
        rotate_input_ids_cpu,
    ),
}
