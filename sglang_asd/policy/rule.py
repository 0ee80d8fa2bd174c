"""The ASD acceptance rule (spec sections 3 and 4) for one chain block. Standard library only.

Vocabulary: a block has K draft tokens x_0..x_{K-1}; z_i are the target logits that score x_i.
Each draft position is *exact* (x_i == argmax z_i, accepted free), an *exception* (a mismatch
accepted under the three gates, charged its regret) or *rejected* (the block stops there).
The *bonus* token is argmax z_j at the stop position j (argmax z_K when all K pass).

``admits_exception`` is the one gate function; ``select_chain`` (here) and ``select_tree``
(``tree.py``) both call it, and the batched verifier is tested against both.
"""

from __future__ import annotations

import dataclasses
import math
from typing import AbstractSet, Sequence, Tuple

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
) -> bool:
    """May the mismatched draft token at 0-based ``position`` of a ``depth``-token block be
    accepted, given ``exceptions_before`` exceptions with ``regret_before`` nats already
    accepted earlier in this block and ``remaining`` = B - spent before the block?

    Strict identity: B == 0 or g == 0 or m == 0 admits nothing, not even a regret-0 tie; so
    does an exhausted ledger (remaining == 0: the verifier contract's "0 => strict row").
    Gate 3 is checked as ``block <= B - spent`` (what the verifier sees); the ledger clamps
    ``spent`` to B against rounding. Stop tokens and masked tokens (regret inf, or NaN) are
    never exceptions.
    """
    if not (remaining > 0 and config.gate > 0 and config.max_exceptions_per_block > 0):
        return False
    if is_stop_token or not math.isfinite(regret):
        return False
    suffix_value = depth - position  # q_i = K - i: an early exception may unlock a longer suffix
    return (
        regret / suffix_value <= config.gate  # 1. regret gate
        and exceptions_before + 1 <= config.max_exceptions_per_block  # 2. block cap
        and regret_before + regret <= remaining  # 3. request ledger: spent + block <= B
    )


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
) -> ChainDecision:
    """Decide one chain block and charge ``ledger``.

    draft: [K] x_0..x_{K-1}; target_argmax: [K+1] argmax z_0..z_K; regret: [K] r_i =
    max z_i - z_i(x_i) in nats (inf for a masked token). K = 0 (no draft) commits the bonus
    argmax z_0 alone.
    """
    depth = len(draft)
    _check_lengths(depth, target_argmax, regret)
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
            remaining=ledger.remaining,
            config=config,
            is_stop_token=token in stop_tokens,
        ):
            break  # rejected: the first failing position stops the block
        accepted.append(token)
        events.append(ExceptionEvent(i, token, target_argmax[i], regret[i]))
        block_regret += regret[i]
    spent = ledger.charge(events)
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
