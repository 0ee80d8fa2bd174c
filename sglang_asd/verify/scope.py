"""A request's scope on the device: which draft nodes may be relaxed (``policy.scope`` is the rule).

Each row carries its scope (``ScopeRows``, gathered from the ledger table): its output count
``produced`` (output tokens committed, the root included), ``strict_prefix``, the span ``state``
after every committed token before the root, the ``require`` / ``forbid`` bits and its marker
tokens with their ops ``[bs, M, 4]`` (token, set, clear, toggle; token -1 pads). A node at depth d
is draft position d - 1, output index ``produced + d - 1``.

The state is propagated along the tree's paths as the verifier propagates its path totals: K
rounds of one gather along ``up`` (after t rounds every node at depth <= t is exact), so a marker
drafted at depth d changes the state of its descendants in the same block. The root's own token
(the last committed token, e.g. the one a prefill sampled) is folded in first, so the host never
needs to know a token the device committed. No host sync, no loop over rows: O(bs * W * M) work
in loops over K only; none of it runs for a batch without a scoped row (the caller passes None).
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import torch


class ScopeRows(NamedTuple):
    """The scope of a batch's rows ([bs] int32 unless said)."""

    produced: torch.Tensor  # output tokens committed (the root is output index produced - 1)
    strict_prefix: torch.Tensor  # output indices < strict_prefix are strict
    state: torch.Tensor  # span state after every token before the root
    require: torch.Tensor  # bits the parent's state must hold
    forbid: torch.Tensor  # bits it must not hold
    markers: torch.Tensor  # [bs, M, 4] int64 (token, set, clear, toggle); token -1: none


def _ops(tokens: torch.Tensor, markers: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """-> is_marker, set, clear, toggle, each shaped as ``tokens`` ([bs, ...]), for the row's
    markers [bs, M, 4]. Each token has at most one entry per row (``policy.scope.resolve``)."""
    flat = tokens.reshape(tokens.shape[0], -1)  # [bs, n]
    match = (flat[:, :, None] == markers[:, None, :, 0]) & (markers[:, None, :, 0] >= 0)  # [bs, n, M]
    picked = [torch.where(match, markers[:, None, :, j], 0).sum(dim=-1).view(tokens.shape) for j in (1, 2, 3)]
    return (match.any(dim=-1).view(tokens.shape), *picked)


def _apply(state: torch.Tensor, s: torch.Tensor, c: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return ((state & ~c) | s) ^ x


def root_state(scope: ScopeRows, root_token: torch.Tensor) -> torch.Tensor:
    """[bs] int64: the state after the root token ([bs])."""
    _, s, c, x = _ops(root_token[:, None], scope.markers)
    return _apply(scope.state.long(), s[:, 0], c[:, 0], x[:, 0])


def allowed_nodes(
    scope: ScopeRows,
    candidates: torch.Tensor,  # [bs, W] int64, node 0 the root (the last committed token)
    up: torch.Tensor,  # [bs, W] int64 parent (self for the root and nodes outside the tree)
    node_depth: torch.Tensor,  # [bs, W] int64
    target_at_parent: torch.Tensor,  # [bs, W] int64 the target's choice scoring each node
    K: int,
) -> torch.Tensor:
    """[bs, W] bool: the scope allows node n to be relaxed: its output index is past the strict
    prefix, the state after its parent has the required bits and none of the forbidden ones, and
    neither its token nor the target's choice there is a marker. The root's value is meaningless."""
    bs, W = candidates.shape
    node = torch.arange(W, device=candidates.device).expand(bs, W)
    is_marker, s, c, x = _ops(candidates, scope.markers)
    root = root_state(scope, candidates[:, 0])[:, None]  # [bs, 1]
    state = root.expand(bs, W)
    for _ in range(K):  # state after each node's token; exact for depth <= t after t rounds
        state = torch.where(node == 0, root, _apply(state.gather(1, up), s, c, x))
    parent_state = state.gather(1, up)
    target_is_marker = _ops(target_at_parent, scope.markers)[0]
    require, forbid = scope.require.long()[:, None], scope.forbid.long()[:, None]
    position = scope.produced.long()[:, None] + node_depth - 1
    return ((position >= scope.strict_prefix.long()[:, None]) & ((parent_state & require) == require)
            & ((parent_state & forbid) == 0) & ~is_marker & ~target_is_marker)


def committed_state(
    scope: ScopeRows,
    candidates: torch.Tensor,  # [bs, W] int64
    accept_index: torch.Tensor,  # [bs, K+1] global ids b*W+n of the committed path, root first
    num_correct_drafts: torch.Tensor,  # [bs]
) -> torch.Tensor:
    """[bs] int32: the state after the round's last accepted node, i.e. before the bonus token,
    which is the next round's root (folded in by that round, ``root_state``)."""
    bs, W = candidates.shape
    S = accept_index.shape[1]
    tokens = candidates.reshape(-1)[accept_index.long().clamp(min=0)]  # [bs, S]
    _, s, c, x = _ops(tokens, scope.markers)
    state = root_state(scope, candidates[:, 0])
    n = num_correct_drafts.long()
    for slot in range(1, S):
        state = torch.where(slot <= n, _apply(state, s[:, slot], c[:, slot], x[:, slot]), state)
    return state.int()
