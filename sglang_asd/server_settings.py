"""Server-wide ASD settings: the ``--asd-*`` flags and their YAML keys, in one frozen dataclass.

Standard library only. The flags are parsed by ``sglang_asd.launch_server`` before SGLang sees the
rest of the command line, and also accepted as keys of SGLang's ``--config file.yaml``
(``asd-default-budget: 8`` or ``asd_default_budget: 8``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any, Mapping


def _finite_nonneg(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _nonneg_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class ASDServerSettings:
    """What the server allows and what a request gets when it says nothing.

    default_budget: regret budget (nats) of a request that sends no ``asd_budget``; 0 = strict.
    max_budget: the largest ``asd_budget`` a request may ask for.
    gate: regret per suffix value g; a request may lower it with ``asd_gate``, never raise it.
    max_exceptions_per_block: cap m; a request may lower it, never raise it.
    max_receipt_events: how many exception events a receipt lists (the counts stay exact).
    """

    default_budget: float = 0.0
    max_budget: float = 64.0
    gate: float = 0.25
    max_exceptions_per_block: int = 2
    max_receipt_events: int = 64

    def __post_init__(self) -> None:
        _finite_nonneg("asd_default_budget", self.default_budget)
        _finite_nonneg("asd_max_budget", self.max_budget)
        _finite_nonneg("asd_gate", self.gate)
        _nonneg_int("asd_max_exceptions_per_block", self.max_exceptions_per_block)
        _nonneg_int("asd_max_receipt_events", self.max_receipt_events)
        if self.default_budget > self.max_budget:
            raise ValueError(
                f"asd_default_budget must be <= asd_max_budget ({self.max_budget}), got {self.default_budget}"
            )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> "ASDServerSettings":
        """Strict constructor: keys are field names (``-`` or ``_``, optional ``asd_`` prefix)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs, unknown = {}, []
        for key, value in mapping.items():
            name = key.replace("-", "_")
            name = name[4:] if name.startswith("asd_") else name
            (kwargs.__setitem__(name, value) if name in fields else unknown.append(key))
        if unknown:
            raise ValueError(f"unknown ASD setting(s) {sorted(unknown)}; known: {sorted(fields)}")
        return cls(**kwargs)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_FLAGS = (
    ("--asd-default-budget", float, "default_budget",
     "Regret budget (nats) for requests that send no asd_budget. 0 (default) = strict greedy unless a request asks."),
    ("--asd-max-budget", float, "max_budget", "Largest asd_budget a request may ask for (default 64)."),
    ("--asd-gate", float, "gate", "Regret gate g: an exception at draft position i needs regret/(K-i) <= g (default 0.25)."),
    ("--asd-max-exceptions-per-block", int, "max_exceptions_per_block",
     "Cap m on exceptions accepted per draft block (default 2)."),
    ("--asd-max-receipt-events", int, "max_receipt_events",
     "How many exception events a receipt lists (default 64); counts stay exact."),
)


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("Approximate speculative decoding (sglang-asd)")
    defaults = ASDServerSettings()
    for flag, typ, field, help_text in _FLAGS:
        underscore = "--" + flag[2:].replace("-", "_")  # the spelling YAML keys with underscores produce
        group.add_argument(flag, underscore, type=typ, default=getattr(defaults, field), dest=f"asd_{field}",
                           help=help_text)


def from_namespace(ns: argparse.Namespace) -> ASDServerSettings:
    return ASDServerSettings(**{field: getattr(ns, f"asd_{field}") for _, _, field, _ in _FLAGS})


def split_argv(argv: list[str]) -> tuple[ASDServerSettings, list[str]]:
    """Take the ``--asd-*`` flags out of ``argv``; return the settings and SGLang's arguments."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_cli_args(parser)
    ns, rest = parser.parse_known_args(argv)
    return from_namespace(ns), rest
