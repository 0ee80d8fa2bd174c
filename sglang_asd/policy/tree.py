"""The acceptance rules on a draft tree (spec section 5). Standard library only.

Every root-to-node path is a chain block: a node at depth d is draft position i = d - 1 of
a block of K = ``depth`` tokens, judged by the same ``admits_exception`` as a chain. The
accepted path is the deepest node whose whole path is accepted; ties go to the smaller regret
sum, then the smaller node index.

The gate's suffix value q_i = K - i takes K = ``depth`` (EAGLE: ``speculative_num_steps``, as
the spec says), unless ``gate_depth`` is given: NGRAM's tree has no fixed number of steps (SGLang
passes ``draft_token_num - 1`` as the loop bound), so its gate uses the tree's real depth, the
depth of its deepest node (``tree_depth``).

Duplicate siblings: among siblings carrying the same token only the first (smallest node
index) counts. SGLang's strict walk never looks past the first sibling that matches, so this
keeps "no exceptions allowed" == SGLang's ``verify_tree_greedy`` even when two siblings carry
the target's token. SGLang 0.5.23 builds every sibling list in ascending node index
(``build_tree_kernel_efficient``: children inserted in descending index at the list head;
ngram and ``reconstruct_tree``: next sibling = next larger index), so "first sibling" and
"smallest index" agree; the batched verifier follows ``retrieve_next_sibling`` itself.
"""

from __future__ import annotations

import dataclasses
import math
from typing import AbstractSet, Optional, Sequence, Tuple

from sglang_asd.policy.config import ASDConfig
from sglang_asd.policy.ledger import ExceptionEvent, Ledger
from sglang_asd.policy.rule import admits_exception, block_limit


@dataclasses.dataclass(frozen=True)
class TreeDecision:
    """path: accepted node ids, root excluded, root to leaf; accepted: their tokens;
    exceptions: the draft positions i (0-based; ``path[i]`` is at depth i + 1) that were
    exceptions; spent: the block's regret;
    bonus: argmax of the target logits at the last accepted node."""

    path: Tuple[int, ...]
    accepted: Tuple[int, ...]
    exceptions: Tuple[int, ...]
    spent: float
    bonus: int


@dataclasses.dataclass(frozen=True)
class _PathState:
    depth: int
    exception_nodes: Tuple[int, ...]
    regret: float  # sum of the path's exception regrets, accumulated root to leaf


def select_tree(
    tokens: Sequence[int],
    parents: Sequence[int],
    target_argmax: Sequence[int],
    regret: Sequence[float],
    depth: int,
    ledger: Ledger,
    config: ASDConfig,
    stop_tokens: AbstractSet[int] = frozenset(),
    target_margin: Optional[Sequence[float]] = None,
    gate_depth: Optional[int] = None,
    produced: int = 0,
) -> TreeDecision:
    """Decide one tree block and charge ``ledger`` (bounded for asd, unbounded otherwise).

    tokens: [W] draft token per node (node 0 = root, ignored); parents: [W] parent node
    (parents[0] = -1, parents[n] < n); target_argmax: [W] argmax of the target logits at each
    node; regret: [W] regret of node n's token under its parent's logits (regret[0] ignored);
    a node n >= 1 with parents[n] = -1 is not in the tree (SGLang's builder drops such nodes);
    depth: K, the block's draft positions (``speculative_num_steps``); K = 0 (SGLang's adaptive
    zero-step verify, W = 1) accepts nothing and commits the root's argmax as the bonus;
    target_margin: [W] z_(1) - z_(2) of each node's target logits (the margin rule reads it at
    the parent); gate_depth: the K of the gate's q_i = K - i (default ``depth``; NGRAM:
    ``tree_depth(parents, depth)``); produced: output tokens committed before the block (read by
    a ledger's accrual, ``Ledger.limit``).
    """
    _check_tree(tokens, parents, target_argmax, regret)
    if target_margin is None:
        target_margin = [math.nan] * len(tokens)
    elif len(target_margin) != len(tokens):
        raise ValueError(f"target_margin must have W = {len(tokens)} entries, got {len(target_margin)}")
    gate_k = depth if gate_depth is None else gate_depth
    limit = block_limit(ledger, config, produced)
    states: list[Optional[_PathState]] = [None] * len(tokens)
    states[0] = _PathState(depth=0, exception_nodes=(), regret=0.0)
    first_sibling_tokens: set[Tuple[int, int]] = set()
    for n in range(1, len(tokens)):
        parent = parents[n]
        if (parent, tokens[n]) in first_sibling_tokens:
            continue  # duplicate sibling: never looked at
        first_sibling_tokens.add((parent, tokens[n]))
        up = states[parent] if parent >= 0 else None
        if up is None or up.depth >= depth:
            continue  # parent not accepted, or node beyond the block
        if tokens[n] == target_argmax[parent]:
            states[n] = _PathState(up.depth + 1, up.exception_nodes, up.regret)
        elif admits_exception(
            regret=regret[n],
            position=up.depth,
            depth=gate_k,
            exceptions_before=len(up.exception_nodes),
            regret_before=up.regret,
            remaining=limit,
            config=config,
            is_stop_token=tokens[n] in stop_tokens,
            target_margin=target_margin[parent],
        ):
            states[n] = _PathState(up.depth + 1, up.exception_nodes + (n,), up.regret + regret[n])

    best = min(
        (n for n, s in enumerate(states) if s is not None),
        key=lambda n: (-states[n].depth, states[n].regret, n),
    )
    path = _path_to(best, parents)
    exceptions = tuple(i for i, n in enumerate(path) if n in states[best].exception_nodes)
    events = [ExceptionEvent(i, tokens[path[i]], target_argmax[parents[path[i]]], regret[path[i]]) for i in exceptions]
    spent = ledger.charge(events, produced)
    return TreeDecision(
        path=path,
        accepted=tuple(tokens[n] for n in path),
        exceptions=exceptions,
        spent=spent,
        bonus=target_argmax[best],
    )


def tree_depth(parents: Sequence[int], depth: int) -> int:
    """The depth of the deepest node reachable from the root, at most ``depth`` (nodes deeper than
    K are never accepted): NGRAM's K for the gate."""
    node_depth = [0] + [-1] * (len(parents) - 1)  # -1: not (yet) known to hang from the root
    for n in range(1, len(parents)):
        p = parents[n]
        if p >= 0 and node_depth[p] >= 0:
            node_depth[n] = node_depth[p] + 1
    return min(max(node_depth), depth)


def _path_to(node: int, parents: Sequence[int]) -> Tuple[int, ...]:
    path = []
    while node != 0:
        path.append(node)
        node = parents[node]
    return tuple(reversed(path))


def _check_tree(tokens, parents, target_argmax, regret) -> None:
    width = len(tokens)
    if width < 1 or not (len(parents) == len(target_argmax) == len(regret) == width):
        raise ValueError(
            "tokens, parents, target_argmax and regret must have the same length W >= 1, got "
            f"{len(tokens)}, {len(parents)}, {len(target_argmax)}, {len(regret)}"
        )
    if parents[0] != -1:
        raise ValueError(f"parents[0] must be -1 (node 0 is the root), got {parents[0]!r}")
    for n in range(1, width):
        if not -1 <= parents[n] < n:
            raise ValueError(f"parents[{n}] must be in [-1, {n}), got {parents[n]!r}")
        if regret[n] < 0:  # NaN passes here and is treated as masked
            raise ValueError(f"regret[{n}] must be >= 0 (or inf for a masked token), got {regret[n]!r}")
