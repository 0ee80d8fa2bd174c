"""Scopes in the batched verifiers (``verify/scope.py``) against the pure rule (``policy/scope.py``).

- an unscoped row (prefix 0, scope all, no spans) decides bit for bit as without a scope;
- ``allowed_nodes`` equals the pure rule walked node by node along each tree path, markers
  drafted mid-block included, and no exception or relaxed node lands where it is not allowed;
- ``committed_state`` folds exactly the committed path's markers (the bonus excluded);
- a marker accepted in the middle of a chain makes the following positions strict in the same round.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from sglang_asd.policy.scope import Markers, ReasoningMarkers, Scope, resolve
from sglang_asd.testing.rounds import make_round
from sglang_asd.testing.sampled import sampled_round
from sglang_asd.verify.sampled_verify import asd_sampled_verify
from sglang_asd.verify.scope import ScopeRows, allowed_nodes, committed_state
from sglang_asd.verify.torch_verify import asd_verify_torch
from sglang_asd.verify.tree_links import node_depths, tree_links


def scope_rows(markers: list[Markers], produced: list[int], states: list[int]) -> ScopeRows:
    """The device rows of ``markers`` (one per row), as the ledger table gathers them."""
    M = max([len(m.ops) for m in markers] + [1])
    table = torch.tensor([[list(op) for op in m.ops] + [[-1, 0, 0, 0]] * (M - len(m.ops)) for m in markers],
                         dtype=torch.int64)
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    return ScopeRows(produced=i32(produced), strict_prefix=i32([m.strict_prefix for m in markers]),
                     state=i32(states), require=i32([m.require for m in markers]),
                     forbid=i32([m.forbid for m in markers]), markers=table)


def unscoped(bs: int) -> ScopeRows:
    return scope_rows([Markers(0, 0, 0, ())] * bs, [1] * bs, [0] * bs)


def random_markers(rng: random.Random, V: int) -> Markers:
    """A scope over token ids 0..V-1: a prefix, maybe reasoning, a span or two (one may toggle)."""
    tokens = rng.sample(range(V), 5)
    scope = Scope(strict_prefix=rng.choice([0, 0, 1, 2, 3, 5]), scope=rng.choice(["all", "reasoning"]),
                  strict_spans=rng.choice([(), (("a", "b"),), (("a", "b"), ("c", "c"))]))
    ids = {"a": tokens[0], "b": tokens[1], "c": tokens[2]}
    return resolve(scope, ids.get, ReasoningMarkers(tokens[3], tokens[4], starts_inside=rng.random() < 0.5))


ROUNDS = [dict(shape="chain", W=5, K=4), dict(shape="eagle", W=6, K=3, topk=2), dict(shape="random", W=7, K=4)]


def _fields(out):
    return {f.name: getattr(out, f.name) for f in dataclasses.fields(out) if getattr(out, f.name) is not None}


@pytest.mark.parametrize("shape", ROUNDS, ids=lambda s: s["shape"])
@pytest.mark.parametrize("seed", range(6))
def test_an_unscoped_row_decides_exactly_as_without_a_scope(shape, seed):
    rnd = make_round(seed=seed, bs=6, V=12, rows="asd", **shape)
    args, kwargs = rnd.args()
    plain = asd_verify_torch(*args, **kwargs)
    scoped = asd_verify_torch(*args, **kwargs, scope=unscoped(6))
    for name, value in _fields(plain).items():
        assert torch.equal(value, _fields(scoped)[name]), name
    assert scoped.scope_skipped.tolist() == [0] * 6


def _pure_allowed(m: Markers, parents, tokens, target, produced, state0, K):
    """node -> allowed, walking each node's path from the root with the pure rule."""
    out = {}
    for n in range(1, len(parents)):
        path, p = [n], parents[n]
        while p > 0:
            path.append(p)
            p = parents[p]
        if p != 0 or len(path) > K:
            continue  # outside the tree, or deeper than K
        path.reverse()
        state = m.apply(state0, tokens[0])
        for node in path[:-1]:
            state = m.apply(state, tokens[node])
        out[n] = m.allowed(state, produced + len(path) - 1, tokens[n], target[parents[n]])
    return out


@pytest.mark.parametrize("shape", ROUNDS, ids=lambda s: s["shape"])
@pytest.mark.parametrize("seed", range(8))
def test_allowed_nodes_and_exceptions_follow_the_pure_rule(shape, seed):
    V, bs = 8, 6
    rng = random.Random(seed)
    rnd = make_round(seed=seed, bs=bs, V=V, rows="asd", stop=False, **shape)
    markers = [random_markers(rng, V) for _ in range(bs)]
    produced = [rng.randrange(1, 6) for _ in range(bs)]
    states = [rng.randrange(0, 8) for _ in range(bs)]
    scope = scope_rows(markers, produced, states)
    parent, _ = tree_links(rnd.retrieve_next_token, rnd.retrieve_next_sibling)
    up, depth = node_depths(parent, rnd.depth)
    target = rnd.logits.argmax(dim=-1).view(rnd.candidates.shape)
    allowed = allowed_nodes(scope, rnd.candidates, up, depth, target.gather(1, up), rnd.depth)
    args, kwargs = rnd.args()
    out = asd_verify_torch(*args, **kwargs, scope=scope)
    for b in range(bs):
        pure = _pure_allowed(markers[b], rnd.parents[b], rnd.candidates[b].tolist(), target[b].tolist(),
                             produced[b], states[b], rnd.depth)
        for n, ok in pure.items():
            assert bool(allowed[b, n]) == ok, (b, n)
        W = rnd.candidates.shape[1]
        for i in range(rnd.depth):
            if out.exception_mask[b, i]:
                assert pure[int(out.accept_index[b, i + 1]) - b * W], (b, i)


def test_a_marker_accepted_mid_block_makes_the_rest_of_the_block_strict():
    """A chain: position 0 exact, position 1 the span's open marker drafted exactly, positions 2 and 3
    near misses. Unscoped, 2 and 3 are exceptions; with the span, the marker is accepted and 2 is not."""
    V, K = 6, 4
    logits = torch.zeros(K + 1, V)
    argmax = [1, 4, 2, 3, 1]  # the target's choice after each chain node (node i scores draft i)
    for node, a in enumerate(argmax):
        logits[node, a] = 1.0
        logits[node, 0] = 0.9  # token 0: the near miss everywhere
    candidates = torch.tensor([[5, 1, 4, 0, 0]])  # root 5, then exact 1, the marker 4, then two near misses
    links = torch.tensor([[1, 2, 3, 4, -1]]), torch.full((1, K + 1), -1)
    common = (candidates, logits, *links, torch.tensor([8.0]), torch.tensor([1.0]), torch.tensor([4], dtype=torch.int32), K)
    plain = asd_verify_torch(*common)
    assert plain.num_correct_drafts.tolist() == [4] and plain.exception_mask[0].tolist() == [False, False, True, True]
    markers = resolve(Scope(strict_spans=(("<o>", "<c>"),)), {"<o>": 4, "<c>": 3}.get)
    scoped = asd_verify_torch(*common, scope=scope_rows([markers], [7], [0]))
    assert scoped.num_correct_drafts.tolist() == [2], "the open marker is committed, the position after it strict"
    assert scoped.exception_mask[0].tolist() == [False] * K and scoped.scope_skipped.tolist() == [1]
    state = committed_state(scope_rows([markers], [7], [0]), candidates, scoped.accept_index, scoped.num_correct_drafts)
    assert state.tolist() == [markers.forbid], "the next round starts inside the span"
    # The close marker as the target's choice at position 2: never displaced, even outside the span.
    closing = asd_verify_torch(candidates, logits.index_fill(1, torch.tensor([2]), 0.0).index_put_(
        (torch.tensor([2]), torch.tensor([3])), torch.tensor(1.0)), *common[2:], scope=scope_rows([markers], [7], [0]))
    assert closing.exception_mask[0, 2].item() is False


@pytest.mark.parametrize("produced,prefix,first_allowed", [(1, 0, 0), (1, 3, 2), (4, 3, 0), (2, 4, 2)])
def test_strict_prefix_counts_output_positions(produced, prefix, first_allowed):
    """Draft position i is output index produced + i; the first position past the prefix may relax."""
    V, K = 6, 4
    logits = torch.zeros(K + 1, V)
    logits[:, 1] = 1.0
    logits[:, 0] = 0.9
    candidates = torch.tensor([[5, 0, 0, 0, 0]])  # every draft a near miss
    links = torch.tensor([[1, 2, 3, 4, -1]]), torch.full((1, K + 1), -1)
    markers = resolve(Scope(strict_prefix=prefix), {}.get)
    out = asd_verify_torch(candidates, logits, *links, torch.tensor([8.0]), torch.tensor([1.0]),
                           torch.tensor([4], dtype=torch.int32), K, scope=scope_rows([markers], [produced], [0]))
    if first_allowed == 0:
        assert out.exception_mask[0, 0].item()
    else:
        assert out.num_correct_drafts.tolist() == [0] and out.scope_skipped.tolist() == [1]
        late = scope_rows([markers], [produced + first_allowed], [0])
        assert asd_verify_torch(candidates, logits, *links, torch.tensor([8.0]), torch.tensor([1.0]),
                                torch.tensor([4], dtype=torch.int32), K, scope=late).exception_mask[0, 0].item()


def test_reasoning_scope_starts_where_the_parser_says():
    think = ReasoningMarkers(start=7, end=8, starts_inside=False)
    m = resolve(Scope(scope="reasoning"), {}.get, think)
    assert m.state_after([1, 2]) == 0 and m.state_after([1, 7, 3]) == 1 and m.state_after([7, 3, 8]) == 0
    forced = resolve(Scope(scope="reasoning"), {}.get, ReasoningMarkers(start=None, end=8, starts_inside=True))
    assert forced.state_after([1, 2]) == 1 and forced.state_after([1, 8, 2]) == 0
    with pytest.raises(ValueError, match="--reasoning-parser"):
        resolve(Scope(scope="reasoning"), {}.get, None)
    with pytest.raises(ValueError, match="not a single token"):
        resolve(Scope(strict_spans=(("<x>", "</x>"),)), {"<x>": 3}.get)


def test_committed_state_folds_the_committed_path_only():
    m = resolve(Scope(strict_spans=(("o", "c"), ("f", "f"))), {"o": 2, "c": 3, "f": 4}.get)
    rows = scope_rows([m, m], [5, 5], [0, 0])
    candidates = torch.tensor([[2, 1, 4, 3], [1, 4, 2, 4]])  # chains; row 0's root opens span 0
    accept_index = torch.tensor([[0, 1, 2, -1], [4, 5, 6, 7]])
    state = committed_state(rows, candidates, accept_index, torch.tensor([2, 3]))
    assert state.tolist() == [m.state_after([2, 1, 4]), m.state_after([1, 4, 2, 4])]


@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_sampled_relaxes_only_where_the_scope_allows(tree, seed):
    rnd = sampled_round(bs=6, W=6, K=3, V=16, tree=tree, seed=seed, keep=6)
    bs, W = rnd.candidates.shape

    def run(scope):
        bufs = rnd.buffers()
        out = asd_sampled_verify(*bufs, *rnd.inputs(), scope=scope)
        return bufs, out

    (p0, a0, n0), plain = run(None)
    (p1, a1, n1), same = run(unscoped(bs))
    assert torch.equal(p0, p1) and torch.equal(a0, a1) and torch.equal(n0, n1)
    assert plain.scope_skipped is None and same.scope_skipped.tolist() == [0] * bs  # nothing kept strict
    assert all(torch.equal(getattr(plain, f.name), getattr(same, f.name)) for f in dataclasses.fields(plain)
               if f.name != "scope_skipped")
    rng = random.Random(seed)
    markers = [random_markers(rng, 16) for _ in range(bs)]
    scope = scope_rows(markers, [rng.randrange(1, 4) for _ in range(bs)], [0] * bs)
    parent, _ = tree_links(rnd.next_token, rnd.next_sibling)
    up, depth = node_depths(parent, rnd.K)
    allowed = allowed_nodes(scope, rnd.candidates, up, depth, rnd.probs.argmax(-1).gather(1, up), rnd.K)
    (_, accept_index, _), out = run(scope)
    for b in range(bs):
        for i in range(rnd.K):
            if out.relaxed[b, i]:
                token = int(out.relaxed_token[b, i])
                parent_node = int(accept_index[b, i]) - b * W  # the walk's node at level i
                child = [n for n in range(W) if int(parent[b, n]) == parent_node and int(rnd.candidates[b, n]) == token]
                assert child and bool(allowed[b, child[0]]), (b, i)


@pytest.mark.parametrize("tree", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_sampled_rows_count_the_relaxations_their_scope_kept_strict(tree, seed):
    """A strict prefix over the whole block relaxes nothing; at the first level both walks stand at the
    root with nothing spent, so every row the unscoped walk relaxed there counts at least one level
    kept strict, and a row counts at most one per level."""
    rnd = sampled_round(bs=6, W=6, K=3, V=16, tree=tree, seed=seed, keep=6)
    bs = rnd.candidates.shape[0]
    free = asd_sampled_verify(*rnd.buffers(), *rnd.inputs())
    strict = scope_rows([Markers(rnd.K + 2, 0, 0, ())] * bs, [1] * bs, [0] * bs)
    kept = asd_sampled_verify(*rnd.buffers(), *rnd.inputs(), scope=strict)
    assert not kept.relaxed.any() and kept.spent.eq(0).all()
    assert kept.scope_skipped.ge(free.relaxed[:, 0].int()).all() and kept.scope_skipped.le(rnd.K).all()
    assert free.relaxed[:, 0].any(), "the unscoped walk must relax at the root for the test to bite"
    assert kept.scope_skipped.sum() >= free.relaxed[:, 0].sum()
