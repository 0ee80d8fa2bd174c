"""A seeded sampled-verify round at any size, on any device, for benchmarks and device checks.

    from sglang_asd.testing.sampled import sampled_round
    rnd = sampled_round(bs=16, W=8, K=4, V=151936, tree=True, device="cuda")
    out = asd_sampled_verify(*rnd.buffers(), *rnd.inputs())

Chains (W = K + 1) or EAGLE topk trees as SGLang builds them (``trees.eagle_draft``), target
probabilities a softmax of N(0, 4) logits per node with a top-k cut (SGLang's processed
distribution), draft tokens drawn from the parent's probabilities, every row relaxed
(remaining 4 nats, floor 0.2, cap 2, power 0.5) with one stop token. Drawn on the device.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

import torch

from sglang_asd.testing.trees import chain_parents, eagle_draft, eagle_parents, sglang_links


@dataclasses.dataclass
class SampledRound:
    candidates: torch.Tensor  # [bs, W] int64
    retrieve_index: torch.Tensor  # [bs, W] int64
    next_token: torch.Tensor  # [bs, W] int64
    next_sibling: torch.Tensor  # [bs, W] int64
    coins: torch.Tensor  # [bs, W] float32
    final_coins: torch.Tensor  # [bs] float32
    probs: torch.Tensor  # [bs, W, V] float32
    remaining: torch.Tensor  # [bs] float32
    floor: torch.Tensor  # [bs] float32
    cap: torch.Tensor  # [bs] int32
    power: torch.Tensor  # [bs] float32
    stop_tokens: torch.Tensor  # [bs, 1] int64
    K: int
    topk: int  # the bound on any node's children (1 for chains)

    def buffers(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Fresh (predicts [bs*W], accept_index [bs, K+1] -1, accept_token_num [bs]) int32, as SGLang allocates them."""
        bs, W = self.candidates.shape
        dev = self.candidates.device
        return (torch.zeros(bs * W, dtype=torch.int32, device=dev),
                torch.full((bs, self.K + 1), -1, dtype=torch.int32, device=dev),
                torch.zeros(bs, dtype=torch.int32, device=dev))

    def inputs(self) -> tuple:
        """The positional inputs of ``asd_sampled_verify`` after the three buffers (thresholds 1, the topk bound)."""
        return (self.candidates, self.retrieve_index, self.next_token, self.next_sibling, self.coins, self.final_coins,
                self.probs, self.remaining, self.floor, self.cap, self.power, self.stop_tokens, 1.0, 1.0, self.topk)

    def sglang_inputs(self) -> tuple:
        """The inputs of SGLang's ``tree_speculative_sampling_target_only`` after the three buffers
        (target-only: draft probabilities 0; thresholds 1)."""
        return (self.candidates, self.retrieve_index, self.next_token, self.next_sibling, self.coins, self.final_coins,
                self.probs, torch.zeros_like(self.probs), 1.0, 1.0)


def sampled_round(bs: int, W: int, K: int, V: int, tree: bool, device="cpu", seed: int = 0, topk: int = 2,
                  keep: int = 64) -> SampledRound:
    """One seeded round (module docstring); ``keep``: the top-k cut of each node's distribution."""
    gen = torch.Generator().manual_seed(seed)
    if tree:
        parent_list, selected = eagle_draft(bs, topk, K, W, gen)
        parents = [eagle_parents(parent_list[b].tolist(), selected[b].tolist(), topk) for b in range(bs)]
    else:
        W, topk = K + 1, 1
        parents = [chain_parents(K)] * bs
    links = [sglang_links(p) for p in parents]
    dgen = torch.Generator(device=device).manual_seed(seed)
    logits = torch.randn(bs * W, V, generator=dgen, device=device) * 2
    cut = logits.topk(min(keep, V), dim=-1).values[:, -1:]
    probs = torch.softmax(logits.masked_fill(logits < cut, float("-inf")), dim=-1).view(bs, W, V)
    parent = torch.tensor(parents, device=device).clamp(min=0)  # [bs, W]
    rows = torch.arange(bs, device=device)[:, None]
    drawn = torch.multinomial(probs[rows, parent].view(bs * W, V), 1, generator=dgen).view(bs, W)
    candidates = torch.where(torch.arange(W, device=device) == 0, 0, drawn)
    ix = dict(dtype=torch.int64, device=device)
    full = lambda value, dtype=torch.float32: torch.full((bs,), value, dtype=dtype, device=device)  # noqa: E731
    return SampledRound(
        candidates=candidates, retrieve_index=torch.arange(bs * W, **ix).view(bs, W),
        next_token=torch.tensor([nt for nt, _ in links], **ix),
        next_sibling=torch.tensor([ns for _, ns in links], **ix),
        coins=torch.rand(bs, W, generator=dgen, device=device),
        final_coins=torch.rand(bs, generator=dgen, device=device),
        probs=probs, remaining=full(4.0), floor=full(0.2), cap=full(2, torch.int32), power=full(0.5),
        stop_tokens=torch.full((bs, 1), V - 1, **ix), K=K, topk=topk)
