"""The acceptance rules (spec sections 3 and 4; ``config`` for local, margin, threshold) for one
chain block. Standard library only.

Vocabulary: a block has K draft tokens x_0..x_{K-1}; z_i are the target logits that score x_i.
Each draft position is *exact* (x_i == argmax z_i, accepted free), an *exception* (a mismatch
its rule admits, counted with its regret) or *rejected* (the block stops there).
The *bonus* token is argmax z_j at the stop position j (argmax z_K when all K pass).
The target's *margin* at a position is z_(1) - z_(2), its top-2 logit gap (the margin rule's input).

``admits_exception`` is the one gate function, every rule in one body, driven by the rule's
``RuleTraits``; ``select_chain`` (here) and ``select_tree`` (``tree.py``) both call it, and the
batched verifier is tested against both.
"""

from __future__ import annotations

import dataclasses
import math
from typing import AbstractSet, Optional, Sequence, Tuple

from sglang_asd.policy.config import ASDConfig
from sglang_asd.policy.ledger import ExceptionEvent, Ledger


def admits_exception(
    *,
    regret: float,
    position: int,
    depth: int,
    exceptions_before: int,
    regret_before: float,
    remaining: float,
    config: ASDConfig,
    is_stop_token: bool,
    target_margin: float = math.nan,
) -> bool:
    """May the mismatched draft token at 0-based ``position`` of a ``depth``-token block be
    accepted, given ``exceptions_before`` exceptions with ``regret_before`` nats already
    accepted earlier in this block, the row's limit ``remaining`` (``block_limit``: B - spent
    for asd, B for the other rules) and the target's ``target_margin`` z_(1) - z_(2) there
    (read by the margin rule only)?

    Strict identity: B == 0, the rule's gate 0 or (asd, local) m == 0 admits nothing, not even a
    regret-0 tie; so does an exhausted asd ledger (remaining == 0: the verifier contract's
    "0 => strict row"). Gate 3 is checked as ``block <= B - spent`` (what the verifier sees); the
    ledger clamps ``spent`` to B against rounding. Stop tokens and masked tokens (regret inf, or
    NaN) are never exceptions. ``depth`` is the K of q_i = K - i: the block's depth for chains and
    EAGLE trees, the tree's real depth for NGRAM (``select_tree``'s ``gate_depth``).
    """
    traits = config.traits
    if not (remaining > 0 and config.allows_exceptions):
        return False
    if is_stop_token or not math.isfinite(regret):
        return False
    # margin: the draft is the target's runner-up iff its regret is the target's top-2 margin
    # (z(x) = z_(2)); NaN margins (undefined) fail the comparison.
    if traits.runner_up_only and not regret <= target_margin:
        return False
    suffix_value = depth - position if traits.per_suffix_value else 1  # q_i = K - i: an early exception may unlock a longer suffix
    return (
        regret / suffix_value <= config.rule_gate  # 1. regret gate (g; margin; threshold)
        and (not traits.capped or exceptions_before + 1 <= config.max_exceptions_per_block)  # 2. block cap
        and (not traits.block_limited or regret_before + regret <= remaining)  # 3. ledger / per-block limit
    )


def block_limit(ledger: Ledger, config: ASDConfig, produced: int = 0) -> float:
    """The ``remaining`` that ``admits_exception`` checks: B - spent on asd's bounded ledger (under
    an accrual, ``ledger.limit(produced)``: also at most rate * produced + burst - spent), B
    otherwise (local's per-block limit; margin and threshold read it only as the opt-in B > 0)."""
    if ledger.bounded != config.traits.ledger:
        kind = "a bounded" if config.traits.ledger else "an unbounded"
        raise ValueError(f"rule {config.rule} needs {kind} ledger, got {ledger!r}")
    return ledger.limit(produced) if ledger.bounded else ledger.budget


@dataclasses.dataclass(frozen=True)
class ChainDecision:
    """accepted: the accepted draft tokens (exact and exceptions), in order;
    exceptions: their 0-based block positions that were exceptions; spent: the block's
    regret; bonus: the target token committed after them."""

    accepted: Tuple[int, ...]
    exceptions: Tuple[int, ...]
    spent: float
    bonus: int


def select_chain(
    draft: Sequence[int],
    target_argmax: Sequence[int],
    regret: Sequence[float],
    ledger: Ledger,
    config: ASDConfig,
    stop_tokens: AbstractSet[int] = frozenset(),
    target_margin: Optional[Sequence[float]] = None,
    produced: int = 0,
) -> ChainDecision:
    """Decide one chain block and charge ``ledger`` (bounded for asd, unbounded otherwise).
    ``produced``: output tokens committed before the block (read by a ledger's accrual).

    draft: [K] x_0..x_{K-1}; target_argmax: [K+1] argmax z_0..z_K; regret: [K] r_i =
    max z_i - z_i(x_i) in nats (inf for a masked token); target_margin: [K+1] z_(1) - z_(2) of
    z_0..z_K (needed by the margin rule only). K = 0 (no draft) commits the bonus argmax z_0 alone.
    """
    depth = len(draft)
    _check_lengths(depth, target_argmax, regret)
    if target_margin is None:
        target_margin = [math.nan] * (depth + 1)
    elif len(target_margin) != depth + 1:
        raise ValueError(f"target_margin must have K + 1 = {depth + 1} entries, got {len(target_margin)}")
    limit = block_limit(ledger, config, produced)
    accepted: list[int] = []
    events: list[ExceptionEvent] = []
    block_regret = 0.0
    for i, token in enumerate(draft):
        if token == target_argmax[i]:
            accepted.append(token)  # exact: free; after an exception this is suffix reuse (section 4)
            continue
        if not admits_exception(
            regret=regret[i],
            position=i,
            depth=depth,
            exceptions_before=len(events),
            regret_before=block_regret,
            remaining=limit,
            config=config,
            is_stop_token=token in stop_tokens,
            target_margin=target_margin[i],
        ):
            break  # rejected: the first failing position stops the block
        accepted.append(token)
        events.append(ExceptionEvent(i, token, target_argmax[i], regret[i]))
        block_regret += regret[i]
    spent = ledger.charge(events, produced)
    return ChainDecision(
        accepted=tuple(accepted),
        exceptions=tuple(e.position for e in events),
        spent=spent,
        bonus=target_argmax[len(accepted)],
    )


def _check_lengths(depth: int, target_argmax: Sequence[int], regret: Sequence[float]) -> None:
    if len(target_argmax) != depth + 1:
        raise ValueError(f"target_argmax must have K + 1 = {depth + 1} entries, got {len(target_argmax)}")
    if len(regret) != depth:
        raise ValueError(f"regret must have K = {depth} entries, got {len(regret)}")
    for r in regret:
        if r < 0:  # NaN passes here and is treated as masked
            raise ValueError(f"regret must be >= 0 (or inf for a masked token), got {r!r}")
