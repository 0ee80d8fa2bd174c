"""Triton kernels of the fused sampled verify (the wrapper, shapes and checks are in
``triton_sampled_verify.py``). Kernels only compute: every buffer is allocated by the wrapper.

Two launches per round, both grid ``[bs]`` (one program per row), with the float64 node charges
computed by torch between them (``sampled_verify.node_charges``, ``[bs, W]``, a fixed handful of
elementwise ops; the wrapper's docstring says why), or, with the constexpr ``CHARGES_IN_KERNEL``
(CUDA only, pending a device parity run), in the walk kernel by ``_node_charges``, which then
also gathers q itself: one launch in all.

1. ``sampled_node_q_kernel``: the row's tree links (parent of every node, by walking every child
   list, as ``tree_links`` for the trees SGLang builds) and q, the target probability of each
   node's draft token at its parent, ``target_probs[b, parent, token]`` (W loads).
2. ``sampled_walk_kernel``: everything else of ``sampled_verify.asd_sampled_verify``, in the same
   operations and the same order: the relaxed child of every parent (``_relax_choice``: floor,
   a > q, stop tokens, duplicate siblings, largest q then sibling rank then node), the K-level walk
   with its ledger and cap tests, the float64 coin mapping after a relaxed rejection, SGLang's
   sibling walk with its float32 running sum and thresholds (``max_children`` steps per level),
   the writes to ``predicts`` / ``accept_index`` / ``accept_token_num``, every receipt, and the
   bonus draw from the residual at the last accepted node, tiled over the vocabulary.

Node vectors are ``[W_PAD]`` registers (``W_PAD = next_pow2(W)``); the per-parent choice is a
``[W_PAD, W_PAD]`` reduction; the walk's state is scalars and one ``[W_PAD]`` rejected mask.
The bonus reads the last node's probabilities twice in ``BLOCK_V`` tiles (the total, then the
first crossing), holding one tile and a ``[BLOCK_V, W_PAD]`` comparison against the rejected
tokens: no ``[bs, V]`` buffer.

Compiled variants: every runtime integer is ``do_not_specialize`` and every pointer
``do_not_specialize_on_alignment``, so the only constexprs are ``W_PAD`` and ``BLOCK_V`` (a
module constant), and the pointer types are fixed by the wrapper's casts: one variant per draft
width class (``variants.sampled_keys``).

Bitwise parity with the torch verifier: every step is the same IEEE operation on the same
operands in the same order (float32 running sums and ``acc / threshold_acc`` with
``div_rn``; float64 coin mapping; float64 block charge). The bonus's cumulative distribution is a
sequential float64 prefix sum (the reference's ``resid.double().cumsum``): each tile adds the
carry to its first element and scans, so under the interpreter (numpy's sequential cumsum) the
sums are the reference's bit for bit; on a GPU the tile scan is a parallel float64 scan, whose
association can move a prefix by a few float64 ulps, which changes the float32-rounded CDF only
when a prefix sits within that distance of a float32 rounding boundary.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import libdevice

IDX_BIG = tl.constexpr(2**31 - 1)
TINY64 = tl.constexpr(2.2250738585072014e-308)  # torch.finfo(torch.float64).tiny


@triton.jit
def _node_charges(q, power):
    """``sampled_verify.node_charges`` in the kernel, the same float64 operations in the same order
    with libdevice's ``pow``/``log``/``log1p`` (what torch's CUDA kernels call); launched with
    ``enable_fp_fusion=False`` so no multiply-add is contracted. -> (q64, a64, charge64)."""
    q64 = q.to(tl.float64)
    a64 = libdevice.pow(q64, power + tl.zeros_like(q64))
    qc = tl.minimum(tl.maximum(q64, TINY64), 0.5)
    qc = tl.where((q64 > 0) & (q64 < 1), q64, qc)
    ac = tl.where(a64 < 1, a64, 0.5)
    rest = tl.where(a64 < 1, (1 - ac) * (libdevice.log1p(-ac) - libdevice.log1p(-qc)), 0.0)
    return q64, a64, a64 * (libdevice.log(tl.maximum(a64, TINY64)) - libdevice.log(qc)) + rest


@triton.jit
def _tree_links(b, next_token_ptr, next_sibling_ptr, W, W_PAD: tl.constexpr):
    """(parent [W_PAD] int32, -1 none; sibling rank [W_PAD] int32) of row ``b``'s nodes, by
    walking every node's child list one hop at a time (a list holds at most W - 1 nodes)."""
    node = tl.arange(0, W_PAD)
    in_row = node < W
    base = b.to(tl.int64) * W
    cur = tl.load(next_token_ptr + base + node, mask=in_row, other=-1).to(tl.int32)  # per parent
    parent = tl.full([W_PAD], -1, tl.int32)
    rank = tl.zeros([W_PAD], tl.int32)
    for hop in range(W - 1):
        live = (cur >= 0) & (cur < W) & in_row
        hit = live[:, None] & (cur[:, None] == node[None, :])  # [parent, child]
        found = tl.max(hit.to(tl.int32), 0) > 0
        parent = tl.where(found, tl.max(tl.where(hit, node[:, None], -1), 0), parent)
        rank = tl.where(found, hop, rank)
        cur = tl.load(next_sibling_ptr + base + cur, mask=live, other=-1).to(tl.int32)
    return parent, rank


@triton.jit
def _at(values, node, index):
    """values[index] of a [W_PAD] vector (0 where index is out of range)."""
    return tl.sum(tl.where(node == index, values, 0), 0)


@triton.jit(do_not_specialize=["W", "V", "stride_b", "stride_n"],
            do_not_specialize_on_alignment=["candidates_ptr", "next_token_ptr", "next_sibling_ptr",
                                            "probs_ptr", "q_ptr"])
def sampled_node_q_kernel(
    candidates_ptr,  # [bs, W] int64
    next_token_ptr,  # [bs, W] int64
    next_sibling_ptr,  # [bs, W] int64
    probs_ptr,  # [bs, W, V] float32, unit column stride
    stride_b,  # probs stride of a row
    stride_n,  # probs stride of a node
    q_ptr,  # [bs, W] float32, written: q of each node at its parent (at itself where it has none)
    W,
    V,
    W_PAD: tl.constexpr,
):
    b = tl.program_id(0)
    node = tl.arange(0, W_PAD)
    in_row = node < W
    parent, _ = _tree_links(b, next_token_ptr, next_sibling_ptr, W, W_PAD)
    cand = tl.load(candidates_ptr + b.to(tl.int64) * W + node, mask=in_row, other=0)
    up = tl.where(parent >= 0, parent, node)
    col = tl.minimum(tl.maximum(cand, 0), V - 1)
    q = tl.load(probs_ptr + b.to(tl.int64) * stride_b + up.to(tl.int64) * stride_n + col, mask=in_row, other=0.0)
    tl.store(q_ptr + b.to(tl.int64) * W + node, q, mask=in_row)


@triton.jit(do_not_specialize=["W", "K", "V", "stride_b", "stride_n", "T", "siblings"],
            do_not_specialize_on_alignment=[
                "predicts_ptr", "accept_index_ptr", "accept_num_ptr", "candidates_ptr", "retrieve_index_ptr",
                "next_token_ptr", "next_sibling_ptr", "coins_ptr", "final_coins_ptr", "probs_ptr", "q_ptr",
                "q64_ptr", "a64_ptr", "charge64_ptr", "power_ptr", "remaining_ptr", "floor_ptr", "cap_ptr",
                "stop_tokens_ptr",
                "spent_ptr", "num_relaxed_ptr", "relaxed_ptr", "relaxed_token_ptr", "relaxed_q_ptr",
                "relaxed_a_ptr", "relaxed_charge_ptr", "relaxed_accepted_ptr"])
def sampled_walk_kernel(
    predicts_ptr,  # [bs*W] int32, written on the accepted path (in place, as SGLang's kernel)
    accept_index_ptr,  # [bs, K+1] int32, written at the accepted slots
    accept_num_ptr,  # [bs] int32, written
    candidates_ptr,  # [bs, W] int64
    retrieve_index_ptr,  # [bs, W] int64
    next_token_ptr,  # [bs, W] int64
    next_sibling_ptr,  # [bs, W] int64
    coins_ptr,  # [bs, W] float32
    final_coins_ptr,  # [bs] float32
    probs_ptr,  # [bs, W, V] float32, unit column stride
    stride_b,
    stride_n,
    q_ptr,  # [bs, W] float32 (kernel 1; unread with CHARGES_IN_KERNEL)
    q64_ptr,  # [bs, W] float64 (node_charges)
    a64_ptr,  # [bs, W] float64
    charge64_ptr,  # [bs, W] float64
    power_ptr,  # [bs] float32 (read with CHARGES_IN_KERNEL)
    remaining_ptr,  # [bs] float32
    floor_ptr,  # [bs] float32
    cap_ptr,  # [bs] int32
    stop_tokens_ptr,  # [bs, T] int64, -1 padded
    T,
    threshold_single,  # float32
    threshold_acc,  # float32, already max(threshold_acc, 1e-9)
    siblings,  # sibling steps per level
    spent_ptr,  # [bs] float32, written
    num_relaxed_ptr,  # [bs] int32, written
    relaxed_ptr,  # [bs, K] bool, written
    relaxed_token_ptr,  # [bs, K] int64, written
    relaxed_q_ptr,  # [bs, K] float32, written
    relaxed_a_ptr,  # [bs, K] float32, written
    relaxed_charge_ptr,  # [bs, K] float32, written
    relaxed_accepted_ptr,  # [bs, K] bool, written
    W,
    K,
    V,
    W_PAD: tl.constexpr,
    BLOCK_V: tl.constexpr,
    CHARGES_IN_KERNEL: tl.constexpr,  # compute the node charges here (CUDA; not interpretable: libdevice)
):
    b = tl.program_id(0)
    b64 = b.to(tl.int64)
    node_ids = tl.arange(0, W_PAD)
    in_row = node_ids < W
    nb = b64 * W  # offset of the row in [bs, W] tensors
    S = K + 1

    # --- the relaxed child of every parent (``_relax_choice``)
    parent, rank = _tree_links(b, next_token_ptr, next_sibling_ptr, W, W_PAD)
    has_parent = parent >= 0
    cand = tl.load(candidates_ptr + nb + node_ids, mask=in_row, other=0)
    if CHARGES_IN_KERNEL:  # q here too: the whole verify is this one launch
        up = tl.where(has_parent, parent, node_ids)
        col = tl.minimum(tl.maximum(cand, 0), V - 1)
        q = tl.load(probs_ptr + b64 * stride_b + up.to(tl.int64) * stride_n + col, mask=in_row, other=0.0)
        q64, a64, c64 = _node_charges(q, tl.load(power_ptr + b).to(tl.float64))
        q64 = tl.where(in_row, q64, 0.0)
        a64 = tl.where(in_row, a64, 0.0)
        c64 = tl.where(in_row, c64, 0.0)
    else:
        q = tl.load(q_ptr + nb + node_ids, mask=in_row, other=0.0)
        q64 = tl.load(q64_ptr + nb + node_ids, mask=in_row, other=0.0)
        a64 = tl.load(a64_ptr + nb + node_ids, mask=in_row, other=0.0)
        c64 = tl.load(charge64_ptr + nb + node_ids, mask=in_row, other=0.0)
    floor = tl.load(floor_ptr + b)
    cap = tl.load(cap_ptr + b)
    remaining = tl.load(remaining_ptr + b)
    eligible = has_parent & (q >= floor) & (a64 > q64)
    for t in range(T):
        eligible = eligible & (cand != tl.load(stop_tokens_ptr + b64 * T + t))
    # a parent whose children share a token is never relaxed
    same_key = ((parent[:, None] == parent[None, :]) & (cand[:, None] == cand[None, :])
                & (node_ids[:, None] != node_ids[None, :]) & in_row[:, None] & in_row[None, :])
    duplicate = has_parent & (tl.max(same_key.to(tl.int32), 1) > 0)
    # rows: parents P, columns: nodes n
    child_of = parent[None, :] == node_ids[:, None]
    has_duplicate = tl.max((child_of & duplicate[None, :]).to(tl.int32), 1) > 0
    of_parent = child_of & eligible[None, :]
    q_cand = tl.where(of_parent, q64[None, :], -1.0)
    best_q = tl.max(q_cand, 1)
    at_best = of_parent & (q_cand == best_q[:, None])
    best_rank = tl.min(tl.where(at_best, rank[None, :], W), 1)
    best = tl.min(tl.where(at_best & (rank[None, :] == best_rank[:, None]), node_ids[None, :], W), 1)
    best = tl.where(has_duplicate, W, best)  # [W_PAD] per parent, W: none

    # --- the walk
    row_on = (remaining > 0) & (floor > 0) & (cap > 0)
    remaining64 = remaining.to(tl.float64)
    node = tl.zeros([], tl.int32)
    coin = tl.load(coins_ptr + nb).to(tl.float64)
    last = tl.load(retrieve_index_ptr + nb)
    tl.store(accept_index_ptr + b64 * S, last.to(tl.int32))
    n_acc = tl.zeros([], tl.int32)
    alive = n_acc == 0
    block_charge = tl.zeros([], tl.float64)
    n_relaxed = tl.zeros([], tl.int32)
    rejected = node_ids < 0
    for level in range(K):
        j = _at(best, node_ids, node)
        has_j = j < W
        qj = tl.where(has_j, _at(q64, node_ids, j), 0.0)
        aj = tl.where(has_j, _at(a64, node_ids, j), 0.0)
        cj = tl.where(has_j, _at(c64, node_ids, j), 0.0)
        relax = row_on & alive & has_j & (n_relaxed < cap) & (block_charge + cj <= remaining64)
        block_charge = tl.where(relax, block_charge + cj, block_charge)
        n_relaxed = n_relaxed + relax.to(tl.int32)
        take_relaxed = relax & ((coin < aj) | (aj >= 1))
        mapped = (coin - aj) / tl.where(aj < 1, 1 - aj, 1.0) * (1 - qj)  # float64 "/": div.rn.f64
        coin = tl.where(relax & ~take_relaxed, mapped, coin)
        skip = tl.where(relax, j, -1)
        level_rejected = node_ids == tl.where(relax & ~take_relaxed, j, -1)  # (scalar masks enter vectors by value)
        rejected = tl.where(alive, level_rejected, rejected)

        # SGLang's walk over the siblings, the relaxed child skipped
        child = tl.load(next_token_ptr + nb + node).to(tl.int32)
        cur = tl.where(alive, child, -1)
        searching = alive & (cur >= 0) & ~take_relaxed
        taken_node = tl.where(take_relaxed, j, -1)
        prob_acc = tl.zeros([], tl.float32)
        for step in range(siblings):
            idx = tl.maximum(cur, 0)
            tok = tl.load(candidates_ptr + nb + idx)
            tok = tl.minimum(tl.maximum(tok, 0), V - 1)
            qs = tl.load(probs_ptr + b64 * stride_b + node.to(tl.int64) * stride_n + tok)
            at_skip = idx == skip
            acc_sum = prob_acc + qs
            take = (searching & ~at_skip & (qs > 0)
                    & ((coin < tl.math.div_rn(acc_sum, threshold_acc).to(tl.float64)) | (qs >= threshold_single)))
            drop = searching & ~take
            prob_acc = tl.where(take, 0.0, tl.where(drop & ~at_skip, acc_sum, prob_acc))
            rejected = rejected | (node_ids == tl.where(drop, idx, -1))
            taken_node = tl.where(take, idx, taken_node)
            sibling = tl.load(next_sibling_ptr + nb + idx).to(tl.int32)
            cur = tl.where(drop, sibling, cur)
            searching = drop & (sibling >= 0)
        took = taken_node >= 0

        # receipts of level i = this level
        out = b64 * K + level
        tl.store(relaxed_ptr + out, relax)
        tl.store(relaxed_token_ptr + out, tl.where(relax, _at(cand, node_ids, tl.minimum(j, W - 1)), -1))
        tl.store(relaxed_q_ptr + out, tl.where(relax, qj, 0.0).to(tl.float32))
        tl.store(relaxed_a_ptr + out, tl.where(relax, aj, 0.0).to(tl.float32))
        tl.store(relaxed_charge_ptr + out, tl.where(relax, cj, 0.0).to(tl.float32))
        tl.store(relaxed_accepted_ptr + out, take_relaxed)

        new = tl.maximum(taken_node, 0)
        tl.store(predicts_ptr + last, _at(cand, node_ids, new).to(tl.int32), mask=took)
        n_acc = n_acc + took.to(tl.int32)
        draft_id = tl.load(retrieve_index_ptr + nb + new)
        tl.store(accept_index_ptr + b64 * S + tl.minimum(n_acc, S - 1), draft_id.to(tl.int32), mask=took)
        last = tl.where(took, draft_id, last)
        node = tl.where(took, new, node)
        coin = tl.where(took, tl.load(coins_ptr + nb + new).to(tl.float64), coin)
        rejected = tl.where(took, node_ids < 0, rejected)
        alive = alive & took
    tl.store(accept_num_ptr + b, n_acc)
    tl.store(spent_ptr + b, block_charge.to(tl.float32))
    tl.store(num_relaxed_ptr + b, n_relaxed)

    # --- the bonus: inverse CDF of relu(p - p on the rejected tokens) at the last accepted node
    leaves = tl.where(n_acc != K, rejected, node_ids < 0) & in_row  # tokens that leave the residual
    drop_tok = tl.where(leaves, tl.minimum(tl.maximum(cand, 0), V - 1), -1)
    p_row = probs_ptr + b64 * stride_b + node.to(tl.int64) * stride_n
    lanes = tl.arange(0, BLOCK_V)
    total = tl.zeros([], tl.float64)  # the sequential float64 prefix sum, carried tile to tile
    for start in range(0, V, BLOCK_V):
        cols = start + lanes
        p = tl.load(p_row + cols, mask=cols < V, other=0.0)
        dropped = tl.max((cols[:, None] == drop_tok[None, :]).to(tl.int32), 1) > 0
        resid = tl.where(dropped, 0.0, tl.where(p > 0, p, 0.0))
        x = tl.where(lanes == 0, resid.to(tl.float64) + total, resid.to(tl.float64))
        total = tl.sum(tl.where(lanes == BLOCK_V - 1, tl.cumsum(x, 0), 0.0), 0)
    u = tl.load(final_coins_ptr + b) * total.to(tl.float32)
    first = tl.full([], IDX_BIG, tl.int32)
    last_positive = tl.full([], -1, tl.int32)
    carry = tl.zeros([], tl.float64)
    for start in range(0, V, BLOCK_V):
        cols = start + lanes
        p = tl.load(p_row + cols, mask=cols < V, other=0.0)
        dropped = tl.max((cols[:, None] == drop_tok[None, :]).to(tl.int32), 1) > 0
        resid = tl.where(dropped, 0.0, tl.where(p > 0, p, 0.0))
        x = tl.where(lanes == 0, resid.to(tl.float64) + carry, resid.to(tl.float64))
        cdf = tl.cumsum(x, 0)
        carry = tl.sum(tl.where(lanes == BLOCK_V - 1, cdf, 0.0), 0)
        positive = (resid > 0) & (cols < V)
        above = positive & (cdf.to(tl.float32) > u)
        first = tl.minimum(first, tl.min(tl.where(above, cols, IDX_BIG), 0))
        last_positive = tl.maximum(last_positive, tl.max(tl.where(positive, cols, -1), 0))
    fallback = tl.where(last_positive >= 0, last_positive, V - 1)
    bonus = tl.where(first < IDX_BIG, first, fallback)
    tl.store(predicts_ptr + last, bonus.to(tl.int32))
