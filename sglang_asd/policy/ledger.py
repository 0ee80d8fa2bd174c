"""A request's regret ledger: budget, spent, remaining, and the exceptions that spent it.

Standard library only. A *bounded* ledger (the asd rule's) keeps ``0 <= spent <= budget`` at every
moment and has ``remaining = budget - spent``. The rules without a request ledger (local, margin,
threshold; ``policy.config``) use an *unbounded* one: it counts what was spent, so that every
rule reports spent regret, but nothing bounds it and it has no ``remaining`` (None).

A bounded ledger may also accrue its allowance with output tokens (``Accrual``: rate nats per
output token, plus a burst): a block is then admitted only if ``spent + block <= rate * produced +
burst`` as well, where ``produced`` is the number of output tokens committed before the block. Every
exception of the block sits at an output position ``pos >= produced``, so after every event the
cumulative spent is ``<= rate * pos + burst``: the accrual bound holds at every event, not only at
the end. ``limit`` is what the rule checks a block against: ``min(B - spent, rate * produced +
burst - spent)``, never below 0.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Optional, Tuple

from sglang_asd.policy.config import check_number


@dataclasses.dataclass(frozen=True)
class ExceptionEvent:
    """One mismatched draft token accepted under the gates.

    position: 0-based draft position in its block (the receipt layer re-bases it to the
    output position); draft_token: the accepted token; target_token: the target's argmax
    there (what strict greedy would have emitted); regret: its cost in nats.
    """

    position: int
    draft_token: int
    target_token: int
    regret: float


@dataclasses.dataclass(frozen=True)
class Accrual:
    """An allowance that grows with output: ``rate`` nats per output token plus ``burst`` nats.

    rate: ``asd_budget_per_token``; burst: ``asd_budget_burst`` (what may be spent before any
    token was produced). Rate 0 and burst 0 admit nothing (strict)."""

    rate: float
    burst: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", check_number("asd_budget_per_token", self.rate))
        object.__setattr__(self, "burst", check_number("asd_budget_burst", self.burst))

    def allowance(self, produced: int) -> float:
        """What may have been spent in all once ``produced`` output tokens were committed."""
        return self.rate * produced + self.burst


class Ledger:
    """Budget B, spent, remaining = B - spent (bounded ledgers only), and the exception events so far;
    with ``accrual``, the allowance that also bounds spent as output grows (module docstring)."""

    def __init__(self, budget: float, spent: float = 0.0, *, bounded: bool = True,
                 accrual: Optional[Accrual] = None) -> None:
        self._budget = check_number("budget", budget)
        self._spent = check_number("spent", spent)
        self._bounded = bool(bounded)
        if bounded and spent > budget:
            raise ValueError(f"spent must be <= budget ({budget!r}), got {spent!r}")
        if accrual is not None and not bounded:
            raise ValueError("an accrual needs a bounded ledger (the asd rule's)")
        self._accrual = accrual
        self._events: list[ExceptionEvent] = []

    @property
    def budget(self) -> float:
        return self._budget

    @property
    def spent(self) -> float:
        return self._spent

    @property
    def bounded(self) -> bool:
        return self._bounded

    @property
    def remaining(self) -> Optional[float]:
        """B - spent for a bounded ledger; None for an unbounded one (nothing limits it)."""
        return self._budget - self._spent if self._bounded else None

    @property
    def accrual(self) -> Optional[Accrual]:
        return self._accrual

    def limit(self, produced: int = 0) -> Optional[float]:
        """The most the next block may spend once ``produced`` output tokens were committed:
        remaining, and under an accrual also ``allowance(produced) - spent`` (never below 0);
        None for an unbounded ledger."""
        if not self._bounded:
            return None
        if self._accrual is None:
            return self.remaining
        return max(min(self.remaining, self._accrual.allowance(produced) - self._spent), 0.0)

    @property
    def num_exceptions(self) -> int:
        return len(self._events)

    @property
    def events(self) -> Tuple[ExceptionEvent, ...]:
        return tuple(self._events)

    def charge(self, events: Iterable[ExceptionEvent], produced: int = 0) -> float:
        """Add one block's exceptions; returns the block's regret (summed in order). ``produced``:
        output tokens committed before the block (read only under an accrual).

        Bounded: the rule admits a block only if its regret is <= ``limit(produced)``; anything
        else is a bug in the caller and raises. ``spent`` is clamped to ``budget`` so float rounding of
        ``spent + block`` can never break the invariant. Unbounded: ``spent`` grows by the block.
        """
        events = tuple(events)
        block = 0.0
        for event in events:
            if not (math.isfinite(event.regret) and event.regret >= 0):
                raise ValueError(f"exception regret must be a finite number >= 0, got {event.regret!r}")
            block += event.regret
        if not self._bounded:
            self._spent += block
        elif not block <= self.limit(produced):
            what = "remaining budget" if self._accrual is None else "ledger's limit (budget and accrual)"
            raise ValueError(f"block regret {block!r} exceeds the {what} {self.limit(produced)!r}")
        else:
            self._spent = min(self._budget, self._spent + block)
        self._events.extend(events)
        return block

    def __repr__(self) -> str:
        bounded = "" if self._bounded else ", bounded=False"
        accrual = "" if self._accrual is None else f", accrual={self._accrual!r}"
        return (f"Ledger(budget={self._budget!r}, spent={self._spent!r}, exceptions={len(self._events)}"
                f"{bounded}{accrual})")
