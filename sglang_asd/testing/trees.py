"""Draft trees for tests and benchmarks, as parent arrays, and SGLang's linked-list encoding.

A row's tree is a parent array: ``parents[0] = -1`` (node 0 is the root, the last committed
token), ``parents[n] < n`` for a node in the tree, ``-1`` for a node outside it (SGLang's
builder drops such nodes). A node at depth d (1..K) is draft position i = d - 1.
"""

from __future__ import annotations

import random
from typing import List, Sequence, Tuple

import torch


def chain_parents(K: int) -> List[int]:
    """A chain of K draft tokens: W = K + 1 nodes in a line."""
    return [-1] + list(range(K))


def eagle_draft(bs: int, topk: int, depth: int, W: int, gen: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    """(parent_list, selected) shaped like EAGLE's ``organize_draft_results``, the input of
    ``build_tree_kernel_efficient``: W - 1 <= topk + (depth - 1) * topk^2 nodes.

    Step 0 offers topk children of the root (score ids 0..topk-1); step s >= 1 offers topk
    children of each of the topk nodes expanded at step s - 1 (score ids topk + (s-1)*topk^2 + ...);
    scores multiply along a path, so a selected node's parent is always selected too.
    parent_list: [bs, topk + 1 + (depth - 2) * topk] score id of each expanded node (-1 first);
    selected: [bs, W - 1] the W - 1 best score ids, ascending (node n = selected[n - 1] + ...).
    """
    p0 = torch.rand(bs, topk, generator=gen).sort(1, descending=True).values
    score_list = [p0]
    parents = [torch.arange(-1, topk).expand(bs, -1)]
    cur = p0
    for s in range(1, depth):
        expand = cur.unsqueeze(2) * torch.rand(bs, topk, topk, generator=gen)
        score_list.append(expand.flatten(1))
        cs_p, cs_idx = expand.flatten(1).topk(topk, dim=1)
        parents.append(cs_idx + topk * topk * (s - 1) + topk)
        cur = cs_p
    scores = torch.cat(score_list, 1)
    selected = scores.topk(W - 1, dim=1).indices.sort(1).values
    parent_list = torch.cat(parents[:-1], 1) if len(parents) > 1 else torch.empty(bs, 0, dtype=torch.long)
    return parent_list, selected


def eagle_parents(parent_list: Sequence[int], selected: Sequence[int], topk: int) -> List[int]:
    """One row's parent array from ``eagle_draft``, as ``build_tree_kernel_efficient`` links it:
    node n >= 1 is ``selected[n - 1]``; its parent is the root when it was offered at step 0,
    else the node whose score id is ``parent_list[selected[n - 1] // topk]`` (-1 if unselected)."""
    node_of = {score_id: n + 1 for n, score_id in enumerate(selected)}
    parents = [-1]
    for score_id in selected:
        block = score_id // topk
        parents.append(0 if block == 0 else node_of.get(parent_list[block], -1))
    return parents


def random_tree(rng: random.Random, K: int, W: int, *, outside: float = 0.0, too_deep: float = 0.0) -> List[int]:
    """Any tree with parents[n] < n and depth <= K; with probability ``outside`` a node is
    outside the tree (-1), with ``too_deep`` it may sit at depth K + 1 (never accepted)."""
    parents, depth = [-1], [0]
    for n in range(1, W):
        u = rng.random()
        if u < outside:
            parents.append(-1)
            depth.append(0)
            continue
        limit = K + 1 if u < outside + too_deep else K
        choices = [p for p in range(n) if (p == 0 or parents[p] >= 0) and depth[p] < limit]
        p = rng.choice(choices)
        parents.append(p)
        depth.append(depth[p] + 1)
    return parents


def sglang_links(parents: Sequence[int], reverse_siblings: bool = False) -> Tuple[List[int], List[int]]:
    """(retrieve_next_token, retrieve_next_sibling) as ``build_tree_kernel_efficient`` writes them:
    children inserted at the head of the list in descending index, so sibling order = ascending
    node index; a node outside the tree is in no list. ``reverse_siblings`` inserts in ascending
    index instead (sibling order != index order: not what SGLang builds, a harder case)."""
    W = len(parents)
    next_token, next_sibling = [-1] * W, [-1] * W
    for n in (range(1, W) if reverse_siblings else range(W - 1, 0, -1)):
        p = parents[n]
        if p < 0:
            continue
        if next_token[p] != -1:
            next_sibling[n] = next_token[p]
        next_token[p] = n
    return next_token, next_sibling
