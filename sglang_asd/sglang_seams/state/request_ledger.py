"""The host-side ledger of one request and the receipt it produces. Standard library only.

The device holds the authoritative ``remaining`` of every running request (indexed by its
request-pool slot, see ``sglang_seams/scheduler/req_to_token_pool.py``); this object is its host mirror, fed
from each verify round's results after SGLang commits the tokens. It is what a receipt reports and
what a retracted request resumes from.

Every rule counts ``spent`` (the sum of its exceptions' regrets) so that rules compare by spent
regret; only the asd rule has a ledger that bounds it (``remaining = budget - spent``). For the
other rules the receipt's ``remaining`` is null: nothing it could claim is enforced.

A sampled request (temperature > 0, not top-k 1) with a budget is served by the sampled rule
(``asd-sampled-1``, ``sglang_asd.policy.sampled``): the same ``asd_budget`` is then nats of KL
divergence from exact speculative sampling, ``spent`` sums the charges of its relaxed nodes
(booked whether or not the relaxed token was accepted) and each event is one relaxed node.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from sglang_asd.policy import ASDConfig, validate_budget
from sglang_asd.policy.sampled import SAMPLED_RULE, SAMPLED_RULE_VERSION, SampledConfig
from sglang_asd.policy.scope import Markers, Scope
from sglang_asd.server_settings import ASDServerSettings

# Keys of SamplingParams.custom_params that carry a request's ASD choices (the HTTP layer moves
# the public fields here; a client may also send them inside custom_params directly).
BUDGET_KEY = "asd_budget"
GATE_KEY = "asd_gate"
CAP_KEY = "asd_max_exceptions_per_block"
RULE_KEY = "asd_rule"
MARGIN_KEY = "asd_margin"
THRESHOLD_KEY = "asd_threshold"
FLY_THRESHOLD_KEY = "asd_fly_entropy_threshold"
FLY_TOP_K_KEY = "asd_fly_entropy_top_k"
FLY_WINDOW_KEY = "asd_fly_window_size"
FLY_KEYS = (FLY_THRESHOLD_KEY, FLY_TOP_K_KEY, FLY_WINDOW_KEY)
SAMPLED_FLOOR_KEY = "asd_sampled_floor"
SAMPLED_POWER_KEY = "asd_sampled_power"
SAMPLED_CAP_KEY = "asd_sampled_max_relaxed_per_block"
SAMPLED_KEYS = (SAMPLED_FLOOR_KEY, SAMPLED_POWER_KEY, SAMPLED_CAP_KEY)
STRICT_PREFIX_KEY = "asd_strict_prefix"
SCOPE_KEY = "asd_scope"
STRICT_SPANS_KEY = "asd_strict_spans"
SCOPE_KEYS = (STRICT_PREFIX_KEY, SCOPE_KEY, STRICT_SPANS_KEY)
REQUEST_KEYS = (BUDGET_KEY, GATE_KEY, CAP_KEY, RULE_KEY, MARGIN_KEY, THRESHOLD_KEY) + FLY_KEYS + SAMPLED_KEYS + SCOPE_KEYS

# Why ASD did not apply to a request.
REASON_STRICT = "strict"  # the request's choice is strict greedy: budget 0, its rule's gate 0, or cap 0
REASON_SAMPLING = "sampling"  # a sampled request where the sampled rule cannot run (its verify is greedy, or no seam)
REASON_THRESHOLDS = "thresholds"  # sampled: SGLang's --speculative-accept-threshold-single/-acc are not 1
REASON_REJECTION_SAMPLING = "rejection_sampling"  # sampled: --speculative-use-rejection-sampling
REASON_NO_SPEC = "no_speculative_decoding"
REASON_FLY_SAMPLED = "fly_sampled"  # a sampled request chose fly: served as stock SGLang samples (fly is greedy here)


@dataclasses.dataclass(frozen=True)
class RequestASD:
    """A request's validated choice: its budget B and its rule config (the server's, tightened).

    B is the opt-in of every rule (0 = strict greedy) and, for asd, its ledger's limit; local
    uses it as a per-block limit; margin and threshold read it only as the opt-in. ``sampled``:
    the sampled rule's parameters (the server's, tightened), used if the request samples; then B
    is nats of KL. ``scope``: where it may spend (``policy.scope``; the server's, tightened)."""

    budget: float
    config: ASDConfig
    sampled: SampledConfig = SampledConfig()
    scope: Scope = Scope()

    @property
    def is_strict(self) -> bool:
        return self.budget <= 0 or not self.config.allows_exceptions

    @property
    def is_sampled_strict(self) -> bool:
        """A sampled request's choice relaxes nothing: budget 0 or cap 0."""
        return self.budget <= 0 or self.sampled.max_relaxed_per_block == 0

    @classmethod
    def from_custom_params(cls, custom_params: Optional[Mapping[str, Any]], settings: ASDServerSettings) -> "RequestASD":
        """The request's choice from its ``custom_params``; raises ValueError (never another error) on
        anything the HTTP layer would refuse, so the scheduler can serve such a request strictly."""
        if custom_params is not None and not isinstance(custom_params, Mapping):
            raise ValueError(f"custom_params must be an object, got {type(custom_params).__name__}")
        params = custom_params or {}
        budget = params.get(BUDGET_KEY)
        return cls(
            budget=settings.default_budget if budget is None else validate_budget(budget, settings.max_budget),
            config=settings.config.tightened(
                gate=params.get(GATE_KEY), max_exceptions_per_block=params.get(CAP_KEY), rule=params.get(RULE_KEY),
                margin=params.get(MARGIN_KEY), threshold=params.get(THRESHOLD_KEY),
                fly_entropy_threshold=params.get(FLY_THRESHOLD_KEY), fly_entropy_top_k=params.get(FLY_TOP_K_KEY),
                fly_window_size=params.get(FLY_WINDOW_KEY), allowed_rules=settings.allowed_rules),
            sampled=settings.sampled.tightened(
                floor=params.get(SAMPLED_FLOOR_KEY), power=params.get(SAMPLED_POWER_KEY),
                max_relaxed_per_block=params.get(SAMPLED_CAP_KEY)),
            scope=settings.scope.tightened(strict_prefix=params.get(STRICT_PREFIX_KEY), scope=params.get(SCOPE_KEY),
                                           strict_spans=params.get(STRICT_SPANS_KEY)),
        )

    @classmethod
    def strict(cls) -> "RequestASD":
        return cls(budget=0.0, config=ASDConfig(gate=0.0, max_exceptions_per_block=0))


@dataclasses.dataclass
class RequestLedger:
    """Budget, spending and exception events of one request (host mirror of the device ledger)."""

    choice: RequestASD
    reason: Optional[str] = None  # None: ASD applies
    sampled: bool = False  # a sampled request: the sampled rule (KL budget), not choice.config's rule
    max_events: int = 64
    spent: float = 0.0
    exceptions: int = 0
    suffix_tokens: int = 0
    events: list = dataclasses.field(default_factory=list)
    events_truncated: bool = False
    finalized: bool = False  # the request finished and was counted in the metrics
    markers: Optional[Markers] = None  # the scope resolved against the served model; None: unscoped
    scope_skipped: int = 0  # draft nodes the rule would have relaxed but the scope did not allow

    @property
    def scope_receipt(self) -> dict:
        """The scope in force and what it skipped (docs/CONTRACTS.md, "Scopes")."""
        return {**self.choice.scope.parameters(), "skipped": self.scope_skipped}

    @property
    def applied(self) -> bool:
        return self.reason is None

    @property
    def rule(self) -> str:
        """The rule's name (the metrics' ``rule`` label): ``asd-sampled`` for a sampled request."""
        return SAMPLED_RULE if self.sampled else self.choice.config.rule

    @property
    def remaining(self) -> Optional[float]:
        """budget - spent under the asd or sampled rule's ledger; None for a rule without one."""
        if not (self.sampled or self.choice.config.traits.ledger):
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

    def record_relaxed(self, pos: int, token: int, q: float, a: float, charge: float, accepted: bool) -> None:
        """A sampled request's relaxed node: its output position, the relaxed token, q = p(token),
        a, the KL charge (nats, booked whether or not accepted) and whether the token was committed."""
        self.exceptions += 1
        self.spent += charge
        if len(self.events) < self.max_events:
            self.events.append({"pos": pos, "token": token, "q": round(q, 6), "a": round(a, 6),
                                "charge": round(charge, 9), "accepted": accepted})
        else:
            self.events_truncated = True

    def receipt(self) -> dict:
        """docs/CONTRACTS.md "Receipt": the rule's version, its parameters, and what was spent."""
        if self.sampled:
            return self._sampled_receipt()
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
            "scope": self.scope_receipt,
        }

    def _sampled_receipt(self) -> dict:
        """A sampled request's receipt: spent and remaining in nats of KL, one event per relaxed node."""
        sampled = self.choice.sampled
        return {
            "applied": self.applied,
            "reason": self.reason,
            "rule": SAMPLED_RULE_VERSION,
            "budget": self.choice.budget,
            "spent": round(min(self.spent, self.choice.budget), 9),
            "remaining": round(self.remaining, 9),
            "floor": sampled.floor,
            "power": sampled.power,
            "max_relaxed_per_block": sampled.max_relaxed_per_block,
            "relaxed": self.exceptions,
            "events": list(self.events),
            "events_truncated": self.events_truncated,
            "scope": self.scope_receipt,
        }
