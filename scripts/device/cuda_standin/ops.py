"""Plain-torch versions of the ``sgl_kernel`` functions SGLang's CUDA text path may call (test-only).

Used only by the GPU end-to-end kit (``cuda_standin``, opt-in ``SGLANG_ASD_KERNEL_STANDIN=cuda-e2e``)
on a device machine that has no ``sgl_kernel`` wheel. The kit forces SGLang's own native forwards
(``SGLANG_FORCE_FUSED_OP_BACKEND=torch``), so most of these are a safety net for call sites that
bypass the fused-op dispatch. Signatures follow ``sgl_kernel`` 0.4.10's Python wrappers; every
function runs on any device, issues no host synchronisation, and is safe to capture in a CUDA graph.

``tree_speculative_sampling_target_only`` is a port of SGLang's JIT kernel
(``kernels/jit/include/sgl_kernel/speculative/sampling.cuh``), which needs flashinfer's headers to
compile: it walks the draft tree one level at a time for the whole batch at once.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (y * (weight.float() + offset)).to(x.dtype)


def rmsnorm(input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: Optional[torch.Tensor] = None,
            enable_pdl: Optional[bool] = None) -> torch.Tensor:
    """``out = input / RMS(input) * weight``."""
    y = _rms(input, weight, eps, 0.0)
    return y if out is None else out.copy_(y)


def _fused_add_rms(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, offset: float) -> None:
    residual.add_(input)
    input.copy_(_rms(residual, weight, eps, offset))


def fused_add_rmsnorm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                      enable_pdl: Optional[bool] = None) -> None:
    """In place: ``residual += input``; ``input = residual / RMS(residual) * weight``."""
    _fused_add_rms(input, residual, weight, eps, 0.0)


def gemma_rmsnorm(input: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, out: Optional[torch.Tensor] = None,
                  enable_pdl: Optional[bool] = None) -> torch.Tensor:
    """``out = input / RMS(input) * (weight + 1)``."""
    y = _rms(input, weight, eps, 1.0)
    return y if out is None else out.copy_(y)


def gemma_fused_add_rmsnorm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                            enable_pdl: Optional[bool] = None) -> None:
    """In place: ``residual += input``; ``input = residual / RMS(residual) * (weight + 1)``."""
    _fused_add_rms(input, residual, weight, eps, 1.0)


def _gated(act, input: torch.Tensor, out: Optional[torch.Tensor]) -> torch.Tensor:
    d = input.shape[-1] // 2
    y = act(input[..., :d].float()) * input[..., d:].float()
    y = y.to(input.dtype)
    return y if out is None else out.copy_(y)


def silu_and_mul(input: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _gated(F.silu, input, out)


def gelu_and_mul(input: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _gated(lambda x: F.gelu(x, approximate="none"), input, out)


def gelu_tanh_and_mul(input: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _gated(lambda x: F.gelu(x, approximate="tanh"), input, out)


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, head_size: int,
                     cos_sin_cache: torch.Tensor, is_neox: bool = True) -> None:
    """In place on ``query`` / ``key`` (``[tokens, heads * head_size]``); cache rows are ``[cos | sin]``."""
    cos, sin = cos_sin_cache.index_select(0, positions.flatten().long()).float().chunk(2, dim=-1)
    rot = cos.shape[-1] * 2
    for t in (query, key):
        x = t.view(t.shape[0], -1, head_size)
        r = x[..., :rot].float()
        if is_neox:
            x1, x2 = r[..., : rot // 2], r[..., rot // 2:]
            c, s = cos[:, None, :], sin[:, None, :]
            x[..., :rot] = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(t.dtype)
        else:
            x1, x2 = r[..., 0::2], r[..., 1::2]
            c, s = cos[:, None, :], sin[:, None, :]
            x[..., :rot] = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2).to(t.dtype)


def top_k_renorm_prob(probs: torch.Tensor, top_k: Union[torch.Tensor, int]) -> torch.Tensor:
    """Keep each row's ``top_k`` largest probabilities (ties at the threshold kept), renormalise."""
    probs = probs.float()
    V = probs.shape[-1]
    k = torch.as_tensor(top_k, device=probs.device).long().expand(probs.shape[0]).clamp(1, V)
    sorted_desc = probs.sort(dim=-1, descending=True).values
    thresh = sorted_desc.gather(1, (k - 1)[:, None])
    kept = torch.where(probs >= thresh, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


def top_p_renorm_prob(probs: torch.Tensor, top_p: Union[torch.Tensor, float]) -> torch.Tensor:
    """Keep the smallest set of largest probabilities whose mass reaches ``top_p``, renormalise."""
    probs = probs.float()
    p = torch.as_tensor(top_p, device=probs.device, dtype=torch.float32).expand(probs.shape[0])
    sorted_desc, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_desc.cumsum(dim=-1) - sorted_desc
    keep_sorted = mass_before < p[:, None]
    keep = torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


def weak_ref_tensor(tensor):
    """``sgl_kernel`` returns a non-owning alias; plain torch can only return the tensor (kept alive longer)."""
    return tensor


def can_use_store_cache(k_row_bytes: int, v_row_bytes: int = 0, num_threads: int = 0) -> bool:
    """Replaces SGLang's probe of its JIT ``store_cache`` kernel: False, so SGLang writes the KV cache
    with its own torch fallback instead of compiling the kernel with nvcc on a bare device machine."""
    return False


def is_arch_support_pdl() -> bool:
    """Programmatic dependent launch is a compiled-kernel feature: never claimed by the stand-in."""
    return False


def tree_speculative_sampling_target_only(
    predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor, candidates: torch.Tensor,
    retrive_index: torch.Tensor, retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor,
    uniform_samples: torch.Tensor, uniform_samples_for_final_sampling: torch.Tensor, target_probs: torch.Tensor,
    draft_probs: torch.Tensor, threshold_single: float = 1.0, threshold_acc: float = 1.0,
    deterministic: bool = True,
) -> None:
    """SGLang's target-only tree speculative sampling, in place (``predicts``, ``accept_index``,
    ``accept_token_num``, and ``draft_probs`` where a sibling was rejected).

    Per row: walk down from the root; at each level try the children in sibling order, accepting
    child ``c`` (token ``t``, probability ``q = target[node, t]``) when ``q > 0`` and either the
    running coin is below the level's accumulated ``q`` / ``threshold_acc`` or ``q >=
    threshold_single``; a rejected child's ``q`` goes into ``draft_probs`` so the final residual
    ``relu(target - draft)`` excludes it. The bonus token is drawn from that residual at the last
    accepted node with ``uniform_samples_for_final_sampling`` (inverse CDF; the last positive entry,
    else ``V - 1``, when rounding leaves no entry above the draw).
    """
    bs, W = candidates.shape
    S = accept_index.shape[1]
    V = target_probs.shape[-1]
    dev = candidates.device
    rows = torch.arange(bs, device=dev)
    thr_acc = max(float(threshold_acc), 1e-9)
    node = torch.zeros(bs, dtype=torch.long, device=dev)  # node whose target distribution is current
    cur = torch.zeros(bs, dtype=torch.long, device=dev)
    coin = uniform_samples[:, 0].clone()
    last = retrive_index[:, 0].clone()  # global id of the last accepted node
    accept_index[:, 0] = last.to(accept_index.dtype)
    n_acc = torch.zeros(bs, dtype=torch.long, device=dev)
    prob_acc = torch.zeros(bs, dtype=target_probs.dtype, device=dev)
    alive = torch.ones(bs, dtype=torch.bool, device=dev)
    for _ in range(1, S):
        child = retrive_next_token.gather(1, cur.clamp(min=0)[:, None]).squeeze(1)
        cur = torch.where(alive, child, torch.full_like(cur, -1))
        searching = cur >= 0
        accepted = torch.zeros_like(alive)
        for _ in range(W):
            idx = cur.clamp(min=0)
            tok = candidates.gather(1, idx[:, None]).squeeze(1)
            q = target_probs[rows, node, tok]
            acc_sum = prob_acc + q
            take = searching & (q > 0) & ((coin < acc_sum / thr_acc) | (q >= threshold_single))
            drop = searching & ~take
            old = draft_probs[rows, node, tok]
            draft_probs[rows, node, tok] = torch.where(drop, q, old)
            prob_acc = torch.where(take, torch.zeros_like(prob_acc), torch.where(drop, acc_sum, prob_acc))
            predicts.scatter_(0, last, torch.where(take, tok.to(predicts.dtype), predicts.gather(0, last)))
            n_acc = n_acc + take.long()
            draft_id = retrive_index.gather(1, idx[:, None]).squeeze(1)
            slot = n_acc.clamp(max=S - 1)[:, None]
            accept_index.scatter_(1, slot, torch.where(take[:, None], draft_id[:, None].to(accept_index.dtype),
                                                       accept_index.gather(1, slot)))
            last = torch.where(take, draft_id, last)
            node = torch.where(take, idx, node)
            coin = torch.where(take, uniform_samples.gather(1, idx[:, None]).squeeze(1), coin)
            sibling = retrive_next_sibling.gather(1, idx[:, None]).squeeze(1)
            cur = torch.where(drop, sibling, cur)
            accepted |= take
            searching = drop & (sibling >= 0)
        alive &= accepted
    accept_token_num.copy_(n_acc.to(accept_token_num.dtype))
    q = target_probs[rows, node]  # [bs, V]
    p = torch.where((n_acc != S - 1)[:, None], draft_probs[rows, node], torch.zeros_like(q))
    resid = (q - p).clamp(min=0)
    u = uniform_samples_for_final_sampling * resid.sum(dim=-1)
    positive = resid > 0
    above = positive & (resid.cumsum(dim=-1) > u[:, None])
    first = above.int().argmax(dim=-1)
    last_positive = V - 1 - positive.flip(-1).int().argmax(dim=-1)
    fallback = torch.where(positive.any(dim=-1), last_positive, torch.full_like(last_positive, V - 1))
    sampled = torch.where(above.any(dim=-1), first, fallback)
    predicts.scatter_(0, last, sampled.to(predicts.dtype))


# Name -> implementation, for the stand-in modules (``cuda_standin/__init__.py``).
TOP_LEVEL = {f.__name__: f for f in (
    rmsnorm, fused_add_rmsnorm, gemma_rmsnorm, gemma_fused_add_rmsnorm, silu_and_mul, gelu_and_mul,
    gelu_tanh_and_mul, rotary_embedding, top_k_renorm_prob, top_p_renorm_prob, weak_ref_tensor,
    tree_speculative_sampling_target_only,
)}
SUBMODULES = {
    "utils": {"is_arch_support_pdl": is_arch_support_pdl},
    "memory": {"weak_ref_tensor": weak_ref_tensor},
    "elementwise": {k: TOP_LEVEL[k] for k in ("rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm",
                                              "gemma_fused_add_rmsnorm", "silu_and_mul", "gelu_and_mul",
                                              "gelu_tanh_and_mul", "rotary_embedding")},
    "sampling": {k: TOP_LEVEL[k] for k in ("top_k_renorm_prob", "top_p_renorm_prob")},
}
