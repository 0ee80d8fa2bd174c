"""Measured arms: what a benchmark compares, each a label and the request fields it sends.

An arm is ``label`` + ``fields`` (ASD request fields, sent in ``sampling_params.custom_params`` on
/generate and top level on the OpenAI routes), e.g. ``b8g0.5 = {asd_budget: 8, asd_gate: 0.5}``. Two kinds
of arm are special:

- ``strict`` = ``{asd_budget: 0}``, the reference every other arm is paired against (always
  measured, always first);
- ``plain`` = a second server without speculative decoding (``--plain-url`` / ``--plain-launch``
  in the speed benchmark); it sends no ASD fields.

Syntax of ``--arms`` (``ARM;ARM;...``, ``ARM`` = ``LABEL:FIELD=VALUE,FIELD=VALUE``)::

    --arms 'b8:asd_budget=8;b8g05:asd_budget=8,asd_gate=0.5;margin1:asd_rule=margin,asd_margin=1'
    --arms 'pt02:asd_budget_per_token=0.02;pt02b1:asd_budget_per_token=0.02,asd_budget_burst=1'

Fields must be named ``asd_*`` (a benchmark owns temperature and lengths); a value is a number
when it reads as one (an integer stays an integer: ``asd_max_exceptions_per_block=1``), else a
string (``asd_rule=margin``). ``--budgets 0,2,8`` is shorthand for
the arms ``strict``, ``b2``, ``b8``. The server validates the values; a bad one comes back as a
400 naming the field, which the benchmark reports.

Scope fields (docs/CONTRACTS.md, "Scopes"): ``asd_strict_prefix=16`` and ``asd_scope=reasoning`` as
any field; ``asd_strict_spans`` is a list: its value is spans joined by ``+``, each a preset name
or ``OPEN|CLOSE`` (``asd_strict_spans=tool_call+<answer>|</answer>`` sends
``["tool_call", ["<answer>", "</answer>"]]``)::

    --arms 'b8p16:asd_budget=8,asd_strict_prefix=16;b8tool:asd_budget=8,asd_strict_spans=tool_call'

``--rules`` is shorthand for arms of the acceptance rules (docs/CONTRACTS.md), each swept over
its own knob: ``RULE=V1|V2,...`` (``rule_arms``)::

    --rules 'asd=2|8|32,local=0.5|2,margin=0.5|2,threshold=0.25|1'   # asd2 asd8 ... threshold1
    --rules asd,local,margin,threshold                               # the server's parameters
    --rules 'fly=0.3|0.6|1,fly-bounded=2|8'                          # fly0.3 ... fly-bounded8

The knob of asd, local and fly-bounded is ``asd_budget`` (local: a per-block limit); of margin
``asd_margin``, of threshold ``asd_threshold`` and of fly ``asd_fly_entropy_threshold``, which
then send ``asd_budget=8`` as their opt-in (no ledger limits them). A bare rule sends
``asd_budget=8`` and the server's parameters. Any other setting goes through ``--arms``, e.g.
``fly6:asd_budget=8,asd_rule=fly,asd_fly_window_size=6,asd_fly_entropy_threshold=0.3``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Iterable, Mapping, Optional, Union

from sglang_asd.bench.client import parse_budgets

STRICT = "strict"
PLAIN = "plain"
BUDGET_FIELD = "asd_budget"
SPANS_FIELD = "asd_strict_spans"
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}$")
_FIELD = re.compile(r"^asd_[a-z0-9_]+$")
_INT = re.compile(r"^[+-]?[0-9]+$")

Value = Union[int, float, str, list]


@dataclasses.dataclass(frozen=True)
class Arm:
    """One measured configuration: a label and the ASD request fields every request of it sends."""

    label: str
    fields: Mapping[str, Value]
    server: str = "speculative"   # "speculative" (the server under test) or "plain" (the second server)

    def __post_init__(self) -> None:
        if not _LABEL.match(self.label):
            raise ValueError(f"arm label must be 1-40 characters of letters, digits, '_', '.', '+', '-' "
                             f"starting with a letter or digit, got {self.label!r}")
        if self.server not in ("speculative", "plain"):
            raise ValueError(f"arm server must be 'speculative' or 'plain', got {self.server!r}")
        object.__setattr__(self, "fields", dict(self.fields))

    @property
    def budget(self) -> Optional[float]:
        """The arm's ``asd_budget`` (None when it sends none, e.g. plain)."""
        value = self.fields.get(BUDGET_FIELD)
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def is_strict(self) -> bool:
        return self.server == "speculative" and dict(self.fields) == {BUDGET_FIELD: 0.0}

    def to_dict(self) -> dict:
        return {"label": self.label, "fields": dict(self.fields), "server": self.server}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Arm":
        return cls(d["label"], d["fields"], d.get("server", "speculative"))


STRICT_ARM = Arm(STRICT, {BUDGET_FIELD: 0.0})
PLAIN_ARM = Arm(PLAIN, {}, server="plain")


def budget_label(budget: float) -> str:
    """``0`` -> ``strict``, ``8`` -> ``b8``, ``0.5`` -> ``b0.5``."""
    return STRICT if budget == 0 else f"b{budget:g}"


def _value(label: str, field: str, text: str) -> Value:
    text = text.strip()
    if not text:
        raise ValueError(f"arm {label}: field {field} has no value")
    if _INT.match(text):  # counts (asd_max_exceptions_per_block) must arrive as JSON integers
        return int(text)
    try:
        number = float(text)
    except ValueError:
        return text
    if not math.isfinite(number):
        raise ValueError(f"arm {label}: field {field} must be a finite number or a word, got {text!r}")
    return number


def _spans(label: str, text: str) -> list:
    """``asd_strict_spans``' value: ``SPAN+SPAN``, a span a preset name or ``OPEN|CLOSE``."""
    spans = []
    for part in text.strip().split("+"):
        open_, bar, close = part.partition("|")
        if not part or (bar and not (open_ and close)):
            raise ValueError(f"arm {label}: {SPANS_FIELD} is SPAN+SPAN..., each a preset name or OPEN|CLOSE, "
                             f"got {text.strip()!r}")
        spans.append([open_, close] if bar else part)
    return spans


def parse_arm(spec: str) -> Arm:
    """``"b8g05:asd_budget=8,asd_gate=0.5"`` -> ``Arm("b8g05", {...})``."""
    label, sep, body = spec.partition(":")
    label = label.strip()
    if not sep or not body.strip():
        raise ValueError(f"an arm is LABEL:FIELD=VALUE[,FIELD=VALUE...], got {spec.strip()!r}")
    fields: dict[str, Value] = {}
    for part in body.split(","):
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq:
            raise ValueError(f"arm {label}: a field is FIELD=VALUE, got {part.strip()!r}")
        if not _FIELD.match(name):
            raise ValueError(f"arm {label}: field names must be asd_* in lower case, got {name!r}")
        if name in fields:
            raise ValueError(f"arm {label}: field {name} given twice")
        fields[name] = _spans(label, value) if name == SPANS_FIELD else _value(label, name, value)
    if label in (PLAIN,):
        raise ValueError(f"arm label {PLAIN!r} is reserved for the server without speculative decoding")
    return Arm(label, fields)


def parse_arms(spec: str) -> list[Arm]:
    """``"LABEL:F=V,...;LABEL:F=V"`` -> arms, in order (empty parts are skipped)."""
    arms = [parse_arm(part) for part in spec.split(";") if part.strip()]
    if not arms:
        raise ValueError(f"--arms must list at least one LABEL:FIELD=VALUE, got {spec!r}")
    return arms


RULE_KNOBS = {"asd": BUDGET_FIELD, "local": BUDGET_FIELD, "margin": "asd_margin", "threshold": "asd_threshold",
              "fly": "asd_fly_entropy_threshold", "fly-bounded": BUDGET_FIELD}
RULE_OPT_IN_BUDGET = 8.0  # the asd_budget of rule arms whose knob is not the budget


def rule_arms(spec: str) -> list[Arm]:
    """``"asd=2|8,margin=0.5"`` -> arms asd2, asd8, margin0.5 (see the module docstring)."""
    out = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        rule, eq, values = part.partition("=")
        rule = rule.strip()
        if rule not in RULE_KNOBS:
            raise ValueError(f"--rules: a rule is one of {', '.join(RULE_KNOBS)}, got {rule!r}")
        if not eq:
            out.append(Arm(rule, {"asd_rule": rule, BUDGET_FIELD: RULE_OPT_IN_BUDGET}))
            continue
        for text in values.split("|"):
            value = _value(rule, RULE_KNOBS[rule], text)
            if isinstance(value, str) or value < 0:
                raise ValueError(f"--rules: {rule} takes numbers >= 0 ({RULE_KNOBS[rule]}), got {text.strip()!r}")
            fields = {"asd_rule": rule, BUDGET_FIELD: RULE_OPT_IN_BUDGET, RULE_KNOBS[rule]: float(value)}
            out.append(Arm(f"{rule}{float(value):g}", fields))
    if not out:
        raise ValueError(f"--rules must name at least one rule, got {spec!r}")
    return out


def resolve_arms(budgets: Optional[str], arms: Optional[str], default_budgets: str,
                 rules: Optional[str] = None) -> list[Arm]:
    """The measured arms of a run: ``strict`` first, then ``--budgets`` shorthand arms, then
    ``--rules`` arms, then ``--arms`` arms (``default_budgets`` when none is given). Labels must
    be unique and two labels may not name the same fields."""
    out = [STRICT_ARM]
    if budgets is None and arms is None and rules is None:
        budgets = default_budgets
    if budgets is not None:
        out += [Arm(budget_label(b), {BUDGET_FIELD: b}) for b in parse_budgets(budgets) if b != 0]
    if rules is not None:
        out += rule_arms(rules)
    if arms is not None:
        out += [a for a in parse_arms(arms) if not (a.is_strict and a.label == STRICT)]
    check_unique(out)
    return out


def check_unique(arms: Iterable[Arm]) -> None:
    labels: dict[str, Arm] = {}
    for arm in arms:
        if arm.label in labels:
            raise ValueError(f"arm label {arm.label!r} is used twice ({dict(labels[arm.label].fields)} and "
                             f"{dict(arm.fields)})")
        same = next((a for a in labels.values() if a.fields == arm.fields and a.server == arm.server), None)
        if same is not None:
            raise ValueError(f"arms {same.label!r} and {arm.label!r} send the same fields {dict(arm.fields)}")
        labels[arm.label] = arm


def describe(arm: Arm) -> str:
    """``asd_budget=8, asd_gate=0.5`` (or ``no speculative decoding`` for plain)."""
    if arm.server == "plain":
        return "no speculative decoding"
    return ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in arm.fields.items())
