"""Seam: SGLang's speculative *sampling* verify on CPU, with the CPU stand-in unless
``SGLANG_ASD_CPU_SAMPLING=off`` (``cpu_backend.env.cpu_sampling``; on by default).

Why: SGLang 0.5.23 verifies sampled rows greedily on CPU (``_verify_uses_greedy(is_cpu=True)`` in
``srt/speculative/eagle_utils.py``: it commits the target's argmax for every row, so a sampled
request's first token is sampled and the rest is the greedy continuation of it) and has no CPU
``tree_speculative_sampling_target_only`` (``kernels/ops/speculative/verify_sampling.py`` binds None),
no CPU ``top_k_renorm_prob`` / ``top_p_renorm_prob`` (``kernels/ops/sampling/renorm.py``: None) and no
``murmur_hash32`` the stand-in can run (``kernels/ops/sampling/murmur_hash.py`` calls a Triton kernel,
or the CPU build's ``murmur_hash32_cpu``, which the stand-in lacks; it makes SGLang's seeded coins,
``sampling_seed``). Without this seam a CPU server answers sampled requests with
``"reason": "sampling"`` and no speculative sampling to compare against. With it, SGLang's real
sampling branch runs on CPU with torch versions of those, for ASD and stock servers alike, so
budget 0 is stock SGLang's sampling token for token (same ``sampling_seed``) and the sampled rule
(docs/SAMPLED.md) is served and measured on CPU:

- ``_verify_uses_greedy`` sees ``is_cpu=False`` (the GPU predicate);
- ``tree_speculative_sampling_target_only``: ``sglang_asd.verify.sampled_verify.asd_sampled_verify``
  with every row exact (remaining, floor, cap 0), which is SGLang's target-only walk bit for bit
  (``tests/verify/test_sampled_verify.py`` against the port of SGLang's kernel). On an ASD server
  the ``eagle_sample`` seam then wraps this kernel as it wraps SGLang's CUDA kernel (the seam is
  applied before the scheduler hooks are chosen: ``eagle_sample.sampling_hooks`` registers only
  where the kernel exists);
- ``top_k_renorm_prob`` / ``top_p_renorm_prob``: plain torch (keep the k largest, or the smallest
  prefix of the sorted distribution reaching p, then renormalise);
- per-request seeds: SGLang reads ``sampling_seed`` only under ``--enable-deterministic-inference``
  (``SamplingBatchInfo.from_schedule_batch``), which refuses the CPU attention backend
  (``intel_amx``), and there gives every request without one seed 42 (two identical unseeded
  requests return the same text). Here ``SamplingBatchInfo.from_schedule_batch`` is SGLang's, then
  sets the batch's ``sampling_seed`` row by row (``request_seeds``): the request's ``sampling_seed``
  (``seed`` on the OpenAI routes), or, without one, a seed hashed from its request id. Seeded
  requests draw SGLang's seeded coins (``_seeded_verify_coins``) and seeded first tokens, as on a GPU
  server with that flag, and reproduce; unseeded ones draw fresh randomness, since SGLang gives each
  request (and each of its ``n`` choices) a fresh uuid as ``rid``. The id is the same on every TP rank
  and across a retraction, so ranks draw the same coins and a retracted request its own again. A
  client that sends the same ``rid`` twice without a seed draws the same coins twice. Cost: one
  hash per request and one ``[bs]`` int64 tensor where SGLang builds a batch's sampling info (a new
  prefill batch; decode steps filter and merge the tensor, as SGLang's seeded path does): no
  per-step work, no device sync. Overlap scheduler: the tensor is made on the scheduler thread with
  the batch, before its first forward is launched, and lives in that batch's ``SamplingBatchInfo``,
  so a step in flight (one step behind) reads the seeds of the batch it was launched with;
- ``top_k_top_p_min_p_sampling_from_probs_torch`` (SGLang's torch sampler): min-p applied before
  it where a batch has seeds, which SGLang's own asserts against (every request has one here);
- ``murmur_hash32``: the arithmetic of SGLang's Triton kernel in int64 torch (not compared with it
  here: Triton has no CPU driver; ASD and stock servers use this one).

Kind: module and class attribute assignments, not HookRegistry hooks. The kernels are None on CPU,
and HookRegistry's propagation would rebind every module attribute that is None; here each binding
is set where SGLang reads it (``BINDINGS``), nowhere else. ``apply`` is idempotent (a forked child
inherits the launcher's, a spawned one applies its own), and ``missing`` lists a binding that is not
this module's function (or a HookRegistry wrapper around it), so the process refuses to serve
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

import hashlib
import importlib
import inspect

import torch

# (module, name) of every binding this seam sets, each to the function of the same role below; a
# dotted name is a class attribute (``Class.attribute``).
EAGLE_UTILS = "sglang.srt.speculative.eagle_utils"
FROM_SCHEDULE_BATCH = "SamplingBatchInfo.from_schedule_batch"
BINDINGS = (
    (EAGLE_UTILS, "_verify_uses_greedy"),
    ("sglang.srt.sampling.sampling_batch_info", FROM_SCHEDULE_BATCH),
    ("sglang.kernels.ops.speculative.verify_sampling", "tree_speculative_sampling_target_only"),
    (EAGLE_UTILS, "tree_speculative_sampling_target_only"),
    ("sglang.kernels.ops.sampling.renorm", "top_k_renorm_prob"),
    (EAGLE_UTILS, "top_k_renorm_prob"),
    ("sglang.kernels.ops.sampling.renorm", "top_p_renorm_prob"),
    (EAGLE_UTILS, "top_p_renorm_prob"),
    ("sglang.kernels.ops.sampling.murmur_hash", "murmur_hash32"),
    ("sglang.srt.layers.sampler", "murmur_hash32"),
    ("sglang.srt.layers.sampler", "top_k_top_p_min_p_sampling_from_probs_torch"),
)
SEEDED_SAMPLER = "top_k_top_p_min_p_sampling_from_probs_torch"
# SGLang's originals of the two functions this seam wraps (set by ``apply``, per process).
_ORIGINAL: dict = {}


def wanted() -> bool:
    """Whether this process serves SGLang's sampling verify on CPU: the CPU stand-in is active and
    ``SGLANG_ASD_CPU_SAMPLING`` is not ``off`` (a bad value raises ``ValueError`` naming it)."""
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


def top_k_top_p_min_p_sampling_from_probs_torch(probs, top_ks, top_ps, min_ps, need_min_p_sampling, sampling_seed,
                                                 positions, **kwargs):
    """SGLang's torch sampler (``srt/layers/sampler.py``, CPU's sampling backend), which asserts when a
    batch needs min-p and has seeds; ``from_schedule_batch`` gives every request a seed, so without
    this a ``min_p`` request would take the scheduler down. Here min-p is applied first (each row's
    probabilities below min_p times its largest set to 0: the cut SGLang makes after top-k and top-p,
    which keep the largest entries and their prefix sums, so the order does not matter), then
    SGLang's sampler runs without it. Its seeded draw is a Gumbel-max over log weights
    (``multinomial_with_seed``): zeroed entries need no renormalisation, as after top-k / top-p."""
    if need_min_p_sampling and sampling_seed is not None:
        probs = torch.where(probs < probs.amax(dim=-1, keepdim=True) * min_ps.to(probs.dtype)[:, None],
                            torch.zeros_like(probs), probs)
        need_min_p_sampling = False
    return _ORIGINAL[SEEDED_SAMPLER](probs, top_ks, top_ps, min_ps, need_min_p_sampling, sampling_seed, positions,
                                     **kwargs)


def verify_uses_greedy(*, is_cpu, **kwargs) -> bool:
    """SGLang's ``_verify_uses_greedy`` as on a GPU: ``is_cpu`` read as False (the rest unchanged:
    an all-greedy batch still verifies greedily)."""
    return _ORIGINAL["_verify_uses_greedy"](is_cpu=False, **kwargs)


SEED_BITS = 63  # a request's seed is an int64 >= 0, as SGLang's sampling_seed tensor holds it


def request_seed(rid) -> int:
    """The seed of a request that sent none: a hash of its request id in [0, 2**63) (the same in
    every process, unlike Python's ``hash``)."""
    key = str(rid).encode("utf-8", "surrogatepass")  # a JSON rid may hold a lone surrogate
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "little") >> (64 - SEED_BITS)


def request_seeds(reqs, device) -> torch.Tensor:
    """[len(reqs)] int64: each request's ``sampling_seed``, or ``request_seed`` of its ``rid``."""
    seeds = [r.sampling_params.sampling_seed if r.sampling_params.sampling_seed is not None
             else request_seed(r.rid) for r in reqs]
    return torch.tensor(seeds, dtype=torch.int64, device=device)


def from_schedule_batch(cls, batch, vocab_size: int):
    """SGLang's ``SamplingBatchInfo.from_schedule_batch``, with every request's seed in
    ``sampling_seed`` (``request_seeds``). Under SGLang's own deterministic inference (which the CPU
    attention backend refuses) SGLang has set it already and it is left as SGLang made it."""
    info = _ORIGINAL[FROM_SCHEDULE_BATCH](cls, batch, vocab_size)
    if info.sampling_seed is None:
        info.sampling_seed = request_seeds(batch.reqs, info.device)
    return info


_OURS = {"_verify_uses_greedy": verify_uses_greedy, FROM_SCHEDULE_BATCH: from_schedule_batch,
         "tree_speculative_sampling_target_only": tree_speculative_sampling_target_only,
         "top_k_renorm_prob": top_k_renorm_prob, "top_p_renorm_prob": top_p_renorm_prob,
         "murmur_hash32": murmur_hash32, SEEDED_SAMPLER: top_k_top_p_min_p_sampling_from_probs_torch}


def binding(module_name: str, name: str) -> tuple:
    """(owner, attribute) of a binding: the module, or the class a dotted name starts with."""
    owner = importlib.import_module(module_name)
    *classes, attr = name.split(".")
    for cls in classes:
        owner = getattr(owner, cls)
    return owner, attr


def _current(owner, attr):
    """The function bound at ``owner.attr`` (a classmethod's function, not a bound method)."""
    value = getattr(owner, attr)
    return getattr(value, "__func__", value)


def apply() -> None:
    """Set every binding of ``BINDINGS`` to this module's function (idempotent: a binding already
    set, or wrapped by a HookRegistry hook around it, is left alone)."""
    for module_name, name in BINDINGS:
        owner, attr = binding(module_name, name)
        current = _current(owner, attr)
        if _holds(current, _OURS[name]):
            continue
        if name in ("_verify_uses_greedy", FROM_SCHEDULE_BATCH, SEEDED_SAMPLER):
            _ORIGINAL[name] = current
        is_classmethod = isinstance(inspect.getattr_static(owner, attr), classmethod)
        setattr(owner, attr, classmethod(_OURS[name]) if is_classmethod else _OURS[name])


def missing() -> list[str]:
    """The bindings of ``BINDINGS`` that are not this module's function (nor a wrapper around it)."""
    return [f"{m}.{n}" for m, n in BINDINGS if not _holds(_current(*binding(m, n)), _OURS[n])]


def _holds(obj, fn) -> bool:
    """``obj`` is ``fn``, or a chain of ``functools.wraps`` wrappers (HookRegistry's) around it."""
    for _ in range(16):
        if obj is fn:
            return True
        obj = getattr(obj, "__wrapped__", None)
        if obj is None:
            return False
    return False
