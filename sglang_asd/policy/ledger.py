"""A request's regret ledger: budget, spent, remaining, and the exceptions that spent it.

Standard library only. A *bounded* ledger (the asd rule's) keeps ``0 <= spent <= budget`` at every
moment and has ``remaining = budget - spent``. The rules without a request ledger (local, margin,
threshold; ``policy.config``) use an *unbounded* one: it counts what was spent, so that every
rule reports spent regret, but nothing bounds it and it has no ``remaining`` (None).
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


class Ledger:
    """Budget B, spent, remaining = B - spent (bounded ledgers only), and the exception events so far."""

    def __init__(self, budget: float, spent: float = 0.0, *, bounded: bool = True) -> None:
        self._budget = check_number("budget", budget)
        self._spent = check_number("spent", spent)
        self._bounded = bool(bounded)
        if bounded and spent > budget:
            raise ValueError(f"spent must be <= budget ({budget!r}), got {spent!r}")
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
    def num_exceptions(self) -> int:
        return len(self._events)

    @property
    def events(self) -> Tuple[ExceptionEvent, ...]:
        return tuple(self._events)

    def charge(self, events: Iterable[ExceptionEvent]) -> float:
        """Add one block's exceptions; returns the block's regret (summed in order).

        Bounded: the rule admits a block only if its regret is <= remaining; anything else is a
        bug in the caller and raises. ``spent`` is clamped to ``budget`` so float rounding of
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
        elif not block <= self.remaining:
            raise ValueError(f"block regret {block!r} exceeds the remaining budget {self.remaining!r}")
        else:
            self._spent = min(self._budget, self._spent + block)
        self._events.extend(events)
        return block

    def __repr__(self) -> str:
        bounded = "" if self._bounded else ", bounded=False"
        return f"Ledger(budget={self._budget!r}, spent={self._spent!r}, exceptions={len(self._events)}{bounded})"
