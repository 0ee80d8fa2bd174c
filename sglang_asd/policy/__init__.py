"""The ASD rule in pure Python (standard library only; no torch, no sglang).

    from sglang_asd.policy import ASDConfig, Ledger, select_chain, select_tree

This is the reference every batched or fused implementation is tested against.
"""

from sglang_asd.policy.config import (
    RULE_VERSION,
    ASDConfig,
    validate_budget,
    validate_cap,
    validate_gate,
)
from sglang_asd.policy.ledger import ExceptionEvent, Ledger
from sglang_asd.policy.rule import ChainDecision, admits_exception, select_chain
from sglang_asd.policy.tree import TreeDecision, select_tree

__all__ = [
    "RULE_VERSION",
    "ASDConfig",
    "ChainDecision",
    "ExceptionEvent",
    "Ledger",
    "TreeDecision",
    "admits_exception",
    "select_chain",
    "select_tree",
    "validate_budget",
    "validate_cap",
    "validate_gate",
]
