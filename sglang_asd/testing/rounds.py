"""``make_round``: one seeded batched verify round, shaped the way SGLang builds it.

Drafts are planted against the logits so that every outcome occurs: a node's token is its
parent's argmax (exact) most often, one of the parent's top-4 tokens (a near miss: an exception
or a rejection) often, a copy of the previous sibling's token (a duplicate sibling) sometimes,
else any token. Logits:

- ``"grid"``: multiples of 1/8 in [-2, 2] (many argmax ties, exact float arithmetic, exact gate
  boundaries such as 0.5 / 2 == 0.25), a ``masked`` fraction of -inf (grammar-masked) entries;
- ``"hard"``: the grid, plus fully masked (all -inf) rows and rows holding a NaN;
- ``"normal"``: N(0, 3^2), drawn on ``device`` (benchmark sizes are gigabytes).

Ledger rows (``rows``): ``"mixed"`` (strict rows, with one of budget, gate, cap at 0, beside ASD
rows of every size), ``"strict"`` (every row strict), ``"asd"`` (every row budget 8, gate 0.25,
cap 2: the reference configuration).
"""

from __future__ import annotations

import dataclasses
import random
from typing import List, Optional

import torch

from sglang_asd.testing.trees import chain_parents, eagle_draft, eagle_parents, random_tree, sglang_links


@dataclasses.dataclass
class VerifyRound:
    parents: List[List[int]]  # per row, see ``trees``
    candidates: torch.Tensor  # [bs, W] int64
    logits: torch.Tensor  # [bs*W, V] float
    retrieve_next_token: torch.Tensor  # [bs, W] int64
    retrieve_next_sibling: torch.Tensor  # [bs, W] int64
    remaining: torch.Tensor  # [bs] float32
    gate: torch.Tensor  # [bs] float32
    cap: torch.Tensor  # [bs] int32
    depth: int  # K
    stop_tokens: Optional[torch.Tensor]  # [bs, T] int64, -1 padded

    def args(self, target_predict=None):
        """(args, kwargs) for ``asd_verify``. ``target_predict``: None (the verifier's own
        argmax), True (the argmax, given), or a [bs, W] tensor."""
        kwargs = {"stop_tokens": self.stop_tokens}
        if target_predict is True:
            target_predict = self.logits.argmax(dim=-1).view(self.candidates.shape)
        if target_predict is not None and target_predict is not False:
            kwargs["target_predict"] = target_predict
        return (self.candidates, self.logits, self.retrieve_next_token, self.retrieve_next_sibling,
                self.remaining, self.gate, self.cap, self.depth), kwargs

    def strict_links(self):
        """(candidates, logits, retrieve_next_token, retrieve_next_sibling, depth): ``strict_verify``'s args."""
        return self.candidates, self.logits, self.retrieve_next_token, self.retrieve_next_sibling, self.depth


def make_round(
    *,
    seed: int,
    bs: int,
    W: int,
    K: int,
    V: int = 12,
    shape: str = "eagle",  # "chain" (W = K + 1) | "eagle" (EAGLE topk tree) | "random"
    topk: int = 2,
    logits: str = "grid",  # "grid" | "hard" | "normal"
    rows: str = "mixed",  # "mixed" | "strict" | "asd"
    masked: float = 0.05,
    stop: bool = True,
    reverse_siblings: bool = False,
    orphans: float = 0.0,  # fraction of nodes dropped from the tree (with their subtrees)
    too_deep: float = 0.0,  # random trees: fraction of nodes allowed at depth K + 1
    dtype: torch.dtype = torch.float32,
    device="cpu",
) -> VerifyRound:
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    z = _logits(logits, bs * W, V, masked, gen, seed, dtype, device)
    argmax = z.argmax(dim=-1).view(bs, W).tolist()
    near = z.topk(min(4, V), dim=-1).indices.view(bs, W, -1).tolist()

    if shape == "eagle" and K > 0:
        drafts = eagle_draft(bs, topk, K, W, gen)
        trees = [eagle_parents(pl, sel, topk) for pl, sel in zip(*(t.tolist() for t in drafts))]
    elif shape == "random":
        trees = [random_tree(rng, K, W, too_deep=too_deep) for _ in range(bs)]
    elif shape in ("chain", "eagle"):
        if W != K + 1:
            raise ValueError(f"a chain has W = K + 1 nodes, got W={W}, K={K}")
        trees = [chain_parents(K) for _ in range(bs)]
    else:
        raise ValueError(f"shape must be 'chain', 'eagle' or 'random', got {shape!r}")
    trees = [[-1 if n > 0 and rng.random() < orphans else p for n, p in enumerate(t)] for t in trees]

    candidates = []
    for b, parents in enumerate(trees):
        tokens = [rng.randrange(V)]
        for n in range(1, W):
            p, u = max(parents[n], 0), rng.random()
            if u < 0.55:
                tokens.append(argmax[b][p])  # exact
            elif u < 0.8:
                tokens.append(rng.choice(near[b][p]))  # near miss
            elif u < 0.9 and parents[n - 1] == parents[n]:
                tokens.append(tokens[n - 1])  # duplicate sibling
            else:
                tokens.append(rng.randrange(V))
        candidates.append(tokens)
    next_token, next_sibling = zip(*(sglang_links(t, reverse_siblings) for t in trees))

    remaining, gate, cap = _ledger_rows(rows, bs, K, rng)
    stop_tokens = None
    if stop:  # [bs, 3]: half the rows carry a drafted token, the last column is padding
        stop_tokens = [[rng.randrange(V), rng.randrange(V), -1] for _ in range(bs)]
        for b in range(bs):
            if W > 1 and rng.random() < 0.5:
                stop_tokens[b][0] = candidates[b][rng.randrange(1, W)]
    tensor = lambda values, dt: torch.tensor(values, dtype=dt, device=device)  # noqa: E731
    return VerifyRound(
        parents=trees,
        candidates=tensor(candidates, torch.int64).view(bs, W),
        logits=z,
        retrieve_next_token=tensor(next_token, torch.int64).view(bs, W),
        retrieve_next_sibling=tensor(next_sibling, torch.int64).view(bs, W),
        remaining=tensor(remaining, torch.float32),
        gate=tensor(gate, torch.float32),
        cap=tensor(cap, torch.int32),
        depth=K,
        stop_tokens=None if stop_tokens is None else tensor(stop_tokens, torch.int64).view(bs, 3),
    )


def _logits(kind: str, rows: int, V: int, masked: float, gen: torch.Generator, seed: int,
            dtype: torch.dtype, device) -> torch.Tensor:  # -> [rows, V]
    if kind == "normal":
        device_gen = torch.Generator(device=device).manual_seed(seed)
        return (torch.randn(rows, V, generator=device_gen, device=device) * 3).to(dtype)
    if kind not in ("grid", "hard"):
        raise ValueError(f"logits must be 'grid', 'hard' or 'normal', got {kind!r}")
    z = torch.randint(-16, 17, (rows, V), generator=gen).float() / 8
    z[torch.rand(rows, V, generator=gen) < masked] = float("-inf")
    if kind == "hard":
        special = torch.rand(rows, generator=gen)
        z[special < 0.03] = float("-inf")  # a fully masked row
        nan_rows = (special >= 0.03) & (special < 0.05)
        z[nan_rows, torch.randint(0, V, (1,), generator=gen)] = float("nan")
    return z.to(device=device, dtype=dtype)


def _ledger_rows(kind: str, bs: int, K: int, rng: random.Random):
    """-> remaining, gate, cap as lists of ``bs`` values."""
    if kind == "asd":
        return [8.0] * bs, [0.25] * bs, [2] * bs
    if kind == "strict":  # exactly one knob at 0 per row, the others anything
        zero = [rng.randrange(3) for _ in range(bs)]
        return ([0.0 if z == 0 else rng.choice([0.5, 8.0, 64.0]) for z in zero],
                [0.0 if z == 1 else rng.choice([0.25, 4.0]) for z in zero],
                [0 if z == 2 else rng.choice([1, 2, 8]) for z in zero])
    if kind != "mixed":
        raise ValueError(f"rows must be 'mixed', 'strict' or 'asd', got {kind!r}")
    return ([rng.choice([0.0, 0.125, 0.5, 1.0, 2.0, 8.0, 64.0]) for _ in range(bs)],
            [rng.choice([0.0, 0.0625, 0.25, 1.0, 4.0, 100.0]) for _ in range(bs)],
            [rng.choice([0, 1, 2, 3, max(K, 1), 8]) for _ in range(bs)])
