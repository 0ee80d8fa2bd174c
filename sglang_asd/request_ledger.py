"""The host-side ledger of one request and the receipt it produces. Standard library only.

The device holds the authoritative ``remaining`` of every running request (indexed by its
request-pool slot, see ``sglang_seams/req_to_token_pool.py``); this object is its host mirror, fed
from each verify round's results after SGLang commits the tokens. It is what a receipt reports and
what a retracted request resumes from.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from sglang_asd.policy import RULE_VERSION, ASDConfig, validate_budget
from sglang_asd.server_settings import ASDServerSettings

# Keys of SamplingParams.custom_params that carry a request's ASD choices (the HTTP layer moves
# the public fields here; a client may also send them inside custom_params directly).
BUDGET_KEY = "asd_budget"
GATE_KEY = "asd_gate"
CAP_KEY = "asd_max_exceptions_per_block"
REQUEST_KEYS = (BUDGET_KEY, GATE_KEY, CAP_KEY)

# Why ASD did not apply to a request.
REASON_STRICT = "strict"  # the request's choice is strict greedy: budget 0, gate 0 or cap 0
REASON_SAMPLING = "sampling"
REASON_NO_SPEC = "no_speculative_decoding"


@dataclasses.dataclass(frozen=True)
class RequestASD:
    """A request's validated choice: its budget B and its rule config (the server's, tightened)."""

    budget: float
    rule: ASDConfig

    @property
    def is_strict(self) -> bool:
        return self.budget <= 0 or not self.rule.allows_exceptions

    @classmethod
    def from_custom_params(cls, custom_params: Optional[Mapping[str, Any]], settings: ASDServerSettings) -> "RequestASD":
        params = custom_params or {}
        budget = params.get(BUDGET_KEY)
        return cls(
            budget=settings.default_budget if budget is None else validate_budget(budget, settings.max_budget),
            rule=settings.rule.tightened(gate=params.get(GATE_KEY), max_exceptions_per_block=params.get(CAP_KEY)),
        )

    @classmethod
    def strict(cls) -> "RequestASD":
        return cls(budget=0.0, rule=ASDConfig(gate=0.0, max_exceptions_per_block=0))


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
    def remaining(self) -> float:
        return max(self.choice.budget - self.spent, 0.0)

    def record(self, pos: int, draft: int, target: int, regret: float) -> None:
        self.exceptions += 1
        self.spent += regret
        if len(self.events) < self.max_events:
            self.events.append({"pos": pos, "draft": draft, "target": target, "regret": round(regret, 6)})
        else:
            self.events_truncated = True

    def receipt(self) -> dict:
        return {
            "applied": self.applied,
            "reason": self.reason,
            "rule": RULE_VERSION,
            "budget": self.choice.budget,
            "spent": round(self.spent, 6),
            "remaining": round(self.remaining, 6),
            "gate": self.choice.rule.gate,
            "max_exceptions_per_block": self.choice.rule.max_exceptions_per_block,
            "exceptions": self.exceptions,
            "suffix_tokens": self.suffix_tokens,
            "events": list(self.events),
            "events_truncated": self.events_truncated,
        }


