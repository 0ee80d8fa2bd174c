"""Triton kernels of the fused ASD verify (the wrapper, shapes and argument checks are in
``triton_verify.py``). Kernels only compute: every buffer is allocated by the wrapper.

Two launches per verify round:

1. ``row_argmax_partials_kernel``, grid ``[bs*W, SPLIT]``: one pass over a slice of one node's
   logits row, giving the slice's max and argmax (lowest index on ties; NaN counts as the
   largest value and the first NaN wins, as in ``torch.argmax``). ``SPLIT > 1`` only when there
   are too few rows to fill the GPU; the slices are reduced by kernel 2.
2. ``asd_select_kernel``, grid ``[bs]``: per row, reduce the slices (or gather
   ``max = logits[n, target_predict[n]]`` when the caller already has the argmax), gather each
   child draft token's logit from its parent's row (the same row the pass just read, so it is
   in L2), compute regrets, walk the tree level by level under the three gates, pick the
   deepest accepted node (ties: smaller regret sum, then smaller node index) and write every
   output. Node vectors are ``[BW]`` registers; a gather along the tree (child -> parent) is a
   ``[BW, BW]`` one-hot reduction, cheap for W <= 64.

Every floating-point step that a decision depends on (fp32 max, fp32 ``max - logit``,
IEEE-rounded ``regret / q``, the path-order fp32 regret sum) is the same operation in the same
order as in the torch verifier, so the decisions are bitwise equal, not merely close.
"""

from __future__ import annotations

import triton
import triton.language as tl

IDX_NONE = tl.constexpr(2**31 - 1)  # "no index" in argmax reductions (larger than any vocab index)


@triton.jit
def row_argmax_partials_kernel(
    logits_ptr,  # [R, V] float (bf16/fp16/fp32)
    stride_row,
    stride_col,
    part_max_ptr,  # [R, SPLIT] float32, written
    part_idx_ptr,  # [R, SPLIT] int32, written (IDX_NONE for an empty slice)
    V,
    chunk,  # columns per slice, a multiple of BLOCK_V
    SPLIT: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0)
    s = tl.program_id(1)
    lo = s * chunk
    hi = tl.minimum(lo + chunk, V)
    base = logits_ptr + row.to(tl.int64) * stride_row
    lanes = tl.arange(0, BLOCK_V)
    acc = tl.full([BLOCK_V], float("-inf"), tl.float32)  # per-lane running max
    idx = tl.full([BLOCK_V], IDX_NONE, tl.int32)  # its column (the first one, lanes see columns in order)
    for start in range(lo, hi, BLOCK_V):
        cols = start + lanes
        valid = cols < hi
        v = tl.load(base + cols.to(tl.int64) * stride_col, mask=valid, other=float("-inf")).to(tl.float32)
        # strictly greater keeps the earliest column; a NaN beats anything but an earlier NaN
        better = valid & ((v > acc) | ((v != v) & (acc == acc)) | (idx == IDX_NONE))
        acc = tl.where(better, v, acc)
        idx = tl.where(better, cols, idx)
    lane_nan = acc != acc
    has_nan = tl.max(lane_nan.to(tl.int32), 0) > 0
    clean = tl.where(lane_nan, float("-inf"), acc)
    best = tl.max(clean, 0)
    pick = tl.where(has_nan, lane_nan, (clean == best) & (idx != IDX_NONE))
    arg = tl.min(tl.where(pick, idx, IDX_NONE), 0)
    out = row * SPLIT + s
    tl.store(part_max_ptr + out, tl.where(has_nan, float("nan"), best))
    tl.store(part_idx_ptr + out, arg)


@triton.jit
def _node_argmax_max(
    nodes,  # [BW] int32 local node ids (valid where mask)
    mask,
    b,
    logits_ptr,
    stride_row,
    stride_col,
    part_max_ptr,
    part_idx_ptr,
    tp_ptr,
    W: tl.constexpr,
    SPLIT: tl.constexpr,
    BSPLIT: tl.constexpr,
    HAS_TP: tl.constexpr,
):
    """(argmax [BW] int64, max [BW] float32) of the logits rows of ``nodes``."""
    rows = (b * W + nodes).to(tl.int64)
    if HAS_TP:
        am = tl.load(tp_ptr + rows, mask=mask, other=0).to(tl.int64)
        mx = tl.load(logits_ptr + rows * stride_row + am * stride_col, mask=mask, other=0.0).to(tl.float32)
    else:
        sp = tl.arange(0, BSPLIT)
        m2 = mask[:, None] & (sp[None, :] < SPLIT)
        pmax = tl.load(part_max_ptr + rows[:, None] * SPLIT + sp[None, :], mask=m2, other=float("-inf"))
        pidx = tl.load(part_idx_ptr + rows[:, None] * SPLIT + sp[None, :], mask=m2, other=IDX_NONE)
        is_nan = pmax != pmax
        has_nan = tl.max(is_nan.to(tl.int32), 1) > 0
        clean = tl.where(is_nan, float("-inf"), pmax)
        best = tl.max(clean, 1)
        pick = tl.where(has_nan[:, None], is_nan, clean == best[:, None])
        am = tl.min(tl.where(pick, pidx, IDX_NONE), 1).to(tl.int64)
        mx = tl.where(has_nan, float("nan"), best)
        am = tl.where(mask, am, 0)
    return am, mx


@triton.jit
def _gather_i(values, onehot, axis: tl.constexpr):
    """values[j] picked by a one-hot [BW, BW] matrix along ``axis`` (0 where no one)."""
    if axis == 0:
        return tl.sum(tl.where(onehot, values[:, None], 0), 0)
    else:
        return tl.sum(tl.where(onehot, values[None, :], 0), 1)


@triton.jit
def _gather_f(values, onehot, axis: tl.constexpr):
    """Float version of ``_gather_i``: exactly one term is non-zero, so the sum is exact."""
    if axis == 0:
        return tl.sum(tl.where(onehot, values[:, None], 0.0), 0)
    else:
        return tl.sum(tl.where(onehot, values[None, :], 0.0), 1)


@triton.jit
def asd_select_kernel(
    cand_ptr,  # [bs, W] int  draft token per node
    next_token_ptr,  # [bs, W] int  first child, -1 none
    next_sibling_ptr,  # [bs, W] int  next sibling, -1 none
    logits_ptr,  # [bs*W, V] float
    stride_row,
    stride_col,
    V,
    part_max_ptr,  # [bs*W, SPLIT] float32 (unused when HAS_TP)
    part_idx_ptr,  # [bs*W, SPLIT] int32 (unused when HAS_TP)
    tp_ptr,  # [bs, W] int  target argmax per node (unused unless HAS_TP)
    remaining_ptr,  # [bs] float32
    gate_ptr,  # [bs] float32
    cap_ptr,  # [bs] int32
    stop_ptr,  # [bs, T] int64, -1 padded (unused unless HAS_STOP)
    T,
    predict_ptr,  # [bs*W] int32, written
    accept_ptr,  # [bs, S] int32, written
    ncd_ptr,  # [bs] int32, written
    spent_ptr,  # [bs] float32, written
    nexc_ptr,  # [bs] int32, written
    emask_ptr,  # [bs, K] bool, written
    ereg_ptr,  # [bs, K] float32, written
    ttok_ptr,  # [bs, K] int64, written
    nsuf_ptr,  # [bs] int32, written
    W: tl.constexpr,
    K: tl.constexpr,
    SPLIT: tl.constexpr,
    HAS_TP: tl.constexpr,
    HAS_STOP: tl.constexpr,
    BW: tl.constexpr,  # next_pow2(W)
    BS: tl.constexpr,  # next_pow2(K + 1)
    BSPLIT: tl.constexpr,
    BT: tl.constexpr,
):
    b = tl.program_id(0)
    node = tl.arange(0, BW)
    in_row = node < W
    row_base = b * W

    cand = tl.load(cand_ptr + row_base + node, mask=in_row, other=0).to(tl.int64)
    argmax, maxv = _node_argmax_max(node, in_row, b, logits_ptr, stride_row, stride_col, part_max_ptr,
                                    part_idx_ptr, tp_ptr, W, SPLIT, BSPLIT, HAS_TP)

    # --- tree structure: parent and sibling rank of each node, by walking every child list.
    # child_of[p, c]: c is in p's child list (rows: parents, columns: children).
    cur = tl.load(next_token_ptr + row_base + node, mask=in_row, other=-1).to(tl.int32)  # [BW] per parent
    parent = tl.full([BW], -1, tl.int32)
    rank = tl.zeros([BW], tl.int32)
    child_of = (node[:, None] < 0) & (node[None, :] < 0)  # all False, [BW, BW]
    for hop in range(W - 1):  # a child list holds at most W - 1 nodes
        live = (cur >= 0) & (cur < W) & in_row
        hit = live[:, None] & (cur[:, None] == node[None, :])  # [p, c]
        child_of = child_of | hit
        found = tl.max(hit.to(tl.int32), 0) > 0
        parent = tl.where(found, tl.max(tl.where(hit, node[:, None], -1), 0), parent)
        rank = tl.where(found, hop, rank)
        cur = tl.load(next_sibling_ptr + row_base + cur, mask=live, other=-1).to(tl.int32)
    has_parent = (parent >= 0) & (node > 0)
    # Duplicate siblings: only the first (in list order) carrying a token is ever looked at.
    same_list = (parent[:, None] == parent[None, :]) & (rank[:, None] < rank[None, :])  # [c', c]
    shadowed = tl.max((same_list & (cand[:, None] == cand[None, :])).to(tl.int32), 0) > 0
    # child_of[p, c] as a gather matrix along axis 0 ("value of my parent")
    parent_argmax = _gather_i(argmax, child_of, 0)
    parent_max = _gather_f(maxv, child_of, 0)
    par = tl.where(has_parent, parent, 0)
    col = tl.minimum(tl.maximum(cand, 0), V - 1)  # as the reference: a token outside the vocab reads a clamped column
    child_logit = tl.load(logits_ptr + (row_base + par).to(tl.int64) * stride_row + col * stride_col,
                          mask=has_parent, other=0.0).to(tl.float32)
    regret = parent_max - child_logit  # [BW] fp32; inf for a masked (-inf) token, NaN if undefined
    regret = tl.where(regret < 0, 0.0, regret)  # clamp_min(0), keeping NaN
    exact = cand == parent_argmax

    if HAS_STOP:
        ts = tl.arange(0, BT)
        stops = tl.load(stop_ptr + b.to(tl.int64) * T + ts, mask=ts < T, other=-1).to(tl.int64)
        is_stop = tl.max(((stops[None, :] == cand[:, None]) & (ts[None, :] < T)).to(tl.int32), 1) > 0
    else:
        is_stop = node < 0

    # the row's ledger and gates, broadcast over the node lanes
    same = b + node * 0
    remaining = tl.load(remaining_ptr + same)
    gate = tl.load(gate_ptr + same)
    cap = tl.load(cap_ptr + same)
    asd_row = (remaining > 0) & (gate > 0) & (cap > 0)  # else strict: no exception at all
    may_except = asd_row & ~is_stop & (regret == regret) & (regret != float("inf"))

    # --- level-synchronous walk: at level d the children of accepted depth-(d-1) nodes are judged.
    accepted = node == 0
    depth_of = tl.zeros([BW], tl.int32)
    n_exc = tl.zeros([BW], tl.int32)
    regret_sum = tl.zeros([BW], tl.float32)
    n_suffix = tl.zeros([BW], tl.int32)
    is_exc = node < 0
    for d in range(1, K + 1):
        p_acc = _gather_i(accepted.to(tl.int32), child_of, 0) > 0
        p_depth = _gather_i(depth_of, child_of, 0)
        p_exc = _gather_i(n_exc, child_of, 0)
        p_sum = _gather_f(regret_sum, child_of, 0)
        p_suffix = _gather_i(n_suffix, child_of, 0)
        judged = has_parent & in_row & ~shadowed & p_acc & (p_depth == d - 1)
        q = tl.zeros([BW], tl.float32) + (K - d + 1)  # suffix value K - i of draft position i = d - 1
        new_sum = p_sum + regret
        admit = (may_except & (tl.math.div_rn(regret, q) <= gate) & (p_exc + 1 <= cap)
                 & (new_sum <= remaining))
        exc_here = judged & ~exact & admit
        ok = judged & (exact | admit)
        accepted = accepted | ok
        depth_of = tl.where(ok, d, depth_of)
        is_exc = is_exc | exc_here
        n_exc = tl.where(ok, p_exc + exc_here.to(tl.int32), n_exc)
        regret_sum = tl.where(exc_here, new_sum, tl.where(ok, p_sum, regret_sum))
        n_suffix = tl.where(ok, p_suffix + (exact & (p_exc > 0)).to(tl.int32), n_suffix)

    # --- the accepted node: deepest, then smaller regret sum, then smaller index.
    best_depth = tl.max(tl.where(accepted, depth_of, -1), 0)
    tied = accepted & (depth_of == best_depth)
    best_sum = tl.min(tl.where(tied, regret_sum, float("inf")), 0)
    best = tl.min(tl.where(tied & (regret_sum == best_sum), node, BW), 0)
    at_best = node == best

    # --- walk up from the best node: node_at[s] = path node at slot s (root at slot 0).
    slot = tl.arange(0, BS)
    node_at = tl.full([BS], -1, tl.int32)
    on_path = node < 0
    walk = best
    for t in range(K + 1):  # past the root, walk is -1 then 0 again, at negative slots: no effect
        node_at = tl.where(slot == best_depth - t, walk, node_at)
        on_path = on_path | (node == walk)
        walk = tl.sum(tl.where(node == walk, parent, 0), 0)

    # predict: on the path, the token committed after the node (the next path node's draft token,
    # or the bonus argmax after the last); 0 off the path.
    child_on_path = child_of & on_path[None, :]  # [p, c]
    next_draft = tl.sum(tl.where(child_on_path, cand[None, :], 0), 1)
    predict = tl.where(at_best, argmax, tl.where(on_path, next_draft, 0))
    tl.store(predict_ptr + row_base + node, predict.to(tl.int32), mask=in_row)
    S: tl.constexpr = K + 1
    accept = tl.where(node_at >= 0, row_base + node_at, -1)
    tl.store(accept_ptr + b * S + slot, accept.to(tl.int32), mask=slot < S)

    # per draft position d (node at slot d + 1 judged under the argmax of the node at slot d)
    pos = slot
    in_k = pos < K
    # one-hot [BS, BW] of the path node at slot d + 1 (depth d + 1) and at slot d (depth d)
    onehot_next = on_path[None, :] & (depth_of[None, :] == pos[:, None] + 1)
    onehot_this = on_path[None, :] & (depth_of[None, :] == pos[:, None])
    exc_d = tl.max((onehot_next & is_exc[None, :]).to(tl.int32), 1) > 0
    reg_d = tl.sum(tl.where(onehot_next & is_exc[None, :], regret[None, :], 0.0), 1)
    tok_d = tl.sum(tl.where(onehot_this, argmax[None, :], 0), 1)
    tok_d = tl.where(pos <= best_depth, tok_d, -1)
    tl.store(emask_ptr + b * K + pos, exc_d, mask=in_k)
    tl.store(ereg_ptr + b * K + pos, reg_d, mask=in_k)
    tl.store(ttok_ptr + b * K + pos, tok_d.to(tl.int64), mask=in_k)

    tl.store(ncd_ptr + b, best_depth)
    tl.store(spent_ptr + b, best_sum)
    tl.store(nexc_ptr + b, tl.sum(tl.where(at_best, n_exc, 0), 0))
    tl.store(nsuf_ptr + b, tl.sum(tl.where(at_best, n_suffix, 0), 0))
