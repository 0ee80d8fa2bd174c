"""Triton kernels of the fused ASD verify (the wrapper, shapes and argument checks are in
``triton_verify.py``). Kernels only compute: every buffer is allocated by the wrapper.

Two launches per verify round:

1. ``row_argmax_partials_kernel``, grid ``[bs*W, split]``: one pass over a slice of one node's
   logits row, giving the slice's max and argmax (lowest index on ties; NaN counts as the
   largest value and the first NaN wins, as in ``torch.argmax``). ``split > 1`` only when there
   are too few rows to fill the GPU; the slices are reduced by kernel 2.
2. ``asd_select_kernel``, grid ``[bs]``: per row, reduce the slices (or gather
   ``max = logits[n, target_predict[n]]`` when the caller already has the argmax), gather each
   child draft token's logit from its parent's row (the same row the pass just read, so it is
   in L2), compute regrets, walk the tree level by level (depth d = 1..K, draft position
   i = d - 1) under the three gates, pick the deepest accepted node (ties: smaller regret sum,
   then smaller node index) and write every output. Node vectors are ``[W_PAD]`` registers
   (``W_PAD = next_pow2(W)``); a gather along the tree (child -> parent) is a ``[W_PAD, W_PAD]``
   one-hot reduction, cheap for W <= 64. Slot vectors (the accepted path, s = 0..K, and the
   per-draft-position outputs, i = 0..K-1) are ``[S_PAD]``, ``S_PAD = next_pow2(K + 1)``.

Compiled variants (see ``variants.py``): every runtime integer is ``do_not_specialize`` and every
pointer of the selection kernel ``do_not_specialize_on_alignment``, so Triton never forks a
variant on a value (==1, %16) or an address; the variants are named by the constexprs alone,
plus the logits pointer's 16-byte alignment in the vocabulary pass (what its 16-byte loads need).
The vocabulary length and row stride reach the vocabulary pass in units of ``UNIT`` elements
(16 when both are multiples of 16) and the slice length in tiles of ``BLOCK_V``, so the
compiler knows their divisibility from a constexpr, not from the value.

Every floating-point step that a decision depends on (fp32 max, fp32 ``max - logit``,
IEEE-rounded ``regret / q``, the path-order fp32 regret sum) is the same operation in the same
order as in the torch verifier, so the decisions are bitwise equal, not merely close.
"""

from __future__ import annotations

import triton
import triton.language as tl

IDX_NONE = tl.constexpr(2**31 - 1)  # "no index" in argmax reductions (larger than any vocab index)


@triton.jit(do_not_specialize=["row_stride_units", "V_units", "split", "tiles_per_slice"],
            do_not_specialize_on_alignment=["part_max_ptr", "part_idx_ptr"])
def row_argmax_partials_kernel(
    logits_ptr,  # [R, V] float (bf16/fp16/fp32), unit column stride
    row_stride_units,  # the row stride in units of UNIT elements
    part_max_ptr,  # [R, split] float32, written
    part_idx_ptr,  # [R, split] int32, written (IDX_NONE for an empty slice)
    V_units,  # V in units of UNIT elements
    split,  # slices per row
    tiles_per_slice,  # columns per slice in tiles of BLOCK_V
    BLOCK_V: tl.constexpr,
    UNIT: tl.constexpr,  # 16 when V and the row stride are multiples of 16, else 1
):
    row = tl.program_id(0)
    s = tl.program_id(1)
    V = V_units * UNIT
    chunk = tiles_per_slice * BLOCK_V
    lo = s * chunk
    hi = tl.minimum(lo + chunk, V)
    base = logits_ptr + row.to(tl.int64) * (row_stride_units * UNIT)
    lanes = tl.arange(0, BLOCK_V)
    acc = tl.full([BLOCK_V], float("-inf"), tl.float32)  # per-lane running max
    idx = tl.full([BLOCK_V], IDX_NONE, tl.int32)  # its column (the first one, lanes see columns in order)
    for start in range(lo, hi, BLOCK_V):
        cols = start + lanes
        valid = cols < hi
        v = tl.load(base + cols, mask=valid, other=float("-inf")).to(tl.float32)
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
    out = row * split + s
    tl.store(part_max_ptr + out, tl.where(has_nan, float("nan"), best))
    tl.store(part_idx_ptr + out, arg)


@triton.jit
def _node_argmax_max(
    nodes,  # [W_PAD] int32 local node ids (valid where mask)
    mask,
    b,
    logits_ptr,
    stride_row,
    part_max_ptr,
    part_idx_ptr,
    target_predict_ptr,
    split,
    W: tl.constexpr,
    HAS_TARGET_PREDICT: tl.constexpr,
):
    """(argmax [W_PAD] int64, max [W_PAD] float32) of the logits rows of ``nodes``."""
    rows = (b * W + nodes).to(tl.int64)
    if HAS_TARGET_PREDICT:
        am = tl.load(target_predict_ptr + rows, mask=mask, other=0)
        mx = tl.load(logits_ptr + rows * stride_row + am, mask=mask, other=0.0).to(tl.float32)
    else:
        # the slices in column order: the same (NaN first, then max, then lowest index) rule
        mx = tl.full(nodes.shape, float("-inf"), tl.float32)
        am = tl.full(nodes.shape, IDX_NONE, tl.int32)
        for s in range(split):
            pmax = tl.load(part_max_ptr + rows * split + s, mask=mask, other=float("-inf"))
            pidx = tl.load(part_idx_ptr + rows * split + s, mask=mask, other=IDX_NONE)
            better = (pidx != IDX_NONE) & ((pmax > mx) | ((pmax != pmax) & (mx == mx)) | (am == IDX_NONE))
            mx = tl.where(better, pmax, mx)
            am = tl.where(better, pidx, am)
        am = tl.where(mask, am, 0).to(tl.int64)
    return am, mx


@triton.jit
def _gather_i(values, onehot, axis: tl.constexpr):
    """values[j] picked by a one-hot [W_PAD, W_PAD] matrix along ``axis`` (0 where no one)."""
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


@triton.jit(do_not_specialize=["stride_row", "V", "split", "T", "tree_depth_gate"],
            do_not_specialize_on_alignment=[
                "candidates_ptr", "next_token_ptr", "next_sibling_ptr", "logits_ptr", "part_max_ptr",
                "part_idx_ptr", "target_predict_ptr", "remaining_ptr", "gate_ptr", "cap_ptr", "stop_tokens_ptr",
                "predict_ptr", "accept_index_ptr", "num_correct_drafts_ptr", "spent_ptr", "num_exceptions_ptr",
                "exception_mask_ptr", "exception_regret_ptr", "target_token_ptr", "num_suffix_tokens_ptr"])
def asd_select_kernel(
    candidates_ptr,  # [bs, W] int64 draft token per node
    next_token_ptr,  # [bs, W] int64 first child, -1 none
    next_sibling_ptr,  # [bs, W] int64 next sibling, -1 none
    logits_ptr,  # [bs*W, V] float, unit column stride
    stride_row,
    V,
    part_max_ptr,  # [bs*W, split] float32 (unused with HAS_TARGET_PREDICT)
    part_idx_ptr,  # [bs*W, split] int32 (unused with HAS_TARGET_PREDICT)
    split,
    target_predict_ptr,  # [bs, W] int64 target argmax per node (used with HAS_TARGET_PREDICT)
    remaining_ptr,  # [bs] float32
    gate_ptr,  # [bs] float32
    cap_ptr,  # [bs] int32
    stop_tokens_ptr,  # [bs, T] int64, -1 padded
    T,  # stop tokens per row (0: none)
    tree_depth_gate,  # 1: the gate's K is the row's tree depth (NGRAM), 0: the constexpr K
    predict_ptr,  # [bs*W] int32, written
    accept_index_ptr,  # [bs, S] int32, written
    num_correct_drafts_ptr,  # [bs] int32, written
    spent_ptr,  # [bs] float32, written
    num_exceptions_ptr,  # [bs] int32, written
    exception_mask_ptr,  # [bs, K] bool, written
    exception_regret_ptr,  # [bs, K] float32, written
    target_token_ptr,  # [bs, K] int64, written
    num_suffix_tokens_ptr,  # [bs] int32, written
    W: tl.constexpr,
    K: tl.constexpr,
    HAS_TARGET_PREDICT: tl.constexpr,
    W_PAD: tl.constexpr,  # next_pow2(W)
    S_PAD: tl.constexpr,  # next_pow2(K + 1)
):
    b = tl.program_id(0)
    node = tl.arange(0, W_PAD)
    in_row = node < W
    row_base = b * W

    cand = tl.load(candidates_ptr + row_base + node, mask=in_row, other=0)
    argmax, maxv = _node_argmax_max(node, in_row, b, logits_ptr, stride_row, part_max_ptr, part_idx_ptr,
                                    target_predict_ptr, split, W, HAS_TARGET_PREDICT)

    # --- tree structure: parent and sibling rank of each node, by walking every child list.
    # child_of[p, c]: c is in p's child list (rows: parents, columns: children).
    cur = tl.load(next_token_ptr + row_base + node, mask=in_row, other=-1).to(tl.int32)  # [W_PAD] per parent
    parent = tl.full([W_PAD], -1, tl.int32)
    rank = tl.zeros([W_PAD], tl.int32)
    child_of = (node[:, None] < 0) & (node[None, :] < 0)  # all False, [W_PAD, W_PAD]
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
    child_logit = tl.load(logits_ptr + (row_base + par).to(tl.int64) * stride_row + col,
                          mask=has_parent, other=0.0).to(tl.float32)
    regret = parent_max - child_logit  # [W_PAD] fp32; inf for a masked (-inf) token, NaN if undefined
    regret = tl.where(regret < 0, 0.0, regret)  # clamp_min(0), keeping NaN
    exact = cand == parent_argmax

    is_stop = node < 0  # all False
    for t in range(T):
        is_stop = is_stop | (cand == tl.load(stop_tokens_ptr + b.to(tl.int64) * T + t))

    # the row's ledger and gates, broadcast over the node lanes
    same = b + node * 0
    remaining = tl.load(remaining_ptr + same)
    gate = tl.load(gate_ptr + same)
    cap = tl.load(cap_ptr + same)
    asd_row = (remaining > 0) & (gate > 0) & (cap > 0)  # else strict: no exception at all
    may_except = asd_row & ~is_stop & (regret == regret) & (regret != float("inf"))

    # --- the K of the gate's q_i = K - i: the constexpr K, or (NGRAM) the row's tree depth, the depth
    # of its deepest node hanging from the root (level by level: a runtime branch, no variant).
    gate_k = tl.zeros([W_PAD], tl.int32) + K
    if tree_depth_gate != 0:
        in_tree = node == 0
        tree_d = tl.zeros([W_PAD], tl.int32)
        for d in range(1, K + 1):
            grow = has_parent & in_row & (_gather_i(in_tree.to(tl.int32), child_of, 0) > 0) & ~in_tree
            tree_d = tl.where(grow, d, tree_d)
            in_tree = in_tree | grow
        gate_k = tl.zeros([W_PAD], tl.int32) + tl.max(tree_d, 0)

    # --- level-synchronous walk: at depth d the children of accepted depth-(d-1) nodes are judged.
    accepted = node == 0
    depth_of = tl.zeros([W_PAD], tl.int32)
    n_exc = tl.zeros([W_PAD], tl.int32)
    regret_sum = tl.zeros([W_PAD], tl.float32)
    n_suffix = tl.zeros([W_PAD], tl.int32)
    is_exc = node < 0
    for d in range(1, K + 1):
        p_acc = _gather_i(accepted.to(tl.int32), child_of, 0) > 0
        p_depth = _gather_i(depth_of, child_of, 0)
        p_exc = _gather_i(n_exc, child_of, 0)
        p_sum = _gather_f(regret_sum, child_of, 0)
        p_suffix = _gather_i(n_suffix, child_of, 0)
        judged = has_parent & in_row & ~shadowed & p_acc & (p_depth == d - 1)
        q = tl.maximum(gate_k - d + 1, 1).to(tl.float32)  # suffix value K - i of draft position i = d - 1
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
    best = tl.min(tl.where(tied & (regret_sum == best_sum), node, W_PAD), 0)
    at_best = node == best

    # --- walk up from the best node: node_at[s] = path node at slot s (root at slot 0, depth s).
    slot = tl.arange(0, S_PAD)
    node_at = tl.full([S_PAD], -1, tl.int32)
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
    tl.store(accept_index_ptr + b * S + slot, accept.to(tl.int32), mask=slot < S)

    # per draft position i: the path node at depth i + 1, judged under the argmax of the node at depth i
    i = slot
    in_k = i < K
    onehot_drafted = on_path[None, :] & (depth_of[None, :] == i[:, None] + 1)  # [S_PAD, W_PAD]
    onehot_judge = on_path[None, :] & (depth_of[None, :] == i[:, None])  # [S_PAD, W_PAD]
    exc_i = tl.max((onehot_drafted & is_exc[None, :]).to(tl.int32), 1) > 0
    regret_i = tl.sum(tl.where(onehot_drafted & is_exc[None, :], regret[None, :], 0.0), 1)
    target_i = tl.sum(tl.where(onehot_judge, argmax[None, :], 0), 1)
    target_i = tl.where(i <= best_depth, target_i, -1)
    tl.store(exception_mask_ptr + b * K + i, exc_i, mask=in_k)
    tl.store(exception_regret_ptr + b * K + i, regret_i, mask=in_k)
    tl.store(target_token_ptr + b * K + i, target_i.to(tl.int64), mask=in_k)

    tl.store(num_correct_drafts_ptr + b, best_depth)
    tl.store(spent_ptr + b, best_sum)
    tl.store(num_exceptions_ptr + b, tl.sum(tl.where(at_best, n_exc, 0), 0))
    tl.store(num_suffix_tokens_ptr + b, tl.sum(tl.where(at_best, n_suffix, 0), 0))
