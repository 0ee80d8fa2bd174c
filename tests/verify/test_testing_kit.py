"""``sglang_asd.testing``: kept out of the runtime, and its trees are the ones SGLang builds.

- No runtime module imports it (it exists for tests, ``scripts/`` and device checks).
- ``eagle_parents`` + ``sglang_links`` give exactly the links of ``build_tree_kernel_efficient``
  (its plain-torch stand-in in ``sglang_asd.cpu_backend``) for EAGLE drafts.
- ``make_round`` plants what it promises: exact drafts, near misses, strict and ASD rows.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
import torch

from sglang_asd.cpu_backend import spec_tree_ops
from sglang_asd.testing import eagle_draft, eagle_parents, make_round, sglang_links

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "sglang_asd"


def imported_modules(path: pathlib.Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


def test_no_runtime_module_imports_the_testing_kit():
    # bench/ (tools a user runs before turning ASD on) starts servers through the kit's launcher; what
    # serves (policy, verify, seams, launcher, CPU stand-in, fixtures) never imports the kit.
    runtime = [p for p in PACKAGE.rglob("*.py") if not {"testing", "bench"} & set(p.relative_to(PACKAGE).parts)]
    assert len(runtime) > 20
    offenders = {str(p.relative_to(PACKAGE)): m for p in runtime for m in imported_modules(p)
                 if m == "sglang_asd.testing" or m.startswith("sglang_asd.testing.")}
    assert offenders == {}


@pytest.mark.parametrize("topk,depth,W", [(1, 4, 5), (2, 3, 6), (3, 4, 10), (4, 5, 16)])
def test_eagle_trees_link_as_sglang_builds_them(topk, depth, W):
    bs = 6
    parent_list, selected = eagle_draft(bs, topk, depth, W, torch.Generator().manual_seed(W))
    retrieve = torch.full((3, bs, W), -1, dtype=torch.long)
    spec_tree_ops.build_tree_kernel_efficient_cpu(
        parent_list, selected, torch.full((bs,), 4), torch.empty(bs * W * W, dtype=torch.bool),
        torch.empty(bs * W, dtype=torch.long), *retrieve, topk, depth, W, spec_tree_ops.QLEN_ONLY,
    )  # fmt: skip
    for b in range(bs):
        parents = eagle_parents(parent_list[b].tolist(), selected[b].tolist(), topk)
        assert all(0 <= p < n for n, p in enumerate(parents) if n > 0)  # a selected node's parent is selected
        assert sglang_links(parents) == (retrieve[1, b].tolist(), retrieve[2, b].tolist())


def test_make_round_plants_exact_drafts_near_misses_and_both_kinds_of_rows():
    rnd = make_round(seed=0, bs=64, W=10, K=4, V=50, shape="eagle", topk=3)
    argmax = rnd.logits.argmax(-1).view(64, 10)
    parents = torch.tensor(rnd.parents)
    drafted = parents[:, 1:] >= 0
    exact = rnd.candidates[:, 1:] == argmax.gather(1, parents[:, 1:].clamp(min=0))
    assert 0.4 < float(exact[drafted].float().mean()) < 0.8
    strict = (rnd.remaining <= 0) | (rnd.gate <= 0) | (rnd.cap <= 0)
    assert strict.any() and not strict.all()
    assert not make_round(seed=0, bs=64, W=10, K=4, shape="eagle", topk=3, rows="asd").remaining.eq(0).any()
    rows = make_round(seed=0, bs=64, W=10, K=4, shape="eagle", topk=3, rows="strict")
    assert ((rows.remaining <= 0) | (rows.gate <= 0) | (rows.cap <= 0)).all()
    with pytest.raises(ValueError, match="a chain has W = K \\+ 1 nodes, got W=5, K=3"):
        make_round(seed=0, bs=1, W=5, K=3, shape="chain")
