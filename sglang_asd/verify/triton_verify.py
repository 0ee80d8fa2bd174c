"""The fused ASD verify for GPUs: ``asd_verify_triton``, same signature and outputs as the torch
verifier (``torch_verify.asd_verify_torch``), bit for bit; keyword-only tiling knobs for tests.

What it fuses (kernels in ``triton_kernels.py``): the one pass over the vocabulary per node
(max and argmax, lowest index on ties, as ``torch.argmax``), the gathers of every child draft
token's logit from its parent's row, the regrets, the three gates, the per-row path choice for
chains and trees and every output, in two launches: the vocabulary pass (grid ``[bs*W, split]``)
and the selection (grid ``[bs]``). With ``target_predict`` given the vocabulary pass is skipped
and ``max = logits[n, target_predict[n]]`` is one gather.

CUDA graphs: the launch configuration (grid, split, block sizes, constexprs) is a function of
the tensor shapes and the device only, never of tensor values; there is no host sync and no
branch on data in Python; every output (and the small [bs*W, split] workspace) is freshly
allocated with ``torch.empty``, so nothing aliases the inputs or a graph's static buffers, and
every element of every output is written by the selection kernel.

Compiled variants: the index and ledger inputs are cast to the contract's dtypes (int64 tokens
and links, float32 remaining and gate, int32 cap; no-ops for what SGLang passes), so only the
logits' dtype enters the kernels' signatures; which constexprs a call compiles is
``variants.specialization_key`` (the module docstring there says why the set is small).

Depth 0 (SGLang's adaptive zero-step verify: ``W = 1``, ``K = 0``) launches the same kernels:
only the root is accepted, the bonus is its argmax, and the per-position outputs are ``[bs, 0]``.

Tensor parallelism (why every rank reaches the same decision):
1. SGLang's logits processor gathers the vocab-parallel shards before sampling
   (``LogitsProcessor._get_logits``, ``do_tensor_parallel_all_gather``), so every TP rank holds
   the full ``[bs*W, V]`` logits, and penalties, logit bias and grammar masks are applied
   identically on every rank. A gather moves bytes and does no arithmetic, so the ranks' logits
   are bitwise identical whenever the shards were (SGLang's own greedy sampling rests on the
   same premise: by default it does not sync token ids across ranks).
2. The decision is a deterministic function of (logits, candidates, tree links, ledger rows,
   stop tokens): both launches have a fixed grid and no atomics, the vocabulary reduction has a
   fixed order and its result (max, lowest index) does not depend on the order anyway, and
   every float step (fp32 max, fp32 ``max - logit``, IEEE-rounded ``regret / q``, the
   path-order fp32 regret sum) is exactly rounded. Same inputs on the same kind of GPU give
   the same bits on every rank.
3. The ledger rows (``remaining``, gate, cap) live on every rank and are updated from this very
   output (``remaining -= spent``), so they stay identical round after round, by induction.
Where the premise of 1 fails (a backend whose logits may differ bitwise across ranks, e.g. a
non-deterministic reduction in the head; SGLang guards that case for sampled ids with an
all-reduce MIN under ``SYNC_TOKEN_IDS_ACROSS_TP`` or grammars), call
``sglang_asd.verify.tp.broadcast_decision`` to make rank 0's whole decision everyone's: a MIN
per field could mix two ranks' decisions, a broadcast cannot.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch
import triton

from sglang_asd.verify.output import ASDVerifyOutput
from sglang_asd.verify.triton_kernels import asd_select_kernel, row_argmax_partials_kernel
from sglang_asd.verify.variants import vocab_unit

BLOCK_V = 2048  # columns per tile of the vocabulary pass (16 B per thread for bf16 at 8 warps)
VOCAB_WARPS = 8
MAX_SPLIT = 64
PROGRAMS_PER_SM = 4  # aim for this many vocabulary-pass programs per multiprocessor
MIN_TILES_PER_SLICE = 2


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1  # the interpreter on CPU: no point splitting


def choose_split(rows: int, V: int, device: torch.device, block_v: int = BLOCK_V) -> int:
    """Slices per logits row in the vocabulary pass: enough programs to fill the GPU when
    ``rows = bs*W`` is small, each slice at least ``MIN_TILES_PER_SLICE`` tiles. Shapes only;
    a runtime argument of the kernels, so it never compiles a variant."""
    tiles = triton.cdiv(V, block_v)
    want = triton.cdiv(PROGRAMS_PER_SM * _sm_count(device), max(rows, 1))
    split = min(triton.next_power_of_2(want), MAX_SPLIT, max(tiles // MIN_TILES_PER_SLICE, 1))
    return max(split, 1)


def select_warps(W_PAD: int) -> int:
    """Warps of the selection kernel: its [W_PAD, W_PAD] reductions stay inside one warp up to W = 16."""
    return 1 if W_PAD <= 16 else 2 if W_PAD <= 32 else 4 if W_PAD <= 64 else 8


def asd_verify_triton(
    candidates: torch.Tensor,  # [bs, W] int64 draft token per node (node 0 = root, ignored)
    logits: torch.Tensor,  # [bs*W, V] float final logits (bf16/fp16/fp32)
    retrieve_next_token: torch.Tensor,  # [bs, W] int64 first child, -1 none
    retrieve_next_sibling: torch.Tensor,  # [bs, W] int64 next sibling, -1 none
    remaining: torch.Tensor,  # [bs] float32 ledger remaining budget (0 => strict row)
    gate: torch.Tensor,  # [bs] float32 g (0 => strict row)
    cap: torch.Tensor,  # [bs] int32 m (0 => strict row)
    depth: int,  # K
    stop_tokens: Optional[torch.Tensor] = None,  # [bs, T] int64 -1 padded; never exceptions
    target_predict: Optional[torch.Tensor] = None,  # [bs, W] int64 argmax per node, if known
    tree_depth_gate: bool = False,  # NGRAM: q_i = (row's tree depth) - i instead of K - i
    *,
    split: Optional[int] = None,  # vocabulary slices per row (default: ``choose_split``)
    block_v: int = BLOCK_V,  # tests use tiny tiles so that tiny vocabularies take every path
    vocab_warps: int = VOCAB_WARPS,
) -> ASDVerifyOutput:
    """The fused kernel for asd rows (and local rows, which verify identically: ``rules.py``); see
    ``ASDVerifyOutput`` and ``torch_verify.asd_verify_torch``. Rows under other rules take the torch
    verifier (``dispatch.py``)."""
    bs, W, V = _check(candidates, logits, retrieve_next_token, retrieve_next_sibling, remaining, gate, cap,
                      depth, stop_tokens, target_predict)
    K = depth
    device = logits.device
    out = ASDVerifyOutput(
        predict=torch.empty(bs * W, dtype=torch.int32, device=device),
        accept_index=torch.empty((bs, K + 1), dtype=torch.int32, device=device),
        num_correct_drafts=torch.empty(bs, dtype=torch.int32, device=device),
        spent=torch.empty(bs, dtype=torch.float32, device=device),
        num_exceptions=torch.empty(bs, dtype=torch.int32, device=device),
        exception_mask=torch.empty((bs, K), dtype=torch.bool, device=device),
        exception_regret=torch.empty((bs, K), dtype=torch.float32, device=device),
        target_token=torch.empty((bs, K), dtype=torch.int64, device=device),
        num_suffix_tokens=torch.empty(bs, dtype=torch.int32, device=device),
        scope_skipped=torch.zeros(bs, dtype=torch.int32, device=device),  # the kernel takes no scope
    )
    if bs == 0:
        return out
    if logits.stride(1) != 1:
        logits = logits.contiguous()  # the kernels read rows with unit column stride
    as_index = lambda t: t.to(torch.int64).contiguous()  # noqa: E731  (no-ops for the contract's dtypes)
    candidates = as_index(candidates)
    rows = bs * W
    has_target_predict = target_predict is not None
    if has_target_predict:
        split = 1
        target_predict = as_index(target_predict)
        part_max, part_idx = out.spent, out.num_exceptions  # unused by the kernel
    else:
        split = split or choose_split(rows, V, device, block_v)
        tiles_per_slice = triton.cdiv(triton.cdiv(V, split), block_v)
        part_max = torch.empty((rows, split), dtype=torch.float32, device=device)
        part_idx = torch.empty((rows, split), dtype=torch.int32, device=device)
        unit = vocab_unit(V, logits.stride(0))
        row_argmax_partials_kernel[(rows, split)](
            logits, logits.stride(0) // unit, part_max, part_idx, V // unit, split, tiles_per_slice,
            BLOCK_V=block_v, UNIT=unit, num_warps=vocab_warps,
        )
        target_predict = candidates  # unused by the kernel
    if stop_tokens is None:
        stop_tokens = candidates[:, :0]  # T = 0
    stop_tokens = as_index(stop_tokens)
    W_PAD = triton.next_power_of_2(W)
    asd_select_kernel[(bs,)](
        candidates, as_index(retrieve_next_token), as_index(retrieve_next_sibling), logits, logits.stride(0), V,
        part_max, part_idx, split, target_predict, remaining.to(torch.float32).contiguous(),
        gate.to(torch.float32).contiguous(), cap.to(torch.int32).contiguous(), stop_tokens, stop_tokens.shape[1],
        int(bool(tree_depth_gate)), out.predict, out.accept_index, out.num_correct_drafts, out.spent, out.num_exceptions,
        out.exception_mask, out.exception_regret, out.target_token, out.num_suffix_tokens,
        W=W, K=K, HAS_TARGET_PREDICT=has_target_predict, W_PAD=W_PAD, S_PAD=triton.next_power_of_2(K + 1),
        num_warps=select_warps(W_PAD),
    )
    return out


def _check(candidates, logits, next_token, next_sibling, remaining, gate, cap, depth, stop_tokens,
           target_predict):
    """Shapes, dtypes and devices (metadata only: no sync). -> (bs, W, V)."""
    if not (isinstance(depth, int) and not isinstance(depth, bool) and depth >= 0):
        raise ValueError(f"depth must be an integer >= 0, got {depth!r}")
    if candidates.dim() != 2:
        raise ValueError(f"candidates must be [bs, W], got shape {tuple(candidates.shape)}")
    bs, W = candidates.shape
    if W < 1:
        raise ValueError(f"candidates must hold W >= 1 nodes per row (the root first), got shape {tuple(candidates.shape)}")
    if logits.dim() != 2 or logits.shape[0] != bs * W:
        raise ValueError(f"logits must be [bs*W, V] = [{bs * W}, V], got shape {tuple(logits.shape)}")
    if logits.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"logits must be bfloat16, float16 or float32, got {logits.dtype}")
    V = logits.shape[1]
    named = {"retrieve_next_token": (next_token, (bs, W)), "retrieve_next_sibling": (next_sibling, (bs, W)),
             "remaining": (remaining, (bs,)), "gate": (gate, (bs,)), "cap": (cap, (bs,))}
    if target_predict is not None:
        named["target_predict"] = (target_predict, (bs, W))
    if stop_tokens is not None:
        if stop_tokens.dim() != 2 or stop_tokens.shape[0] != bs:
            raise ValueError(f"stop_tokens must be [bs, T] = [{bs}, T], got shape {tuple(stop_tokens.shape)}")
        named["stop_tokens"] = (stop_tokens, tuple(stop_tokens.shape))
    named["candidates"] = (candidates, (bs, W))
    for name, (t, shape) in named.items():
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {list(shape)}, got {list(t.shape)}")
        if t.device != logits.device:
            raise ValueError(f"{name} must be on the logits' device {logits.device}, got {t.device}")
    return bs, W, V
