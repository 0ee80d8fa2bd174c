"""Seam: DFLASH's accept (``sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2._accept_block``).

- Kind: AROUND on three methods of ``DFlashWorkerV2``, each calls the original. Process:
  scheduler (every TP rank), in DFLASH's decode step.
  - ``forward_batch_generation``: in a decode step, opens and publishes the ASD verify step
    (``step/verify_step.py``, which holds the numbered step, its ordering under the overlap
    scheduler and CUDA graphs, and TP), then attaches the round's receipts to the result's logits
    output. TP: the decision is rank 0's where SGLang syncs this batch's accept (``accept_site``:
    ``DFLASH_SELECTOR``, ``DFLASH_ACCEPT_SAMPLE`` or ``DFLASH_ACCEPT_GREEDY``, by SGLang's own
    branch, each on or off by ``SGLANG_SPEC_TP_SYNC``).
  - ``_accept_block``: SGLang's ``(accept_len, commit_lens, bonus, out_tokens, new_seq_lens)``,
    then ``verify_step.decide_chain`` on candidates ``[bs, B]`` = anchor + ``B - 1`` drafts and
    the final logits, which charges the ledger. ASD rows take ASD's accepted length and bonus;
    their committed block and lengths are rebuilt with SGLang's own ``_commit_accept`` (drafts
    shifted left, the bonus at the boundary); ``new_seq_lens`` is returned as None, which makes
    the step recompute it from the commit lengths (as whenever its Triton accept did not write it).
  - ``_can_skip_verify_logits``: False in a step that holds an ASD row. With TP and a deferred
    vocab gather, SGLang otherwise skips gathering the verify logits of an all-greedy batch and
    accepts from a sharded argmax; ASD needs the logits (regrets).
- Why: ASD replaces strict greedy acceptance for the rows of requests that carry a budget.
  ``_accept_block`` returns everything the rest of the step reads the accept from (the
  sampling-mask capture, spec logprobs, the mamba commit, ``on_publish``, the draft KV of the
  committed positions, the next draft's anchor). SGLang broadcasts rank 0's argmax, not its
  decision: the step broadcasts ASD's whole decision from rank 0. There is no folded accept in
  DFLASH (its draft graph folds the draft head only).
- Upstream: none yet. An accept-policy hook in ``_accept_block`` would replace these.
- Removal: when SGLang exposes an acceptance-policy extension point for block drafters.
- Tested on: sglang 0.5.23 (CPU).
"""

from __future__ import annotations

import functools

import torch

from sglang_asd.hooks.arguments import NamedArguments
from sglang_asd.hooks.registry import Seam, resolve
from sglang_asd.sglang_seams.step import verify_step

_MODULE = "sglang.srt.speculative.dflash_worker_v2"
_WORKER = f"{_MODULE}.DFlashWorkerV2"
FORWARD = f"{_WORKER}.forward_batch_generation"
ACCEPT_BLOCK = f"{_WORKER}._accept_block"
SKIP_VERIFY_LOGITS = f"{_WORKER}._can_skip_verify_logits"
FORWARD_ARGS = NamedArguments(FORWARD, ("self", "batch"))
ACCEPT_ARGS = NamedArguments(ACCEPT_BLOCK, ("self", "candidates", "next_token_logits", "sampling_info", "target_predict"))


def check_signatures(forward_fn, accept_fn) -> None:
    """At install: bind the hooks to SGLang's parameters; raise if one they read was renamed."""
    FORWARD_ARGS.bind(forward_fn)
    ACCEPT_ARGS.bind(accept_fn)
    _commit_accept()


def forward_batch_generation_around(original, *args, **kwargs):
    worker, batch = FORWARD_ARGS.of(args, kwargs)
    if batch.forward_mode.is_extend() or batch.is_extend_in_batch:
        return original(*args, **kwargs)
    return verify_step.run_block_step(original, args, kwargs, batch, worker._tp_sync)


def accept_block_around(original, *args, **kwargs):
    worker, candidates, logits, sampling_info, target_predict = ACCEPT_ARGS.of(args, kwargs)
    site = accept_site(worker, sampling_info, target_predict)  # before the call: it may consume the selector's draw
    accept_len, commit_lens, bonus, out_tokens, new_seq_lens = original(*args, **kwargs)
    step = verify_step.current()
    if step is None or logits is None:  # logits None: a step without ASD rows (``_can_skip_verify_logits``)
        return accept_len, commit_lens, bonus, out_tokens, new_seq_lens
    asd_len, asd_bonus, active = verify_step.decide_chain(step, candidates, logits, sync_site=site)
    accept_len = torch.where(active, asd_len.to(accept_len.dtype), accept_len)  # [bs]
    bonus = torch.where(active, asd_bonus.to(bonus.dtype), bonus)  # [bs]
    asd_tokens, asd_commit = _commit_accept()(candidates, accept_len, bonus)  # [bs, B], [bs]
    out_tokens = torch.where(active[:, None], asd_tokens.to(out_tokens.dtype), out_tokens)
    commit_lens = torch.where(active, asd_commit.to(commit_lens.dtype), commit_lens)
    return accept_len, commit_lens, bonus, out_tokens, None


def accept_site(worker, sampling_info, target_predict) -> str:
    """The ``SpecTpSyncSite`` SGLang's ``_accept_block`` syncs this batch's accept at, by its own
    branch predicate: the selector's sampled accept, the sampling verify (a batch holding a sampled
    request, where the platform has it), else the greedy argmax. ASD broadcasts its decision, and so
    its regret, over that site's group where ``SGLANG_SPEC_TP_SYNC`` has it on."""
    import importlib

    dflash = importlib.import_module(_MODULE)
    if worker._selector_sample is not None:
        return "DFLASH_SELECTOR"
    if (target_predict is None and not dflash._is_all_greedy(sampling_info)
            and dflash.is_dflash_sampling_verify_available()):
        return "DFLASH_ACCEPT_SAMPLE"
    return "DFLASH_ACCEPT_GREEDY"


def skip_verify_logits_around(original, *args, **kwargs):
    step = verify_step.current()
    if step is not None and step.holds_asd:
        return False
    return original(*args, **kwargs)


@functools.lru_cache(maxsize=1)
def _commit_accept():
    """SGLang's ``_commit_accept(candidates, accept_len, bonus) -> (out_tokens, commit_lens)``."""
    import importlib

    fn = getattr(importlib.import_module(_MODULE), "_commit_accept", None)
    if fn is None:
        raise RuntimeError(f"sglang_asd: {_MODULE}._commit_accept is gone; this sglang_asd does not support "
                           "this SGLang version")
    return fn


def hooks():
    return [
        (FORWARD, forward_batch_generation_around),
        (ACCEPT_BLOCK, accept_block_around),
        (SKIP_VERIFY_LOGITS, skip_verify_logits_around),
    ]


SEAMS = (Seam("scheduler", hooks, check=lambda: check_signatures(resolve(FORWARD), resolve(ACCEPT_BLOCK))),)
