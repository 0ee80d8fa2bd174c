"""The fused Triton verify against the torch reference, ``torch.equal`` on every output.

Without CUDA the kernels run in Triton's interpreter on the CPU (``TRITON_INTERPRET=1``, set
here before triton is imported), so sizes are tiny; tiny tiles (``block_v``) and forced
vocabulary splits make a 64-token vocabulary take every path of the reduction.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest
import torch

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)

# Without CUDA the kernels run in Triton's interpreter, which must be on before triton is first
# imported (triton's own tl.max, tl.sum... are decorated then). If this process imported triton
# earlier with the interpreter off, this file runs in a fresh process instead (test_in_fresh_process).
_DELEGATE = False
if not torch.cuda.is_available():
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
    import triton.language.standard as _std

    _DELEGATE = type(_std.max).__name__ != "InterpretedFunction"

from sglang_asd.testing import make_round, sglang_links, sglang_strict_result, strict_verify  # noqa: E402
from sglang_asd.verify import triton_verify as tv  # noqa: E402
from sglang_asd.verify.torch_verify import asd_verify_torch  # noqa: E402

# the interpreter evaluates -inf - -inf (an all-masked row) in numpy, which warns
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


@pytest.fixture(autouse=True)
def _runs_here(request):
    if _DELEGATE and request.node.name != "test_in_fresh_process":
        pytest.skip("triton was imported without the interpreter: run by test_in_fresh_process")


@pytest.mark.skipif(not _DELEGATE, reason="this process runs the kernels itself")
@pytest.mark.filterwarnings("ignore")
def test_in_fresh_process():
    env = dict(os.environ, TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
                       cwd=pathlib.Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TINY_BLOCK = 16


def assert_same(ref, out):
    for f in dataclasses.fields(ref):
        a, b = getattr(ref, f.name), getattr(out, f.name)
        if a is None or b is None:  # scope_skipped: None without a scope
            assert a is b, f.name
            continue
        assert a.dtype == b.dtype and a.shape == b.shape, (f.name, a.dtype, b.dtype, a.shape, b.shape)
        assert torch.equal(a, b), f"{f.name}:\nref {a.tolist()}\nout {b.tolist()}"


def check(rnd, *, target_predict=False, split=None, block_v=TINY_BLOCK):
    args, kwargs = rnd.args(target_predict=target_predict)
    ref = asd_verify_torch(*args, **kwargs)
    out = tv.asd_verify_triton(*args, **kwargs, split=split, block_v=block_v)
    assert_same(ref, out)
    return ref


def hard_round(seed, bs, W, K, V, shape, **kw):
    """Ties, exact gate boundaries, -inf, all -inf and NaN rows, duplicate siblings, stop tokens,
    and for random trees nodes outside the tree and one level deeper than K."""
    extra = dict(orphans=0.05, too_deep=0.1) if shape == "random" else {}
    return make_round(seed=seed, bs=bs, W=W, K=K, V=V, shape=shape, logits="hard", masked=0.1, device=DEVICE,
                      **extra, **kw)


@pytest.mark.parametrize("seed", range(8))
def test_chain_parity(seed):
    K = 1 + seed % 5
    V = (16, 37, 64)[seed % 3]
    check(hard_round(seed, 4, K + 1, K, V, "chain"), split=1 + seed % 3)


@pytest.mark.parametrize("seed", range(10))
def test_tree_parity(seed):
    W, K = (4, 5, 6)[seed % 3], (2, 3, 4)[seed % 3 if seed < 9 else 0]
    check(hard_round(100 + seed, 4, W, K, (29, 64)[seed % 2], "random"), split=(1, 2, 4)[seed % 3])


@pytest.mark.parametrize("shape,reverse,orphans", [("eagle", False, 0.0), ("random", True, 0.2), ("chain", False, 0.0)])
def test_parity_on_sglang_shaped_trees(shape, reverse, orphans):
    """EAGLE topk trees as SGLang builds them, sibling lists in reverse index order, nodes
    dropped from the tree, logits on a 1/8 grid."""
    for seed in range(2):
        rnd = make_round(seed=seed, bs=4, W=4 if shape == "chain" else 7, K=3, V=24, shape=shape, topk=2,
                         reverse_siblings=reverse, orphans=orphans, device=DEVICE)
        check(rnd, split=2, block_v=8)


@pytest.mark.parametrize("bs", [1, 8, 9])
@pytest.mark.parametrize("target_predict", [False, True])
def test_depth_zero_is_sglang_strict(bs, target_predict):
    """SGLang's adaptive zero-step verify (W = 1, K = 0) with ASD rows: the root alone, its
    argmax as the bonus, per-position outputs [bs, 0], exactly SGLang's strict result."""
    rnd = make_round(seed=bs, bs=bs, W=1, K=0, V=40, shape="chain", logits="hard", rows="asd", device=DEVICE)
    args, kwargs = rnd.args(target_predict=target_predict)
    out = tv.asd_verify_triton(*args, **kwargs, split=None if target_predict else 2, block_v=TINY_BLOCK)
    assert_same(asd_verify_torch(*args, **kwargs), out)
    predict, accept_index, num_correct = sglang_strict_result(*rnd.strict_links())
    assert torch.equal(out.predict.cpu(), predict) and torch.equal(out.accept_index.cpu(), accept_index)
    assert torch.equal(out.num_correct_drafts.cpu(), num_correct) and not num_correct.any()
    assert torch.equal(out.accept_index.cpu(), torch.arange(bs, dtype=torch.int32)[:, None])
    assert not out.spent.any() and not out.num_exceptions.any() and out.exception_mask.shape == (bs, 0)


@pytest.mark.parametrize("tree", [False, True])
def test_target_predict_skips_the_vocab_pass(tree):
    check(hard_round(7, 3, 5, 3 if tree else 4, 48, "random" if tree else "chain"), target_predict=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits(dtype):
    check(hard_round(11, 3, 5, 3, 40, "random", dtype=dtype), split=2)


def test_no_stop_tokens_and_strided_logits():
    rnd = hard_round(5, 2, 4, 3, 33, "chain", stop=False)
    wide = torch.full((rnd.logits.shape[0], 40), 7.0, device=DEVICE)
    wide[:, :33] = rnd.logits
    rnd.logits = wide[:, :33]  # row stride 40, not 33
    assert not rnd.logits.is_contiguous()
    check(rnd, split=2)


def test_ties_take_the_lowest_index():
    # rows of node 0 and 2: all logits equal (argmax 0); node 1: two maxima at 5 and 17 (argmax 5)
    bs, K, V = 2, 3, 24
    rnd = hard_round(3, bs, K + 1, K, V, "chain", stop=False)
    rnd.logits = torch.zeros_like(rnd.logits)
    rnd.logits[1::2, 5] = 1.0
    rnd.logits[1::2, 17] = 1.0
    rnd.candidates[:] = torch.tensor([0, 3, 5, 17], device=DEVICE)  # regret-0 tie, exact, regret-0 tie
    rnd.remaining.fill_(8.0), rnd.gate.fill_(0.25), rnd.cap.fill_(2)
    ref = check(rnd, split=3)
    assert ref.num_correct_drafts.tolist() == [3, 3] and ref.num_exceptions.tolist() == [2, 2]
    assert ref.target_token.tolist() == [[0, 5, 0]] * 2


def test_budget_zero_is_strict_greedy():
    rnd = hard_round(21, 4, 6, 3, 48, "random")
    rnd.remaining.zero_()
    args, kwargs = rnd.args()
    out = tv.asd_verify_triton(*args, **kwargs, split=2, block_v=TINY_BLOCK)
    assert_same(asd_verify_torch(*args, **kwargs), out)
    predict, accept_index, num_correct = strict_verify(*rnd.strict_links())
    assert torch.equal(out.predict, predict) and torch.equal(out.accept_index, accept_index)
    assert torch.equal(out.num_correct_drafts, num_correct)
    assert not out.exception_mask.any() and int(out.num_exceptions.sum()) == 0 and float(out.spent.sum()) == 0.0


def test_masked_and_stop_tokens_are_never_exceptions():
    # chain of 3 where every draft is a near-miss of regret 0.5: admissible, except the -inf one
    # (position 1) and the stop token (position 2, row 1)
    K, V = 3, 16
    parents = [-1, 0, 1, 2]
    nt, ns = sglang_links(parents)
    logits = torch.zeros(2 * 4, V)
    logits[:, 0] = 0.5
    logits[[1, 5], 3] = float("-inf")
    cand = torch.tensor([[0, 2, 3, 4], [0, 2, 5, 4]])
    stop = torch.tensor([[-1, -1], [4, -1]])
    args = (cand, logits, torch.tensor([nt, nt]), torch.tensor([ns, ns]), torch.tensor([8.0, 8.0]),
            torch.tensor([1.0, 1.0]), torch.tensor([3, 3], dtype=torch.int32), K)
    args = tuple(a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args)
    ref = asd_verify_torch(*args, stop_tokens=stop.to(DEVICE))
    out = tv.asd_verify_triton(*args, stop_tokens=stop.to(DEVICE), split=1, block_v=TINY_BLOCK)
    assert_same(ref, out)
    assert out.num_correct_drafts.tolist() == [1, 2]  # row 0 stops at the -inf token, row 1 at the stop token


def test_outputs_are_fresh_buffers():
    rnd = hard_round(9, 2, 4, 3, 20, "chain")
    args, kwargs = rnd.args()
    a = tv.asd_verify_triton(*args, **kwargs)
    b = tv.asd_verify_triton(*args, **kwargs)
    inputs = {t.untyped_storage().data_ptr() for t in args if isinstance(t, torch.Tensor)}
    inputs.add(kwargs["stop_tokens"].untyped_storage().data_ptr())
    for f in dataclasses.fields(a):
        if getattr(a, f.name) is None:  # scope_skipped: not computed without a scope
            continue
        pa, pb = getattr(a, f.name).untyped_storage().data_ptr(), getattr(b, f.name).untyped_storage().data_ptr()
        assert pa not in inputs and pa != pb, f.name


def test_bad_shapes_are_refused_with_the_value_got():
    rnd = hard_round(9, 2, 4, 3, 20, "chain")
    args, kwargs = rnd.args()
    bad = (args[0], args[1][:-1]) + args[2:]
    with pytest.raises(ValueError, match=r"logits must be \[bs\*W, V\] = \[8, V\], got shape \(7, 20\)"):
        tv.asd_verify_triton(*bad, **kwargs)
    with pytest.raises(ValueError, match="depth must be an integer >= 0, got -1"):
        tv.asd_verify_triton(*args[:-1], -1, **kwargs)


class _RecordingKernel:
    """Stands in for a @triton.jit kernel: records ``kernel[grid](*args, **meta)``, runs nothing."""

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def launch(*args, **meta):
            scalars = [a for a in args if not isinstance(a, torch.Tensor)]
            self.calls.append((tuple(grid), tuple(scalars), tuple(sorted(meta.items()))))

        return launch


@pytest.mark.parametrize("target_predict", [False, True])
def test_wrapper_never_syncs_and_its_launch_depends_on_shapes_only(monkeypatch, target_predict):
    """What CUDA graphs need from the Python side: no host sync (the Tensor methods that would
    sync raise) and the same grid, scalars and constexprs for any data of the same shapes."""
    vocab, select = _RecordingKernel(), _RecordingKernel()
    monkeypatch.setattr(tv, "row_argmax_partials_kernel", vocab)
    monkeypatch.setattr(tv, "asd_select_kernel", select)
    rounds = [hard_round(s, 3, 6, 3, 40, "random") for s in (1, 2)]
    calls = [rnd.args(target_predict=target_predict) for rnd in rounds]
    for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, lambda *a, _n=name, **k: pytest.fail(f"Tensor.{_n} on the hot path"))
    for args, kwargs in calls:
        tv.asd_verify_triton(*args, **kwargs)
    monkeypatch.undo()
    assert len(select.calls) == 2 and select.calls[0] == select.calls[1]
    assert len(vocab.calls) == (0 if target_predict else 2) and vocab.calls[:1] == vocab.calls[1:]


@pytest.mark.parametrize("seed", range(6))
def test_tree_depth_gate_parity(seed):
    """NGRAM's gate depth (q_i = the row's tree depth - i): random trees with nodes outside the tree
    and one level too deep, and rows of the local rule (which the kernel decides like asd)."""
    W, K = (8, 6, 5)[seed % 3], (7, 4, 3)[seed % 3]
    rnd = hard_round(300 + seed, 4, W, K, (29, 64)[seed % 2], "random")
    args, kwargs = rnd.args(target_predict=seed % 2 == 1)
    ref = asd_verify_torch(*args, **kwargs, tree_depth_gate=True)
    out = tv.asd_verify_triton(*args, **kwargs, tree_depth_gate=True, split=2, block_v=TINY_BLOCK)
    assert_same(ref, out)
    local = torch.ones(4, dtype=torch.int32, device=DEVICE)  # rule id 1: local
    assert_same(asd_verify_torch(*args, **kwargs, rule=local, tree_depth_gate=True), out)


def test_tree_depth_gate_changes_the_decision_on_a_bushy_tree():
    """The kernel side of tests/verify/test_rules_verify.py::test_ngram_gate_uses_the_real_tree_depth."""
    parents = [-1, 0, 0, 0, 0, 0, 1, 2]
    nt, ns = sglang_links(parents)
    logits = torch.zeros(8, 8)
    logits[:, 0] = 1.0
    args = (torch.tensor([[0, 3, 5, 6, 7, 2, 0, 4]]), logits, torch.tensor([nt]), torch.tensor([ns]),
            torch.tensor([8.0]), torch.tensor([0.25]), torch.tensor([2], dtype=torch.int32), 7)
    args = tuple(a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args)
    loose = tv.asd_verify_triton(*args, split=1, block_v=TINY_BLOCK)
    real = tv.asd_verify_triton(*args, tree_depth_gate=True, split=1, block_v=TINY_BLOCK)
    assert loose.num_correct_drafts.tolist() == [2] and real.num_correct_drafts.tolist() == [0]
