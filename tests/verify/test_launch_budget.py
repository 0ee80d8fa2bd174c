"""Launch budget of one verify call: what it dispatches does not grow with the draft depth K, the
tree width W or the batch size, for the fused sampled and greedy paths; the torch paths' counts
are the baseline (published in docs/VERIFY_KERNEL.md, by ``scripts/verify_microbench.py --launches``).

Counted on the CPU (``sglang_asd.testing.launches.count_call``): aten ops by a
``TorchDispatchMode``, Triton launches by wrapping the kernels (under the interpreter here).
"""

from __future__ import annotations

import interpreted  # noqa: F401  (before triton)
import pytest

from sglang_asd.testing import make_round
from sglang_asd.testing.launches import count_call
from sglang_asd.testing.sampled import sampled_round
from sglang_asd.verify.sampled_verify import asd_sampled_verify
from sglang_asd.verify.torch_verify import asd_verify_torch

pytestmark = [pytest.mark.skipif(not interpreted.HAS_TRITON, reason="triton is not installed"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

# (K, tree, bs): depth, width (chains W = K + 1, EAGLE topk-4 trees W = 2K + 2) and batch all vary
GRID = [(1, False, 1), (6, False, 3), (3, True, 1), (8, True, 2)]
SAMPLED_GPU_LAUNCHES = 29  # 2 Triton launches + the float64 node charges' 27 elementwise ops
GREEDY_GPU_LAUNCHES = 2  # the vocabulary pass and the selection (1 with SGLang's argmax given)


@pytest.fixture(autouse=True)
def _runs_here(request):
    interpreted.skip_unless_here(request)


@pytest.mark.skipif(not interpreted.DELEGATE, reason="this process runs the kernels itself")
@pytest.mark.filterwarnings("ignore")
def test_in_fresh_process():
    interpreted.fresh_process(__file__)


def sampled_counts(K, tree, bs, fused, **kwargs):
    from sglang_asd.verify import triton_sampled_verify as tsv

    rnd = sampled_round(bs, 2 * K + 2, K, 32, tree, topk=4, device=interpreted.DEVICE)
    buffers = rnd.buffers()
    verify = (lambda *a: tsv.asd_sampled_verify_triton(*a, **kwargs)) if fused else asd_sampled_verify
    return count_call(lambda: verify(*buffers, *rnd.inputs()),
                      [(tsv, "sampled_node_q_kernel"), (tsv, "sampled_walk_kernel")])


def greedy_counts(K, tree, bs, fused, target_predict):
    from sglang_asd.verify import triton_verify as tv

    W = 2 * K + 2 if tree else K + 1
    rnd = make_round(seed=K, bs=bs, W=W, K=K, V=32, shape="eagle" if tree else "chain", topk=4, logits="normal",
                     rows="asd", device=interpreted.DEVICE)
    args, kwargs = rnd.args(target_predict=target_predict)
    verify = tv.asd_verify_triton if fused else asd_verify_torch
    return count_call(lambda: verify(*args, **kwargs),
                      [(tv, "row_argmax_partials_kernel"), (tv, "asd_select_kernel")])


def test_fused_sampled_verify_is_a_constant_number_of_launches():
    counts = {case: sampled_counts(*case, fused=True) for case in GRID}
    assert len(set(counts.values())) == 1, counts
    c = counts[GRID[0]]
    assert c.triton == 2 and c.gpu_launches == SAMPLED_GPU_LAUNCHES, c


def test_with_the_charges_in_the_kernel_it_is_one_launch(monkeypatch):
    if not interpreted.torch.cuda.is_available():
        interpreted.torch_math_for_libdevice(monkeypatch)
    counts = {case: sampled_counts(*case, fused=True, charges_in_kernel=True) for case in GRID[:2]}
    assert len(set(counts.values())) == 1, counts
    c = counts[GRID[0]]
    assert c.triton == 1 and c.gpu_launches == 1, c


@pytest.mark.parametrize("target_predict", [False, True])
def test_fused_greedy_verify_is_a_constant_number_of_launches(target_predict):
    counts = {case: greedy_counts(*case, fused=True, target_predict=target_predict) for case in GRID}
    assert len(set(counts.values())) == 1, counts
    c = counts[GRID[0]]
    assert c.triton == GREEDY_GPU_LAUNCHES - target_predict and c.compute == 0, c


def test_the_torch_baselines_grow_with_depth():
    """What the fused paths replace: the torch verifiers loop over the levels (and the siblings)."""
    sampled = [sampled_counts(K, False, 1, fused=False).gpu_launches for K in (4, 8, 16)]
    greedy = [greedy_counts(K, False, 1, fused=False, target_predict=True).gpu_launches for K in (4, 8, 16)]
    assert sampled[0] < sampled[1] < sampled[2] and greedy[0] < greedy[1] < greedy[2], (sampled, greedy)
    assert sampled[0] > 15 * SAMPLED_GPU_LAUNCHES, sampled
