"""The acceptance rules in pure Python (standard library only; no torch, no sglang).

    from sglang_asd.policy import ASDConfig, Ledger, select_chain, select_tree

This is the reference every batched or fused implementation is tested against. ``config`` defines
the rules (asd, local, margin, threshold, fly, fly-bounded) and their parameters;
``rule.admits_exception`` decides one mismatched token under the regret rules, and ``fly`` holds
FLy's window rule (``select_chain_fly``, ``select_tree_fly``).
"""

from sglang_asd.policy.config import (
    RULE_NAMES,
    RULE_VERSION,
    RULES,
    ASDConfig,
    RuleTraits,
    validate_budget,
    validate_budget_burst,
    validate_budget_per_token,
    validate_cap,
    validate_gate,
    validate_margin,
    validate_rule,
    validate_rules,
    validate_threshold,
)
from sglang_asd.policy.fly import select_chain_fly, select_tree_fly
from sglang_asd.policy.ledger import Accrual, ExceptionEvent, Ledger
from sglang_asd.policy.rule import ChainDecision, admits_exception, block_limit, select_chain
from sglang_asd.policy.tree import TreeDecision, select_tree, tree_depth

__all__ = [
    "Accrual",
    "RULES",
    "RULE_NAMES",
    "RULE_VERSION",
    "ASDConfig",
    "ChainDecision",
    "ExceptionEvent",
    "Ledger",
    "RuleTraits",
    "TreeDecision",
    "admits_exception",
    "block_limit",
    "select_chain",
    "select_chain_fly",
    "select_tree",
    "select_tree_fly",
    "tree_depth",
    "validate_budget",
    "validate_budget_burst",
    "validate_budget_per_token",
    "validate_cap",
    "validate_gate",
    "validate_margin",
    "validate_rule",
    "validate_rules",
    "validate_threshold",
]
