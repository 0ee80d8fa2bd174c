"""Worked examples at the reference configuration B=8, g=0.25, m=2, checked by hand.

Chain blocks have K draft tokens; position i has suffix value q = K - i. A mismatch is an
exception iff r/q <= g, exceptions in the block <= m, and block regret <= B - spent.
Regrets are dyadic, so every comparison below is exact in floating point.
"""

from __future__ import annotations

import math

import pytest

from sglang_asd.policy import ASDConfig, ExceptionEvent, Ledger, select_chain, select_tree

REF = ASDConfig(gate=0.25, max_exceptions_per_block=2)


def test_suffix_reuse_with_an_early_and_a_late_exception():
    # K = 4. i=0: 10 == 10 exact, free.
    #        i=1: 11 != 21, r=0.625, q=3: 0.625/3 = 0.208 <= 0.25; 1 exception <= 2; 0.625 <= 8 -> exception.
    #        i=2: 12 == 12 exact: the target's own choice after the realized prefix (suffix reuse).
    #        i=3: 13 != 23, r=0.25, q=1: 0.25/1 = 0.25 <= 0.25; 2 <= 2; 0.625 + 0.25 = 0.875 <= 8 -> exception.
    # All four accepted; bonus = argmax z_4 = 30; spent 0.875, remaining 7.125.
    ledger = Ledger(budget=8.0)
    decision = select_chain([10, 11, 12, 13], [10, 21, 12, 23, 30], [0.0, 0.625, 0.0, 0.25], ledger, REF)
    assert decision.accepted == (10, 11, 12, 13)
    assert decision.exceptions == (1, 3)
    assert (decision.spent, decision.bonus) == (0.875, 30)
    assert (ledger.spent, ledger.remaining) == (0.875, 7.125)
    assert ledger.events == (ExceptionEvent(1, 11, 21, 0.625), ExceptionEvent(3, 13, 23, 0.25))
    # Strict greedy on the same block: (10,), then bonus 21.
    strict = select_chain([10, 11, 12, 13], [10, 21, 12, 23, 30], [0.0, 0.625, 0.0, 0.25], Ledger(budget=0.0), REF)
    assert (strict.accepted, strict.bonus) == ((10,), 21)


def test_the_same_regret_passes_early_and_fails_late():
    # K = 4, r = 0.75 twice. i=1: q=3, 0.75/3 = 0.25 <= 0.25 -> exception.
    # i=3: q=1, 0.75/1 = 0.75 > 0.25 -> rejected: stop at j=3, bonus = argmax z_3 = 8.
    decision = select_chain([1, 2, 3, 4], [1, 9, 3, 8, 5], [0.0, 0.75, 0.0, 0.75], Ledger(8.0), REF)
    assert (decision.accepted, decision.exceptions, decision.spent, decision.bonus) == ((1, 2, 3), (1,), 0.75, 8)


def test_block_cap_stops_the_third_exception():
    # K = 4, r = 0.125 everywhere: r/q = 0.031, 0.042, 0.0625, 0.125, all <= 0.25.
    # i=0: 1 exception <= 2; i=1: 2 <= 2; i=2: 3 > 2 -> rejected, bonus = argmax z_2 = 7.
    decision = select_chain([1, 2, 3, 4], [5, 6, 7, 8, 9], [0.125] * 4, Ledger(8.0), REF)
    assert (decision.accepted, decision.exceptions, decision.spent, decision.bonus) == ((1, 2), (0, 1), 0.25, 7)


def test_ledger_stops_an_exception_the_budget_cannot_pay():
    # spent 7.5 of 8 -> remaining 0.5. K = 3.
    # i=0: r=0.25, q=3: 0.083 <= 0.25; 0.25 <= 0.5 -> exception.
    # i=1: r=0.375, q=2: 0.1875 <= 0.25; 2 <= 2; 0.25 + 0.375 = 0.625 > 0.5 -> rejected; bonus = 5.
    ledger = Ledger(budget=8.0, spent=7.5)
    decision = select_chain([1, 2, 3], [4, 5, 6, 7], [0.25, 0.375, 0.0], ledger, REF)
    assert (decision.accepted, decision.exceptions, decision.spent, decision.bonus) == ((1,), (0,), 0.25, 5)
    assert (ledger.spent, ledger.remaining) == (7.75, 0.25)


@pytest.mark.parametrize(
    "ledger,config",
    [(Ledger(0.0), REF), (Ledger(8.0), ASDConfig(gate=0.0)), (Ledger(8.0), ASDConfig(max_exceptions_per_block=0))],
    ids=["budget0", "gate0", "cap0"],
)
def test_strict_identity_rejects_even_a_regret_zero_tie(ledger, config):
    # Token 1 ties the argmax 2 (r = 0) but is not the argmax: strict greedy rejects it.
    decision = select_chain([1, 2], [2, 2, 3], [0.0, 0.0], ledger, config)
    assert (decision.accepted, decision.bonus, decision.spent) == ((), 2, 0.0)
    assert ledger.num_exceptions == 0


def test_stop_and_masked_tokens_are_never_exceptions():
    # A mismatched stop token with regret 0 is rejected; an exact stop token is accepted free.
    assert select_chain([1], [3, 4], [0.0], Ledger(8.0), REF, stop_tokens={1}).accepted == ()
    assert select_chain([3], [3, 5], [0.0], Ledger(8.0), REF, stop_tokens={3}).accepted == (3,)
    # A grammar-masked token (regret inf), or an undefined regret (NaN), is rejected whatever the budget.
    for regret in (math.inf, math.nan):
        huge = ASDConfig(gate=1e300, max_exceptions_per_block=99)
        assert select_chain([1], [3, 4], [regret], Ledger(1e300), huge).accepted == ()


def test_tree_takes_the_deepest_accepted_path():
    # K = 2.      root 0 (argmax 6)
    #            /                  \
    #   node 1: token 5 (argmax 7)    node 2: token 6 (argmax 9)
    #        |                             |
    #   node 3: token 7 (argmax 1)    node 4: token 8 (argmax 2)
    # node 1: 5 != 6, i=0, q=2, r=0.5: 0.25 <= 0.25 -> exception (path regret 0.5).
    # node 2: exact. node 3: exact (7 == argmax at node 1). node 4: 8 != 9, i=1, q=1, r=0.5 > 0.25.
    # Deepest accepted node: 3 (depth 2) -> path (1, 3), bonus = argmax at node 3 = 1.
    tokens, parents, argmax = [0, 5, 6, 7, 8], [-1, 0, 0, 1, 2], [6, 7, 9, 1, 2]
    regret = [0.0, 0.5, 0.0, 0.0, 0.5]
    ledger = Ledger(8.0)
    decision = select_tree(tokens, parents, argmax, regret, 2, ledger, REF)
    assert (decision.path, decision.accepted, decision.exceptions) == ((1, 3), (5, 7), (0,))
    assert (decision.spent, decision.bonus, ledger.spent) == (0.5, 1, 0.5)
    # Strict: follow the child equal to the argmax: node 2, then nothing -> bonus 9.
    strict = select_tree(tokens, parents, argmax, regret, 2, Ledger(0.0), REF)
    assert (strict.path, strict.bonus) == ((2,), 9)


def test_tree_ties_go_to_smaller_regret_then_smaller_node_index():
    # K = 2. Root argmax 4: nodes 1 (token 5) and 2 (token 6) are both mismatches, q = 2:
    # r1 = 0.375 -> 0.1875 <= 0.25, r2 = 0.25 -> 0.125 <= 0.25. Nodes 3, 4 are exact children.
    # Two depth-2 paths: (1, 3) costs 0.375, (2, 4) costs 0.25 -> (2, 4).
    tokens, parents, argmax = [0, 5, 6, 7, 8], [-1, 0, 0, 1, 2], [4, 7, 8, 1, 2]
    decision = select_tree(tokens, parents, argmax, [0.0, 0.375, 0.25, 0.0, 0.0], 2, Ledger(8.0), REF)
    assert (decision.path, decision.spent, decision.bonus) == ((2, 4), 0.25, 2)
    # Equal regret (0.25 each): the smaller node index wins -> (1, 3).
    decision = select_tree(tokens, parents, argmax, [0.0, 0.25, 0.25, 0.0, 0.0], 2, Ledger(8.0), REF)
    assert (decision.path, decision.spent, decision.bonus) == ((1, 3), 0.25, 1)


def test_duplicate_siblings_follow_sglang_first_match():
    # Nodes 1 and 2 both carry token 6 == root argmax. SGLang's walk takes node 1 (first in
    # sibling order) and never looks at node 2, so node 2's exact child 3 is not reachable.
    # Same result with and without a budget: the duplicate is ignored.
    tokens, parents, argmax = [0, 6, 6, 9], [-1, 0, 0, 2], [6, 1, 9, 3]
    for budget in (0.0, 8.0):
        decision = select_tree(tokens, parents, argmax, [0.0, 0.0, 0.0, 0.0], 2, Ledger(budget), REF)
        assert (decision.path, decision.bonus) == ((1,), 1)


def test_depth_zero_commits_the_bonus_alone():
    # SGLang's adaptive zero-step verify: K = 0, the tree is the root alone (W = 1). Nothing to
    # accept, whatever the budget: the bonus is argmax z_0 and the ledger is not charged.
    huge = ASDConfig(gate=1e300, max_exceptions_per_block=99)
    ledger = Ledger(8.0)
    chain = select_chain([], [7], [], ledger, huge)
    assert (chain.accepted, chain.exceptions, chain.spent, chain.bonus) == ((), (), 0.0, 7)
    tree = select_tree([3], [-1], [7], [0.0], 0, ledger, huge)
    assert (tree.path, tree.accepted, tree.exceptions, tree.spent, tree.bonus) == ((), (), (), 0.0, 7)
    # Nodes beyond K = 0 are never accepted, not even exact ones.
    beyond = select_tree([3, 7, 5], [-1, 0, 1], [7, 5, 1], [0.0, 0.0, 0.0], 0, ledger, huge)
    assert (beyond.path, beyond.bonus) == ((), 7)
    assert (ledger.spent, ledger.num_exceptions) == (0.0, 0)
