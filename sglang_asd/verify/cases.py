"""Seeded random verify rounds for parity tests and benchmarks (torch only).

``make_round`` draws one batched verify round: a draft chain or tree per row in SGLang's
linked-list encoding, logits whose argmax and near-misses are planted so that exact tokens,
exceptions and rejections all occur, stop tokens, and ledger rows that mix strict and ASD rows.
``hard=True`` (tiny sizes) adds the corner cases: small-integer logits (ties, exact gate
boundaries such as 0.5 / 2 == 0.25), -inf (masked) tokens, all -inf and NaN rows, duplicate
siblings, nodes outside the tree or deeper than K, budget 0.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

import torch


@dataclasses.dataclass
class VerifyRound:
    candidates: torch.Tensor  # [bs, W] int64
    logits: torch.Tensor  # [bs*W, V]
    retrive_next_token: torch.Tensor  # [bs, W] int64
    retrive_next_sibling: torch.Tensor  # [bs, W] int64
    remaining: torch.Tensor  # [bs] float32
    gate: torch.Tensor  # [bs] float32
    cap: torch.Tensor  # [bs] int32
    depth: int  # K
    stop_tokens: Optional[torch.Tensor]  # [bs, T] int64, -1 padded

    def args(self, target_predict: bool = False):
        """Positional args and kwargs for ``asd_verify``."""
        kwargs = {"stop_tokens": self.stop_tokens}
        if target_predict:
            kwargs["target_predict"] = self.logits.argmax(dim=-1).view(self.candidates.shape)
        return (self.candidates, self.logits, self.retrive_next_token, self.retrive_next_sibling,
                self.remaining, self.gate, self.cap, self.depth), kwargs


def links_from_parents(parents: List[int]):
    """SGLang's encoding: children of a node listed in increasing node index."""
    W = len(parents)
    next_token, next_sibling, last = [-1] * W, [-1] * W, {}
    for c in range(1, W):
        p = parents[c]
        if p < 0:
            continue
        if p in last:
            next_sibling[last[p]] = c
        else:
            next_token[p] = c
        last[p] = c
    return next_token, next_sibling


def random_parents(W: int, K: int, tree: bool, g: torch.Generator, hard: bool) -> List[int]:
    """parents[n] < n; depth <= K (chain: W = K + 1 nodes in a line). ``hard`` adds nodes
    outside the tree (-1) and nodes one level deeper than K."""
    if not tree:
        return [-1] + list(range(W - 1))
    parents, depth = [-1], [0]
    for n in range(1, W):
        u = _rand(g)
        if hard and u < 0.05:
            parents.append(-1)
            depth.append(0)
            continue
        limit = K + 1 if hard and u < 0.15 else K  # a node at depth K + 1 is never accepted
        choices = [p for p in range(n) if (p == 0 or parents[p] >= 0) and depth[p] < limit]
        p = choices[int(_rand(g) * len(choices))]
        parents.append(p)
        depth.append(depth[p] + 1)
    return parents


def make_round(bs: int, W: int, K: int, V: int, *, tree: bool, seed: int, hard: bool = False,
               dtype: torch.dtype = torch.float32, device="cpu", stop: bool = True) -> VerifyRound:
    g = torch.Generator().manual_seed(seed)
    if hard:
        logits = torch.randint(-4, 5, (bs * W, V), generator=g).float() * 0.5  # ties, exact boundaries
        logits[torch.rand(bs * W, V, generator=g) < 0.1] = float("-inf")
        special = torch.rand(bs * W, generator=g)
        logits[special < 0.03] = float("-inf")  # a fully masked row
        nan_rows = (special >= 0.03) & (special < 0.05)
        logits[nan_rows, torch.randint(0, V, (1,), generator=g)] = float("nan")
        logits = logits.to(device=device, dtype=dtype)
    else:  # drawn on the device: at benchmark sizes this is gigabytes
        gd = torch.Generator(device=device).manual_seed(seed)
        logits = (torch.randn(bs * W, V, generator=gd, device=device) * 3).to(dtype)
    argmax = logits.argmax(dim=-1).view(bs, W).cpu()
    near = logits.topk(min(4, V), dim=-1).indices.view(bs, W, -1).cpu()  # near-misses

    parents_all, cand = [], torch.randint(0, V, (bs, W), generator=g)
    for b in range(bs):
        parents = random_parents(W, K, tree, g, hard)
        parents_all.append(parents)
        for n in range(1, W):
            p, u = max(parents[n], 0), _rand(g)
            if u < 0.6:
                cand[b, n] = argmax[b, p]
            elif u < 0.9:
                cand[b, n] = near[b, p, int(_rand(g) * near.shape[-1])]
            elif hard and u < 0.95 and n > 1 and parents[n - 1] == parents[n]:
                cand[b, n] = cand[b, n - 1]  # duplicate sibling
    nt, ns = zip(*(links_from_parents(p) for p in parents_all))

    pick = lambda values, n, dt: torch.tensor(values, dtype=dt)[torch.randint(0, len(values), (n,), generator=g)]
    # hard: about a third of the rows strict (one of B, g, m is 0)
    remaining = pick([0.0, 0.5, 2.0, 8.0, 8.0, 8.0, 8.0, 8.0], bs, torch.float32)
    gate = pick([0.0, 0.1, 0.25, 1.0, 100.0, 100.0, 100.0, 100.0] if hard else [0.25, 1.0], bs, torch.float32)
    cap = pick([0, 1, 2, K, K, K, K, K] if hard else [2, K], bs, torch.int32)
    stop_tokens = None
    if stop:
        T = 3
        stop_tokens = torch.randint(0, V, (bs, T), generator=g)
        stop_tokens[:, -1] = -1  # padding
        some = torch.rand(bs, generator=g) < 0.5
        drafted = cand.gather(1, torch.randint(min(1, W - 1), W, (bs, 1), generator=g)).squeeze(1)
        stop_tokens[:, 0] = torch.where(some, drafted, stop_tokens[:, 0])  # half the rows draft a stop token
    to = lambda t: t.to(device)
    return VerifyRound(
        candidates=to(cand), logits=logits, retrive_next_token=to(torch.tensor(nt)),
        retrive_next_sibling=to(torch.tensor(ns)), remaining=to(remaining), gate=to(gate), cap=to(cap),
        depth=K, stop_tokens=None if stop_tokens is None else to(stop_tokens),
    )


def _rand(g: torch.Generator) -> float:
    return float(torch.rand((), generator=g))
