"""Batched verify for sampled requests under the ``asd-sampled`` rule (torch only; no sglang).

    from sglang_asd.verify.sampled_verify import asd_sampled_verify, SampledVerifyOutput

A drop-in for SGLang's ``tree_speculative_sampling_target_only`` in ``eagle_sample``'s sampling
branch (target-only: SGLang passes draft_probs = 0, so none is taken here), with per-row
relaxation inputs. The rule, its KL charge and the chain-rule guarantee are in
``sglang_asd.policy.sampled``; the node-by-node walk this batches is ``policy.sampled_walk``.
A row with remaining 0, floor 0 or cap 0 is SGLang's walk bit for bit, given the same coins.

Batched over rows: loops over the K levels and, inside a level, over siblings only (as SGLang's
walk tries them in order); no loop over rows or the vocabulary, no host sync (no ``.item()``,
``.tolist()``, ``.cpu()``, no branch on tensor data). Exact rows compare float32 coins with the
float32 running sum as SGLang's kernel does; a relaxed row's mapped coin, a, the charges and the
block's booking are float64 (the float32 ``spent`` returned is <= ``remaining`` because the
float64 sum is and rounding is monotone).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from sglang_asd.verify.scope import ScopeRows, allowed_nodes
from sglang_asd.verify.tree_links import node_depths, tree_links


@dataclasses.dataclass(frozen=True)
class SampledVerifyOutput:
    """Receipts of one sampled verify round; ``K = accept_index.shape[1] - 1`` levels, indexed by
    the draft position i = 0..K-1 of the relaxed child (level i + 1). Fresh tensors on the
    input device; the accepted path itself is in the caller's ``predicts`` / ``accept_index`` /
    ``accept_token_num``, written in place as SGLang's kernel writes them."""

    spent: torch.Tensor  # [bs] float32: nats booked this round (sum of the charges, in path order); <= remaining
    num_relaxed: torch.Tensor  # [bs] int32: relaxed nodes this round
    relaxed: torch.Tensor  # [bs, K] bool: the node walked at level i + 1 was relaxed (charged)
    relaxed_token: torch.Tensor  # [bs, K] int64: the relaxed child's token, -1 where not relaxed
    relaxed_q: torch.Tensor  # [bs, K] float32: its q = p(token) at its parent, 0 where not relaxed
    relaxed_accept_prob: torch.Tensor  # [bs, K] float32: its a, 0 where not relaxed
    relaxed_charge: torch.Tensor  # [bs, K] float32: KL(p' || p) booked there, 0 where not relaxed
    relaxed_accepted: torch.Tensor  # [bs, K] bool: the relaxed child was committed
    scope_skipped: Optional[torch.Tensor] = None  # [bs] int32: levels where the scope kept a relaxation strict; None: no scope


def node_charges(
    q: torch.Tensor,  # [bs, W] float32 q of each node under its parent
    power: torch.Tensor,  # [bs] float32 a = q ** power
):
    """-> q64, a64, charge64 [bs, W] float64 (``policy.sampled.binary_kl``, same expression);
    the charge is meaningful where 0 < q < a."""
    q64 = q.double()
    a64 = q64.pow(power.double()[:, None])
    qc = q64.clamp(min=torch.finfo(torch.float64).tiny, max=0.5)  # a finite log where unused
    qc = torch.where((q64 > 0) & (q64 < 1), q64, qc)
    ac = torch.where(a64 < 1, a64, 0.5)
    rest = torch.where(a64 < 1, (1 - ac) * (torch.log1p(-ac) - torch.log1p(-qc)), 0.0)
    return q64, a64, a64 * (torch.log(a64.clamp(min=torch.finfo(torch.float64).tiny)) - torch.log(qc)) + rest


def _relax_choice(
    candidates: torch.Tensor,  # [bs, W] int64
    target_probs: torch.Tensor,  # [bs, W, V] float
    parent: torch.Tensor,  # [bs, W] int64, -1 none
    rank: torch.Tensor,  # [bs, W] int64 sibling rank
    floor: torch.Tensor,  # [bs] float32
    power: torch.Tensor,  # [bs] float32
    stop_tokens: Optional[torch.Tensor],  # [bs, T] int64 -1 padded
    allowed: Optional[torch.Tensor] = None,  # [bs, W] bool nodes the scope allows; None: all
):
    """Per parent node P: the child to relax if P is relaxed (``policy.sampled.choose_relaxed_child``
    without the ledger and cap tests, which depend on the walk). -> best [bs, W] int64 child node
    (W: none eligible), q64, a64, charge64 [bs, W] float64 per node, and with ``allowed`` the child
    the unscoped rule would pick (to count what the scope kept strict; else None)."""
    bs, W = candidates.shape
    V = target_probs.shape[-1]
    node = torch.arange(W, device=candidates.device).expand(bs, W)
    rows = torch.arange(bs, device=candidates.device)[:, None]
    has_parent = parent >= 0
    up = torch.where(has_parent, parent, node)
    q = target_probs[rows, up, candidates.clamp(0, V - 1)].float()  # [bs, W] q under the parent
    q64, a64, charge64 = node_charges(q, power)
    eligible = has_parent & (q >= floor[:, None]) & (a64 > q64)
    if stop_tokens is not None:
        eligible &= ~(candidates[:, :, None] == stop_tokens[:, None, :]).any(dim=-1)
    # A parent whose children share a token is never relaxed (SGLang's walk is not exact there).
    key = (parent + 1) * 2**32 + candidates  # [bs, W] one int64 per (parent, token)
    duplicate = has_parent & ((key[:, :, None] == key[:, None, :]).sum(dim=-1) > 1)
    parent_slot = torch.where(has_parent, parent, W)
    has_duplicate = torch.zeros(bs, W + 1, dtype=torch.long, device=candidates.device)
    has_duplicate = has_duplicate.scatter_add(1, parent_slot, duplicate.long())[:, :W] > 0  # [bs, W] per parent
    children = parent[:, None, :] == node[:, :, None]  # [bs, P, n]

    def best_of(eligible: torch.Tensor) -> torch.Tensor:
        """best[b, P]: the eligible child of P with the largest q, the first in sibling order on ties."""
        of_parent = children & eligible[:, None, :]
        q_cand = torch.where(of_parent, q64[:, None, :], -1.0)
        best_q = q_cand.amax(dim=-1, keepdim=True)
        at_best = of_parent & (q_cand == best_q)
        best_rank = torch.where(at_best, rank[:, None, :], W).amin(dim=-1, keepdim=True)
        best = torch.where(at_best & (rank[:, None, :] == best_rank), node[:, None, :], W).amin(dim=-1)
        return torch.where(has_duplicate, W, best)

    if allowed is None:
        return best_of(eligible), q64, a64, charge64, None
    return best_of(eligible & allowed), q64, a64, charge64, best_of(eligible)


def sibling_steps(W: int, max_children: Optional[int]) -> int:
    """Steps of the sibling loop at each level for a draft of ``W`` nodes: ``max_children`` (the
    caller's host-known bound on any node's children, e.g. EAGLE's topk) clamped to W - 1, the
    most children a node of W can have; W - 1 without a bound (None, or below 1)."""
    if max_children is None or max_children < 1:
        return max(W - 1, 0)
    return min(int(max_children), max(W - 1, 0))


def asd_sampled_verify(
    predicts: torch.Tensor,  # [bs*W] int32, mutable: token emitted after each accepted node
    accept_index: torch.Tensor,  # [bs, K+1] int32, mutable: global ids of the accepted path (-1 padded by the caller)
    accept_token_num: torch.Tensor,  # [bs] int32, mutable: accepted draft tokens
    candidates: torch.Tensor,  # [bs, W] int64 draft token per node (node 0 = root)
    retrieve_index: torch.Tensor,  # [bs, W] int64 global id b*W+n of each node
    retrieve_next_token: torch.Tensor,  # [bs, W] int64 first child, -1 none
    retrieve_next_sibling: torch.Tensor,  # [bs, W] int64 next sibling, -1 none
    uniform_samples: torch.Tensor,  # [bs, W] float32 coin per node, in [0, 1)
    uniform_samples_for_final_sampling: torch.Tensor,  # [bs] float32 the bonus's coin
    target_probs: torch.Tensor,  # [bs, W, V] float32 processed target distribution per node
    remaining: torch.Tensor,  # [bs] float32 B - spent in nats (0 => exact row)
    floor: torch.Tensor,  # [bs] float32 tau in (0, 1] (0 => exact row)
    cap: torch.Tensor,  # [bs] int32 relaxed nodes per block (0 => exact row)
    power: torch.Tensor,  # [bs] float32 in [0, 1): a = q ** power (0: a = 1)
    stop_tokens: Optional[torch.Tensor] = None,  # [bs, T] int64 -1 padded: never relaxed into
    threshold_single: float = 1.0,  # SGLang's server-wide walk thresholds (1: exact)
    threshold_acc: float = 1.0,
    max_children: Optional[int] = None,  # host-known bound on a node's children (EAGLE: topk), <= W - 1 used
    scope: Optional[ScopeRows] = None,  # each row's scope (``verify.scope``); None: every position allowed
) -> SampledVerifyOutput:
    """Walk every row's draft tree (``policy.sampled_walk.sample_block``), write the accepted path
    into ``predicts`` / ``accept_index`` / ``accept_token_num`` as SGLang's kernel does, and
    return the relaxation receipts. The caller subtracts ``spent`` from each row's ledger.

    ``max_children`` bounds the sibling loop of each level: pass EAGLE's topk (1 for chains); a
    node with more children than the bound would have its later children never tried, so a bound
    below the tree's is a caller bug. No node of W has more than W - 1 children, so each level's
    loop runs ``sibling_steps(W, max_children)`` = min(max_children, W - 1) steps: a topk above
    the draft width, which SGLang accepts (``--speculative-eagle-topk 4
    --speculative-num-draft-tokens 4``), is a valid bound, never an error in the step. None, or a
    value below 1, is no bound (W - 1). Host ints only: the loop count is fixed per shape.

    ``scope``: only a child the row's scope allows may be relaxed (``verify.scope.allowed_nodes``,
    the target's choice at a parent being its mode); the walk itself is SGLang's. With a scope, the
    receipts' ``scope_skipped`` counts, per row, the levels of the walk where no relaxation was made
    but the unscoped rule would have relaxed its best child there (the floor, stop tokens, the cap
    and the budget all passed; only the scope said no)."""
    bs, W = candidates.shape
    S = accept_index.shape[1]
    K = S - 1
    V = target_probs.shape[-1]
    device = candidates.device
    rows = torch.arange(bs, device=device)
    node_ids = torch.arange(W, device=device).expand(bs, W)
    candidates = candidates.long()
    retrieve_index = retrieve_index.long()
    next_token = retrieve_next_token.long()
    next_sibling = retrieve_next_sibling.long()
    thr_acc = max(float(threshold_acc), 1e-9)
    siblings = sibling_steps(W, max_children)

    parent, rank = tree_links(next_token, next_sibling)
    allowed = None
    if scope is not None:
        up, node_depth = node_depths(parent, K)
        mode = target_probs.argmax(dim=-1)  # [bs, W] the target's choice at each node
        allowed = allowed_nodes(scope, candidates, up, node_depth, mode.gather(1, up), K)
    best, q64, a64, charge64, free = _relax_choice(candidates, target_probs, parent, rank, floor, power,
                                                   stop_tokens, allowed)
    no_child = torch.full((bs, 1), W, dtype=best.dtype, device=device)
    best_pad = torch.cat([best, no_child], 1)
    pad64 = torch.zeros(bs, 1, dtype=torch.float64, device=device)
    q64, a64, charge64 = (torch.cat([t, pad64], 1) for t in (q64, a64, charge64))  # column W: no child
    free_pad = None if free is None else torch.cat([free, no_child], 1)  # the unscoped choice: counting only
    skipped = None if free is None else torch.zeros(bs, dtype=torch.int32, device=device)
    row_on = (remaining > 0) & (floor > 0) & (cap > 0)  # [bs]
    remaining64 = remaining.double()

    node = torch.zeros(bs, dtype=torch.long, device=device)  # last accepted node (local id)
    coin = uniform_samples[:, 0].double()  # float32 values on exact rows
    last = retrieve_index[:, 0].clone()  # global id of the last accepted node
    accept_index[:, 0] = last.to(accept_index.dtype)
    n_acc = torch.zeros(bs, dtype=torch.long, device=device)
    alive = torch.ones(bs, dtype=torch.bool, device=device)
    block_charge = torch.zeros(bs, dtype=torch.float64, device=device)
    n_relaxed = torch.zeros(bs, dtype=torch.long, device=device)
    rejected = torch.zeros(bs, W, dtype=torch.bool, device=device)  # children rejected at the current level
    cols = {k: [] for k in ("relaxed", "token", "q", "a", "charge", "accepted")}
    for _ in range(K):
        # The relaxation decision: prefix, p and the children only (no coin read yet).
        j = best_pad.gather(1, node[:, None]).squeeze(1)  # [bs] W = none
        qj, aj, cj = (t.gather(1, j[:, None]).squeeze(1) for t in (q64, a64, charge64))
        relax = (row_on & alive & (j < W) & (n_relaxed < cap.long())
                 & (block_charge + cj <= remaining64))
        if skipped is not None:
            jf = free_pad.gather(1, node[:, None]).squeeze(1)
            cf = charge64.gather(1, jf[:, None]).squeeze(1)
            skipped += (row_on & alive & (jf < W) & (n_relaxed < cap.long()) & (block_charge + cf <= remaining64)
                        & ~relax).int()
        block_charge = torch.where(relax, block_charge + cj, block_charge)
        n_relaxed = n_relaxed + relax.long()
        take_relaxed = relax & ((coin < aj) | (aj >= 1))
        mapped = (coin - aj) / torch.where(aj < 1, 1 - aj, 1.0) * (1 - qj)  # uniform on [0, 1 - q) given coin >= a
        coin = torch.where(relax & ~take_relaxed, mapped, coin)
        skip = torch.where(relax, j, -1)
        level_rejected = (node_ids == skip[:, None]) & (relax & ~take_relaxed)[:, None]
        rejected = torch.where(alive[:, None], level_rejected, rejected)  # a finished row keeps its last level's

        # SGLang's walk over the siblings (the relaxed child skipped), coin compared in float64.
        child = next_token.gather(1, node[:, None]).squeeze(1)
        cur = torch.where(alive, child, -1)
        searching = alive & (cur >= 0) & ~take_relaxed
        taken_node = torch.where(take_relaxed, j, -1)
        prob_acc = torch.zeros(bs, dtype=target_probs.dtype, device=device)
        for _ in range(siblings):
            idx = cur.clamp(min=0)
            tok = candidates.gather(1, idx[:, None]).squeeze(1)
            q = target_probs[rows, node, tok]
            at_skip = idx == skip
            acc_sum = prob_acc + q
            take = searching & ~at_skip & (q > 0) & ((coin < (acc_sum / thr_acc).double()) | (q >= threshold_single))
            drop = searching & ~take
            prob_acc = torch.where(take, torch.zeros_like(prob_acc), torch.where(drop & ~at_skip, acc_sum, prob_acc))
            rejected |= (node_ids == idx[:, None]) & drop[:, None]
            taken_node = torch.where(take, idx, taken_node)
            sibling = next_sibling.gather(1, idx[:, None]).squeeze(1)
            cur = torch.where(drop, sibling, cur)
            searching = drop & (sibling >= 0)
        took = taken_node >= 0

        cols["relaxed"].append(relax)
        cols["token"].append(torch.where(relax, candidates.gather(1, j.clamp(max=W - 1)[:, None]).squeeze(1), -1))
        cols["q"].append(torch.where(relax, qj, 0.0))
        cols["a"].append(torch.where(relax, aj, 0.0))
        cols["charge"].append(torch.where(relax, cj, 0.0))
        cols["accepted"].append(take_relaxed)

        new = taken_node.clamp(min=0)
        tok = candidates.gather(1, new[:, None]).squeeze(1)
        predicts.scatter_(0, last, torch.where(took, tok.to(predicts.dtype), predicts.gather(0, last)))
        n_acc = n_acc + took.long()
        draft_id = retrieve_index.gather(1, new[:, None]).squeeze(1)
        slot = n_acc.clamp(max=S - 1)[:, None]
        accept_index.scatter_(1, slot, torch.where(took[:, None], draft_id[:, None].to(accept_index.dtype),
                                                   accept_index.gather(1, slot)))
        last = torch.where(took, draft_id, last)
        node = torch.where(took, new, node)
        coin = torch.where(took, uniform_samples.gather(1, new[:, None]).squeeze(1).double(), coin)
        rejected &= ~took[:, None]
        alive &= took
    accept_token_num.copy_(n_acc.to(accept_token_num.dtype))
    bonus = _bonus(target_probs[rows, node], rejected & (n_acc != K)[:, None], candidates,
                   uniform_samples_for_final_sampling)
    predicts.scatter_(0, last, bonus.to(predicts.dtype))
    return dataclasses.replace(_receipts(cols, block_charge, n_relaxed, bs, device), scope_skipped=skipped)


def _bonus(
    p: torch.Tensor,  # [bs, V] target distribution at the last accepted node
    rejected: torch.Tensor,  # [bs, W] bool children whose tokens leave the residual
    candidates: torch.Tensor,  # [bs, W] int64
    coin: torch.Tensor,  # [bs] float32
) -> torch.Tensor:
    """-> [bs] int64: inverse CDF of relu(p - p on the rejected tokens), SGLang's fallbacks (the
    last positive entry, else V - 1) when rounding leaves no entry above the draw. The CDF is the
    float32 rounding of the sequential float64 prefix sums and the total its last entry (what
    torch's CPU cumsum of float32 computes, made explicit), so a tiled kernel reproduces it bit for
    bit; SGLang's kernel sums in float32 by blocks, which can differ in the last bit of u only."""
    bs, V = p.shape
    slot = torch.where(rejected, candidates.clamp(0, V - 1), V)
    dropped = torch.zeros(bs, V + 1, dtype=torch.bool, device=p.device).scatter_(1, slot, True)[:, :V]
    resid = (p - torch.where(dropped, p, torch.zeros_like(p))).clamp(min=0)  # SGLang's relu(q - draft_probs)
    cdf = resid.double().cumsum(dim=-1)  # sequential float64 prefix sums, rounded below: the fused kernel's
    u = coin * cdf[:, -1].float()
    positive = resid > 0
    above = positive & (cdf.float() > u[:, None])
    first = above.int().argmax(dim=-1)
    last_positive = V - 1 - positive.flip(-1).int().argmax(dim=-1)
    fallback = torch.where(positive.any(dim=-1), last_positive, torch.full_like(last_positive, V - 1))
    return torch.where(above.any(dim=-1), first, fallback)


def _receipts(cols, block_charge, n_relaxed, bs, device) -> SampledVerifyOutput:
    def stack(name, dtype, empty):
        if not cols[name]:
            return torch.full((bs, 0), empty, dtype=dtype, device=device)
        return torch.stack(cols[name], dim=1).to(dtype)

    return SampledVerifyOutput(
        spent=block_charge.float(),
        num_relaxed=n_relaxed.int(),
        relaxed=stack("relaxed", torch.bool, False),
        relaxed_token=stack("token", torch.int64, -1),
        relaxed_q=stack("q", torch.float32, 0.0),
        relaxed_accept_prob=stack("a", torch.float32, 0.0),
        relaxed_charge=stack("charge", torch.float32, 0.0),
        relaxed_accepted=stack("accepted", torch.bool, False),
    )
