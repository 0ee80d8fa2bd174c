"""The rule's parameters, their defaults and their validators. Standard library only.

One config type for the rule, ``ASDConfig`` (gate g and cap m, spec section 3); the budget B lives
in the request's ``Ledger``. The server settings (``sglang_asd.server_settings``) hold the server's
``ASDConfig`` and a request's choice (``sglang_asd.request_ledger.RequestASD``) holds its own, which
may only tighten the server's. Each default is defined here, once, and each field has one
validator, shared by the pure rule, the server flags and the HTTP layer. Errors name the field,
the allowed range and the value got: ``asd_budget must be a finite number in [0, 64], got -1``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

# Version of the acceptance rule in ``sglang_asd.policy.rule``. Change it whenever a decision
# could change; every receipt names it.
RULE_VERSION = "asd-1"

DEFAULT_GATE = 0.25  # g: nats of regret per suffix value (the reference configuration)
DEFAULT_MAX_EXCEPTIONS_PER_BLOCK = 2  # m


def _fmt(x: float) -> str:
    """64.0 -> '64', 0.25 -> '0.25' (for range bounds in messages)."""
    return f"{x:g}"


def check_number(name: str, value: Any, upper: float = math.inf) -> float:
    """A finite number in [0, upper] (bool, str and None rejected), as float."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not (ok and 0 <= value <= upper):
        bound = ">= 0" if upper == math.inf else f"in [0, {_fmt(upper)}]"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


def check_count(name: str, value: Any, upper: float = math.inf) -> int:
    """An integer in [0, upper] (bool and float rejected)."""
    if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= upper):
        bound = ">= 0" if upper == math.inf else f"in [0, {_fmt(upper)}]"
        raise ValueError(f"{name} must be an integer {bound}, got {value!r}")
    return value


# The per-field validators, named as the request fields (the HTTP layer reuses them).
def validate_budget(value: Any, max_budget: float = math.inf, name: str = "asd_budget") -> float:
    """A budget B: a finite number in [0, max_budget]."""
    return check_number(name, value, max_budget)


def validate_gate(value: Any, max_gate: float = math.inf, name: str = "asd_gate") -> float:
    """A gate g: a finite number in [0, max_gate]."""
    return check_number(name, value, max_gate)


def validate_cap(value: Any, max_cap: float = math.inf, name: str = "asd_max_exceptions_per_block") -> int:
    """A cap m: an integer in [0, max_cap]."""
    return check_count(name, value, max_cap)


@dataclasses.dataclass(frozen=True)
class ASDConfig:
    """The rule's parameters (spec section 3).

    gate: g, the largest regret per suffix value (nats) an exception may have; 0 = strict.
    max_exceptions_per_block: m, the cap on exceptions in one verify block; 0 = strict.
    """

    gate: float = DEFAULT_GATE
    max_exceptions_per_block: int = DEFAULT_MAX_EXCEPTIONS_PER_BLOCK

    def __post_init__(self) -> None:
        object.__setattr__(self, "gate", validate_gate(self.gate, name="gate"))
        validate_cap(self.max_exceptions_per_block, name="max_exceptions_per_block")

    @property
    def allows_exceptions(self) -> bool:
        """False when the rule is strict whatever the budget (g == 0 or m == 0)."""
        return self.gate > 0 and self.max_exceptions_per_block > 0

    def tightened(self, gate: Any = None, max_exceptions_per_block: Any = None) -> "ASDConfig":
        """This config with a request's overrides, each validated to be no looser than ours."""
        return ASDConfig(
            gate=self.gate if gate is None else validate_gate(gate, self.gate),
            max_exceptions_per_block=(
                self.max_exceptions_per_block if max_exceptions_per_block is None
                else validate_cap(max_exceptions_per_block, self.max_exceptions_per_block)
            ),
        )
