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

A per-token rate (``asd_budget_per_token``, ``asd_budget_burst``; docs/CONTRACTS.md "Budgets that
accrue with output") bounds a ledger rule's spent as output grows: at every event, the cumulative
spent is at most rate x (the event's output position, i.e. the output tokens before it) + burst.
The device enforces it (``ledger_table.py``); the host checks it at every event it records, listed
or not, and the receipt carries each listed event's cumulative ``spent`` and ``allowance`` and
whether the bound held at all of them (``accrual_held``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional

from sglang_asd.policy import ASDConfig, validate_budget, validate_budget_burst, validate_budget_per_token
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
PER_TOKEN_KEY = "asd_budget_per_token"
BURST_KEY = "asd_budget_burst"
SAMPLED_KEYS = (SAMPLED_FLOOR_KEY, SAMPLED_POWER_KEY, SAMPLED_CAP_KEY)
STRICT_PREFIX_KEY = "asd_strict_prefix"
SCOPE_KEY = "asd_scope"
STRICT_SPANS_KEY = "asd_strict_spans"
SCOPE_KEYS = (STRICT_PREFIX_KEY, SCOPE_KEY, STRICT_SPANS_KEY)
REQUEST_KEYS = ((BUDGET_KEY, GATE_KEY, CAP_KEY, RULE_KEY, MARGIN_KEY, THRESHOLD_KEY, PER_TOKEN_KEY, BURST_KEY)
                + FLY_KEYS + SAMPLED_KEYS + SCOPE_KEYS)

# How far the host's cumulative spent may pass an event's allowance before the receipt says the
# accrual bound did not hold: the device keeps its running sums in float32, so the host's float64
# sum of the same regrets can differ by rounding; a real overdraft is a whole exception's regret.
ACCRUAL_SLACK = 1e-4

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
    is nats of KL. ``scope``: where it may spend (``policy.scope``; the server's, tightened).
    ``rate`` (nats per output token; None: none) and ``burst``: the accrual that also bounds a
    ledger rule's spent (asd, asd-sampled): at most rate x output tokens + burst."""

    budget: float
    config: ASDConfig
    sampled: SampledConfig = SampledConfig()
    scope: Scope = Scope()
    rate: Optional[float] = None
    burst: float = 0.0

    @property
    def accrues_nothing(self) -> bool:
        """A rate that never allows a nat: rate 0 and burst 0 (strict, as budget 0)."""
        return self.rate == 0 and self.burst == 0

    @property
    def is_strict(self) -> bool:
        return (self.budget <= 0 or not self.config.allows_exceptions
                or (self.accrues_nothing and self.config.traits.ledger))

    @property
    def is_sampled_strict(self) -> bool:
        """A sampled request's choice relaxes nothing: budget 0, cap 0, or rate 0 with burst 0."""
        return self.budget <= 0 or self.sampled.max_relaxed_per_block == 0 or self.accrues_nothing

    @classmethod
    def from_custom_params(cls, custom_params: Optional[Mapping[str, Any]], settings: ASDServerSettings) -> "RequestASD":
        """The request's choice from its ``custom_params``; raises ValueError (never another error) on
        anything the HTTP layer would refuse, so the scheduler can serve such a request strictly."""
        if custom_params is not None and not isinstance(custom_params, Mapping):
            raise ValueError(f"custom_params must be an object, got {type(custom_params).__name__}")
        params = custom_params or {}
        budget = params.get(BUDGET_KEY)
        config = settings.config.tightened(
            gate=params.get(GATE_KEY), max_exceptions_per_block=params.get(CAP_KEY), rule=params.get(RULE_KEY),
            margin=params.get(MARGIN_KEY), threshold=params.get(THRESHOLD_KEY),
            fly_entropy_threshold=params.get(FLY_THRESHOLD_KEY), fly_entropy_top_k=params.get(FLY_TOP_K_KEY),
            fly_window_size=params.get(FLY_WINDOW_KEY), allowed_rules=settings.allowed_rules)
        rate, burst = _accrual(params, settings, config)
        if budget is not None:
            budget = validate_budget(budget, settings.max_budget)
        elif rate is not None and settings.default_budget == 0:
            budget = settings.max_budget  # a rate is the request's opt-in; its total is the server's maximum
        else:
            budget = settings.default_budget
        return cls(
            budget=budget, config=config,
            sampled=settings.sampled.tightened(
                floor=params.get(SAMPLED_FLOOR_KEY), power=params.get(SAMPLED_POWER_KEY),
                max_relaxed_per_block=params.get(SAMPLED_CAP_KEY)),
            scope=settings.scope.tightened(strict_prefix=params.get(STRICT_PREFIX_KEY), scope=params.get(SCOPE_KEY),
                                           strict_spans=params.get(STRICT_SPANS_KEY)),
            rate=rate, burst=burst,
        )

    @classmethod
    def strict(cls) -> "RequestASD":
        return cls(budget=0.0, config=ASDConfig(gate=0.0, max_exceptions_per_block=0))


def _accrual(params: Mapping[str, Any], settings: ASDServerSettings, config: ASDConfig) -> tuple:
    """The request's (rate, burst): its own, validated against the server's maxima, else the
    server's defaults. A rate the request sends under a rule without a request ledger (local,
    margin, threshold) is refused, as is a burst with no rate to go with it; the server's default
    rate simply does not apply to such a rule's greedy requests (it still bounds their sampled ones)."""
    rate, burst = params.get(PER_TOKEN_KEY), params.get(BURST_KEY)
    if rate is not None:
        rate = validate_budget_per_token(rate, settings.max_budget_per_token)
        if not config.traits.ledger:
            raise ValueError(f"{PER_TOKEN_KEY} does not apply to asd_rule={config.rule} (a rule without a request "
                             f"ledger; its parameters: {', '.join('asd_' + p for p in config.traits.parameters)})")
    else:
        rate = settings.budget_per_token
    if burst is None:
        return rate, settings.budget_burst
    burst = validate_budget_burst(burst, settings.max_budget)
    if rate is None:
        raise ValueError(f"{BURST_KEY} needs a per-token rate: send {PER_TOKEN_KEY} too (this server sets no "
                         f"--asd-budget-per-token), got {BURST_KEY}={burst:g}")
    return rate, burst


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
    accrual_held: bool = True  # every recorded event's cumulative spent <= its allowance (+ ACCRUAL_SLACK)
    accrual_min_headroom: Optional[float] = None  # min over recorded events of allowance - cumulative spent
    markers: Optional[Markers] = None  # the scope resolved against the served model; None: unscoped
    scope_skipped: int = 0  # draft nodes the rule would have relaxed but the scope did not allow

    @property
    def accrues(self) -> bool:
        """A per-token rate bounds this request's ledger (its rule has one: asd or asd-sampled)."""
        return self.choice.rate is not None and (self.sampled or self.choice.config.traits.ledger)

    def allowance(self, pos: int) -> float:
        """The accrual allowance at output position ``pos``: rate x pos + burst (``pos`` tokens before it)."""
        return self.choice.rate * pos + self.choice.burst

    @property
    def device_burst_left(self) -> float:
        """What the request's device row holds at admission in the accrual column: burst - spent
        under a rate (host spent exact then, as for ``device_remaining``); +inf without one (the
        accrual never binds: ``min(remaining, rate x produced + inf) = remaining``)."""
        return self.choice.burst - self.spent if self.accrues else math.inf

    def _accrue(self, pos: int, event: dict) -> None:
        """Check the accrual bound after an event at output position ``pos`` (spent already
        includes it) and annotate the event with its cumulative spent and allowance."""
        if not self.accrues:
            return
        allowance = self.allowance(pos)
        headroom = allowance - self.spent
        if self.accrual_min_headroom is None or headroom < self.accrual_min_headroom:
            self.accrual_min_headroom = headroom
        self.accrual_held = self.accrual_held and headroom >= -ACCRUAL_SLACK
        if event is not None:
            event["spent"] = round(self.spent, 9)
            event["allowance"] = round(allowance, 9)

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
        event = None
        if len(self.events) < self.max_events:
            event = {"pos": pos, "draft": draft, "target": target, "regret": round(regret, 6)}
            self.events.append(event)
        else:
            self.events_truncated = True
        self._accrue(pos, event)

    def record_relaxed(self, pos: int, token: int, q: float, a: float, charge: float, accepted: bool) -> None:
        """A sampled request's relaxed node: its output position, the relaxed token, q = p(token),
        a, the KL charge (nats, booked whether or not accepted) and whether the token was committed."""
        self.exceptions += 1
        self.spent += charge
        event = None
        if len(self.events) < self.max_events:
            event = {"pos": pos, "token": token, "q": round(q, 6), "a": round(a, 6), "charge": round(charge, 9),
                     "accepted": accepted}
            self.events.append(event)
        else:
            self.events_truncated = True
        self._accrue(pos, event)

    def _accrual_receipt(self) -> dict:
        """The receipt's accrual fields (none without a rate): the rate, the burst, whether every
        event's cumulative spent stayed within its allowance, and the smallest margin it did by."""
        if not self.accrues:
            return {}
        headroom = self.accrual_min_headroom
        return {"budget_per_token": self.choice.rate, "budget_burst": self.choice.burst,
                "accrual_held": self.accrual_held,
                "accrual_min_headroom": None if headroom is None else round(headroom, 9)}

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
            **self._accrual_receipt(),
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
            **self._accrual_receipt(),
            "relaxed": self.exceptions,
            "events": list(self.events),
            "events_truncated": self.events_truncated,
            "scope": self.scope_receipt,
        }
