"""ASD for sampled requests: a per-request budget in nats of KL divergence from exact speculative
sampling. Standard library only. The walk over a draft block is ``sampled_walk.py``.

Vocabulary. A *verify node* is a draft-tree node whose children are judged under the target's
processed distribution p there (after temperature, top-k, top-p: what SGLang's sampling verifier
feeds ``tree_speculative_sampling_target_only``). A child's *q* is p(its token). SGLang's
target-only walk commits a token distributed exactly as p (with distinct sibling tokens): it
accepts sibling k iff a uniform *coin* u falls in [Q_{k-1}, Q_k) (Q_k = q_1 + .. + q_k), else
samples the *bonus* from p without the children's tokens.

The rule (``asd-sampled-1``). At a *relaxed* node one child x (q = p(x)) is accepted with
probability a > q instead: accept x iff u < a; otherwise the coin is mapped onto [0, 1 - q) by
u' = (u - a) / (1 - a) * (1 - q) and SGLang's walk runs over the other siblings with u', then the
bonus is drawn from p without every child's token. The committed token is then distributed as

    p' = a * delta_x + (1 - a) * p(. | != x),   KL(p' || p) = a log(a/q) + (1-a) log((1-a)/(1-q))

(on x the ratio is a/q; on every other token it is (1-a)/(1-q)). This binary KL is the node's
*charge*. a = q ** power: power 0 gives a = 1 and charge -log q; the default 0.5 (a = sqrt q)
buys more acceptance per nat, since the charge grows as (a - q)^2 / (2 q (1 - q)) near a = q
(docs/SAMPLED.md has the measurement).

Which node relaxes (decided from the prefix, p and the children before the coin is read):
the request's row is on (remaining > 0, cap > 0); this block has relaxed fewer than
``max_relaxed_per_block`` nodes; the node's children carry distinct tokens (else SGLang's own walk
is not exact and no per-node KL is exact either); the relaxed child is the eligible child with
the largest q (first in sibling order on ties), eligible = q >= ``floor``, a > q, not a stop
token (a grammar-masked token has p = 0 < floor); and the block's charges so far plus this
one are <= remaining (= budget - spent). The charge is booked whether or not x is accepted.

The guarantee, by the chain rule of KL. Let P be the law of a request's whole trajectory
(drafts, committed tokens) under exact speculative sampling and Q under this rule, on the same
drafter. Both are sequential: each step draws from a kernel given the history h. Drafter steps
and non-relaxed nodes have the same kernel under P and Q; a relaxed node's committed token has
kernel p' under Q and p under P (a node's step is its whole sibling walk and bonus; its outcome,
the committed token, also names the accepted child as sibling tokens are distinct; a node's coin
is read by its own step only). The decision to relax, the node's p and x and the remaining
budget are functions of h alone, so KL(Q || P) = E_Q[sum over steps of KL(Q(.|h) || P(.|h))] =
E_Q[sum of the charges booked along the trajectory]. The expectation is under Q: relaxing
changes which prefixes occur later, but the ledger books at most B on EVERY trajectory, so the
expectation is <= B. The output text is a function of the trajectory, so by data processing
KL(output under ASD || output under exact sampling) <= B nats. B = 0 books nothing and relaxes
nothing: SGLang's walk, coin for coin.

SGLang's ``threshold_single`` / ``threshold_acc`` (server-wide, default 1) relax its own walk;
only at 1 is that walk exact, and only then does the bound hold relative to p.
"""

from __future__ import annotations

import dataclasses
import math
from typing import AbstractSet, Any, Mapping, Optional, Sequence, Tuple

from sglang_asd.policy.config import check_count, shown

SAMPLED_RULE = "asd-sampled"
SAMPLED_RULE_VERSION = "asd-sampled-1"
DEFAULT_SAMPLED_FLOOR = 0.3  # tau: never force a token the target gives less than this
DEFAULT_SAMPLED_POWER = 0.5  # a = q ** power (sqrt q); 0: a = 1, charge -log q
DEFAULT_SAMPLED_MAX_RELAXED = 2  # m: relaxed nodes per draft block


def _is_real(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def validate_sampled_floor(value: Any, name: str = "asd_sampled_floor") -> float:
    """The floor tau: a number in (0, 1]."""
    if not (_is_real(value) and 0 < value <= 1):
        raise ValueError(f"{name} must be in (0, 1], got {shown(value)}")
    return float(value)


def validate_sampled_power(value: Any, name: str = "asd_sampled_power") -> float:
    """The power of a = q ** power: a number in [0, 1) (1 would be a = q: nothing relaxed)."""
    if not (_is_real(value) and 0 <= value < 1):
        raise ValueError(f"{name} must be in [0, 1), got {shown(value)}")
    return float(value)


def validate_sampled_cap(value: Any, upper: float = math.inf, name: str = "asd_sampled_max_relaxed_per_block") -> int:
    """The cap m on relaxed nodes per block: an integer >= 0 (0: nothing relaxed)."""
    return check_count(name, value, upper)


@dataclasses.dataclass(frozen=True)
class SampledConfig:
    """The sampled rule's parameters (module docstring); the budget lives in the ``KLLedger``.

    floor: tau in (0, 1], the smallest q a relaxed child may have.
    power: in [0, 1), the relaxed child's acceptance probability a = q ** power (0: a = 1; default 0.5).
    max_relaxed_per_block: m >= 0, relaxed nodes per draft block (0: exact sampling).
    """

    floor: float = DEFAULT_SAMPLED_FLOOR
    power: float = DEFAULT_SAMPLED_POWER
    max_relaxed_per_block: int = DEFAULT_SAMPLED_MAX_RELAXED

    def __post_init__(self) -> None:
        object.__setattr__(self, "floor", validate_sampled_floor(self.floor))
        object.__setattr__(self, "power", validate_sampled_power(self.power))
        validate_sampled_cap(self.max_relaxed_per_block)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> "SampledConfig":
        """From ``{"floor": .., "power": .., "max_relaxed_per_block": ..}``; unknown keys fail."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(mapping) - fields)
        if unknown:
            raise ValueError(f"unknown sampled ASD setting(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
        return cls(**dict(mapping))

    def tightened(self, floor: Any = None, power: Any = None, max_relaxed_per_block: Any = None) -> "SampledConfig":
        """This (the server's) config with a request's overrides, each validated and no looser than
        ours (None keeps ours): floor >= ours (fewer nodes eligible), power >= ours (a closer to q:
        less acceptance and less KL per node), cap <= ours. Errors name the request field."""
        floor = self.floor if floor is None else validate_sampled_floor(floor)
        power = self.power if power is None else validate_sampled_power(power)
        cap = self.max_relaxed_per_block if max_relaxed_per_block is None else \
            validate_sampled_cap(max_relaxed_per_block, self.max_relaxed_per_block)
        if floor < self.floor:
            raise ValueError(f"asd_sampled_floor must be in [{self.floor:g}, 1] (the server's floor), got {shown(floor)}")
        if power < self.power:
            raise ValueError(f"asd_sampled_power must be in [{self.power:g}, 1) (the server's power), got {shown(power)}")
        return SampledConfig(floor=floor, power=power, max_relaxed_per_block=cap)

    def parameters(self) -> dict:
        """The rule's name, version and parameters (receipts)."""
        return {"rule": SAMPLED_RULE, "version": SAMPLED_RULE_VERSION, "floor": self.floor,
                "power": self.power, "max_relaxed_per_block": self.max_relaxed_per_block}


def accept_probability(q: float, power: float) -> float:
    """a = q ** power (power 0: a = 1), in float64."""
    return q ** power


def binary_kl(a: float, q: float) -> float:
    """KL(p' || p) in nats of a node relaxed from acceptance q to a (0 < q <= a <= 1), in float64:
    a (log a - log q) + (1 - a) (log1p(-a) - log1p(-q)), the second term 0 at a = 1. The batched
    verifier evaluates the same expression in torch float64."""
    if not (0 < q <= a <= 1):
        raise ValueError(f"binary_kl needs 0 < q <= a <= 1, got q={q!r}, a={a!r}")
    rest = (1 - a) * (math.log1p(-a) - math.log1p(-q)) if a < 1 else 0.0
    return a * (math.log(a) - math.log(q)) + rest


@dataclasses.dataclass(frozen=True)
class RelaxedNode:
    """One relaxed verify node (a receipt event).

    position: draft position i of the relaxed child (0-based; the child is at depth i + 1);
    node: the child's node id in its row; token: its token; q: p(token) at its parent;
    accept_prob: a; charge: KL(p' || p) in nats, booked whether or not it was accepted;
    accepted: the relaxed child was committed.
    """

    position: int
    node: int
    token: int
    q: float
    accept_prob: float
    charge: float
    accepted: bool


def choose_relaxed_child(
    children: Sequence[Tuple[int, int, float]],
    *,
    remaining: float,
    block_charge: float,
    relaxed_before: int,
    config: SampledConfig,
    stop_tokens: AbstractSet[int] = frozenset(),
) -> Optional[Tuple[int, float, float]]:
    """The relaxed child of one verify node, or None (exact walk).

    children: (node, token, q) in sibling order; remaining: B - spent before this block;
    block_charge: nats booked earlier in this block; relaxed_before: relaxed nodes earlier in
    this block. Returns (index into ``children``, a, charge)."""
    if not (remaining > 0 and config.max_relaxed_per_block > 0):
        return None
    if relaxed_before >= config.max_relaxed_per_block:
        return None
    tokens = [token for _, token, _ in children]
    if len(set(tokens)) != len(tokens):
        return None  # duplicate sibling tokens: SGLang's walk itself is not exact there
    best = None
    for k, (_, token, q) in enumerate(children):
        if token in stop_tokens or not (q >= config.floor):
            continue
        a = accept_probability(q, config.power)
        if not a > q:
            continue
        if best is None or q > children[best][2]:
            best = k
    if best is None:
        return None
    q = children[best][2]
    a = accept_probability(q, config.power)
    charge = binary_kl(a, q)
    if not block_charge + charge <= remaining:
        return None
    return best, a, charge


class KLLedger:
    """A sampled request's budget B (nats of KL), spent, remaining = B - spent, relaxed nodes.
    ``0 <= spent <= B`` at every moment (spent is clamped to B against rounding)."""

    def __init__(self, budget: float, spent: float = 0.0) -> None:
        if not (_is_real(budget) and budget >= 0):
            raise ValueError(f"asd_budget must be a finite number >= 0, got {shown(budget)}")
        if not (_is_real(spent) and 0 <= spent <= budget):
            raise ValueError(f"spent must be a finite number in [0, budget={budget!r}], got {shown(spent)}")
        self.budget = float(budget)
        self.spent = float(spent)
        self.relaxed: list[RelaxedNode] = []

    @property
    def remaining(self) -> float:
        return self.budget - self.spent

    def charge(self, nodes: Sequence[RelaxedNode]) -> float:
        """Book one block's relaxed nodes (charges summed in order); returns the block's charge."""
        block = 0.0
        for node in nodes:
            block += node.charge
        if not block <= self.remaining:
            raise ValueError(f"block charge {block!r} exceeds the remaining budget {self.remaining!r}")
        self.spent = min(self.budget, self.spent + block)
        self.relaxed.extend(nodes)
        return block

    def __repr__(self) -> str:
        return f"KLLedger(budget={self.budget!r}, spent={self.spent!r}, relaxed={len(self.relaxed)})"
