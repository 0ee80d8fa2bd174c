"""The ASD configuration and the validators the HTTP layer reuses. Standard library only.

Errors follow one style, naming the field, the allowed range and the value got:
``asd_budget must be a finite number in [0, 64], got -1``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any, Mapping

# Version of the acceptance rule in ``sglang_asd.policy.rule``. Change it whenever a decision
# could change; it is part of every config fingerprint and every receipt.
RULE_VERSION = "asd-1"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fmt(x: float) -> str:
    """64.0 -> '64', 0.25 -> '0.25' (for range bounds in messages)."""
    return f"{x:g}"


def validate_budget(value: Any, max_budget: float) -> float:
    """A request's ``asd_budget``: a finite number in [0, max_budget] (bool and str rejected)."""
    return _bounded_number("asd_budget", value, max_budget)


def validate_gate(value: Any, max_gate: float) -> float:
    """A request's ``asd_gate`` override: a finite number in [0, max_gate]."""
    return _bounded_number("asd_gate", value, max_gate)


def validate_cap(value: Any, max_cap: int) -> int:
    """A request's ``asd_max_exceptions_per_block`` override: an integer in [0, max_cap]."""
    if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= max_cap):
        raise ValueError(f"asd_max_exceptions_per_block must be an integer in [0, {max_cap}], got {value!r}")
    return value


def _bounded_number(name: str, value: Any, upper: float) -> float:
    if not (_is_number(value) and math.isfinite(value) and 0 <= value <= upper):
        raise ValueError(f"{name} must be a finite number in [0, {_fmt(upper)}], got {value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class ASDConfig:
    """Server-side rule parameters (spec section 3).

    gate: g, the largest regret per suffix value (nats) an exception may have; 0 = strict.
    max_exceptions_per_block: m, the cap on exceptions in one verify block; 0 = strict.
    """

    gate: float = 0.25
    max_exceptions_per_block: int = 2

    def __post_init__(self) -> None:
        if not (_is_number(self.gate) and math.isfinite(self.gate) and self.gate >= 0):
            raise ValueError(f"gate must be a finite number >= 0, got {self.gate!r}")
        cap = self.max_exceptions_per_block
        if not (isinstance(cap, int) and not isinstance(cap, bool) and cap >= 0):
            raise ValueError(f"max_exceptions_per_block must be an integer >= 0, got {cap!r}")
        object.__setattr__(self, "gate", float(self.gate))  # 0 and 0.0 give one fingerprint

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> "ASDConfig":
        """Build from a dict (YAML, flags); unknown keys raise, naming them."""
        allowed = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(mapping) - set(allowed))
        if unknown:
            raise ValueError(f"unknown ASD config keys {unknown}; allowed: {allowed}")
        return cls(**dict(mapping))

    @property
    def fingerprint(self) -> str:
        """Short stable hash of the rule version and the parameters."""
        canonical = json.dumps(
            {"rule": RULE_VERSION, **dataclasses.asdict(self)}, sort_keys=True, separators=(",", ":")
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]
