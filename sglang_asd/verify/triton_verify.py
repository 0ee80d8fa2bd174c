"""The fused ASD verify for GPUs: ``asd_verify_triton``, same signature and outputs as the torch
verifier (``torch_verify.asd_verify``), bit for bit.

What it fuses (kernels in ``triton_kernels.py``): the one pass over the vocabulary per node
(max and argmax, lowest index on ties, as ``torch.argmax``), the gathers of every child draft
token's logit from its parent's row, the regrets, the three gates, the per-row path choice for
chains and trees and every output, in two launches: the vocabulary pass (grid ``[bs*W, SPLIT]``)
and the selection (grid ``[bs]``). With ``target_predict`` given the vocabulary pass is skipped
and ``max = logits[n, target_predict[n]]`` is one gather.

CUDA graphs: the launch configuration (grid, SPLIT, block sizes, constexprs) is a function of
the tensor shapes and the device only, never of tensor values; there is no host sync and no
branch on data in Python; every output (and the small [bs*W, SPLIT] workspace) is freshly
allocated with ``torch.empty``, so nothing aliases the inputs or a graph's static buffers, and
every element of every output is written by the selection kernel.

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


def choose_split(rows: int, V: int, device: torch.device) -> int:
    """Slices per logits row in the vocabulary pass: enough programs to fill the GPU when
    ``rows = bs*W`` is small, each slice at least ``MIN_TILES_PER_SLICE`` tiles. Shapes only."""
    tiles = triton.cdiv(V, BLOCK_V)
    want = triton.cdiv(PROGRAMS_PER_SM * _sm_count(device), max(rows, 1))
    split = min(triton.next_power_of_2(want), MAX_SPLIT, max(tiles // MIN_TILES_PER_SLICE, 1))
    return max(split, 1)


def asd_verify_triton(
    candidates: torch.Tensor,  # [bs, W] int64 draft token per node (node 0 = root, ignored)
    logits: torch.Tensor,  # [bs*W, V] float final logits (bf16/fp16/fp32)
    retrive_next_token: torch.Tensor,  # [bs, W] int64 first child, -1 none
    retrive_next_sibling: torch.Tensor,  # [bs, W] int64 next sibling, -1 none
    remaining: torch.Tensor,  # [bs] float32 ledger remaining budget (0 => strict row)
    gate: torch.Tensor,  # [bs] float32 g (0 => strict row)
    cap: torch.Tensor,  # [bs] int32 m (0 => strict row)
    depth: int,  # K
    stop_tokens: Optional[torch.Tensor] = None,  # [bs, T] int64 -1 padded; never exceptions
    target_predict: Optional[torch.Tensor] = None,  # [bs, W] int64 argmax per node, if known
) -> ASDVerifyOutput:
    """The fused kernel; see ``ASDVerifyOutput`` and ``torch_verify.asd_verify``."""
    return launch(candidates, logits, retrive_next_token, retrive_next_sibling, remaining, gate, cap, depth,
                  stop_tokens, target_predict)


def launch(candidates, logits, retrive_next_token, retrive_next_sibling, remaining, gate, cap, depth,
           stop_tokens=None, target_predict=None, *, split: Optional[int] = None,
           block_v: int = BLOCK_V, vocab_warps: int = VOCAB_WARPS) -> ASDVerifyOutput:
    """``asd_verify_triton`` with the vocabulary tiling exposed (tests use tiny tiles and
    ``split`` > 1 so that tiny vocabularies still take every path of the reduction)."""
    bs, W, V = _check(candidates, logits, retrive_next_token, retrive_next_sibling, remaining, gate, cap,
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
    )
    if bs == 0:
        return out
    candidates = candidates.contiguous()
    links = retrive_next_token.contiguous(), retrive_next_sibling.contiguous()
    rows = bs * W
    has_tp = target_predict is not None
    if has_tp:
        split = 1
        part_max = part_idx = out.spent  # unused by the kernel
        tp = target_predict.contiguous()
    else:
        split = split or choose_split(rows, V, device)
        chunk = triton.cdiv(triton.cdiv(V, split), block_v) * block_v
        part_max = torch.empty((rows, split), dtype=torch.float32, device=device)
        part_idx = torch.empty((rows, split), dtype=torch.int32, device=device)
        row_argmax_partials_kernel[(rows, split)](
            logits, logits.stride(0), logits.stride(1), part_max, part_idx, V, chunk,
            SPLIT=split, BLOCK_V=block_v, num_warps=vocab_warps,
        )
        tp = candidates  # unused by the kernel
    has_stop = stop_tokens is not None and stop_tokens.shape[1] > 0
    stops = stop_tokens.contiguous() if has_stop else candidates
    T = stops.shape[1] if has_stop else 1
    BW = triton.next_power_of_2(W)
    asd_select_kernel[(bs,)](
        candidates, links[0], links[1], logits, logits.stride(0), logits.stride(1), V,
        part_max, part_idx, tp, remaining.contiguous(), gate.contiguous(), cap.contiguous(), stops, T,
        out.predict, out.accept_index, out.num_correct_drafts, out.spent, out.num_exceptions,
        out.exception_mask, out.exception_regret, out.target_token, out.num_suffix_tokens,
        W=W, K=K, SPLIT=split, HAS_TP=has_tp, HAS_STOP=has_stop, BW=BW,
        BS=triton.next_power_of_2(K + 1), BSPLIT=triton.next_power_of_2(split), BT=triton.next_power_of_2(T),
        num_warps=_select_warps(BW),
    )
    return out


def _select_warps(BW: int) -> int:
    """Warps of the selection kernel: its [BW, BW] reductions stay inside one warp up to W = 16."""
    return 1 if BW <= 16 else 2 if BW <= 32 else 4 if BW <= 64 else 8


def _check(candidates, logits, next_token, next_sibling, remaining, gate, cap, depth, stop_tokens,
           target_predict):
    """Shapes, dtypes and devices (metadata only: no sync). -> (bs, W, V)."""
    if not (isinstance(depth, int) and not isinstance(depth, bool) and depth >= 1):
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
    if candidates.dim() != 2:
        raise ValueError(f"candidates must be [bs, W], got shape {tuple(candidates.shape)}")
    bs, W = candidates.shape
    if logits.dim() != 2 or logits.shape[0] != bs * W:
        raise ValueError(f"logits must be [bs*W, V] = [{bs * W}, V], got shape {tuple(logits.shape)}")
    if logits.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"logits must be bfloat16, float16 or float32, got {logits.dtype}")
    V = logits.shape[1]
    named = {"retrive_next_token": (next_token, (bs, W)), "retrive_next_sibling": (next_sibling, (bs, W)),
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
