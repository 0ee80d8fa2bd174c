"""The rules' parameters, their defaults and their validators. Standard library only.

One config type, ``ASDConfig``: which acceptance rule a request uses and that rule's parameters;
the budget B lives in the request's ``Ledger``. The server settings (``sglang_asd.server_settings``)
hold the server's ``ASDConfig`` and a request's choice (``sglang_asd.sglang_seams.state.request_ledger.RequestASD``)
holds its own, built by ``ASDConfig.tightened``. Each default is defined here, once, and each field
has one validator, shared by the pure rule, the server flags and the HTTP layer. Errors name the
field, the allowed range and the value got: ``asd_budget must be a finite number in [0, 64], got -1``.

The rules (``RULES``; all target-only: SGLang's greedy verify has no draft probabilities). A
mismatched draft token at draft position i with regret r_i (spec section 2) is an *exception* iff
its rule admits it; every rule accepts exact tokens for free and stops at the first failure:

- ``asd`` (default): the spec (docs/ASD_SPEC.md section 3): gate ``r_i / (K - i) <= g``, at most
  m exceptions per block, and ``spent + block regret <= B`` on the request's ledger.
- ``local``: asd's gate and cap, and the budget as a per-block limit (``block regret <= B``, reset
  every block): no request ledger. The ablation that isolates the ledger.
- ``margin`` (MARS-style, arXiv 2601.15498): the draft token is the target's runner-up (the
  largest logit among the tokens other than the argmax) and the target's top-2 logit margin
  ``z_(1) - z_(2)`` is at most ``margin`` nats. For the runner-up r_i IS that margin, so the test
  is ``r_i <= margin`` on runner-up tokens. No ledger, no cap. What MARS does (checked in the
  authors' code, github.com/5SSjw/MARS, ``mars/model/utils.py``, ``evaluate_posterior``): when the
  ratio of the raw top-2 logits ``z_(2) / z_(1)`` exceeds ``relaxation_threshold`` (0.9 by
  default), a draft token in the target's top 2 is accepted, else rejection sampling as usual; its
  greedy branch stays strict. We keep the top-2 test and replace the raw-logit ratio by the
  difference, which is ``log(p_(1) / p_(2))`` and so does not depend on the logits' arbitrary
  offset (a ratio of raw logits does, and has no meaning when ``z_(1) <= 0``). For ``z_(1) > 0``
  MARS's test is ``z_(1) - z_(2) < (1 - threshold) * z_(1)``: threshold 0.9 at ``z_(1) = 20`` is a
  margin of 2 nats.
- ``threshold`` (Fuzzy SD-style, arXiv 2502.20704, target-only): ``r_i <= threshold``. FSD
  thresholds a divergence between the draft's and the target's distributions; SGLang's greedy
  verify has no draft distribution, so the target-only analogue thresholds the draft token's
  log-probability gap to the target's argmax (the regret). No gate normalisation, no cap, no ledger.
- ``fly`` (FLy, arXiv 2511.22972, as vLLM serves it; ``policy/fly.py`` has the facts and their
  sources): a mismatch is *deferred* (accepted) where the target's top-k entropy at that position
  is >= ``fly_entropy_threshold`` and the next ``fly_window_size`` draft tokens on its path are all
  exact. Not a regret gate: the verifier reads the row's window and entropy, not a limit on r_i.
  No cap, no ledger (B is the opt-in); spent regret is counted.
- ``fly-bounded``: fly's deferrals, and the asd ledger: ``spent + block regret <= B`` over the
  request, charged like asd's. The two differ only in ``ledger``/``block_limited``, like local and
  asd, so that FLy and asd compare at equal spend (``policy/fly.py`` says why a separate rule).

Uniform form (what the batched verifier computes, rule as data, see ``RuleTraits``): an exception
needs ``r_i / q_i <= gate`` where ``q_i = K - i`` for asd and local and ``q_i = 1`` for margin and
threshold, whose per-token limit (margin, threshold) takes the place of g; then the rule's own
extra conditions (runner-up; cap; block limit). ``spent`` (the sum of exception regrets) is
counted for every rule so that rules compare by spent regret, but only asd's ledger bounds it.

Strict identity, every rule: budget 0 (the request's opt-in), or the rule's gate (g, margin or
threshold) 0, or (asd, local) cap 0 admit nothing, not even a regret-0 tie. fly's threshold 0 is
not strict (every mismatch has entropy >= 0): its strict setting is budget 0 (fly-bounded: also an
exhausted ledger).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable

# Version of the asd rule in ``sglang_asd.policy.rule``. Change it whenever a decision could
# change; every receipt names the rule's version (``RuleTraits.version``).
RULE_VERSION = "asd-1"

DEFAULT_RULE = "asd"
DEFAULT_GATE = 0.25  # g: nats of regret per suffix value (the reference configuration)
DEFAULT_MAX_EXCEPTIONS_PER_BLOCK = 2  # m
DEFAULT_MARGIN = 1.0  # margin rule: largest top-2 logit margin (nats) at which the runner-up passes
DEFAULT_THRESHOLD = 0.5  # threshold rule: largest regret (nats) of one exception
DEFAULT_FLY_ENTROPY_THRESHOLD = 0.3  # fly: smallest top-k entropy (nats) at a deferred mismatch (vLLM's default)
DEFAULT_FLY_ENTROPY_TOP_K = 3  # fly: how many of the largest target probabilities the entropy sums (vLLM's)
DEFAULT_FLY_WINDOW_SIZE = 0  # fly: exact tokens that must follow a deferral; 0 = min(6, K - 1) (vLLM's default)
MAX_FLY_ENTROPY_TOP_K = 32  # the verifier's one top-k pass takes this many values (requests choose fewer)


@dataclasses.dataclass(frozen=True)
class RuleTraits:
    """What distinguishes one rule from another, as data (the verifier reads these, not names).

    gate_field: the ASDConfig field holding the rule's gate (the verifier's per-row ``gate``).
    per_suffix_value: the gate divides regret by q_i = K - i (else by 1).
    runner_up_only: only the target's runner-up token may be an exception.
    capped: at most ``max_exceptions_per_block`` exceptions per block.
    block_limited: a block's exception regret must be <= the row's limit (asd: remaining; local: B).
    ledger: the block's regret is charged to the request's ledger (remaining = B - spent).
    deferred: FLy's test replaces the regret gate: the gate field is the entropy threshold (0 is
        not strict), and an exception needs the next window of draft tokens on its path exact.
    """

    name: str
    version: str
    gate_field: str
    per_suffix_value: bool
    runner_up_only: bool
    capped: bool
    block_limited: bool
    ledger: bool
    deferred: bool = False

    @property
    def parameters(self) -> tuple:
        """The ASDConfig fields this rule reads (what its receipt reports)."""
        if self.deferred:
            return (self.gate_field, "fly_entropy_top_k", "fly_window_size")
        return (self.gate_field, "max_exceptions_per_block") if self.capped else (self.gate_field,)


RULES = {
    "asd": RuleTraits("asd", RULE_VERSION, "gate", True, False, True, True, True),
    "local": RuleTraits("local", "local-1", "gate", True, False, True, True, False),
    "margin": RuleTraits("margin", "margin-1", "margin", False, True, False, False, False),
    "threshold": RuleTraits("threshold", "threshold-1", "threshold", False, False, False, False, False),
    "fly": RuleTraits("fly", "fly-1", "fly_entropy_threshold", False, False, False, False, False, deferred=True),
    "fly-bounded": RuleTraits("fly-bounded", "fly-bounded-1", "fly_entropy_threshold", False, False, False, True, True,
                              deferred=True),
}
RULE_NAMES = tuple(RULES)  # a rule's id on the device is its index here


def _fmt(x: float) -> str:
    """64.0 -> '64', 0.25 -> '0.25' (for range bounds in messages)."""
    return f"{x:g}"


# The largest count a request or server may set: the device ledger holds counts as int32.
MAX_COUNT = 2**31 - 1


def shown(value: Any) -> str:
    """``value`` for an error message: its repr, or its size where the repr would flood the message
    (an integer of hundreds of digits, a long string)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:40]}... ({len(text)} characters)"


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond float's range
        return False


def check_number(name: str, value: Any, upper: float = math.inf) -> float:
    """A finite number in [0, upper] (bool, str and None rejected), as float; an integer beyond
    float's range is rejected like any other out-of-range value."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value)
    if not (ok and 0 <= value <= upper):
        bound = ">= 0" if upper == math.inf else f"in [0, {_fmt(upper)}]"
        raise ValueError(f"{name} must be a finite number {bound}, got {shown(value)}")
    return float(value)


def check_count(name: str, value: Any, upper: float = math.inf) -> int:
    """An integer in [0, upper] (bool and float rejected), at most ``MAX_COUNT``."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if not (is_int and 0 <= value <= min(upper, MAX_COUNT)):
        if upper != math.inf:
            bound = f"in [0, {_fmt(upper)}]"
        else:
            bound = f"in [0, {MAX_COUNT}]" if is_int and value > MAX_COUNT else ">= 0"
        raise ValueError(f"{name} must be an integer {bound}, got {shown(value)}")
    return value


# The per-field validators, named as the request fields (the HTTP layer reuses them).
def validate_budget(value: Any, max_budget: float = math.inf, name: str = "asd_budget") -> float:
    """A budget B: a finite number in [0, max_budget]."""
    return check_number(name, value, max_budget)


def validate_budget_per_token(value: Any, max_rate: float = math.inf, name: str = "asd_budget_per_token") -> float:
    """An accrual rate: a finite number of nats per output token in [0, max_rate]."""
    return check_number(name, value, max_rate)


def validate_budget_burst(value: Any, max_burst: float = math.inf, name: str = "asd_budget_burst") -> float:
    """An accrual's burst: a finite number of nats in [0, max_burst]."""
    return check_number(name, value, max_burst)


def validate_gate(value: Any, max_gate: float = math.inf, name: str = "asd_gate") -> float:
    """A gate g: a finite number in [0, max_gate]."""
    return check_number(name, value, max_gate)


def validate_cap(value: Any, max_cap: float = math.inf, name: str = "asd_max_exceptions_per_block") -> int:
    """A cap m: an integer in [0, max_cap]."""
    return check_count(name, value, max_cap)


def validate_margin(value: Any, max_margin: float = math.inf, name: str = "asd_margin") -> float:
    """The margin rule's top-2 logit margin: a finite number in [0, max_margin] (nats)."""
    return check_number(name, value, max_margin)


def validate_threshold(value: Any, max_threshold: float = math.inf, name: str = "asd_threshold") -> float:
    """The threshold rule's per-token regret limit: a finite number in [0, max_threshold] (nats)."""
    return check_number(name, value, max_threshold)


def validate_fly_entropy_threshold(value: Any, least: float = 0.0,
                                   name: str = "asd_fly_entropy_threshold") -> float:
    """fly's entropy threshold (nats): a finite number >= ``least`` (a request's: >= the server's,
    since a higher threshold defers less)."""
    value = check_number(name, value)
    if value < least:
        raise ValueError(f"{name} must be a finite number >= {_fmt(least)} (the server's), got {shown(value)}")
    return value


def validate_fly_entropy_top_k(value: Any, most: int = MAX_FLY_ENTROPY_TOP_K,
                               name: str = "asd_fly_entropy_top_k") -> int:
    """fly's entropy top-k: an integer in [1, most] (a request's: at most the server's, since more
    terms make a larger entropy, which defers more)."""
    if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most):
        raise ValueError(f"{name} must be an integer in [1, {most}], got {shown(value)}")
    return value


def validate_fly_window_size(value: Any, least: int = 0, name: str = "asd_fly_window_size") -> int:
    """fly's window: an integer >= 0, 0 meaning min(6, K - 1) (vLLM's default); a request's is >=
    the server's where the server sets one (a longer window defers less). Under the server's 0 a
    request may choose any window: the default follows K, which is no admission limit."""
    value = check_count(name, value)
    if least > 0 and value < least:
        raise ValueError(f"{name} must be an integer >= {least} (the server's), got {shown(value)}")
    return value


def validate_rule(value: Any, allowed: Iterable[str] = RULE_NAMES, name: str = "asd_rule") -> str:
    """A rule name among ``allowed``."""
    allowed = tuple(allowed)
    if not (isinstance(value, str) and value in allowed):
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def validate_rules(value: Any, name: str = "asd_allowed_rules") -> tuple:
    """A non-empty set of rule names, as a tuple in ``RULE_NAMES`` order (a comma-separated string
    or an iterable of names)."""
    names = value.split(",") if isinstance(value, str) else value
    try:
        names = [n.strip() for n in names]
    except (TypeError, AttributeError):
        raise ValueError(f"{name} must list rules among {', '.join(RULE_NAMES)}, got {value!r}") from None
    bad = [n for n in names if n not in RULES]
    if bad or not names:
        raise ValueError(f"{name} must list rules among {', '.join(RULE_NAMES)}, got {value!r}")
    return tuple(r for r in RULE_NAMES if r in names)


@dataclasses.dataclass(frozen=True)
class ASDConfig:
    """The acceptance rule and its parameters (module docstring; spec section 3 for asd).

    gate: g, the largest regret per suffix value (nats) of an asd or local exception; 0 = strict.
    max_exceptions_per_block: m, asd's and local's cap on exceptions in one block; 0 = strict.
    rule: one of ``RULE_NAMES``.
    margin: the margin rule's largest top-2 logit margin (nats); 0 = strict.
    threshold: the threshold rule's largest regret of one exception (nats); 0 = strict.
    fly_entropy_threshold: fly's smallest top-k entropy (nats) at a deferred mismatch.
    fly_entropy_top_k: how many of the target's largest probabilities fly's entropy sums.
    fly_window_size: exact draft tokens that must follow a deferred mismatch; 0 = min(6, K - 1).
    """

    gate: float = DEFAULT_GATE
    max_exceptions_per_block: int = DEFAULT_MAX_EXCEPTIONS_PER_BLOCK
    rule: str = DEFAULT_RULE
    margin: float = DEFAULT_MARGIN
    threshold: float = DEFAULT_THRESHOLD
    fly_entropy_threshold: float = DEFAULT_FLY_ENTROPY_THRESHOLD
    fly_entropy_top_k: int = DEFAULT_FLY_ENTROPY_TOP_K
    fly_window_size: int = DEFAULT_FLY_WINDOW_SIZE

    def __post_init__(self) -> None:
        object.__setattr__(self, "gate", validate_gate(self.gate, name="gate"))
        validate_cap(self.max_exceptions_per_block, name="max_exceptions_per_block")
        validate_rule(self.rule, name="rule")
        object.__setattr__(self, "margin", validate_margin(self.margin, name="margin"))
        object.__setattr__(self, "threshold", validate_threshold(self.threshold, name="threshold"))
        object.__setattr__(self, "fly_entropy_threshold",
                           validate_fly_entropy_threshold(self.fly_entropy_threshold, name="fly_entropy_threshold"))
        validate_fly_entropy_top_k(self.fly_entropy_top_k, name="fly_entropy_top_k")
        validate_fly_window_size(self.fly_window_size, name="fly_window_size")

    @property
    def traits(self) -> RuleTraits:
        return RULES[self.rule]

    @property
    def rule_gate(self) -> float:
        """The rule's gate: g (asd, local), the margin or the threshold (the device row's ``gate``)."""
        return getattr(self, self.traits.gate_field)

    @property
    def allows_exceptions(self) -> bool:
        """False when the rule is strict whatever the budget (its gate 0, or cap 0 where capped;
        fly never: its threshold 0 is its loosest setting)."""
        if self.traits.deferred:
            return True
        return self.rule_gate > 0 and (self.max_exceptions_per_block > 0 or not self.traits.capped)

    @property
    def device_columns(self) -> tuple:
        """The row's (gate, cap, power) columns on the device ledger (``ledger_table``): the rule's
        gate and cap; fly: (entropy threshold, window, top-k)."""
        if self.traits.deferred:
            return self.fly_entropy_threshold, self.fly_window_size, float(self.fly_entropy_top_k)
        return self.rule_gate, self.max_exceptions_per_block, 0.0

    def parameters(self) -> dict:
        """The rule's parameters by field name (receipts)."""
        return {name: getattr(self, name) for name in self.traits.parameters}

    def tightened(self, gate: Any = None, max_exceptions_per_block: Any = None, rule: Any = None,
                  margin: Any = None, threshold: Any = None, fly_entropy_threshold: Any = None,
                  fly_entropy_top_k: Any = None, fly_window_size: Any = None,
                  allowed_rules: Iterable[str] = RULE_NAMES) -> "ASDConfig":
        """This config with a request's overrides: a rule among ``allowed_rules``, and each
        parameter validated to be no looser than ours (None keeps ours).

        "A request may only tighten": every parameter is bounded by the server's value of the same
        parameter (gate <= g, cap <= m, margin <= the server's margin, threshold <= the server's
        threshold; fly: entropy threshold >= the server's, top-k <= the server's, window >= the
        server's where it sets one; the budget by the server's maximum, checked by the caller). The rules are not
        ordered by looseness (threshold T admits more than margin T; local at B admits more than
        asd at B over a request), so the rule itself is a choice among the rules the server allows,
        not a tightening. A parameter the chosen rule does not read is refused, so that a request
        never believes it set something that has no effect.
        """
        chosen = self.rule if rule is None else validate_rule(rule, allowed_rules)
        given = {"gate": gate, "max_exceptions_per_block": max_exceptions_per_block, "margin": margin,
                 "threshold": threshold, "fly_entropy_threshold": fly_entropy_threshold,
                 "fly_entropy_top_k": fly_entropy_top_k, "fly_window_size": fly_window_size}
        for name, value in given.items():
            if value is not None and name not in RULES[chosen].parameters:
                raise ValueError(f"asd_{name} does not apply to asd_rule={chosen} (its parameters: "
                                 f"{', '.join('asd_' + p for p in RULES[chosen].parameters)})")
        return ASDConfig(
            gate=self.gate if gate is None else validate_gate(gate, self.gate),
            max_exceptions_per_block=(
                self.max_exceptions_per_block if max_exceptions_per_block is None
                else validate_cap(max_exceptions_per_block, self.max_exceptions_per_block)
            ),
            rule=chosen,
            margin=self.margin if margin is None else validate_margin(margin, self.margin),
            threshold=self.threshold if threshold is None else validate_threshold(threshold, self.threshold),
            fly_entropy_threshold=(self.fly_entropy_threshold if fly_entropy_threshold is None
                                   else validate_fly_entropy_threshold(fly_entropy_threshold, self.fly_entropy_threshold)),
            fly_entropy_top_k=(self.fly_entropy_top_k if fly_entropy_top_k is None
                               else validate_fly_entropy_top_k(fly_entropy_top_k, self.fly_entropy_top_k)),
            fly_window_size=(self.fly_window_size if fly_window_size is None
                             else validate_fly_window_size(fly_window_size, self.fly_window_size)),
        )
