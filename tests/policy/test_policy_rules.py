"""The rules beside asd (local, margin, threshold): config, worked examples, properties.

Worked examples use dyadic regrets, so every comparison is exact in floating point.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglang_asd.policy import (
    RULE_NAMES,
    RULES,
    ASDConfig,
    ExceptionEvent,
    Ledger,
    select_chain,
    select_tree,
    tree_depth,
    validate_rule,
    validate_rules,
)

SETTINGS = settings(max_examples=250, deadline=None, derandomize=True)


# ---------------------------------------------------------------- config


def test_rules_and_their_defaults():
    assert RULE_NAMES == ("asd", "local", "margin", "threshold", "fly", "fly-bounded")
    assert ASDConfig().rule == "asd" and RULES["asd"].version == "asd-1"
    assert [RULES[r].version for r in RULE_NAMES] == ["asd-1", "local-1", "margin-1", "threshold-1", "fly-1",
                                                      "fly-bounded-1"]
    assert (ASDConfig().margin, ASDConfig().threshold) == (1.0, 0.5)
    assert ASDConfig(rule="margin").rule_gate == 1.0 and ASDConfig(rule="threshold").rule_gate == 0.5
    assert ASDConfig(rule="local", gate=0.125).rule_gate == 0.125
    assert ASDConfig(rule="margin", margin=2).parameters() == {"margin": 2.0}
    assert ASDConfig(rule="local").parameters() == {"gate": 0.25, "max_exceptions_per_block": 2}
    assert [r for r in RULE_NAMES if RULES[r].ledger] == ["asd", "fly-bounded"]
    # fly: vLLM's defaults (threshold 0.3, top-3; window 0 = min(6, K - 1)); threshold 0 is not strict
    assert ASDConfig(rule="fly").parameters() == {"fly_entropy_threshold": 0.3, "fly_entropy_top_k": 3,
                                                  "fly_window_size": 0}
    assert ASDConfig(rule="fly", fly_entropy_threshold=0).allows_exceptions
    assert ASDConfig(rule="fly-bounded", fly_window_size=2, fly_entropy_top_k=5).device_columns == (0.3, 2, 5.0)


@pytest.mark.parametrize("kwargs,message", [
    (dict(rule="fuzzy"), "rule must be one of asd, local, margin, threshold, fly, fly-bounded, got 'fuzzy'"),
    (dict(rule=None), "rule must be one of asd, local, margin, threshold, fly, fly-bounded, got None"),
    (dict(margin=-1), "margin must be a finite number >= 0, got -1"),
    (dict(threshold=math.inf), "threshold must be a finite number >= 0, got inf"),
    (dict(threshold="1"), "threshold must be a finite number >= 0, got '1'"),
])
def test_invalid_rule_config_is_rejected_with_a_clear_message(kwargs, message):
    with pytest.raises(ValueError) as excinfo:
        ASDConfig(**kwargs)
    assert str(excinfo.value) == message


def test_strictness_of_each_rule():
    assert not ASDConfig(rule="margin", margin=0).allows_exceptions
    assert not ASDConfig(rule="threshold", threshold=0).allows_exceptions
    assert not ASDConfig(rule="local", max_exceptions_per_block=0).allows_exceptions
    # margin and threshold have no cap: cap 0 does not switch them off
    assert ASDConfig(rule="margin", max_exceptions_per_block=0).allows_exceptions
    assert ASDConfig(rule="threshold", gate=0).allows_exceptions


def test_tightened_picks_an_allowed_rule_and_bounds_each_parameter_by_the_server():
    server = ASDConfig(gate=0.25, max_exceptions_per_block=2, margin=2.0, threshold=1.0)
    assert server.tightened(rule="margin", margin=0.5) == ASDConfig(0.25, 2, "margin", 0.5, 1.0)
    assert server.tightened(rule="threshold").threshold == 1.0  # the server's value by default
    assert server.tightened(rule="local", gate=0.125).rule == "local"
    with pytest.raises(ValueError, match=r"^asd_margin must be a finite number in \[0, 2\], got 3$"):
        server.tightened(rule="margin", margin=3)
    with pytest.raises(ValueError, match=r"^asd_threshold must be a finite number in \[0, 1\], got 1.5$"):
        server.tightened(rule="threshold", threshold=1.5)
    with pytest.raises(ValueError, match=r"^asd_rule must be one of asd, local, got 'margin'$"):
        server.tightened(rule="margin", allowed_rules=("asd", "local"))
    with pytest.raises(ValueError, match=r"^asd_margin does not apply to asd_rule=asd \(its parameters: asd_gate, "
                                         r"asd_max_exceptions_per_block\)$"):
        server.tightened(margin=0.5)
    with pytest.raises(ValueError, match=r"^asd_gate does not apply to asd_rule=threshold \(its parameters: "
                                         r"asd_threshold\)$"):
        server.tightened(rule="threshold", gate=0.1)


def test_validate_rule_and_rules():
    assert validate_rule("local") == "local"
    assert validate_rules("threshold, asd") == ("asd", "threshold")  # RULE_NAMES order
    assert validate_rules(["margin"]) == ("margin",)
    for bad in ("", "asd,fuzzy", 3, None):
        with pytest.raises(ValueError, match="^asd_allowed_rules must list rules among asd, local, margin, threshold"):
            validate_rules(bad)


# ---------------------------------------------------------------- ledgers


def test_an_unbounded_ledger_counts_spent_and_has_no_remaining():
    ledger = Ledger(budget=1.0, bounded=False)
    assert ledger.remaining is None and not ledger.bounded
    ledger.charge([ExceptionEvent(0, 1, 2, 0.75)])
    ledger.charge([ExceptionEvent(0, 1, 2, 0.75)])
    assert (ledger.spent, ledger.remaining, ledger.num_exceptions) == (1.5, None, 2)  # past B: nothing bounds it
    with pytest.raises(ValueError, match="rule asd needs a bounded ledger"):
        select_chain([1], [2, 3], [0.5], ledger, ASDConfig())
    with pytest.raises(ValueError, match="rule local needs an unbounded ledger"):
        select_chain([1], [2, 3], [0.5], Ledger(1.0), ASDConfig(rule="local"))


# ---------------------------------------------------------------- worked examples


def test_local_limits_each_block_but_not_the_request():
    # g = 0.25, m = 2, B = 1. Each block: K = 2, i=0: r=0.5, q=2: 0.25 <= 0.25; block 0.5 <= 1 -> exception.
    # asd: the first two blocks spend the whole budget, the third is strict. local: every block passes.
    block = ([1, 2], [5, 2, 9], [0.5, 0.0])
    asd, local = Ledger(1.0), Ledger(1.0, bounded=False)
    got = {"asd": [], "local": []}
    for _ in range(3):
        got["asd"].append(len(select_chain(*block, asd, ASDConfig()).accepted))
        got["local"].append(len(select_chain(*block, local, ASDConfig(rule="local")).accepted))
    assert got == {"asd": [2, 2, 0], "local": [2, 2, 2]}
    assert (asd.spent, asd.remaining, local.spent, local.remaining) == (1.0, 0.0, 1.5, None)
    # ... and within a block local's B still limits: two exceptions of 0.5 + 0.75 > 1 stop at the second.
    d = select_chain([1, 2, 3], [5, 6, 7, 8], [0.5, 0.75, 0.0], Ledger(1.0, bounded=False),
                     ASDConfig(gate=1.0, rule="local"))
    assert (d.accepted, d.exceptions, d.spent) == ((1,), (0,), 0.5)


def test_margin_takes_the_runner_up_when_the_target_is_undecided():
    # K = 3, margins (z_(1) - z_(2)) [0.25, 1.0, 0.25, 0.5]; margin rule at 0.5.
    # i=0: r=0.25 == margin 0.25 (the runner-up), 0.25 <= 0.5 -> exception.
    # i=1: r=1.0 == margin 1.0 (runner-up) but 1.0 > 0.5: the target is decided -> rejected, bonus 8.
    config = ASDConfig(rule="margin", margin=0.5)
    d = select_chain([1, 2, 3], [5, 8, 7, 9], [0.25, 1.0, 0.0], Ledger(1.0, bounded=False), config,
                     target_margin=[0.25, 1.0, 0.25, 0.5])
    assert (d.accepted, d.exceptions, d.spent, d.bonus) == ((1,), (0,), 0.25, 8)
    # A token that is not the runner-up (r = 0.5 > margin 0.25) is rejected whatever the margin rule's value.
    d = select_chain([1], [5, 8], [0.5], Ledger(1.0, bounded=False), ASDConfig(rule="margin", margin=4.0),
                     target_margin=[0.25, 0.0])
    assert d.accepted == ()
    # No cap and no ledger: four runner-ups in a row, spending 4 x 0.5 = 2 > B = 1.
    d = select_chain([1, 2, 3, 4], [5, 6, 7, 8, 9], [0.5] * 4, Ledger(1.0, bounded=False),
                     ASDConfig(rule="margin", margin=0.5, max_exceptions_per_block=1), target_margin=[0.5] * 5)
    assert (len(d.accepted), d.spent) == (4, 2.0)


def test_threshold_has_no_gate_normalisation():
    # K = 4, r = 0.5 at i=0 (q would be 4) and at i=3 (q would be 1): threshold 0.5 takes both, asd at
    # g = 0.25 takes only the early one (0.5/4 <= 0.25 < 0.5/1).
    block = ([1, 2, 3, 4], [5, 2, 3, 8, 9], [0.5, 0.0, 0.0, 0.5])
    t = select_chain(*block, Ledger(8.0, bounded=False), ASDConfig(rule="threshold", threshold=0.5))
    a = select_chain(*block, Ledger(8.0), ASDConfig())
    assert (t.exceptions, a.exceptions) == ((0, 3), (0,))
    t = select_chain(*block, Ledger(8.0, bounded=False), ASDConfig(rule="threshold", threshold=0.375))
    assert t.accepted == ()


def test_tree_depth_is_the_deepest_node_hanging_from_the_root():
    assert tree_depth([-1, 0, 0, 0, 1, 4], 7) == 3
    assert tree_depth([-1, 0, -1, 2, 3, 4], 7) == 1  # node 2 is outside the tree, and so is its subtree
    assert tree_depth([-1, 0, 1, 2, 3], 2) == 2  # at most K
    assert tree_depth([-1], 3) == 0


# ---------------------------------------------------------------- properties

REGRETS = st.one_of(st.sampled_from([0.0, 0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, math.inf, math.nan]),
                    st.floats(0, 4, allow_nan=False))
TOKENS = st.integers(0, 3)
RULE_CONFIGS = st.builds(
    ASDConfig, gate=st.sampled_from([0.0, 0.0625, 0.25, 1.0, 1e9]), max_exceptions_per_block=st.integers(0, 3),
    rule=st.sampled_from(RULE_NAMES), margin=st.sampled_from([0.0, 0.25, 1.0, 1e9]),
    threshold=st.sampled_from([0.0, 0.25, 1.0, 1e9]))


@st.composite
def chains(draw):
    K = draw(st.integers(1, 8))
    regret = draw(st.lists(REGRETS, min_size=K, max_size=K))
    # margins: sometimes the token's own regret (it is the runner-up), sometimes less (it is not)
    margin = [r if draw(st.booleans()) else draw(st.sampled_from([0.0, 0.125])) for r in regret]
    return dict(draft=draw(st.lists(TOKENS, min_size=K, max_size=K)),
                target_argmax=draw(st.lists(TOKENS, min_size=K + 1, max_size=K + 1)), regret=regret,
                stop_tokens=frozenset(draw(st.sets(TOKENS, max_size=2))), target_margin=margin + [0.0])


def strict_length(draft, target_argmax):
    n = 0
    while n < len(draft) and draft[n] == target_argmax[n]:
        n += 1
    return n


@SETTINGS
@given(block=chains(), budget=st.sampled_from([0.0, 0.125, 0.5, 2.0, 8.0]), config=RULE_CONFIGS)
def test_every_rule_obeys_its_own_gates(block, budget, config):
    traits = config.traits
    ledger = Ledger(budget, bounded=traits.ledger)
    d = select_chain(ledger=ledger, config=config, **block)
    K, n = len(block["draft"]), len(d.accepted)
    assert d.accepted == tuple(block["draft"][:n]) and d.bonus == block["target_argmax"][n]
    assert n >= strict_length(block["draft"], block["target_argmax"])
    if budget == 0 or not config.allows_exceptions:  # strict identity, every rule
        assert n == strict_length(block["draft"], block["target_argmax"]) and not d.exceptions
    for i in d.exceptions:
        r = block["regret"][i]
        assert block["draft"][i] != block["target_argmax"][i] and block["draft"][i] not in block["stop_tokens"]
        assert math.isfinite(r) and r / (K - i if traits.per_suffix_value else 1) <= config.rule_gate
        if traits.runner_up_only:
            assert r <= block["target_margin"][i]
    if traits.capped:
        assert len(d.exceptions) <= config.max_exceptions_per_block
    if traits.block_limited:
        assert d.spent <= budget
    assert ledger.spent == (min(budget, d.spent) if traits.ledger else d.spent)


@SETTINGS
@given(block=chains(), budget=st.sampled_from([0.125, 0.5, 2.0, 8.0]), config=RULE_CONFIGS)
def test_chain_and_tree_agree_for_every_rule(block, budget, config):
    K = len(block["draft"])
    bounded = config.traits.ledger
    chain = select_chain(ledger=Ledger(budget, bounded=bounded), config=config, **block)
    tree = select_tree(tokens=[0] + block["draft"], parents=[-1] + list(range(K)),
                       target_argmax=block["target_argmax"], regret=[0.0] + block["regret"], depth=K,
                       ledger=Ledger(budget, bounded=bounded), config=config, stop_tokens=block["stop_tokens"],
                       target_margin=block["target_margin"])
    assert (tree.accepted, tree.exceptions, tree.bonus) == (chain.accepted, chain.exceptions, chain.bonus)
    # on a chain the tree depth is K: the gate depth changes nothing
    again = select_tree(tokens=[0] + block["draft"], parents=[-1] + list(range(K)),
                        target_argmax=block["target_argmax"], regret=[0.0] + block["regret"], depth=K,
                        ledger=Ledger(budget, bounded=bounded), config=config, stop_tokens=block["stop_tokens"],
                        target_margin=block["target_margin"], gate_depth=tree_depth([-1] + list(range(K)), K))
    assert again.accepted == tree.accepted


@SETTINGS
@given(block=chains(), budget=st.sampled_from([0.125, 2.0]), config=RULE_CONFIGS)
def test_asd_never_accepts_more_than_local_at_the_same_budget(block, budget, config):
    """local's limit (B every block) is never below asd's (B - spent): same gate and cap, so over a
    stream of blocks local accepts at least as much in each block given the same history."""
    asd = Ledger(budget, spent=budget / 2)
    a = select_chain(ledger=asd, config=ASDConfig(config.gate, config.max_exceptions_per_block), **block)
    b = select_chain(ledger=Ledger(budget, bounded=False),
                     config=ASDConfig(config.gate, config.max_exceptions_per_block, rule="local"), **block)
    assert len(b.accepted) >= len(a.accepted)
