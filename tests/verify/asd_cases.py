"""Seeded verify cases built the way SGLang builds them, and plain-Python oracles.

- ``eagle_tree``: EAGLE's topk tree (each step expands the best ``topk`` leaves by ``topk``,
  the ``W - 1`` best-scoring candidates are kept, node ids in candidate order = BFS order).
- ``sglang_links``: ``build_tree_kernel_efficient``'s linked lists for a parent array.
- ``sglang_verify_tree_greedy``: a line-by-line port of SGLang's ``VerifyTreeGreedy`` kernel.
- ``reference_row``: ``sglang_asd.policy.select_tree`` on one row, as expected tensors.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import List, Optional, Sequence

import torch

from sglang_asd.policy import ASDConfig, Ledger, select_tree


def chain_parents(K: int) -> List[int]:
    return [-1] + list(range(K))


def eagle_tree(rng: random.Random, topk: int, K: int, W: int) -> List[int]:
    """Parents of an EAGLE topk tree with W nodes (W - 1 <= topk + (K - 1) * topk^2)."""
    candidates = [(math.log(rng.random() + 1e-12), -1) for _ in range(topk)]  # (score, parent cand)
    frontier = list(range(topk))
    for _ in range(K - 1):
        start = len(candidates)
        for c in frontier:
            for _ in range(topk):
                candidates.append((candidates[c][0] + math.log(rng.random() + 1e-12), c))
        new = range(start, len(candidates))
        frontier = sorted(new, key=lambda c: -candidates[c][0])[:topk]
    chosen = sorted(sorted(range(len(candidates)), key=lambda c: -candidates[c][0])[: W - 1])
    node_of = {c: i + 1 for i, c in enumerate(chosen)}
    # A child scores below its parent, so every chosen candidate's parent is chosen too.
    return [-1] + [node_of[candidates[c][1]] if candidates[c][1] >= 0 else 0 for c in chosen]


def random_tree(rng: random.Random, K: int, W: int) -> List[int]:
    """Any tree with parents[n] < n and depth <= K."""
    parents, depth = [-1], [0]
    for _ in range(1, W):
        p = rng.choice([n for n in range(len(parents)) if depth[n] < K])
        parents.append(p)
        depth.append(depth[p] + 1)
    return parents


def sglang_links(parents: Sequence[int], reverse_siblings: bool = False):
    """(next_token, next_sibling) as SGLang's build_tree_kernel_efficient writes them: children
    inserted at the list head in descending index, so sibling order = ascending node index.
    ``reverse_siblings`` inserts in ascending index instead (not what SGLang builds)."""
    W = len(parents)
    next_token, next_sibling = [-1] * W, [-1] * W
    order = range(1, W) if reverse_siblings else range(W - 1, 0, -1)
    for i in order:
        p = parents[i]
        if p < 0:
            continue  # a node without a parent is dropped, as SGLang does
        if next_token[p] != -1:
            next_sibling[i] = next_token[p]
        next_token[p] = i
    return next_token, next_sibling


def sglang_verify_tree_greedy(candidates, retrive_index, next_token, next_sibling, target_predict, S):
    """Port of SGLang's VerifyTreeGreedy (lists in, lists out); predicts start at 0, accept
    index at -1, as ``eagle_sample`` allocates them. target_predict is flat [bs*W]."""
    bs, W = len(candidates), len(candidates[0])
    predicts = [0] * (bs * W)
    accept_index = [[-1] * S for _ in range(bs)]
    accept_num = [0] * bs
    for bx in range(bs):
        last = retrive_index[bx][0]
        accept_index[bx][0] = last
        num = 0
        cur = 0
        for _ in range(1, S):
            cur = next_token[bx][cur]
            while cur != -1:
                draft_index = retrive_index[bx][cur]
                target = target_predict[last]
                if candidates[bx][cur] == target:
                    predicts[last] = target
                    num += 1
                    accept_index[bx][num] = draft_index
                    last = draft_index
                    break
                cur = next_sibling[bx][cur]
            if cur == -1:
                break
        accept_num[bx] = num
        predicts[last] = target_predict[last]
    return predicts, accept_index, accept_num


@dataclasses.dataclass
class Case:
    parents: List[List[int]]  # per row
    candidates: torch.Tensor  # [bs, W] int64
    logits: torch.Tensor  # [bs*W, V] float32
    next_token: torch.Tensor  # [bs, W] int64
    next_sibling: torch.Tensor  # [bs, W] int64
    remaining: torch.Tensor  # [bs] float32
    gate: torch.Tensor  # [bs] float32
    cap: torch.Tensor  # [bs] int32
    depth: int
    stop_tokens: Optional[torch.Tensor]  # [bs, T] int64

    def verify_args(self):
        return (self.candidates, self.logits, self.next_token, self.next_sibling,
                self.remaining, self.gate, self.cap, self.depth)


def make_case(
    seed: int,
    bs: int,
    K: int,
    W: int,
    V: int = 12,
    shape: str = "eagle",  # "chain" | "eagle" | "random"
    topk: int = 3,
    grid: bool = True,
    strict: bool = False,
    masked: float = 0.05,
    with_stop: bool = True,
    reverse_siblings: bool = False,
    orphans: float = 0.0,
) -> Case:
    """Logits on a 1/8 grid (many ties, exact float arithmetic) or continuous; drafts that
    copy the parent's argmax often, a sibling's token sometimes (duplicates), else random."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    if grid:
        logits = torch.randint(-16, 17, (bs * W, V), generator=gen).float() / 8
    else:
        logits = torch.randn((bs * W, V), generator=gen) * 2
    logits[torch.rand((bs * W, V), generator=gen) < masked] = -math.inf
    argmax = logits.argmax(-1).view(bs, W).tolist()

    parents, cand, nt, ns = [], [], [], []
    for b in range(bs):
        if shape == "chain":
            p = chain_parents(K)
        elif shape == "eagle":
            p = eagle_tree(rng, topk, K, W)
        else:
            p = random_tree(rng, K, W)
        p = [-1 if n > 0 and rng.random() < orphans else q for n, q in enumerate(p)]  # dropped nodes
        toks = [rng.randrange(V)]
        for n in range(1, W):
            u = rng.random()
            if u < 0.55:
                toks.append(argmax[b][p[n]])
            elif u < 0.7 and n > 1 and p[n - 1] == p[n]:
                toks.append(toks[n - 1])  # duplicate sibling
            else:
                toks.append(rng.randrange(V))
        a, s = sglang_links(p, reverse_siblings)
        parents.append(p)
        cand.append(toks)
        nt.append(a)
        ns.append(s)

    def pick(values):
        return [rng.choice(values) for _ in range(bs)]

    if strict:
        kinds = pick([0, 1, 2])
        remaining = [0.0 if k == 0 else rng.choice([0.5, 8.0, 64.0]) for k in kinds]
        gate = [0.0 if k == 1 else rng.choice([0.25, 4.0]) for k in kinds]
        cap = [0 if k == 2 else rng.choice([1, 2, 8]) for k in kinds]
    else:
        remaining = pick([0.0, 0.125, 0.5, 1.0, 2.0, 8.0, 64.0])
        gate = pick([0.0, 0.0625, 0.25, 1.0, 4.0, 100.0])
        cap = pick([0, 1, 2, 3, 8])
    stop = None
    if with_stop:
        stop = torch.tensor([[rng.randrange(V) if rng.random() < 0.5 else -1 for _ in range(3)] for _ in range(bs)])
    return Case(
        parents=parents,
        candidates=torch.tensor(cand, dtype=torch.int64),
        logits=logits,
        next_token=torch.tensor(nt, dtype=torch.int64),
        next_sibling=torch.tensor(ns, dtype=torch.int64),
        remaining=torch.tensor(remaining, dtype=torch.float32),
        gate=torch.tensor(gate, dtype=torch.float32),
        cap=torch.tensor(cap, dtype=torch.int32),
        depth=K,
        stop_tokens=stop,
    )


def node_regrets(case: Case, target_predict: torch.Tensor) -> List[List[float]]:
    """regret[b][n] of node n's token under its parent's logits, float32 like the verifier,
    relative to ``target_predict`` at the parent, clamped at 0 (NaN stays NaN); 0 at the root."""
    bs, W = case.candidates.shape
    parents = torch.tensor(case.parents)
    up = torch.where(parents >= 0, parents, 0)
    rows = torch.arange(bs)[:, None] * W + up
    best = case.logits[rows, target_predict.long().gather(1, up)].float()
    drafted = case.logits[rows, case.candidates].float()
    return torch.where(parents >= 0, (best - drafted).clamp_min(0), 0.0).tolist()


def reference_outputs(case: Case, target_predict: Optional[torch.Tensor] = None) -> dict:
    """select_tree on every row, as the tensors asd_verify must return."""
    bs, W = case.candidates.shape
    K = case.depth
    tp = case.logits.argmax(-1).view(bs, W) if target_predict is None else target_predict.long()
    regrets = node_regrets(case, tp)
    tp_rows = tp.tolist()
    tokens = case.candidates.tolist()
    stops = [[]] * bs if case.stop_tokens is None else case.stop_tokens.tolist()
    remaining, gate, cap = case.remaining.tolist(), case.gate.tolist(), case.cap.tolist()
    predict = [0] * (bs * W)
    accept_index = [[-1] * (K + 1) for _ in range(bs)]
    target_token = [[-1] * K for _ in range(bs)]
    exception_mask = [[False] * K for _ in range(bs)]
    exception_regret = [[0.0] * K for _ in range(bs)]
    num_correct, spent, num_exceptions, num_suffix = [], [], [], []
    for b in range(bs):
        decision = select_tree(
            tokens=tokens[b],
            parents=case.parents[b],
            target_argmax=tp_rows[b],
            regret=regrets[b],
            depth=K,
            ledger=Ledger(budget=max(remaining[b], 0.0)),
            config=ASDConfig(gate=gate[b], max_exceptions_per_block=cap[b]),
            stop_tokens=frozenset(stops[b]) - {-1},
        )
        nodes = (0,) + decision.path
        n = len(decision.path)
        emitted = list(decision.accepted) + [decision.bonus]
        for d, node in enumerate(nodes):
            predict[b * W + node] = emitted[d]
            accept_index[b][d] = b * W + node
            if d < K:
                target_token[b][d] = tp_rows[b][node]
        for d in decision.exceptions:
            exception_mask[b][d] = True
            exception_regret[b][d] = regrets[b][decision.path[d]]
        first = decision.exceptions[0] if decision.exceptions else n
        num_correct.append(n)
        spent.append(decision.spent)
        num_exceptions.append(len(decision.exceptions))
        num_suffix.append(sum(1 for d in range(first + 1, n) if d not in decision.exceptions))
    return {
        "predict": torch.tensor(predict, dtype=torch.int32),
        "accept_index": torch.tensor(accept_index, dtype=torch.int32),
        "num_correct_drafts": torch.tensor(num_correct, dtype=torch.int32),
        "spent": torch.tensor(spent, dtype=torch.float32),
        "num_exceptions": torch.tensor(num_exceptions, dtype=torch.int32),
        "exception_mask": torch.tensor(exception_mask, dtype=torch.bool),
        "exception_regret": torch.tensor(exception_regret, dtype=torch.float32),
        "target_token": torch.tensor(target_token, dtype=torch.int64),
        "num_suffix_tokens": torch.tensor(num_suffix, dtype=torch.int32),
    }
