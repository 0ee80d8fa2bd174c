"""A request's regret ledger: budget, spent, remaining, and the exceptions that spent it.

Standard library only. Invariant: ``0 <= spent <= budget`` at every moment.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Tuple

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
    """Budget B, spent, remaining = B - spent, and the exception events so far."""

    def __init__(self, budget: float, spent: float = 0.0) -> None:
        self._budget = check_number("budget", budget)
        self._spent = check_number("spent", spent)
        if spent > budget:
            raise ValueError(f"spent must be <= budget ({budget!r}), got {spent!r}")
        self._events: list[ExceptionEvent] = []

    @property
    def budget(self) -> float:
        return self._budget

    @property
    def spent(self) -> float:
        return self._spent

    @property
    def remaining(self) -> float:
        return self._budget - self._spent

    @property
    def num_exceptions(self) -> int:
        return len(self._events)

    @property
    def events(self) -> Tuple[ExceptionEvent, ...]:
        return tuple(self._events)

    def charge(self, events: Iterable[ExceptionEvent]) -> float:
        """Add one block's exceptions; returns the block's regret (summed in order).

        The rule admits a block only if its regret is <= remaining; anything else is a bug in
        the caller and raises. ``spent`` is clamped to ``budget`` so float rounding of
        ``spent + block`` can never break the invariant.
        """
        events = tuple(events)
        block = 0.0
        for event in events:
            if not (math.isfinite(event.regret) and event.regret >= 0):
                raise ValueError(f"exception regret must be a finite number >= 0, got {event.regret!r}")
            block += event.regret
        if not block <= self.remaining:
            raise ValueError(f"block regret {block!r} exceeds the remaining budget {self.remaining!r}")
        self._spent = min(self._budget, self._spent + block)
        self._events.extend(events)
        return block

    def __repr__(self) -> str:
        return f"Ledger(budget={self._budget!r}, spent={self._spent!r}, exceptions={len(self._events)})"
