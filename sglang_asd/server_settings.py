"""Server-wide ASD settings: the ``--asd-*`` flags and their YAML keys, in one frozen dataclass.

Standard library only. The flags are parsed by ``sglang_asd.launch_server`` before SGLang sees the
rest of the command line, and also accepted as keys of SGLang's ``--config file.yaml``
(``asd-default-budget: 8`` or ``asd_default_budget: 8``). The rule and its parameters are the
policy's ``ASDConfig`` (its defaults and validators are defined there, once).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any, Mapping, Optional

from sglang_asd.policy.config import (
    DEFAULT_FLY_ENTROPY_THRESHOLD,
    DEFAULT_FLY_ENTROPY_TOP_K,
    DEFAULT_GATE,
    DEFAULT_MARGIN,
    DEFAULT_MAX_EXCEPTIONS_PER_BLOCK,
    DEFAULT_RULE,
    DEFAULT_THRESHOLD,
    MAX_FLY_ENTROPY_TOP_K,
    RULE_NAMES,
    ASDConfig,
    check_count,
    check_number,
    validate_budget_burst,
    validate_budget_per_token,
    validate_rules,
)
from sglang_asd.policy.scope import SCOPES, SPAN_PRESETS, Scope
from sglang_asd.policy.sampled import (
    DEFAULT_SAMPLED_FLOOR,
    DEFAULT_SAMPLED_MAX_RELAXED,
    DEFAULT_SAMPLED_POWER,
    SampledConfig,
)

DEFAULT_BUDGET = 0.0  # a request that sends no asd_budget is served strictly
DEFAULT_MAX_BUDGET = 64.0
DEFAULT_MAX_BUDGET_PER_TOKEN = 1.0  # nats per output token: far above any useful rate, below nonsense
DEFAULT_MAX_RECEIPT_EVENTS = 64


@dataclasses.dataclass(frozen=True)
class ASDServerSettings:
    """What the server allows and what a request gets when it says nothing.

    default_budget: regret budget (nats) of a request that sends no ``asd_budget``; 0 = strict.
    max_budget: the largest ``asd_budget`` a request may ask for, and the largest burst; also the
        total of a request under a per-token rate that sends no ``asd_budget`` while
        ``default_budget`` is 0 (docs/CONTRACTS.md "Budgets that accrue with output").
    budget_per_token: the accrual rate (nats per output token) of a request that sends no
        ``asd_budget_per_token``; None: no accrual bound unless a request asks for one.
    max_budget_per_token: the largest ``asd_budget_per_token`` a request may ask for.
    budget_burst: the burst (nats) of a request under a rate that sends no ``asd_budget_burst``.
    config: the server's rule (a request's default) and every rule's parameters (gate g, cap m,
        margin, threshold, fly's entropy threshold, top-k and window); a request may only tighten
        each parameter (lower a gate, cap, margin, threshold or fly top-k; raise fly's entropy
        threshold or window).
    allowed_rules: the rules a request may choose (``asd_rule``); the server's rule is one of them.
    sampled: the sampled rule's parameters (``asd-sampled-1``, for sampled requests: floor, power,
        cap); a request may raise the floor or the power and lower the cap, never the reverse.
    max_receipt_events: how many exception events a receipt lists (the counts stay exact).
    scope: where a request may spend (``policy.scope``: strict prefix, ``"all"`` or ``"reasoning"``,
        strict spans); a request may only tighten it.
    standalone_draft_fix: serve STANDALONE drafts their own tokens (``sglang_seams/scheduler/standalone_draft.py``);
        off by default, so that without it every draft runs exactly as stock SGLang runs it.
    """

    default_budget: float = DEFAULT_BUDGET
    max_budget: float = DEFAULT_MAX_BUDGET
    budget_per_token: Optional[float] = None
    max_budget_per_token: float = DEFAULT_MAX_BUDGET_PER_TOKEN
    budget_burst: float = 0.0
    config: ASDConfig = ASDConfig()
    allowed_rules: tuple = RULE_NAMES
    sampled: SampledConfig = SampledConfig()
    max_receipt_events: int = DEFAULT_MAX_RECEIPT_EVENTS
    standalone_draft_fix: bool = False
    scope: Scope = Scope()

    def __post_init__(self) -> None:
        check_number("asd_default_budget", self.default_budget)
        check_number("asd_max_budget", self.max_budget)
        check_number("asd_max_budget_per_token", self.max_budget_per_token)
        if self.budget_per_token is not None:
            validate_budget_per_token(self.budget_per_token, self.max_budget_per_token)
        validate_budget_burst(self.budget_burst, self.max_budget)
        check_count("asd_max_receipt_events", self.max_receipt_events)
        if not isinstance(self.config, ASDConfig):
            raise ValueError(f"config must be an ASDConfig, got {self.config!r}")
        if not isinstance(self.sampled, SampledConfig):
            raise ValueError(f"sampled must be a SampledConfig, got {self.sampled!r}")
        if not isinstance(self.scope, Scope):
            raise ValueError(f"scope must be a Scope, got {self.scope!r}")
        object.__setattr__(self, "allowed_rules", validate_rules(self.allowed_rules))
        if self.config.rule not in self.allowed_rules:
            raise ValueError(f"asd_rule must be one of asd_allowed_rules ({', '.join(self.allowed_rules)}), "
                             f"got {self.config.rule!r}")
        if not isinstance(self.standalone_draft_fix, bool):
            raise ValueError(f"asd_standalone_draft_fix must be true or false, got {self.standalone_draft_fix!r}")
        if self.default_budget > self.max_budget:
            raise ValueError(
                f"asd_default_budget must be <= asd_max_budget ({self.max_budget:g}), got {self.default_budget!r}"
            )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> "ASDServerSettings":
        """Strict constructor from flag names (``-`` or ``_``, optional ``asd_`` prefix)."""
        kwargs, config, sampled, scope, unknown = {}, {}, {}, {}, []
        for key, value in mapping.items():
            name = key.replace("-", "_")
            name = name[4:] if name.startswith("asd_") else name
            if name in _SCOPE_FIELDS:
                scope[name] = value
            elif name in _RULE_FIELDS:
                config[name] = value
            elif name in _SAMPLED_FLAGS:
                sampled[_SAMPLED_FLAGS[name]] = value
            elif name in _SETTING_FIELDS:
                kwargs[name] = value
            else:
                unknown.append(key)
        if unknown:
            raise ValueError(f"unknown ASD setting(s) {sorted(unknown)}; known: {sorted(_FLAG_FIELDS)}")
        return cls(**kwargs, config=_rule_config(config), sampled=_sampled_config(sampled), scope=_scope(scope))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _rule_config(values: Mapping[str, Any]) -> ASDConfig:
    """The server's rule config; errors use the flag names (``asd_gate``, not ``gate``)."""
    try:
        return ASDConfig(**values)
    except ValueError as e:
        raise ValueError(f"asd_{e}") from None


def _sampled_config(values: Mapping[str, Any]) -> SampledConfig:
    """The server's sampled-rule config; errors use the flag names (``asd_sampled_floor``)."""
    try:
        return SampledConfig(**values)
    except ValueError as e:
        text = str(e)
        if text.startswith("max_relaxed_per_block"):
            text = "asd_sampled_" + text
        raise ValueError(text) from None


def _scope(values: Mapping[str, Any]) -> Scope:
    """The server's scope; ``strict_spans`` as a list, or as the flag's text: a JSON list, or
    comma-separated preset names. Errors use the flag names (``asd_strict_prefix``)."""
    values = dict(values)
    spans = values.get("strict_spans")
    if isinstance(spans, str):
        text = spans.strip()
        if text.startswith("["):
            try:
                values["strict_spans"] = json.loads(text)
            except ValueError:
                raise ValueError(f"asd_strict_spans must be a JSON list or comma-separated preset names, "
                                 f"got {spans!r}") from None
        else:
            values["strict_spans"] = [p.strip() for p in text.split(",") if p.strip()]
    if values.get("strict_spans") is None:
        values.pop("strict_spans", None)
    try:
        return Scope(**values)
    except (TypeError, ValueError) as e:
        text = str(e)
        raise ValueError(text if text.startswith("asd_") else f"asd_{text}") from None


_SCOPE_FIELDS = tuple(f.name for f in dataclasses.fields(Scope))
_RULE_FIELDS = tuple(f.name for f in dataclasses.fields(ASDConfig))
# flag name (without asd_) -> SampledConfig field
_SAMPLED_FLAGS = {"sampled_" + f.name: f.name for f in dataclasses.fields(SampledConfig)}
_SETTING_FIELDS = tuple(f.name for f in dataclasses.fields(ASDServerSettings)
                        if f.name not in ("config", "sampled", "scope"))
_FLAG_FIELDS = _SETTING_FIELDS + _RULE_FIELDS + tuple(_SAMPLED_FLAGS) + _SCOPE_FIELDS

# (field, type, help); bool fields are store_true flags.
_FLAGS = (
    ("default_budget", float,
     f"Regret budget (nats) for requests that send no asd_budget (default {DEFAULT_BUDGET:g} = strict greedy "
     "unless a request asks)."),
    ("max_budget", float, f"Largest asd_budget (and asd_budget_burst) a request may ask for (default "
                          f"{DEFAULT_MAX_BUDGET:g}); the total of a request under a per-token rate without asd_budget "
                          "when --asd-default-budget is 0."),
    ("budget_per_token", float,
     "Accrual rate (nats per output token) of requests that send no asd_budget_per_token: a request may have "
     "spent at most rate x output tokens so far + burst at every exception (default: none)."),
    ("max_budget_per_token", float,
     f"Largest asd_budget_per_token a request may ask for (default {DEFAULT_MAX_BUDGET_PER_TOKEN:g})."),
    ("budget_burst", float,
     "Burst (nats) of a request under a per-token rate that sends no asd_budget_burst (default 0)."),
    ("gate", float,
     f"Regret gate g: an exception at draft position i needs regret/(K-i) <= g (default {DEFAULT_GATE:g})."),
    ("max_exceptions_per_block", int,
     f"Cap m on exceptions accepted per draft block (default {DEFAULT_MAX_EXCEPTIONS_PER_BLOCK})."),
    ("rule", str,
     f"Acceptance rule of a request that sends no asd_rule: {', '.join(RULE_NAMES)} (default {DEFAULT_RULE}; "
     "docs/CONTRACTS.md)."),
    ("allowed_rules", str,
     f"Comma-separated rules a request may choose with asd_rule (default {','.join(RULE_NAMES)})."),
    ("margin", float,
     f"margin rule: largest top-2 logit margin (nats) at which the target's runner-up is accepted; the most a "
     f"request may ask for (default {DEFAULT_MARGIN:g})."),
    ("threshold", float,
     f"threshold rule: largest regret (nats) of one accepted mismatch; the most a request may ask for "
     f"(default {DEFAULT_THRESHOLD:g})."),
    ("fly_entropy_threshold", float,
     f"fly rules (FLy, as vLLM): smallest top-k target entropy (nats) at which a mismatch may be deferred; a "
     f"request may ask for more (default {DEFAULT_FLY_ENTROPY_THRESHOLD:g})."),
    ("fly_entropy_top_k", int,
     f"fly rules: how many of the target's largest probabilities the entropy sums, in [1, {MAX_FLY_ENTROPY_TOP_K}]; "
     f"a request may ask for fewer (default {DEFAULT_FLY_ENTROPY_TOP_K})."),
    ("fly_window_size", int,
     "fly rules: exact draft tokens that must follow a deferred mismatch; 0 = min(6, K - 1) (default 0). A "
     "request may ask for a longer window than a window set here; under 0, for any."),
    ("sampled_floor", float,
     f"Sampled rule (asd-sampled-1, sampled requests with a budget in nats of KL): the smallest q = p(x) a relaxed "
     f"draft token may have; a request may ask for more (default {DEFAULT_SAMPLED_FLOOR:g})."),
    ("sampled_power", float,
     f"Sampled rule: a relaxed token is accepted with probability q ** power (0: always); a request may ask for "
     f"more (default {DEFAULT_SAMPLED_POWER:g})."),
    ("sampled_max_relaxed_per_block", int,
     f"Sampled rule: most relaxed nodes per draft block; a request may ask for fewer "
     f"(default {DEFAULT_SAMPLED_MAX_RELAXED})."),
    ("strict_prefix", int,
     "Output tokens at the start of every response that are strict (no exception, no relaxed node); a request "
     "may ask for more with asd_strict_prefix, never fewer (default 0)."),
    ("scope", str,
     f"Where requests may spend: {' or '.join(SCOPES)} (only inside the reasoning span of --reasoning-parser); "
     "a request may narrow all to reasoning, never widen it (default all)."),
    ("strict_spans", str,
     f"Spans that are strict for every request: comma-separated presets ({', '.join(SPAN_PRESETS)}) or a JSON "
     "list of presets and [open, close] marker pairs, each marker a single token of the served tokenizer; a "
     "request may add spans (default none)."),
    ("max_receipt_events", int,
     f"How many exception events a receipt lists (default {DEFAULT_MAX_RECEIPT_EVENTS}); counts stay exact."),
    ("standalone_draft_fix", bool,
     "STANDALONE only: give the draft model its own tokens at their own positions (SGLang 0.5.23 feeds it the "
     "EAGLE-shifted input, so a plain-LM draft never sees the first token). Changes SGLang's draft flow "
     "(one extra one-token draft forward per round); off by default. See docs/SEAMS.md."),
)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Approximate speculative decoding (sglang-asd)")
    defaults = ASDServerSettings.from_mapping({})
    for field, typ, help_text in _FLAGS:
        flags = ("--asd-" + field.replace("_", "-"), "--asd_" + field)  # the second: YAML keys with underscores
        if field in _SAMPLED_FLAGS:
            default = getattr(defaults.sampled, _SAMPLED_FLAGS[field])
        elif field in _SCOPE_FIELDS:
            default = None if field == "strict_spans" else getattr(defaults.scope, field)
        else:
            default = getattr(defaults.config if field in _RULE_FIELDS else defaults, field)
        if typ is bool:
            group.add_argument(*flags, action="store_true", default=default, dest=f"asd_{field}", help=help_text)
        else:
            group.add_argument(*flags, type=typ, default=default, dest=f"asd_{field}", help=help_text)


def from_namespace(ns: argparse.Namespace) -> ASDServerSettings:
    return ASDServerSettings.from_mapping({field: getattr(ns, f"asd_{field}") for field, _, _ in _FLAGS})


def split_argv(argv: list[str]) -> tuple[ASDServerSettings, list[str]]:
    """Take the ``--asd-*`` flags out of ``argv``; return the settings and SGLang's arguments."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_cli_args(parser)
    ns, rest = parser.parse_known_args(argv)
    return from_namespace(ns), rest
