"""The batched verifier in plain torch, every rule: the reference for any fused kernel.

Semantics: ``sglang_asd.policy`` (spec sections 3-5; the rules in ``policy.config``), batched over
``bs`` rows of ``W`` draft nodes, each row under its own rule (``rule``, as data: ``rules.py``).
One pass over the vocabulary (the argmax; none when the caller passes ``target_predict``), one
more (the top 2) only when the margin rule may be present, then O(bs * W) work in loops over
log2(W) and the depth K only.
No host sync: no ``.item()``, ``.tolist()``, ``.cpu()`` and no branch on tensor data.

Vocabulary (docs/CONTRACTS.md): node 0 is the root (the last committed token); node n at
depth d >= 1 is draft position i = d - 1, scored by its parent's logits. It is *exact* when
its token is the parent's argmax, an *exception* when a mismatch passes the gates, else
*rejected*. The *bonus* is the argmax at the last accepted node.
"""

from __future__ import annotations

import dataclasses
from typing import AbstractSet, Optional

import torch

from sglang_asd.verify.output import ASDVerifyOutput
from sglang_asd.verify.rules import row_traits
from sglang_asd.verify.scope import ScopeRows, allowed_nodes
from sglang_asd.verify.tree_links import node_depths, row_tree_depth, tree_links


def _regret_and_argmax(
    logits: torch.Tensor,  # [bs*W, V] float
    candidates: torch.Tensor,  # [bs, W] int64
    up: torch.Tensor,  # [bs, W] int64 parent (self for the root)
    target_predict: Optional[torch.Tensor],  # [bs, W] int64 or None
):
    """-> target_predict [bs, W] int64, regret [bs, W] float32 of each node's token under its
    parent's logits: z_parent(argmax) - z_parent(token), >= 0, NaN for undefined values."""
    bs, W = candidates.shape
    if target_predict is None:
        target_predict = logits.argmax(dim=-1).view(bs, W)  # the one pass over V
    target_predict = target_predict.long()
    row = torch.arange(bs, device=candidates.device)[:, None] * W + up  # [bs, W] parent's logits row
    best = logits[row, target_predict.gather(1, up)].float()  # [bs, W]
    drafted = logits[row, candidates.clamp(0, logits.shape[1] - 1)].float()  # [bs, W]
    regret = (best - drafted).clamp_min(0)  # -inf draft logit -> inf; NaN stays NaN
    return target_predict, regret


def _target_margin(
    logits: torch.Tensor,  # [bs*W, V] float
    target_predict: torch.Tensor,  # [bs, W] int64
) -> torch.Tensor:
    """-> [bs, W] float32: each node's margin z(target_predict) - max_{v != target_predict} z(v),
    clamped at 0 as the regret is, so that a node's child is the runner-up iff its regret <= the
    node's margin (equal when the child's logit is the second largest: the same float32
    subtraction of the same values). NaN where the row holds a NaN. One pass over V (top 2)."""
    bs, W = target_predict.shape
    flat = target_predict.reshape(-1, 1)  # [bs*W, 1]
    best = logits.gather(1, flat).squeeze(1).float()
    if logits.shape[1] < 2:
        second = torch.full_like(best, float("-inf"))
    else:
        top2 = logits.topk(2, dim=-1)  # ties: either index; only the values matter below
        first_is_tp = top2.indices[:, 0] == flat.squeeze(1)
        second = torch.where(first_is_tp, top2.values[:, 1], top2.values[:, 0]).float()
    return (best - second).clamp_min(0).view(bs, W)


def asd_verify_torch(
    candidates: torch.Tensor,  # [bs, W] int64 draft token per node (node 0 = root, ignored)
    logits: torch.Tensor,  # [bs*W, V] float final logits (after penalties/bias/grammar mask)
    retrieve_next_token: torch.Tensor,  # [bs, W] int64 first child, -1 none
    retrieve_next_sibling: torch.Tensor,  # [bs, W] int64 next sibling, -1 none
    remaining: torch.Tensor,  # [bs] float32 asd: B - spent; other rules: B (0 => strict row)
    gate: torch.Tensor,  # [bs] float32 the rule's gate: g, margin or threshold (0 => strict row)
    cap: torch.Tensor,  # [bs] int32 m, capped rules only (0 => strict row)
    depth: int,  # K
    stop_tokens: Optional[torch.Tensor] = None,  # [bs, T] int64 -1 padded; never exceptions
    target_predict: Optional[torch.Tensor] = None,  # [bs, W] int64 argmax per node, if known
    rule: Optional[torch.Tensor] = None,  # [bs] int32 rule id per row (``rules.RULE_ID``); None: all asd
    rules_present: Optional[AbstractSet[str]] = None,  # host-known superset of the rules in ``rule``
    tree_depth_gate: bool = False,  # NGRAM: q_i = (row's tree depth) - i instead of K - i
    scope: Optional[ScopeRows] = None,  # each row's scope (``verify.scope``); None: every position allowed
) -> ASDVerifyOutput:
    """Choose each row's accepted path under its rule; see ``ASDVerifyOutput``.

    Strict rows (``rules.rows_on`` false: remaining <= 0, gate <= 0, or cap <= 0 under a capped
    rule) give SGLang's ``verify_tree_greedy`` result (predict, accept_index, num_correct_drafts)
    exactly, including ``predict`` off the path (0, as ``eagle_sample`` allocates it).
    ``spent <= remaining`` holds in float32 on block-limited rows (asd, local); the caller
    subtracts ``spent`` from an asd row's ledger (clamping at 0 guards rounding when it keeps
    ``spent`` and ``budget`` instead). On margin and threshold rows ``spent`` is only counted.

    ``rules_present`` (host-known, e.g. the ledger table's view) decides whether the top-2 pass
    for the margin rule runs: None means any rule in ``rule`` may be present; ``rule`` None means
    every row is asd. A ``rules_present`` without a rule that ``rule`` holds is a caller bug (a
    margin row would skip its runner-up test). ``tree_depth_gate`` makes each row's gate use its
    tree's real depth (the deepest node hanging from the root, at most K) for K in q_i = K - i;
    K stays the loop bound and the output width. ``scope``: a node the row's scope does not allow
    (``verify.scope.allowed_nodes``) is never an exception; None computes nothing of it, so an
    unscoped batch runs exactly as without scopes.

    Conventions, as in SGLang: node n of row b is global node b*W + n (SGLang's
    ``retrieve_index``); among siblings carrying the same token only the first in sibling order
    counts; nodes deeper than K are never accepted. A given ``target_predict`` is used as is and
    regret is measured against it (clamped at 0). Regret is float32; NaN counts as masked.
    """
    bs, W = candidates.shape
    K = depth
    device = candidates.device
    candidates = candidates.long()
    node = torch.arange(W, device=device).expand(bs, W)

    parent, sibling_rank = tree_links(retrieve_next_token, retrieve_next_sibling)
    up, node_depth = node_depths(parent, K)
    target_predict, regret = _regret_and_argmax(logits, candidates, up, target_predict)
    has_parent = parent >= 0  # every node except the root and nodes outside the tree
    traits = row_traits(rule, bs, device)  # [bs] bool each

    # Among siblings with the same token only the first in sibling order counts (SGLang's
    # walk never looks past it). One int64 key per (parent, token) pair (token ids < 2^31):
    sibling_token = (parent + 1) * 2**32 + candidates  # [bs, W]
    shadowed = (
        (sibling_token[:, :, None] == sibling_token[:, None, :])
        & (sibling_rank[:, :, None] > sibling_rank[:, None, :])
    ).any(dim=-1)  # [bs, W]

    # A mismatched node at depth d (draft position i = d - 1) is an exception iff (policy.rule)
    #   the row is on (rules.rows_on), the token is no stop token, its regret r is finite,
    #   1. r / q <= gate, q = K - i (per-suffix-value rules) or 1,  margin: and r <= the parent's
    #   margin (the token is the runner-up),  2. capped rules: path exceptions <= cap,
    #   3. block-limited rules: path exception regret <= remaining.
    # Gate 1 is node-local; 2 and 3 are path totals, checked after the scan below.
    exact = has_parent & (candidates == target_predict.gather(1, up))
    row_on = (remaining > 0) & (gate > 0) & ((cap > 0) | ~traits.capped)  # [bs]
    gate_depth = row_tree_depth(up, node_depth, K)[:, None] if tree_depth_gate else K  # [bs, 1] or K
    suffix_value = torch.where(traits.per_suffix_value[:, None], (gate_depth + 1 - node_depth).clamp_min(1), 1).float()
    exception = (
        row_on[:, None]
        & has_parent
        & ~exact
        & torch.isfinite(regret)
        & (regret / suffix_value <= gate[:, None])
    )
    if rule is not None and (rules_present is None or "margin" in rules_present):
        parent_margin = _target_margin(logits, target_predict).gather(1, up)  # [bs, W]
        exception &= ~traits.runner_up_only[:, None] | (regret <= parent_margin)
    if stop_tokens is not None:
        is_stop = (candidates[:, :, None] == stop_tokens[:, None, :]).any(dim=-1)
        exception &= ~is_stop
    gated = exception
    if scope is not None:
        exception = exception & allowed_nodes(scope, candidates, up, node_depth, target_predict.gather(1, up), K)
    node_ok = (node == 0) | has_parent & ~shadowed & (exact | exception)
    node_exceptions = exception.long()
    node_regret = torch.where(exception, regret, 0.0)

    # Path totals, root to node; after t rounds they are exact for every node at depth <= t,
    # and nodes deeper than K never become ok. Regret is summed in path order, as the rule does.
    path_ok = node == 0
    path_exceptions = torch.zeros_like(parent)
    path_regret = torch.zeros_like(regret)
    for _ in range(K):
        path_ok = node_ok & path_ok.gather(1, up)
        path_exceptions = node_exceptions + path_exceptions.gather(1, up)
        path_regret = node_regret + path_regret.gather(1, up)
    # Both totals only grow along a path, so checking them per node keeps acceptance prefix-closed.
    # A path without exceptions needs no check (strict rows stay strict whatever ``remaining`` holds).
    within_gates = ((~traits.capped[:, None] | (path_exceptions <= cap[:, None]))
                    & (~traits.block_limited[:, None] | (path_regret <= remaining[:, None])))
    accepted = path_ok & ((path_exceptions == 0) | within_gates)

    # Deepest accepted node; ties: smaller path regret, then smaller node index.
    accepted_depth = torch.where(accepted, node_depth, -1)
    tied = accepted_depth == accepted_depth.amax(dim=1, keepdim=True)
    least_regret = torch.where(tied, path_regret, float("inf")).amin(dim=1, keepdim=True)
    tied &= path_regret == least_regret
    chosen = torch.where(tied, node, W).amin(dim=1, keepdim=True)  # [bs, 1]
    out = _outputs(candidates, target_predict, up, node_depth, exception, regret, path_regret, chosen, K)
    if scope is None:
        return out
    # Scope-skipped: nodes hanging from the accepted path whose node gates passed but the scope not.
    path = out.accept_index.long() - torch.arange(bs, device=device)[:, None] * W  # [bs, S], -1 padded below 0
    on_path = torch.zeros(bs, W + 1, dtype=torch.bool, device=device)
    on_path.scatter_(1, torch.where(path >= 0, path, W), True)
    skipped = gated & ~exception & ~shadowed & on_path[:, :W].gather(1, up) & ~on_path[:, :W]
    return dataclasses.replace(out, scope_skipped=skipped.sum(dim=1, dtype=torch.int32))


def _outputs(
    candidates: torch.Tensor,  # [bs, W] int64
    target_predict: torch.Tensor,  # [bs, W] int64
    up: torch.Tensor,  # [bs, W] int64
    node_depth: torch.Tensor,  # [bs, W] int64
    exception: torch.Tensor,  # [bs, W] bool
    regret: torch.Tensor,  # [bs, W] float32
    path_regret: torch.Tensor,  # [bs, W] float32
    chosen: torch.Tensor,  # [bs, 1] int64 last accepted node
    K: int,
) -> ASDVerifyOutput:
    bs, W = candidates.shape
    device = candidates.device
    num_correct = node_depth.gather(1, chosen)  # [bs, 1]

    slot = torch.arange(K + 1, device=device)  # [S]
    # ancestors[:, t] = the chosen node's t-th ancestor (the root once past it), so the path node
    # at slot s (depth s) is ancestor num_correct - s; the chosen node itself for s >= num_correct.
    ancestors = [chosen]
    for _ in range(K):
        ancestors.append(up.gather(1, ancestors[-1]))
    path = torch.cat(ancestors, dim=1).gather(1, (num_correct - slot).clamp(min=0))  # [bs, S]

    target_on_path = target_predict.gather(1, path)  # [bs, S] argmax at slot s; the bonus for s >= num_correct
    draft_on_path = candidates.gather(1, path[:, 1:])  # [bs, K] token at draft position i (slot i + 1)
    position = slot[:K]  # [K] draft position i
    accepted_position = position < num_correct  # [bs, K]
    # Token emitted after each path node: the next accepted draft token, or the bonus.
    emitted = torch.cat([torch.where(accepted_position, draft_on_path, target_on_path[:, :K]), target_on_path[:, K:]], 1)
    predict = torch.zeros((bs, W), dtype=torch.int32, device=device)
    predict.scatter_(1, path, emitted.int())  # repeated writes at the chosen node carry the same bonus

    row_base = torch.arange(bs, device=device)[:, None] * W
    accept_index = torch.where(slot <= num_correct, path + row_base, -1).int()
    exception_mask = exception.gather(1, path[:, 1:]) & accepted_position
    exception_regret = torch.where(exception_mask, regret.gather(1, path[:, 1:]), 0.0)
    after_first_exception = exception_mask.cumsum(dim=1) > 0
    return ASDVerifyOutput(
        predict=predict.view(-1),
        accept_index=accept_index,
        num_correct_drafts=num_correct.squeeze(1).int(),
        spent=path_regret.gather(1, chosen).squeeze(1),
        num_exceptions=exception_mask.sum(dim=1, dtype=torch.int32),
        exception_mask=exception_mask,
        exception_regret=exception_regret,
        target_token=torch.where(position <= num_correct, target_on_path[:, :K], -1),
        num_suffix_tokens=(accepted_position & ~exception_mask & after_first_exception).sum(dim=1, dtype=torch.int32),
        scope_skipped=torch.zeros(bs, dtype=torch.int32, device=device),
    )
