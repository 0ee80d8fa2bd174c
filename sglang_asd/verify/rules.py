"""The acceptance rules as data on the device: each row's rule id -> its traits, no branch per rule.

A rule's id is its index in ``sglang_asd.policy.RULE_NAMES`` (asd 0, local 1, margin 2,
threshold 3, fly 4, fly-bounded 5); its traits are ``policy.config.RuleTraits``, the single
definition. The verifier reads the traits, never a rule's name, so the rules are one code path:

- ``per_suffix_value``: the gate divides regret by q_i = K - i (asd, local), else by 1 (margin,
  threshold: the row's ``gate`` column holds the margin or the threshold);
- ``runner_up_only``: only the target's runner-up may be an exception (margin);
- ``capped``: at most ``cap`` exceptions per block (asd, local);
- ``block_limited``: the block's regret must be <= the row's ``remaining`` (asd and fly-bounded:
  B - spent, local: B, which nothing decrements);
- ``deferred``: FLy (fly, fly-bounded; ``policy/fly.py``): the row's ``gate`` column is the
  entropy threshold (0 is not strict), ``cap`` the window (0: min(6, K - 1)), ``power`` the
  entropy's top-k; a mismatch needs the parent's entropy >= the threshold and a window of exact
  tokens after it on its path;
- ``ledger``: the seam charges the row's ``remaining`` with the round's ``spent`` (asd,
  fly-bounded);
- ``sampled``: the row is a sampled request's (``asd-sampled``, id ``SAMPLED_RULE_ID``, after the
  greedy rules): only ``asd_sampled_verify`` in SGLang's sampling branch decides it, never the
  greedy verifier (``rows_on`` is False for it), and its columns mean remaining = B - spent in nats
  of KL, gate = the floor tau, cap = relaxed nodes per block, plus the ledger table's ``power``.

asd and local verify identically given their rows (they differ only in ``ledger``), which is why
the fused Triton kernel, written for asd, also serves local rows (``ASD_KERNEL_RULES``).
No host sync: a gather from a small table cached per device.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import torch

from sglang_asd.policy.config import RULE_NAMES, RULES
from sglang_asd.policy.sampled import SAMPLED_RULE

SAMPLED_RULE_ID = len(RULE_NAMES)  # the sampled rule's row id, after the greedy rules
ROW_RULE_NAMES = RULE_NAMES + (SAMPLED_RULE,)  # a row's rule id -> its name
RULE_ID = {name: i for i, name in enumerate(ROW_RULE_NAMES)}
_COLUMNS = ("per_suffix_value", "runner_up_only", "capped", "block_limited", "deferred", "ledger", "sampled")
# The sampled rule's traits for the greedy columns: capped, block-limited, with a ledger.
_SAMPLED_ROW = (False, False, True, True, False, True, True)
_VERIFY_TRAITS = _COLUMNS[:5]
ASD_KERNEL_RULES = frozenset(
    name for name, t in RULES.items()
    if all(getattr(t, c) == getattr(RULES["asd"], c) for c in _VERIFY_TRAITS)
)  # the rules whose rows the asd kernel decides exactly: asd and local


class RowTraits(NamedTuple):
    """Each row's rule traits, [bs] bool each."""

    per_suffix_value: torch.Tensor
    runner_up_only: torch.Tensor
    capped: torch.Tensor
    block_limited: torch.Tensor
    deferred: torch.Tensor
    ledger: torch.Tensor
    sampled: torch.Tensor


@functools.lru_cache(maxsize=8)
def _table(device: torch.device) -> torch.Tensor:
    """[len(ROW_RULE_NAMES), 7] bool: the traits of every rule, on ``device`` (copied once)."""
    rows = [[getattr(RULES[name], c) for c in _COLUMNS[:-1]] + [False] for name in RULE_NAMES]
    rows.append(list(_SAMPLED_ROW))
    return torch.tensor(rows, dtype=torch.bool, device=device)


def row_traits(
    rule: Optional[torch.Tensor],  # [bs] int rule id per row; None: every row asd
    bs: int,
    device: torch.device,
) -> RowTraits:
    """Each row's traits (a gather: no sync)."""
    table = _table(torch.device(device))
    if rule is None:
        rows = table[RULE_ID["asd"]].expand(bs, len(_COLUMNS))
    else:
        rows = table[rule.long()]
    return RowTraits(*rows.unbind(dim=1))


def rows_on(
    remaining: torch.Tensor,  # [bs] float32
    gate: torch.Tensor,  # [bs] float32
    cap: torch.Tensor,  # [bs] int32
    rule: Optional[torch.Tensor] = None,  # [bs] int rule id; None: every row asd
) -> torch.Tensor:
    """[bs] bool: the greedy verifier's rows: a greedy rule that may admit exceptions: B > 0
    (remaining, for asd and fly-bounded: B - spent), the rule's gate > 0 (fly: any threshold) and,
    for a capped rule, cap > 0. Every other greedy row is strict greedy; a sampled row is never
    one of these."""
    traits = row_traits(rule, remaining.shape[0], remaining.device)
    return (remaining > 0) & ((gate > 0) | traits.deferred) & ((cap > 0) | ~traits.capped) & ~traits.sampled


def sampled_rows_on(
    remaining: torch.Tensor,  # [bs] float32 nats of KL left
    floor: torch.Tensor,  # [bs] float32 (the table's gate column)
    cap: torch.Tensor,  # [bs] int32 relaxed nodes per block
    rule: torch.Tensor,  # [bs] int rule id
) -> torch.Tensor:
    """[bs] bool: the sampled verifier's rows (``asd_sampled_verify``): sampled rule, remaining,
    floor and cap > 0. Every other row keeps SGLang's sampling walk."""
    sampled = row_traits(rule, remaining.shape[0], remaining.device).sampled
    return sampled & (remaining > 0) & (floor > 0) & (cap > 0)


def deferred_present(rules_present) -> bool:
    """True when some row may use a deferred rule (fly): the verifier's entropy pass and window
    totals run only then (host-known: no sync). None: any rule may be present."""
    return rules_present is None or any(RULES[r].deferred for r in rules_present if r in RULES)


def needs_torch_path(rules_present) -> bool:
    """True when some row may use a rule the asd kernel does not decide (host-known: no sync)."""
    return rules_present is not None and not set(rules_present) <= ASD_KERNEL_RULES
