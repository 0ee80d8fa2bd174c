"""The host-side ledger of one request and the receipt it produces. Standard library only.

The device holds the authoritative ``remaining`` of every running request (indexed by its
request-pool slot, see ``sglang_seams/scheduler/req_to_token_pool.py``); this object is its host mirror, fed
from each verify round's results after SGLang commits the tokens. It is what a receipt reports and
what a retracted request resumes from.

Every rule counts ``spent`` (the sum of its exceptions' regrets) so that rules compare by spent
regret; only the asd rule has a ledger that bounds it (``remaining = budget - spent``). For the
other rules the receipt's ``remaining`` is null: nothing it could claim is enforced.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from sglang_asd.policy import ASDConfig, validate_budget
from sglang_asd.server_settings import ASDServerSettings

# Keys of SamplingParams.custom_params that carry a request's ASD choices (the HTTP layer moves
# the public fields here; a client may also send them inside custom_params directly).
BUDGET_KEY = "asd_budget"
GATE_KEY = "asd_gate"
CAP_KEY = "asd_max_exceptions_per_block"
RULE_KEY = "asd_rule"
MARGIN_KEY = "asd_margin"
THRESHOLD_KEY = "asd_threshold"
REQUEST_KEYS = (BUDGET_KEY, GATE_KEY, CAP_KEY, RULE_KEY, MARGIN_KEY, THRESHOLD_KEY)

# Why ASD did not apply to a request.
REASON_STRICT = "strict"  # the request's choice is strict greedy: budget 0, its rule's gate 0, or cap 0
REASON_SAMPLING = "sampling"
REASON_NO_SPEC = "no_speculative_decoding"


@dataclasses.dataclass(frozen=True)
class RequestASD:
    """A request's validated choice: its budget B and its rule config (the server's, tightened).

    B is the opt-in of every rule (0 = strict greedy) and, for asd, its ledger's limit; local
    uses it as a per-block limit; margin and threshold read it only as the opt-in."""

    budget: float
    config: ASDConfig

    @property
    def is_strict(self) -> bool:
        return self.budget <= 0 or not self.config.allows_exceptions

    @classmethod
    def from_custom_params(cls, custom_params: Optional[Mapping[str, Any]], settings: ASDServerSettings) -> "RequestASD":
        params = custom_params or {}
        budget = params.get(BUDGET_KEY)
        return cls(
            budget=settings.default_budget if budget is None else validate_budget(budget, settings.max_budget),
            config=settings.config.tightened(
                gate=params.get(GATE_KEY), max_exceptions_per_block=params.get(CAP_KEY), rule=params.get(RULE_KEY),
                margin=params.get(MARGIN_KEY), threshold=params.get(THRESHOLD_KEY),
                allowed_rules=settings.allowed_rules),
        )

    @classmethod
    def strict(cls) -> "RequestASD":
        return cls(budget=0.0, config=ASDConfig(gate=0.0, max_exceptions_per_block=0))


@dataclasses.dataclass
class RequestLedger:
    """Budget, spending and exception events of one request (host mirror of the device ledger)."""

    choice: RequestASD
    reason: Optional[str] = None  # None: ASD applies
    max_events: int = 64
    spent: float = 0.0
    exceptions: int = 0
    suffix_tokens: int = 0
    events: list = dataclasses.field(default_factory=list)
    events_truncated: bool = False
    finalized: bool = False  # the request finished and was counted in the metrics

    @property
    def applied(self) -> bool:
        return self.reason is None

    @property
    def rule(self) -> str:
        return self.choice.config.rule

    @property
    def remaining(self) -> Optional[float]:
        """budget - spent under the asd rule's ledger; None for a rule without one."""
        if not self.choice.config.traits.ledger:
            return None
        return max(self.choice.budget - self.spent, 0.0)

    @property
    def device_remaining(self) -> float:
        """What the request's device row holds at admission: asd: B - spent (exact then: a
        retracted request is re-admitted only after its last in-flight round was processed);
        other rules: B, which the verify step never decrements."""
        remaining = self.remaining
        return self.choice.budget if remaining is None else remaining

    def record(self, pos: int, draft: int, target: int, regret: float) -> None:
        self.exceptions += 1
        self.spent += regret
        if len(self.events) < self.max_events:
            self.events.append({"pos": pos, "draft": draft, "target": target, "regret": round(regret, 6)})
        else:
            self.events_truncated = True

    def receipt(self) -> dict:
        """docs/CONTRACTS.md "Receipt": the rule's version, its parameters, and what was spent."""
        config = self.choice.config
        remaining = self.remaining
        return {
            "applied": self.applied,
            "reason": self.reason,
            "rule": config.traits.version,
            "budget": self.choice.budget,
            "spent": round(self.spent, 6),
            "remaining": None if remaining is None else round(remaining, 6),
            **config.parameters(),
            "exceptions": self.exceptions,
            "suffix_tokens": self.suffix_tokens,
            "events": list(self.events),
            "events_truncated": self.events_truncated,
        }
