"""The fused sampled verify (``asd_sampled_verify_triton``) against the torch verifier,
``torch.equal`` on the in-place path outputs and on every receipt.

Without CUDA the kernels run in Triton's interpreter (``interpreted.py``), which is slow: the
rounds are small (bs 2-8) and tiny tiles (``block_v``) make small vocabularies cross tile
boundaries in the bonus draw. Cases: chains and random trees (nodes outside the tree, siblings
in reverse order, duplicate sibling tokens), mixed, zero and ample budgets, server thresholds,
stop tokens or none, a sibling bound above W - 1 (SGLang accepts topk above draft tokens - 1),
a tight bound, NGRAM-like blocks (K = W - 1, no bound), a wide tree, and K = 0.
"""

from __future__ import annotations

import dataclasses

import interpreted  # noqa: F401  (before triton)
import pytest
import torch
from sampled_cases import make_sampled_round

pytestmark = [pytest.mark.skipif(not interpreted.HAS_TRITON, reason="triton is not installed"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]


@pytest.fixture(autouse=True)
def _runs_here(request):
    interpreted.skip_unless_here(request)


@pytest.mark.skipif(not interpreted.DELEGATE, reason="this process runs the kernels itself")
@pytest.mark.filterwarnings("ignore")
def test_in_fresh_process():
    interpreted.fresh_process(__file__)


def run(verify, rnd, threshold_single=1.0, threshold_acc=1.0, max_children=None, **overrides):
    """``verify`` on the round's tensors moved to the test device (the kernels' device: CUDA where
    there is one); -> (predicts, accept_index, accept_token_num, out), out's tensors on the CPU."""
    dev = lambda t: None if t is None else t.to(interpreted.DEVICE)  # noqa: E731
    rows = {k: overrides.get(k, getattr(rnd, k)) for k in ("remaining", "floor", "cap", "power", "stop_tokens")}
    buffers = [dev(t) for t in rnd.buffers()]
    out = verify(*buffers, *(dev(t) for t in (rnd.candidates, rnd.retrieve_index, rnd.next_token, rnd.next_sibling,
                                              rnd.coins, rnd.final_coins, rnd.probs)),
                 *(dev(rows[k]) for k in ("remaining", "floor", "cap", "power", "stop_tokens")),
                 threshold_single, threshold_acc, max_children)
    out = type(out)(**{f.name: None if getattr(out, f.name) is None else getattr(out, f.name).cpu()
                       for f in dataclasses.fields(out)})
    return (*(t.cpu() for t in buffers), out)


def check(rnd, *, block_v=16, **kw):
    """The fused kernels against the torch verifier on the same device, every output."""
    from sglang_asd.verify.sampled_verify import asd_sampled_verify
    from sglang_asd.verify.triton_sampled_verify import asd_sampled_verify_triton

    ref = run(asd_sampled_verify, rnd, **kw)
    got = run(lambda *a: asd_sampled_verify_triton(*a, block_v=block_v), rnd, **kw)
    for name, a, b in zip(("predicts", "accept_index", "accept_token_num"), ref[:3], got[:3]):
        assert a.dtype == b.dtype and torch.equal(a, b), f"{name}:\nref {a.tolist()}\nout {b.tolist()}"
    for f in dataclasses.fields(ref[3]):
        a, b = getattr(ref[3], f.name), getattr(got[3], f.name)
        if a is None or b is None:  # scope_skipped: None without a scope (the kernel takes none)
            assert a is b, f.name
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, (f.name, a.dtype, b.dtype, a.shape, b.shape)
        assert torch.equal(a, b), f"{f.name}:\nref {a.tolist()}\nout {b.tolist()}"
    return ref


@pytest.mark.parametrize("K,V,budget", [(1, 24, "mixed"), (4, 40, "mixed"), (6, 33, "ample")])
def test_chain_parity(K, V, budget):
    out = check(make_sampled_round(K, bs=8, K=K, V=V, shape="chain", budget=budget))[3]
    assert out.relaxed.any()  # the case exercises the relaxed branch


@pytest.mark.parametrize("seed,bs,K,reverse", [(20, 8, 3, False), (29, 6, 5, True)])
def test_tree_parity(seed, bs, K, reverse):
    rnd = make_sampled_round(seed, bs=bs, K=K, V=40, shape="tree", reverse_siblings=reverse, duplicates=0.2,
                             peaked=4.0 if K == 3 else 3.0)
    out = check(rnd, max_children=rnd.max_children() if reverse else None)[3]
    assert (out.relaxed & ~out.relaxed_accepted).any()  # a relaxed rejection, then the coin mapping


def test_thresholds_and_no_stop_tokens():
    rnd = make_sampled_round(31, bs=6, K=4, V=24, shape="tree", budget="ample")
    check(rnd, threshold_single=0.6, threshold_acc=0.8, stop_tokens=None, max_children=rnd.max_children())


def test_zero_budget_is_the_exact_walk():
    check(make_sampled_round(32, bs=4, K=3, V=20, shape="tree", budget="zero"))


def test_sibling_bound_above_w_minus_1():
    """EAGLE with topk 8 and 5 draft tokens (SGLang serves it): trees as SGLang builds them and a
    star (the root with W - 1 children); the bound is clamped to W - 1 in both verifiers."""
    from sglang_asd.testing.trees import eagle_draft, eagle_parents

    parent_list, selected = eagle_draft(4, 8, 2, 5, torch.Generator().manual_seed(33))
    parents = [eagle_parents(parent_list[b].tolist(), selected[b].tolist(), 8) for b in range(4)]
    rnd = make_sampled_round(33, K=2, V=24, parents=parents + [[-1, 0, 0, 0, 0]], budget="ample", peaked=4.0)
    check(rnd, max_children=8)


def test_ngram_like_block():
    """NGRAM: K = W - 1 as the loop bound, no sibling bound, shallow trees."""
    rnd = make_sampled_round(34, bs=2, K=3, W=12, V=24, shape="tree", budget="ample")
    rnd.K = rnd.W - 1  # the walk ends where the tree does
    check(rnd)


def test_wide_tree():
    """A large EAGLE-like block: 48 nodes, depth 6, topk 8."""
    rnd = make_sampled_round(35, bs=2, K=6, W=48, V=64, shape="tree", budget="ample")
    check(rnd, max_children=max(rnd.max_children(), 8), block_v=32)


def test_zero_step_verify():
    check(make_sampled_round(36, bs=3, K=0, V=20, shape="chain", budget="ample"))


@pytest.mark.parametrize("shape,K", [("tree", 4), ("chain", 3)])
def test_charges_in_the_kernel(monkeypatch, shape, K):
    """``charges_in_kernel=True`` (one launch: q and the charges in the walk kernel) against the torch
    verifier: on CUDA with libdevice itself, under the interpreter with torch's math standing in."""
    from sglang_asd.verify.sampled_verify import asd_sampled_verify
    from sglang_asd.verify.triton_sampled_verify import asd_sampled_verify_triton

    if not torch.cuda.is_available():
        interpreted.torch_math_for_libdevice(monkeypatch)
    rnd = make_sampled_round(3, bs=6, K=K, V=24, shape=shape, budget="ample", peaked=4.0)
    ref = run(asd_sampled_verify, rnd)
    got = run(lambda *a: asd_sampled_verify_triton(*a, block_v=16, charges_in_kernel=True), rnd)
    for a, b in zip(ref[:3], got[:3]):
        assert torch.equal(a, b)
    for f in dataclasses.fields(ref[3]):
        a, b = getattr(ref[3], f.name), getattr(got[3], f.name)
        assert (a is b) if a is None or b is None else torch.equal(a, b), f.name
    assert ref[3].relaxed.any()
