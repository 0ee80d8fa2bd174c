"""Properties of select_chain / select_tree on random blocks (hypothesis, derandomized)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_asd.policy import ASDConfig, Ledger, select_chain, select_tree

SETTINGS = settings(max_examples=250, deadline=None, derandomize=True)
REGRETS = st.one_of(
    st.sampled_from([0.0, 0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, math.inf, math.nan]),
    st.floats(0, 4, allow_nan=False),
)
TOKENS = st.integers(0, 3)  # a tiny vocabulary: many matches and duplicates


@st.composite
def chains(draw):
    K = draw(st.integers(1, 8))
    return dict(
        draft=draw(st.lists(TOKENS, min_size=K, max_size=K)),
        target_argmax=draw(st.lists(TOKENS, min_size=K + 1, max_size=K + 1)),
        regret=draw(st.lists(REGRETS, min_size=K, max_size=K)),
        stop_tokens=frozenset(draw(st.sets(TOKENS, max_size=2))),
    )


@st.composite
def trees(draw):
    K = draw(st.integers(1, 5))
    W = draw(st.integers(1, 14))
    parents, depth = [-1], [0]
    for n in range(1, W):
        p = draw(st.sampled_from([m for m in range(n) if depth[m] < K]))
        parents.append(p)
        depth.append(depth[p] + 1)
    return dict(
        tokens=draw(st.lists(TOKENS, min_size=W, max_size=W)),
        parents=parents,
        target_argmax=draw(st.lists(TOKENS, min_size=W, max_size=W)),
        regret=draw(st.lists(REGRETS, min_size=W, max_size=W)),
        depth=K,
        stop_tokens=frozenset(draw(st.sets(TOKENS, max_size=2))),
    )


BUDGETS = st.sampled_from([0.0, 0.125, 0.5, 2.0, 8.0, 1e9])
CONFIGS = st.builds(ASDConfig, gate=st.sampled_from([0.0, 0.0625, 0.25, 1.0, 1e9]),
                    max_exceptions_per_block=st.integers(0, 3))


def strict_chain_length(draft, target_argmax):
    n = 0
    while n < len(draft) and draft[n] == target_argmax[n]:
        n += 1
    return n


def sglang_tree_walk(tokens, parents, target_argmax, depth):
    """SGLang's strict walk: from the root, the first child (in index order) equal to the argmax."""
    path, last = [], 0
    for _ in range(depth):
        nxt = next((c for c in range(len(tokens)) if parents[c] == last and tokens[c] == target_argmax[last]), None)
        if nxt is None:
            break
        path.append(nxt)
        last = nxt
    return tuple(path)


@SETTINGS
@given(block=chains(), budget=BUDGETS, config=CONFIGS)
def test_chain_decision_obeys_every_gate(block, budget, config):
    ledger = Ledger(budget)
    d = select_chain(ledger=ledger, config=config, **block)
    K, n = len(block["draft"]), len(d.accepted)
    assert d.accepted == tuple(block["draft"][:n]) and d.bonus == block["target_argmax"][n]
    assert n >= strict_chain_length(block["draft"], block["target_argmax"])
    assert len(d.exceptions) <= config.max_exceptions_per_block
    assert d.spent <= budget and ledger.spent == min(budget, d.spent)
    for i in d.exceptions:
        r = block["regret"][i]
        assert block["draft"][i] != block["target_argmax"][i]
        assert math.isfinite(r) and r / (K - i) <= config.gate
        assert block["draft"][i] not in block["stop_tokens"]
    if budget == 0 or config.gate == 0 or config.max_exceptions_per_block == 0:
        assert n == strict_chain_length(block["draft"], block["target_argmax"]) and not d.exceptions
    if n < K:  # the stop position is a mismatch (an exact token is always accepted)
        assert block["draft"][n] != block["target_argmax"][n]


@SETTINGS
@given(block=chains(), budget=BUDGETS, config=CONFIGS)
def test_chain_and_tree_rules_agree_on_chains(block, budget, config):
    K = len(block["draft"])
    chain = select_chain(ledger=Ledger(budget), config=config, **block)
    tree = select_tree(
        tokens=[0] + block["draft"], parents=[-1] + list(range(K)), target_argmax=block["target_argmax"],
        regret=[0.0] + block["regret"], depth=K, ledger=Ledger(budget), config=config,
        stop_tokens=block["stop_tokens"],
    )
    assert (tree.accepted, tree.exceptions, tree.bonus) == (chain.accepted, chain.exceptions, chain.bonus)
    assert tree.spent == chain.spent or (math.isnan(tree.spent) and math.isnan(chain.spent))


@SETTINGS
@given(block=trees(), budget=BUDGETS, config=CONFIGS)
def test_tree_decision_is_a_valid_path_at_least_as_long_as_strict(block, budget, config):
    d = select_tree(ledger=Ledger(budget), config=config, **block)
    strict = sglang_tree_walk(block["tokens"], block["parents"], block["target_argmax"], block["depth"])
    assert len(d.path) >= len(strict)
    assert [block["parents"][n] for n in d.path] == [0, *d.path][: len(d.path)]
    last = d.path[-1] if d.path else 0
    assert d.bonus == block["target_argmax"][last]
    assert len(d.exceptions) <= config.max_exceptions_per_block and d.spent <= budget
    if budget == 0 or config.gate == 0 or config.max_exceptions_per_block == 0:
        assert d.path == strict and not d.exceptions


@SETTINGS
@given(block=trees(), budget=BUDGETS, config=CONFIGS)
def test_more_budget_gate_or_cap_never_shortens_the_path(block, budget, config):
    base = len(select_tree(ledger=Ledger(budget), config=config, **block).path)
    looser = [
        (Ledger(budget * 2 + 1), config),
        (Ledger(budget), ASDConfig(gate=config.gate * 2 + 1, max_exceptions_per_block=config.max_exceptions_per_block)),
        (Ledger(budget), ASDConfig(gate=config.gate, max_exceptions_per_block=config.max_exceptions_per_block + 1)),
    ]
    for ledger, cfg in looser:
        assert len(select_tree(ledger=ledger, config=cfg, **block).path) >= base


@SETTINGS
@given(blocks=st.lists(chains(), min_size=1, max_size=12), budget=BUDGETS, config=CONFIGS)
def test_spent_never_exceeds_budget_over_many_blocks(blocks, budget, config):
    ledger = Ledger(budget)
    for block in blocks:
        before = ledger.remaining
        d = select_chain(ledger=ledger, config=config, **block)
        assert d.spent <= before
        assert 0 <= ledger.spent <= ledger.budget
    assert ledger.num_exceptions == len(ledger.events)
