"""Parent, sibling rank and depth of every draft node, from SGLang's linked-list tree encoding.

SGLang encodes a row's draft tree as ``retrieve_next_token`` (first child, -1 none) and
``retrieve_next_sibling`` (next sibling, -1 none); node 0 is the root. A chain is the tree
whose every node has one child. Everything here is batched over rows and loops only over
log2(W) (pointer doubling) or the depth K, never over rows or the vocabulary; no host sync.
"""

from __future__ import annotations

from typing import Tuple

import torch


def _invert(
    link: torch.Tensor,  # [bs, W] int64: n -> m, or -1
) -> torch.Tensor:
    """-> [bs, W] int64: m -> n, -1 where nothing points to m."""
    bs, W = link.shape
    node = torch.arange(W, device=link.device).expand(bs, W)
    inverse = torch.full((bs, W + 1), -1, dtype=torch.int64, device=link.device)
    inverse.scatter_(1, torch.where(link >= 0, link, W), node)  # column W swallows the -1 links
    return inverse[:, :W]


def _doubling_rounds(max_distance: int) -> int:
    """Rounds of pointer doubling that cover ``max_distance`` hops (one hop is the start)."""
    return max(max_distance - 1, 0).bit_length()


def tree_links(
    retrieve_next_token: torch.Tensor,  # [bs, W] int64
    retrieve_next_sibling: torch.Tensor,  # [bs, W] int64
) -> Tuple[torch.Tensor, torch.Tensor]:
    """-> parent [bs, W] int64 (-1 for the root and for nodes outside the tree),
    sibling_rank [bs, W] int64 (0-based position in the parent's child list)."""
    bs, W = retrieve_next_token.shape
    node = torch.arange(W, device=retrieve_next_token.device).expand(bs, W)
    first_child_of = _invert(retrieve_next_token.long())  # [bs, W] parent of each first child
    prev_sibling = _invert(retrieve_next_sibling.long())  # [bs, W]

    # List ranking by pointer doubling: jump ends at the first sibling, rank counts the hops.
    jump = torch.where(prev_sibling >= 0, prev_sibling, node)
    rank = (prev_sibling >= 0).long()
    for _ in range(_doubling_rounds(W - 2)):  # a sibling list holds at most W - 1 nodes
        rank = rank + rank.gather(1, jump)
        jump = jump.gather(1, jump)
    parent = first_child_of.gather(1, jump)
    return parent, rank


def node_depths(
    parent: torch.Tensor,  # [bs, W] int64, -1 = no parent
    depth: int,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """-> up [bs, W] (parent, or the node itself where there is none: a self-loop, so gathers
    along ``up`` stop at the root), node_depth [bs, W] (min(true depth, ``depth``) for nodes in
    the tree; meaningless for nodes outside it)."""
    bs, W = parent.shape
    node = torch.arange(W, device=parent.device).expand(bs, W)
    has_parent = parent >= 0
    up = torch.where(has_parent, parent, node)
    step = has_parent.long()  # 1 per edge; the root and nodes outside the tree stay at 0
    node_depth = torch.zeros_like(parent)
    for _ in range(depth):  # after t rounds every node at depth <= t is exact
        node_depth = step + node_depth.gather(1, up)
    return up, node_depth


def row_tree_depth(
    up: torch.Tensor,  # [bs, W] int64 parent, or the node itself (``node_depths``)
    node_depth: torch.Tensor,  # [bs, W] int64 (``node_depths``)
    depth: int,  # K
) -> torch.Tensor:
    """-> [bs] int64: each row's tree depth, the depth of its deepest node that hangs from the
    root, at most K (NGRAM's K for the gate). Nodes outside the tree and their subtrees (whose
    ``node_depth`` counts from the detached node) are left out: after t rounds ``in_tree`` is exact
    for every node at depth <= t."""
    bs, W = up.shape
    node = torch.arange(W, device=up.device).expand(bs, W)
    in_tree = node == 0
    for _ in range(depth):
        in_tree = (node == 0) | ((up != node) & in_tree.gather(1, up))
    return torch.where(in_tree, node_depth, 0).amax(dim=1)
