"""The fused sampled verify for GPUs: ``asd_sampled_verify_triton``, same signature, in-place
writes and receipts as the torch verifier (``sampled_verify.asd_sampled_verify``), bit for bit.

What it fuses (kernels in ``triton_sampled_kernels.py``): the tree links, every node's q at its
parent, the relaxed-child choice, the K-level walk with the ledger and cap tests, the coin
mapping after a relaxed rejection, SGLang's sibling walk with its thresholds, the writes of the
accepted path, every receipt, and the bonus draw from the residual, tiled over the vocabulary.
One call is two kernel launches plus the float64 node charges, a fixed set of ``[bs, W]`` torch
ops (``node_charges``), and the output allocations: the count does not grow with the depth K,
the width W or the batch (``tests/verify/test_launch_budget.py``).

Why the charges stay torch ops: they take ``pow``, ``log`` and ``log1p`` in float64, and the
verdict must be the torch verifier's bit for bit. Triton's interpreter evaluates its math with
numpy, whose float64 ``log``/``log1p``/``pow`` differ from torch's CPU ones in the last ulp on a
share of inputs (and it has no ``log1p``/``pow`` at all: ``libdevice`` is not interpretable), so
charges computed in the kernel could not be checked bit for bit in CPU CI. Computed by the same
torch function in both paths they are identical by construction, on every device. On CUDA the
in-kernel version (libdevice's ``__nv_pow``, ``__nv_log``, ``__nv_log1p``, the routines torch's
CUDA ops compile to) would save those launches; it needs a device to prove its parity.

``charges_in_kernel`` (``CHARGES_IN_KERNEL``, off): the same charges in the walk kernel from
libdevice's routines, q gathered there too: the whole call is one launch. CUDA only (the
interpreter cannot run libdevice; ``test_charges_in_the_kernel`` checks the expression with
torch's math standing in), so it waits for a device run of ``scripts/device_verify_bench.py``
to show libdevice bit-identical to torch's CUDA ops.

Memory: no ``[bs, V]`` or ``[bs, W, V]`` temporary. What is allocated per call: the outputs (the
receipts, ``[bs, K]`` each), ``q`` ``[bs, W]`` float32 and the three ``[bs, W]`` float64 charge
tensors (with node_charges' own ``[bs, W]`` intermediates). SGLang's own sampling kernel holds
none either; its caller's ``target_probs`` ``[bs, W, V]`` is read in place here.

CUDA graphs and the overlap scheduler: the launch configuration (grids ``[bs]``, ``W_PAD``,
``BLOCK_V``, warps) is a function of shapes only; there is no host sync, no branch on tensor data
in Python and no data-dependent allocation. Every output element is written by the walk kernel;
``predicts`` / ``accept_index`` are written only where SGLang's kernel writes them (the caller
pre-fills them, as it does for SGLang's). Both kernels and the charge ops run in stream order on
the current stream after the target forward that produced ``target_probs``, like SGLang's kernel
they replace; nothing is read back to the host, so the overlap scheduler's one-step lag is
untouched (the ledger update from ``spent`` is the caller's, in the same stream).

Tensor parallelism: the result is a deterministic function of the inputs (fixed grids, no
atomics, fixed reduction order); the seam broadcasts rank 0's result anyway, as SGLang does for
its sampling branch.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton

from sglang_asd.verify.sampled_verify import SampledVerifyOutput, node_charges, sibling_steps
from sglang_asd.verify.triton_sampled_kernels import sampled_node_q_kernel, sampled_walk_kernel

BLOCK_V = 1024  # vocabulary columns per tile of the bonus draw, up to W_PAD = 16
# The node charges in the walk kernel (libdevice) instead of 27 torch ops: CUDA only, and off until
# a device run shows it bit-identical to the torch ops (scripts/device_verify_bench.py, section 5).
CHARGES_IN_KERNEL = False
TILE_ELEMENTS = 16384  # the bonus draw's [BLOCK_V, W_PAD] comparison against the rejected tokens


def block_v_for(W_PAD: int) -> int:
    """Columns per bonus tile: ``BLOCK_V``, smaller for wide trees so the ``[BLOCK_V, W_PAD]``
    comparison stays in registers (a function of W_PAD: no variant of its own)."""
    return max(128, min(BLOCK_V, TILE_ELEMENTS // W_PAD))


def select_warps(W_PAD: int) -> int:
    """Warps of both kernels: their [W_PAD, W_PAD] reductions and [BLOCK_V, W_PAD] tile comparisons
    without spilling (``tests/verify/test_sampled_triton_compile.py``)."""
    return 4 if W_PAD <= 16 else 8 if W_PAD <= 32 else 16


def asd_sampled_verify_triton(
    predicts: torch.Tensor,  # [bs*W] int32, mutable
    accept_index: torch.Tensor,  # [bs, K+1] int32, mutable
    accept_token_num: torch.Tensor,  # [bs] int32, mutable
    candidates: torch.Tensor,  # [bs, W] int64
    retrieve_index: torch.Tensor,  # [bs, W] int64
    retrieve_next_token: torch.Tensor,  # [bs, W] int64
    retrieve_next_sibling: torch.Tensor,  # [bs, W] int64
    uniform_samples: torch.Tensor,  # [bs, W] float32
    uniform_samples_for_final_sampling: torch.Tensor,  # [bs] float32
    target_probs: torch.Tensor,  # [bs, W, V] float32
    remaining: torch.Tensor,  # [bs] float32
    floor: torch.Tensor,  # [bs] float32
    cap: torch.Tensor,  # [bs] int32
    power: torch.Tensor,  # [bs] float32
    stop_tokens: Optional[torch.Tensor] = None,  # [bs, T] int64 -1 padded
    threshold_single: float = 1.0,
    threshold_acc: float = 1.0,
    max_children: Optional[int] = None,
    *,
    block_v: Optional[int] = None,  # default ``block_v_for(W_PAD)``; tests use tiny tiles to cross tiles
    charges_in_kernel: Optional[bool] = None,  # default ``CHARGES_IN_KERNEL``; True needs CUDA
) -> SampledVerifyOutput:
    """See ``sampled_verify.asd_sampled_verify``; the fused kernels (module docstring)."""
    bs, W = candidates.shape
    K = accept_index.shape[1] - 1
    V = target_probs.shape[-1]
    device = candidates.device
    _check(predicts, accept_index, accept_token_num, target_probs, bs, W)
    siblings = sibling_steps(W, max_children)
    out = SampledVerifyOutput(
        spent=torch.empty(bs, dtype=torch.float32, device=device),
        num_relaxed=torch.empty(bs, dtype=torch.int32, device=device),
        relaxed=torch.empty((bs, K), dtype=torch.bool, device=device),
        relaxed_token=torch.empty((bs, K), dtype=torch.int64, device=device),
        relaxed_q=torch.empty((bs, K), dtype=torch.float32, device=device),
        relaxed_accept_prob=torch.empty((bs, K), dtype=torch.float32, device=device),
        relaxed_charge=torch.empty((bs, K), dtype=torch.float32, device=device),
        relaxed_accepted=torch.empty((bs, K), dtype=torch.bool, device=device),
    )
    if bs == 0:
        return out
    as_index = lambda t: t.to(torch.int64).contiguous()  # noqa: E731  (no-ops for the contract's dtypes)
    candidates, retrieve_index = as_index(candidates), as_index(retrieve_index)
    next_token, next_sibling = as_index(retrieve_next_token), as_index(retrieve_next_sibling)
    if target_probs.stride(2) != 1:
        target_probs = target_probs.contiguous()
    W_PAD = triton.next_power_of_2(W)
    warps = select_warps(W_PAD)
    power = power.to(torch.float32).contiguous()
    in_kernel = CHARGES_IN_KERNEL if charges_in_kernel is None else charges_in_kernel
    if in_kernel:
        q = q64 = a64 = charge64 = power  # unread by the walk kernel, which gathers q and charges itself
    else:
        q = torch.empty((bs, W), dtype=torch.float32, device=device)
        sampled_node_q_kernel[(bs,)](
            candidates, next_token, next_sibling, target_probs, target_probs.stride(0), target_probs.stride(1), q,
            W, V, W_PAD=W_PAD, num_warps=warps,
        )
        q64, a64, charge64 = node_charges(q, power)
    if stop_tokens is None:
        stop_tokens = candidates[:, :0]  # T = 0
    stop_tokens = as_index(stop_tokens)
    sampled_walk_kernel[(bs,)](
        predicts, accept_index, accept_token_num, candidates, retrieve_index, next_token, next_sibling,
        uniform_samples.to(torch.float32).contiguous(),
        uniform_samples_for_final_sampling.to(torch.float32).contiguous(),
        target_probs, target_probs.stride(0), target_probs.stride(1), q, q64, a64, charge64, power,
        remaining.to(torch.float32).contiguous(), floor.to(torch.float32).contiguous(),
        cap.to(torch.int32).contiguous(), stop_tokens, stop_tokens.shape[1],
        float(threshold_single), max(float(threshold_acc), 1e-9), siblings,
        out.spent, out.num_relaxed, out.relaxed, out.relaxed_token, out.relaxed_q, out.relaxed_accept_prob,
        out.relaxed_charge, out.relaxed_accepted,
        W, K, V, W_PAD=W_PAD, BLOCK_V=block_v or block_v_for(W_PAD), CHARGES_IN_KERNEL=in_kernel,
        num_warps=warps, enable_fp_fusion=False,  # no contracted multiply-add: the torch ops' roundings
    )
    return out


def _check(predicts, accept_index, accept_token_num, target_probs, bs, W) -> None:
    """Shapes and dtypes the kernels write through (metadata only: no sync)."""
    for name, t, shape in (("predicts", predicts, (bs * W,)), ("accept_token_num", accept_token_num, (bs,)),
                           ("accept_index", accept_index, (bs, accept_index.shape[1]))):
        if t.dtype != torch.int32 or tuple(t.shape) != shape or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous int32 tensor of shape {list(shape)}, "
                             f"got {t.dtype} {list(t.shape)}")
    if target_probs.dtype != torch.float32 or target_probs.dim() != 3 or tuple(target_probs.shape[:2]) != (bs, W):
        raise ValueError(f"target_probs must be float32 [bs, W, V] = [{bs}, {W}, V], "
                         f"got {target_probs.dtype} {list(target_probs.shape)}")
