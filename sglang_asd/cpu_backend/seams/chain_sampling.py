"""Seam: the sampling accept of SGLang's block drafters, DSPARK and DFLASH, on CPU, only with the
CPU stand-in (ASD and stock servers alike).

Targets and why:

- ``sglang.kernels.ops.speculative.dspark.dspark_accept.chain_speculative_sampling_triton``: DSPARK
  verifies a batch holding a sampled request with ``accept_draft_tokens`` -> ``AcceptSampling``,
  whose CPU branch (``accept_sampling``) still launches SGLang's Triton kernel
  (``kernels/ops/speculative/reject_sampling.py``). Triton has no CPU driver, so stock SGLang's
  scheduler raises ``RuntimeError: 0 active drivers`` and the server exits on the first sampled
  request, with or without a budget.
- ``sglang.srt.speculative.dflash_utils.tree_speculative_sampling_target_only`` and
  ``._DFLASH_SAMPLING_VERIFY_AVAILABLE``: DFLASH reads the kernel, and whether it exists, once at
  import. On CPU it is None there, so DFLASH verifies sampled rows greedily (logging "DFLASH
  non-greedy verification is unavailable"), even where ``SGLANG_ASD_CPU_SAMPLING=on`` gives the
  platform its kernel (``sampling.py``) after that import.

What runs, chosen to match what SGLang's CPU path does for EAGLE (``sampling.py``):

- ``SGLANG_ASD_CPU_SAMPLING=on`` (``cpu_backend.env.cpu_sampling``): sampled rows are sampled as on
  a GPU. DSPARK's name is bound to :func:`chain_speculative_sampling`, the arithmetic of SGLang's
  ``speculative_sampling_classic_kernel`` in torch: per draft token the rejection test
  ``coin * q < p`` (q a probability), the residual ``max(p - q, 0)`` (or ``p`` when every draft was
  accepted) sampled by inverse CDF with the final coin, and ``block_verification`` (Algorithm 2
  of arXiv 2403.10444) with its prefix probabilities and residual masses, so the binding keeps the
  kernel's whole signature (SGLang 0.5.23 refuses ``--speculative-use-block-verification`` on CPU
  at start-up: "only supports CUDA or ROCm"). Checked against a plain per-row reference on seeded cases and
  for exactness (the output token's distribution is the target's) in
  ``tests/cpu_backend/test_chain_sampling.py``; it cannot be compared with the Triton kernel here
  (no CPU driver). DFLASH's names get ``sampling.tree_speculative_sampling_target_only`` and True,
  so it takes its own sampling branch (``compute_dflash_sampling_correct_drafts_and_bonus``).
- Off: both verify sampled rows greedily, as SGLang's CPU path verifies EAGLE's
  (``_verify_uses_greedy(is_cpu=True)``: the target's argmax is committed for every row). DSPARK's
  name is bound to :func:`chain_greedy_verify`, the same writes from the argmax of the target
  probabilities (top-k / top-p renormalisation and temperature keep the argmax); DFLASH needs
  nothing, it already falls back to greedy there. Why not sample regardless: off is the switch's
  promise that a sampled request decodes on CPU as stock CPU SGLang decodes it, for every algorithm.

Coins: SGLang's DSPARK and DFLASH accepts draw their coins with ``torch.rand`` from the process's
generator (no per-request ``sampling_seed`` stream, unlike EAGLE's ``_seeded_verify_coins``), so
on a GPU too a seeded sampled request reproduces only on a server with the same history.

Receipts: a sampled request on DSPARK or DFLASH still says ``"applied": false, "reason":
"sampling"`` (``sglang_seams/scheduler/scheduler.py``): ASD's block-drafter seams decide greedy rows
only, so its rows are served by SGLang's accept alone, budget or not.

Step order: both functions run where SGLang's kernel runs, inside the verify step after the target
forward, and read only their arguments (no ledger, no host sync: the writes are scatters, without
boolean masks; the loops run over the S draft positions, never over requests). SGLang runs DSPARK
and DFLASH with its overlap scheduler on CPU, where batch N+1 is scheduled before batch N's results
are processed; that lag is SGLang's own and the accept's outputs feed the same ``build_accept_outs``
/ ``_commit_accept`` as its kernel's would. A CPU has no streams, CUDA graphs or TP here; on a GPU
install the seam is never applied.

Kind: module attribute assignments (``BINDINGS``), not HookRegistry hooks: the DFLASH names are None
and a bool on CPU, and HookRegistry's propagation would rebind every module attribute that is None.
``apply`` is idempotent; ``missing`` lists a binding that is not this seam's value, and the
scheduler refuses to serve then (``cpu_backend.seams.install_cpu_path_hooks``).
Process: scheduler (ASD and stock; every TP rank, though the stand-in has no TP). Never on a GPU
install (``wanted`` requires the CPU stand-in).
Upstream: none yet; ``AcceptSampling`` could route CPU tensors to a torch sampler, and DFLASH could
read the kernel when it verifies. Removal: when SGLang's CPU path samples in both accepts.
Tested on: sglang 0.5.23 (``tests/integration/test_block_drafters_sampled.py``).
"""

from __future__ import annotations

import importlib

import torch

DSPARK_ACCEPT = "sglang.kernels.ops.speculative.dspark.dspark_accept"
DFLASH_UTILS = "sglang.srt.speculative.dflash_utils"
PRELOAD = (DSPARK_ACCEPT, DFLASH_UTILS)


def wanted() -> bool:
    """Whether this process runs on the CPU stand-in (the seam's only home)."""
    from sglang_asd import cpu_backend

    return cpu_backend.is_installed()


def _bindings() -> dict:
    """(module, name) -> the value this seam sets there, for the switch's current value."""
    from sglang_asd.cpu_backend.env import cpu_sampling

    if not cpu_sampling():
        return {(DSPARK_ACCEPT, "chain_speculative_sampling_triton"): chain_greedy_verify}
    from sglang_asd.cpu_backend.seams import sampling

    return {(DSPARK_ACCEPT, "chain_speculative_sampling_triton"): chain_speculative_sampling,
            (DFLASH_UTILS, "tree_speculative_sampling_target_only"): sampling.tree_speculative_sampling_target_only,
            (DFLASH_UTILS, "_DFLASH_SAMPLING_VERIFY_AVAILABLE"): True}


def apply() -> None:
    """Set every binding (idempotent; one already holding the value, or a HookRegistry wrapper
    around it, is left alone)."""
    for (module_name, name), value in _bindings().items():
        module = importlib.import_module(module_name)
        if not _holds(getattr(module, name), value):
            setattr(module, name, value)


def missing() -> list[str]:
    """The bindings that do not hold this seam's value."""
    return [f"{m}.{n}" for (m, n), value in _bindings().items()
            if not _holds(getattr(importlib.import_module(m), n), value)]


def _holds(obj, value) -> bool:
    """``obj`` is ``value`` (a flag), or ``value`` wrapped in HookRegistry's wrappers (``sampling._holds``)."""
    from sglang_asd.cpu_backend.seams.sampling import _holds as holds_function

    return obj is value if isinstance(value, bool) else holds_function(obj, value)


def chain_speculative_sampling(predicts, accept_index, accept_token_num, candidates, retrive_index,
                               retrive_next_token, retrive_next_sibling, uniform_samples,
                               uniform_samples_for_final_sampling, target_probs, draft_probs,
                               threshold_single=1.0, threshold_acc=1.0, deterministic=True, *,
                               block_verification: bool = False) -> None:
    """SGLang's ``chain_speculative_sampling_triton`` (same signature; writes in place, returns None).

    Shapes: candidates [bs, W] (the anchor, then S = W - 1 draft tokens), retrive_index [bs, W]
    (each slot's index into predicts), predicts [n >= bs*W], accept_index [bs, >= W],
    accept_token_num [bs], uniform_samples [bs, >= S], uniform_samples_for_final_sampling [bs],
    target_probs [bs, >= W, V], draft_probs [bs, >= S, V]. Draft token s (1..S) is tested against
    row s-1 of both distributions. Like the kernel, only the accepted slots of accept_index and
    predicts are written, then the output token at the last accepted slot. ``threshold_*``,
    ``deterministic`` and the next-token / sibling tables are unused, as in the kernel (a chain).
    """
    bs, width = candidates.shape
    steps = width - 1
    if steps > 0:
        tokens = candidates[:, 1:].long()[..., None]  # [bs, S, 1]
        p = target_probs[:, :steps].gather(2, tokens).squeeze(2)  # [bs, S] target prob of each draft token
        q = draft_probs[:, :steps].gather(2, tokens).squeeze(2)  # [bs, S] its draft prob
        coins = uniform_samples[:, :steps]  # [bs, S]
        q_is_prob = (q > 0) & (q <= 1)
        if block_verification:
            num_accept, scale, norm = _block_accept(p, q, q_is_prob, coins, target_probs, draft_probs)
        else:
            num_accept = (q_is_prob & (coins * q < p)).int().cumprod(dim=1).sum(dim=1)  # [bs]
            scale = torch.ones_like(coins[:, 0])
            norm = torch.full_like(coins[:, 0], -1.0)  # -1: sum the residual below
    else:
        num_accept = torch.zeros(bs, dtype=torch.int64, device=candidates.device)
        scale = norm = None
    final = _final_token(num_accept, steps, scale, norm, uniform_samples_for_final_sampling, target_probs, draft_probs)
    _write_chain(predicts, accept_index, accept_token_num, candidates, retrive_index, num_accept, final)


def chain_greedy_verify(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                        retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
                        draft_probs, threshold_single=1.0, threshold_acc=1.0, deterministic=True, *,
                        block_verification: bool = False) -> None:
    """The same signature and writes, verified greedily: draft token s is accepted while it is the
    argmax of target row s-1, and the output token is the argmax of the row after the last accepted
    one (coins and draft probabilities unused). What SGLang's CPU path does to a sampled EAGLE row."""
    bs, width = candidates.shape
    argmax = target_probs[:, :width].argmax(dim=-1)  # [bs, W]
    matches = candidates[:, 1:].long() == argmax[:, :-1]  # [bs, S]
    num_accept = matches.int().cumprod(dim=1).sum(dim=1)  # [bs]
    final = argmax.gather(1, num_accept.long()[:, None]).squeeze(1)  # [bs]
    _write_chain(predicts, accept_index, accept_token_num, candidates, retrive_index, num_accept, final)


def _block_accept(p, q, q_is_prob, coins, target_probs, draft_probs):
    """Block verification's decision: (accepted drafts [bs], residual scale [bs], residual mass [bs],
    -1 where the final sampling sums it). Longest prefix first: a prefix of length s is taken if its
    coin is below the prefix probability h_s and below s's acceptance probability, which for s < S
    with 0 < h_s < 1 is r / (r + 1 - h_s), r = sum_v max(h_s p_s(v) - q_s(v), 0) over row s."""
    bs, steps = p.shape
    prefix = []  # h_s = min(h_{s-1} p / q, 1) while q is a probability, else 0
    h = torch.ones_like(p[:, 0])
    for s in range(steps):
        h = torch.where(q_is_prob[:, s], torch.minimum(h * p[:, s] / q[:, s], torch.ones_like(h)), torch.zeros_like(h))
        prefix.append(h)
    num_accept = torch.zeros(bs, dtype=torch.int64, device=p.device)
    scale = torch.ones_like(p[:, 0])
    norm = torch.full_like(p[:, 0], -1.0)
    decided = torch.zeros(bs, dtype=torch.bool, device=p.device)
    for step in range(steps, 0, -1):
        h, coin = prefix[step - 1], coins[:, step - 1]
        accept_prob, mass = h, torch.full_like(h, -1.0)
        if step < steps:
            use_mass = (h > 0) & (h < 1)
            residual = (h[:, None] * target_probs[:, step] - draft_probs[:, step]).clamp(min=0).sum(dim=-1)  # [bs]
            accept_prob = torch.where(use_mass, residual / (residual + 1 - h), h)
            mass = torch.where(use_mass, residual, mass)
        take = ~decided & (coin < h) & (coin < accept_prob)
        num_accept = torch.where(take, step, num_accept)
        scale = torch.where(take, h, scale)
        norm = torch.where(take, mass, norm)
        decided |= take
    return num_accept, scale, norm


def _final_token(num_accept, steps, scale, norm, final_coins, target_probs, draft_probs):
    """[bs] token sampled at the row after the last accepted draft: from p when every draft was
    accepted, else from max(scale p - q, 0) (q outside [0, 1] read as 0), by inverse CDF with the
    final coin; the last vocabulary entry where the CDF never passes it (as the kernel)."""
    bs, vocab = target_probs.shape[0], target_probs.shape[-1]
    rows = torch.arange(bs, device=target_probs.device)
    cur = num_accept.long()
    p = target_probs[rows, cur]  # [bs, V]
    if steps == 0:
        val = p
        total = val.sum(dim=-1)
    else:
        q = draft_probs[rows, cur.clamp(max=steps - 1)]  # [bs, V]; unread where every draft was accepted
        q = torch.where((q >= 0) & (q <= 1), q, torch.zeros_like(q))
        diff = scale[:, None] * p - q
        residual = torch.where(diff > 0, diff, torch.zeros_like(diff))
        val = torch.where((cur == steps)[:, None], p, residual)
        total = torch.where(norm < 0, val.sum(dim=-1), norm)
    passed = val.cumsum(dim=-1) > (final_coins * total)[:, None]  # [bs, V]
    first = passed.int().argmax(dim=-1)
    return torch.where(passed.any(dim=-1), first, torch.full_like(first, vocab - 1))


def _write_chain(predicts, accept_index, accept_token_num, candidates, retrive_index, num_accept, final) -> None:
    """The kernel's writes: accept_index[:, 0..n] = the slots of the anchor and the n accepted drafts,
    predicts at slot s-1 = draft token s (s <= n), predicts at slot n = the final token,
    accept_token_num = n. Other entries keep their values. No host sync (scatters, no masks)."""
    bs, width = candidates.shape
    n = num_accept.long()  # [bs]
    slots = retrive_index.long()  # [bs, W]
    accepted = torch.arange(1, width, device=n.device)[None, :] <= n[:, None]  # [bs, S]
    accept_index[:, 0] = slots[:, 0].to(accept_index.dtype)
    accept_index[:, 1:width] = torch.where(accepted, slots[:, 1:], accept_index[:, 1:width].long()).to(accept_index.dtype)
    flat = predicts.view(-1)
    before = slots[:, :-1]  # [bs, S] the slot each draft token is written at
    kept = flat.gather(0, before.reshape(-1)).view_as(before)
    flat.scatter_(0, before.reshape(-1), torch.where(accepted, candidates[:, 1:].to(flat.dtype), kept).reshape(-1))
    last = slots.gather(1, n[:, None]).squeeze(1)  # [bs]
    flat.scatter_(0, last, final.to(flat.dtype))
    accept_token_num.copy_(n.to(accept_token_num.dtype))
