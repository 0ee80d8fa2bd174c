"""The batched verifier == the pure reference for every rule, on hypothesis-drawn rounds: trees with
nodes outside them, logits on the 1/8 grid with -inf entries (many ties and exact gate boundaries),
duplicate siblings, stop tokens, each row under its own rule, with and without NGRAM's gate depth."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_oracle import reference_outputs, rule_ids

from sglang_asd.policy import RULE_NAMES
from sglang_asd.testing import VerifyRound, sglang_links
from sglang_asd.verify import asd_verify

V = 6
GRID = st.one_of(st.integers(-8, 8).map(lambda k: k / 8), st.just(float("-inf")))


@st.composite
def rows(draw, K, W):
    parents, depth = [-1], [0]
    for n in range(1, W):
        if draw(st.integers(0, 9)) == 0:
            parents.append(-1)  # outside the tree
            depth.append(0)
            continue
        p = draw(st.sampled_from([m for m in range(n) if (m == 0 or parents[m] >= 0) and depth[m] < K]))
        parents.append(p)
        depth.append(depth[p] + 1)
    logits = draw(st.lists(st.lists(GRID, min_size=V, max_size=V), min_size=W, max_size=W))
    tokens = draw(st.lists(st.integers(0, V - 1), min_size=W, max_size=W))
    rule = draw(st.sampled_from(RULE_NAMES))
    return dict(parents=parents, logits=logits, tokens=tokens, rule=rule,
                remaining=draw(st.sampled_from([0.0, 0.125, 0.5, 2.0, 64.0])),
                gate=draw(st.sampled_from([0.0, 0.0625, 0.125, 0.25, 0.5, 1.0, 4.0])),
                cap=draw(st.integers(0, 3)), stops=draw(st.lists(st.integers(-1, V - 1), min_size=2, max_size=2)))


@st.composite
def rounds(draw):
    K = draw(st.integers(1, 4))
    W = draw(st.integers(1, 9))
    return K, draw(st.lists(rows(K, W), min_size=1, max_size=4))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(drawn=rounds(), tree_depth_gate=st.booleans())
def test_verifier_equals_reference_for_every_rule(drawn, tree_depth_gate):
    K, rs = drawn
    links = [sglang_links(r["parents"]) for r in rs]
    t = lambda key, dtype: torch.tensor([r[key] for r in rs], dtype=dtype)  # noqa: E731
    rnd = VerifyRound(
        parents=[r["parents"] for r in rs], candidates=t("tokens", torch.int64),
        logits=torch.tensor([row for r in rs for row in r["logits"]], dtype=torch.float32),
        retrieve_next_token=torch.tensor([nt for nt, _ in links]), retrieve_next_sibling=torch.tensor([ns for _, ns in links]),
        remaining=t("remaining", torch.float32), gate=t("gate", torch.float32), cap=t("cap", torch.int32), depth=K,
        stop_tokens=t("stops", torch.int64))
    rules = [r["rule"] for r in rs]
    args, kwargs = rnd.args()
    out = asd_verify(*args, **kwargs, rule=rule_ids(rules), rules_present=set(rules), tree_depth_gate=tree_depth_gate)
    want = reference_outputs(rnd, rules=rules, tree_depth_gate=tree_depth_gate)
    for name, expected in want.items():
        assert torch.equal(getattr(out, name), expected), (name, rules, getattr(out, name), expected)
