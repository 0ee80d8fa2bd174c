"""Test-only: SGLang's speculative *sampling* verify on CPU.

SGLang 0.5.23 verifies sampled rows greedily on CPU (``_verify_uses_greedy(is_cpu=True)`` in
``srt/speculative/eagle_utils.py``: it commits the target's argmax for every row) and has no CPU
``tree_speculative_sampling_target_only`` (``kernels/ops/speculative/verify_sampling.py`` binds
None), no CPU ``top_k_renorm_prob`` / ``top_p_renorm_prob`` (None) and no CPU ``murmur_hash32``
in the ``sgl_kernel`` stand-in (SGLang's seeded coins, ``sampling_seed``). ``apply`` serves SGLang's
real sampling branch on CPU with torch versions of those:

- ``_verify_uses_greedy`` sees ``is_cpu=False`` (the GPU predicate);
- ``tree_speculative_sampling_target_only``: ``sglang_asd.verify.sampled_verify.asd_sampled_verify``
  with every row exact (remaining, floor, cap 0), which is SGLang's target-only walk bit for bit
  (``tests/verify/test_sampled_verify.py`` against the port of SGLang's kernel);
- ``top_k_renorm_prob`` / ``top_p_renorm_prob``: plain torch (keep the k largest, or the smallest
  prefix of the sorted distribution reaching p, then renormalise);
- per-request ``sampling_seed``: SGLang reads it only under ``--enable-deterministic-inference``
  (``SamplingBatchInfo.from_schedule_batch``), which refuses the CPU attention backend
  (``intel_amx``); here ``SamplingBatchInfo`` sees deterministic inference on, so seeded requests draw
  SGLang's seeded coins (``_seeded_verify_coins``) and seeded first tokens, as on a GPU server with
  that flag;
- ``murmur_hash32``: the arithmetic of SGLang's Triton kernel in int64 torch (not compared with it
  here: Triton has no CPU driver; both test servers use this one).

Stock and ASD test servers apply the same module (``tests.sampling_stock_server`` /
``tests.sampling_asd_server``), so both serve exactly the same sampling path and budget-0 identity
is a real claim. The ASD server's hook then wraps this kernel as it wraps SGLang's CUDA kernel.
Imported first by those server modules, so it applies in every process (the CPU stand-in forks
SGLang's children; spawned children import the main module first).
"""

from __future__ import annotations

import torch


def tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                          retrive_next_token, retrive_next_sibling, uniform_samples,
                                          uniform_samples_for_final_sampling, target_probs, draft_probs,
                                          threshold_single: float = 1.0, threshold_acc: float = 1.0,
                                          deterministic: bool = True) -> None:
    """SGLang's kernel signature (``kernels/ops/speculative/sampling.py``); writes in place, returns None."""
    from sglang_asd.verify.sampled_verify import asd_sampled_verify

    bs = candidates.shape[0]
    zero = torch.zeros(bs, dtype=torch.float32, device=candidates.device)
    asd_sampled_verify(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                       retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling,
                       target_probs.float(), remaining=zero, floor=zero, cap=zero.int(), power=zero,
                       threshold_single=threshold_single, threshold_acc=threshold_acc)


def top_k_renorm_prob(probs: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """[n, V] probs, [n] k -> the k largest probabilities of each row (ties at the k-th kept), renormalised."""
    k = top_k.long().clamp(min=1, max=probs.shape[-1])
    kth = probs.sort(dim=-1, descending=True).values.gather(1, (k - 1)[:, None])
    kept = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


def top_p_renorm_prob(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """[n, V] probs, [n] p -> the smallest prefix of each sorted row whose mass reaches p, renormalised."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass strictly before each entry
    keep_sorted = before < top_p.to(probs.dtype)[:, None]
    keep = torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


_M32 = 0xFFFFFFFF


def _rotl32(x, r):
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix(h, k):
    k = (k * 0xCC9E2D51) & _M32
    k = _rotl32(k, 15)
    k = (k * 0x1B873593) & _M32
    h = h ^ k
    h = _rotl32(h, 13)
    return (h * 5 + 0xE6546B64) & _M32


def murmur_hash32(seed, positions, col_indices):
    """The arithmetic of SGLang's ``murmur_hash32`` (``kernels/ops/sampling/murmur_hash.py``) in int64 torch: [n] seeds,
    [n] positions, [m] columns -> [n, m] hashes (int64 holding the uint32 values)."""
    seed = seed.to(torch.int64)[:, None]  # values < 2**63
    pos = positions.to(torch.int64)[:, None] & _M32
    col = col_indices.to(torch.int64)[None, :] & _M32
    h = torch.zeros(seed.shape[0], col.shape[1], dtype=torch.int64, device=seed.device)
    h = _mix(h, seed & _M32)
    h = _mix(h, (seed >> 32) & _M32)
    h = _mix(h, pos)
    h = _mix(h, col)
    h = h ^ 16
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _M32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


class _Proxy:
    """``inner`` with some attributes replaced."""

    def __init__(self, inner, **replaced):
        self._inner, self._replaced = inner, replaced

    def __getattr__(self, name):
        return self._replaced[name] if name in self._replaced else getattr(self._inner, name)


def _seeded_exec(get_exec):
    def get_exec_seeded():
        real = get_exec()
        return _Proxy(real, deterministic=_Proxy(real.deterministic, enable_deterministic_inference=True))
    return get_exec_seeded


def apply() -> None:
    from sglang.kernels.ops.sampling import murmur_hash, renorm
    from sglang.kernels.ops.speculative import verify_sampling
    from sglang.srt.layers import sampler
    from sglang.srt.sampling import sampling_batch_info
    from sglang.srt.speculative import eagle_utils

    sampling_batch_info.get_exec = _seeded_exec(sampling_batch_info.get_exec)

    stock_predicate = eagle_utils._verify_uses_greedy

    def verify_uses_greedy(*, is_cpu, **kwargs):
        return stock_predicate(is_cpu=False, **kwargs)

    eagle_utils._verify_uses_greedy = verify_uses_greedy
    for module in (verify_sampling, eagle_utils):
        module.tree_speculative_sampling_target_only = tree_speculative_sampling_target_only
    for module in (renorm, eagle_utils):
        module.top_k_renorm_prob = top_k_renorm_prob
        module.top_p_renorm_prob = top_p_renorm_prob
    for module in (murmur_hash, sampler):
        module.murmur_hash32 = murmur_hash32
