"""Seam: SGLang's speculative *sampling* verify on CPU, only with the CPU stand-in and
``SGLANG_ASD_CPU_SAMPLING=on`` (``cpu_backend.env.cpu_sampling``; off by default).

Why: SGLang 0.5.23 verifies sampled rows greedily on CPU (``_verify_uses_greedy(is_cpu=True)`` in
``srt/speculative/eagle_utils.py``: it commits the target's argmax for every row, so a sampled
request decodes as a greedy one) and has no CPU ``tree_speculative_sampling_target_only``
(``kernels/ops/speculative/verify_sampling.py`` binds None), no CPU ``top_k_renorm_prob`` /
``top_p_renorm_prob`` (``kernels/ops/sampling/renorm.py``: None) and no ``murmur_hash32`` the
stand-in can run (``kernels/ops/sampling/murmur_hash.py`` calls a Triton kernel, or the CPU build's
``murmur_hash32_cpu``, which the stand-in lacks; it makes SGLang's seeded coins, ``sampling_seed``).
Without this seam a CPU server answers sampled requests with ``"reason": "sampling"`` and no
speculative sampling to compare against. With it, SGLang's real sampling branch runs on CPU with
torch versions of those, for ASD and stock servers alike, so budget 0 is stock SGLang's sampling
token for token (same ``sampling_seed``) and the sampled rule (docs/SAMPLED.md) is served and
measured on CPU:

- ``_verify_uses_greedy`` sees ``is_cpu=False`` (the GPU predicate);
- ``tree_speculative_sampling_target_only``: ``sglang_asd.verify.sampled_verify.asd_sampled_verify``
  with every row exact (remaining, floor, cap 0), which is SGLang's target-only walk bit for bit
  (``tests/verify/test_sampled_verify.py`` against the port of SGLang's kernel). On an ASD server
  the ``eagle_sample`` seam then wraps this kernel as it wraps SGLang's CUDA kernel (the seam is
  applied before the scheduler hooks are chosen: ``eagle_sample.sampling_hooks`` registers only
  where the kernel exists);
- ``top_k_renorm_prob`` / ``top_p_renorm_prob``: plain torch (keep the k largest, or the smallest
  prefix of the sorted distribution reaching p, then renormalise);
- per-request ``sampling_seed``: SGLang reads it only under ``--enable-deterministic-inference``
  (``SamplingBatchInfo.from_schedule_batch``), which refuses the CPU attention backend
  (``intel_amx``); here ``SamplingBatchInfo`` sees deterministic inference on, so seeded requests draw
  SGLang's seeded coins (``_seeded_verify_coins``) and seeded first tokens, as on a GPU server with
  that flag. As there, a sampled request without a seed draws seed 42's coins: two identical
  unseeded requests return the same text (send ``sampling_seed``, or ``seed`` on the OpenAI routes,
  to vary it);
- ``murmur_hash32``: the arithmetic of SGLang's Triton kernel in int64 torch (not compared with it
  here: Triton has no CPU driver; ASD and stock servers use this one).

Kind: module attribute assignments, not HookRegistry hooks. The kernels are None on CPU, and
HookRegistry's propagation would rebind every module attribute that is None (and every module's
``get_exec``, which all of SGLang imports by name); here each binding is set where SGLang reads it
(``BINDINGS``), nowhere else. ``apply`` is idempotent (a forked child inherits the launcher's,
a spawned one applies its own), and ``missing`` lists a binding that is not this module's function
(or a HookRegistry wrapper around it), so the process refuses to serve
(``cpu_backend.seams.install_cpu_sampling``).

Processes: launcher and scheduler (ASD and stock servers alike; ``install_launcher_cpu_hooks``,
``install_scheduler_hooks``, ``run_stock_scheduler_process``). Not in SGLang's own ``sglang serve``
(the plugin entry point): that needs the stand-in, which only our launchers install.
Upstream: none yet; SGLang's CPU backend would need a sampling verify kernel, renorm ops and the
seeded hash (``sgl_kernel``'s CPU build has ``murmur_hash32_cpu``), and a per-request seed outside
deterministic inference. Removal: when SGLang's CPU path samples in its verify step.
Tested on: sglang 0.5.23 (``tests/integration/test_sampled_serving.py``, ``tests/seams/test_cpu_sampling.py``).
"""

from __future__ import annotations

import importlib

import torch

# (module, name) of every binding this seam sets, each to the function of the same role below.
EAGLE_UTILS = "sglang.srt.speculative.eagle_utils"
BINDINGS = (
    (EAGLE_UTILS, "_verify_uses_greedy"),
    ("sglang.srt.sampling.sampling_batch_info", "get_exec"),
    ("sglang.kernels.ops.speculative.verify_sampling", "tree_speculative_sampling_target_only"),
    (EAGLE_UTILS, "tree_speculative_sampling_target_only"),
    ("sglang.kernels.ops.sampling.renorm", "top_k_renorm_prob"),
    (EAGLE_UTILS, "top_k_renorm_prob"),
    ("sglang.kernels.ops.sampling.renorm", "top_p_renorm_prob"),
    (EAGLE_UTILS, "top_p_renorm_prob"),
    ("sglang.kernels.ops.sampling.murmur_hash", "murmur_hash32"),
    ("sglang.srt.layers.sampler", "murmur_hash32"),
)
# SGLang's originals of the two functions this seam wraps (set by ``apply``, per process).
_ORIGINAL: dict = {}


def wanted() -> bool:
    """Whether this process serves SGLang's sampling verify on CPU: the CPU stand-in is active and
    ``SGLANG_ASD_CPU_SAMPLING=on`` (a bad value raises ``ValueError`` naming it)."""
    from sglang_asd import cpu_backend
    from sglang_asd.cpu_backend import env

    return env.cpu_sampling() and cpu_backend.is_installed()


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


def verify_uses_greedy(*, is_cpu, **kwargs) -> bool:
    """SGLang's ``_verify_uses_greedy`` as on a GPU: ``is_cpu`` read as False (the rest unchanged:
    an all-greedy batch still verifies greedily)."""
    return _ORIGINAL["_verify_uses_greedy"](is_cpu=False, **kwargs)


class _Proxy:
    """``inner`` with some attributes replaced."""

    def __init__(self, inner, **replaced):
        self._inner, self._replaced = inner, replaced

    def __getattr__(self, name):
        return self._replaced[name] if name in self._replaced else getattr(self._inner, name)


def get_exec():
    """SGLang's ``get_exec()`` as ``SamplingBatchInfo`` sees it: deterministic inference on (it then
    reads each request's ``sampling_seed``); every other setting is SGLang's."""
    real = _ORIGINAL["get_exec"]()
    return _Proxy(real, deterministic=_Proxy(real.deterministic, enable_deterministic_inference=True))


_OURS = {"_verify_uses_greedy": verify_uses_greedy, "get_exec": get_exec,
         "tree_speculative_sampling_target_only": tree_speculative_sampling_target_only,
         "top_k_renorm_prob": top_k_renorm_prob, "top_p_renorm_prob": top_p_renorm_prob,
         "murmur_hash32": murmur_hash32}


def apply() -> None:
    """Set every binding of ``BINDINGS`` to this module's function (idempotent: a binding already
    set, or wrapped by a HookRegistry hook around it, is left alone)."""
    for module_name, name in BINDINGS:
        module = importlib.import_module(module_name)
        current = getattr(module, name)
        if _holds(current, _OURS[name]):
            continue
        if name in ("_verify_uses_greedy", "get_exec"):
            _ORIGINAL[name] = current
        setattr(module, name, _OURS[name])


def missing() -> list[str]:
    """The bindings of ``BINDINGS`` that are not this module's function (nor a wrapper around it)."""
    return [f"{m}.{n}" for m, n in BINDINGS if not _holds(getattr(importlib.import_module(m), n), _OURS[n])]


def _holds(obj, fn) -> bool:
    """``obj`` is ``fn``, or a chain of ``functools.wraps`` wrappers (HookRegistry's) around it."""
    for _ in range(16):
        if obj is fn:
            return True
        obj = getattr(obj, "__wrapped__", None)
        if obj is None:
            return False
    return False
