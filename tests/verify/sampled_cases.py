"""Seeded sampled-verify rounds for the asd-sampled tests, the stand-in port of SGLang's kernel,
and the pure reference run row by row."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import random
from typing import List, Optional

import torch

from sglang_asd.policy.sampled import KLLedger, SampledConfig
from sglang_asd.policy.sampled_walk import sample_block
from sglang_asd.testing.trees import chain_parents, random_tree, sglang_links
from sglang_asd.verify.sampled_verify import asd_sampled_verify

REPO = pathlib.Path(__file__).resolve().parents[2]


def standin_ops():
    """scripts/device/cuda_standin/ops.py, loaded by path (test-only; it imports torch alone)."""
    spec = importlib.util.spec_from_file_location("cuda_standin_ops", REPO / "scripts/device/cuda_standin/ops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclasses.dataclass
class SampledRound:
    candidates: torch.Tensor  # [bs, W] int64
    retrieve_index: torch.Tensor  # [bs, W] int64
    next_token: torch.Tensor  # [bs, W] int64
    next_sibling: torch.Tensor  # [bs, W] int64
    coins: torch.Tensor  # [bs, W] float32
    final_coins: torch.Tensor  # [bs] float32
    probs: torch.Tensor  # [bs, W, V] float32
    K: int
    remaining: torch.Tensor  # [bs] float32
    floor: torch.Tensor  # [bs] float32
    cap: torch.Tensor  # [bs] int32
    power: torch.Tensor  # [bs] float32
    stop_tokens: torch.Tensor  # [bs, T] int64 -1 padded

    @property
    def bs(self) -> int:
        return self.candidates.shape[0]

    @property
    def W(self) -> int:
        return self.candidates.shape[1]

    def buffers(self):
        bs, W = self.candidates.shape
        return (torch.zeros(bs * W, dtype=torch.int32), torch.full((bs, self.K + 1), -1, dtype=torch.int32),
                torch.empty(bs, dtype=torch.int32))

    def standin(self, threshold_single: float = 1.0, threshold_acc: float = 1.0):
        predicts, accept_index, num = self.buffers()
        standin_ops().tree_speculative_sampling_target_only(
            predicts, accept_index, num, self.candidates, self.retrieve_index, self.next_token, self.next_sibling,
            self.coins, self.final_coins, self.probs, torch.zeros_like(self.probs), threshold_single, threshold_acc)
        return predicts, accept_index, num

    def max_children(self) -> int:
        """The most children any node has (host-side: what EAGLE's topk bounds)."""
        most = 1
        for row in range(self.bs):
            nt, ns = self.next_token[row].tolist(), self.next_sibling[row].tolist()
            for n in range(self.W):
                count, child = 0, nt[n]
                while child != -1:
                    count, child = count + 1, ns[child]
                most = max(most, count)
        return most

    def verify(self, threshold_single: float = 1.0, threshold_acc: float = 1.0, max_children=None, **overrides):
        predicts, accept_index, num = self.buffers()
        rows = {k: overrides.get(k, getattr(self, k)) for k in ("remaining", "floor", "cap", "power", "stop_tokens")}
        out = asd_sampled_verify(predicts, accept_index, num, self.candidates, self.retrieve_index, self.next_token,
                                 self.next_sibling, self.coins, self.final_coins, self.probs, rows["remaining"],
                                 rows["floor"], rows["cap"], rows["power"], rows["stop_tokens"],
                                 threshold_single, threshold_acc, max_children)
        return predicts, accept_index, num, out

    def reference(self, b: int, threshold_single: float = 1.0, threshold_acc: float = 1.0):
        """Row b by the pure walk: (decision, ledger)."""
        cap = int(self.cap[b])
        floor, power = float(self.floor[b]), float(self.power[b])
        if not (floor > 0 and cap > 0):  # the device's "exact row" encodings
            floor, cap = 1.0, 0
        ledger = KLLedger(float(self.remaining[b]))
        config = SampledConfig(floor=floor, power=power, max_relaxed_per_block=cap)
        stops = {t for t in self.stop_tokens[b].tolist() if t >= 0}
        decision = sample_block(self.candidates[b].tolist(), self.next_token[b].tolist(), self.next_sibling[b].tolist(),
                                self.probs[b].tolist(), self.coins[b].tolist(), float(self.final_coins[b]), self.K,
                                ledger, config, stops, threshold_single, threshold_acc)
        return decision, ledger


def _probs(gen: torch.Generator, rows: int, V: int, peaked: float, zeros: float) -> torch.Tensor:
    """[rows, V] float32 distributions: softmax of scaled Gaussians, some entries cut to 0 (top-k / top-p)."""
    logits = torch.randn(rows, V, generator=gen) * peaked
    cut = torch.rand(rows, V, generator=gen) < zeros
    cut &= logits < logits.amax(dim=-1, keepdim=True)  # keep the argmax
    return torch.softmax(logits.masked_fill(cut, float("-inf")), dim=-1)


def make_sampled_round(seed: int, bs: int = 32, K: int = 4, W: Optional[int] = None, V: int = 8,
                       shape: str = "tree", peaked: float = 2.0, zeros: float = 0.2,
                       budget: str = "mixed", reverse_siblings: bool = False, duplicates: float = 0.1,
                       parents: Optional[List[List[int]]] = None) -> SampledRound:
    """A seeded round: ``shape`` chain (W = K + 1) or tree (random trees of depth <= K), or the
    given ``parents`` (one parent array of depth <= K per row: W and bs from them); draft
    tokens mostly drawn from the parent's p (a good drafter, so q often passes the floor), a
    ``duplicates`` share copied from a sibling; budgets ``mixed`` (exact, tight and ample rows),
    ``zero`` or ``ample``."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    shape = "chain" if K == 0 else shape  # K = 0: the root alone
    if parents is not None:
        bs, W = len(parents), len(parents[0])
    else:
        W = K + 1 if shape == "chain" else (W or 2 * K + 2)
    probs = _probs(gen, bs * W, V, peaked, zeros).view(bs, W, V)
    if parents is None:
        parents = [chain_parents(K) if shape == "chain" else random_tree(rng, K, W, outside=0.05)
                   for _ in range(bs)]
    cand = torch.zeros(bs, W, dtype=torch.long)
    for b in range(bs):
        for n in range(1, W):
            p = max(parents[b][n], 0)
            siblings = [m for m in range(1, n) if parents[b][m] == parents[b][n]]
            if siblings and rng.random() < duplicates:
                cand[b, n] = cand[b, rng.choice(siblings)]
            elif rng.random() < 0.8:
                cand[b, n] = torch.multinomial(probs[b, p], 1, generator=gen).item()
            else:
                cand[b, n] = rng.randrange(V)
    links = [sglang_links(par, reverse_siblings) for par in parents]
    next_token = torch.tensor([nt for nt, _ in links])
    next_sibling = torch.tensor([ns for _, ns in links])
    coins = torch.rand(bs, W, generator=gen)
    final_coins = torch.rand(bs, generator=gen)
    if budget == "zero":
        remaining = torch.zeros(bs)
    elif budget == "ample":
        remaining = torch.full((bs,), 64.0)
    else:
        remaining = torch.tensor([rng.choice([0.0, 0.05, 0.3, 0.7, 1.5, 8.0]) for _ in range(bs)])
    floor = torch.tensor([rng.choice([0.1, 0.25, 0.3, 0.5]) for _ in range(bs)])
    cap = torch.tensor([rng.choice([1, 2, 2, K]) for _ in range(bs)], dtype=torch.int32)
    power = torch.tensor([rng.choice([0.0, 0.0, 0.5, 0.9]) for _ in range(bs)])
    stop_tokens = torch.tensor([[rng.randrange(V), -1] if rng.random() < 0.3 else [-1, -1] for _ in range(bs)])
    return SampledRound(cand, torch.arange(bs * W).view(bs, W), next_token, next_sibling, coins, final_coins, probs,
                        K, remaining, floor, cap, power, stop_tokens)
