"""One draft block of a sampled request under the ``asd-sampled`` rule, node by node, with given
target distributions and coins. Standard library only: the reference the batched verifier
(``sglang_asd.verify.sampled_verify``) is tested against.

The walk is SGLang's ``tree_speculative_sampling_target_only`` (target-only: draft_probs = 0) with
the relaxed nodes of ``sampled.py``: level j = 1..K walks the children of the last accepted node
in sibling order with that node's coin; the first accepted child becomes the node of level j + 1
and its own coin is read next; a level where no child is accepted ends the block and the bonus is
drawn there from p without the rejected children's tokens (from the whole p when all K levels
were accepted), by inverse CDF with the final coin.

Floats follow the device: probabilities, coins and the running sum of q are float32 (emulated
here by rounding through ``struct``); the relaxed coin, a, the charges and the ledger are float64.
Only the bonus's inverse CDF sums in float64 here against float32 on the device, so the two can
differ when the final coin falls within rounding of a CDF step (a measure-zero event in tests).
"""

from __future__ import annotations

import dataclasses
import math
import struct
from typing import AbstractSet, List, Sequence, Tuple

from sglang_asd.policy.sampled import KLLedger, RelaxedNode, SampledConfig, choose_relaxed_child


def f32(x: float) -> float:
    """x rounded to float32 (round to nearest even), as a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


@dataclasses.dataclass(frozen=True)
class SampledDecision:
    """path: accepted node ids, root excluded; accepted: their tokens; bonus: the token sampled
    at the last accepted node; relaxed: the block's relaxed nodes (charged, accepted or not);
    spent: the block's charge in nats (float64)."""

    path: Tuple[int, ...]
    accepted: Tuple[int, ...]
    bonus: int
    relaxed: Tuple[RelaxedNode, ...]
    spent: float


def _children(node: int, next_token: Sequence[int], next_sibling: Sequence[int]) -> List[int]:
    out, child = [], next_token[node]
    while child != -1:
        out.append(child)
        child = next_sibling[child]
    return out


def _bonus(p: Sequence[float], rejected: AbstractSet[int], coin: float) -> int:
    """Inverse CDF of relu(p - p on the rejected tokens): the first positive entry whose running
    sum exceeds coin * total; else the last positive entry; else V - 1 (SGLang's fallbacks)."""
    resid = [0.0 if v in rejected else max(pv, 0.0) for v, pv in enumerate(p)]
    u = f32(coin * sum(resid))
    running, last_positive = 0.0, -1
    for v, r in enumerate(resid):
        if r > 0:
            running += r
            last_positive = v
            if running > u:
                return v
    return last_positive if last_positive >= 0 else len(p) - 1


def sample_block(
    tokens: Sequence[int],
    next_token: Sequence[int],
    next_sibling: Sequence[int],
    probs: Sequence[Sequence[float]],
    coins: Sequence[float],
    final_coin: float,
    depth: int,
    ledger: KLLedger,
    config: SampledConfig,
    stop_tokens: AbstractSet[int] = frozenset(),
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
) -> SampledDecision:
    """Walk one block and book its relaxed nodes on ``ledger``.

    tokens: [W] draft token per node (node 0 = root, ignored); next_token / next_sibling: [W]
    SGLang's first-child and next-sibling links (-1 none); probs: [W][V] the target's processed
    distribution at each node (float32 values); coins: [W] uniform in [0, 1) per node (node n's
    coin walks n's children); final_coin: the bonus's uniform; depth: K, the levels walked
    (accept_index has K + 1 slots). A zero ledger (budget 0) or a cap 0 is SGLang's walk.
    """
    cfg = dataclasses.replace(config, floor=f32(config.floor), power=f32(config.power))  # as the device holds them
    thr_acc, thr_single = f32(max(threshold_acc, 1e-9)), f32(threshold_single)
    remaining = ledger.remaining
    node, coin = 0, coins[0]
    path: List[int] = []
    relaxed: List[RelaxedNode] = []
    block_charge = 0.0
    rejected: set = set()
    for level in range(depth):
        p = probs[node]
        children = _children(node, next_token, next_sibling)
        entries = [(c, tokens[c], p[tokens[c]]) for c in children]
        choice = choose_relaxed_child(entries, remaining=remaining, block_charge=block_charge,
                                      relaxed_before=len(relaxed), config=cfg, stop_tokens=stop_tokens)
        skip, taken = -1, -1
        rejected = set()
        if choice is not None:
            k, a, charge = choice
            skip, q_skip = entries[k][0], entries[k][2]
            block_charge += charge
            if coin < a or a >= 1:  # a = 1 accepts whatever the coin (coins lie in [0, 1))
                taken = skip
            else:
                coin = (coin - a) / (1 - a) * (1 - q_skip)  # uniform on [0, 1 - q) given coin >= a
                rejected.add(tokens[skip])
            relaxed.append(RelaxedNode(level, skip, tokens[skip], q_skip, a, charge, taken == skip))
        if taken < 0:
            prob_acc = 0.0
            for c, token, q in entries:
                if c == skip:
                    continue
                acc_sum = f32(prob_acc + q)
                if q > 0 and (coin < f32(acc_sum / thr_acc) or q >= thr_single):
                    taken = c
                    break
                prob_acc = acc_sum
                rejected.add(token)
        if taken < 0:
            break
        path.append(taken)
        node, coin = taken, coins[taken]
    all_accepted = len(path) == depth
    bonus = _bonus(probs[node], set() if all_accepted else rejected, final_coin)
    spent = ledger.charge(relaxed)
    return SampledDecision(tuple(path), tuple(tokens[n] for n in path), bonus, tuple(relaxed), spent)


def committed_distribution(p: Sequence[float], token: int, a: float) -> List[float]:
    """p' = a delta_token + (1 - a) p(. | != token): the committed token's law at a relaxed node."""
    q = p[token]
    return [a if v == token else (1 - a) * pv / (1 - q) for v, pv in enumerate(p)]


def kl_divergence(p_prime: Sequence[float], p: Sequence[float]) -> float:
    """KL(p' || p) summed over the vocabulary (0 log 0 = 0), in float64."""
    return sum(a * math.log(a / b) for a, b in zip(p_prime, p) if a > 0)

