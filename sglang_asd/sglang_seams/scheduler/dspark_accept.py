"""Seam: DSPARK's greedy accept (``dspark_components``: ``dspark_verify.accept_draft_tokens``, inside
``DSparkWorkerV2._forward_decode``).

- Kind: AROUND on three targets, each calls the original. Process: scheduler (every TP rank), in
  DSPARK's decode step.
  - ``DSparkWorkerV2._forward_decode``: opens and publishes the ASD verify step
    (``step/verify_step.py``, which holds the numbered step, its ordering under the overlap
    scheduler and CUDA graphs, and TP), then attaches the round's receipts to the result's logits
    output. TP: the decision is rank 0's where SGLang's accept broadcasts this batch
    (``accept_site``: ``DSPARK_ACCEPT_GREEDY`` for an all-greedy batch, ``DSPARK_ACCEPT_SAMPLE``
    for one holding a sampled request, each on or off by ``SGLANG_SPEC_TP_SYNC``).
  - ``dspark_verify.accept_draft_tokens`` (bound by name in ``dspark_verify`` and
    ``dspark_sampling_accept_graph``): SGLang's ``(correct_len, bonus, cap_trim_lens)`` first
    (greedy, sampled or mixed; with a cap layout in cap-accept and compact modes), then
    ``verify_step.decide_chain`` on the same final logits (candidates = anchor + gamma drafts,
    each row's chain ending at ``verify_lens - 1`` under a layout), which charges the ledger. ASD
    rows take ``correct_len`` = ASD's accepted drafts, ``bonus`` = the target's argmax after them,
    ``cap_trim_lens`` = 0 (ASD never reads past a row's verify length); the others keep SGLang's.
  - ``dspark_verify.verify_logits_adjustments_are_noop`` (bound by name in ``dspark_worker_v2`` and
    ``dspark_observability``): False in a step that holds an ASD row (host view), so the accept is
    not folded into the verify CUDA graph.
- Why: ASD replaces strict greedy acceptance for the rows of requests that carry a budget.
  ``accept_draft_tokens`` returns the only three values the rest of the step reads the accept
  from: ``build_accept_outs`` broadcasts them (TP: rank 0's, ASD's merged values included),
  derives the commit lengths, new sequence lengths and output tokens, and every consumer (the
  draft KV inject, the FutureMap, spec logprobs, the next draft's anchor, ``on_publish``)
  follows. The verify forward already wrote the target KV of the whole window.
- Folded accept: with CUDA graphs, DSPARK can run ``AcceptGreedy`` and ``build_accept_outs``
  inside the verify graph (``DsparkVerifyEpilogue``), where no Python hook runs. ``fold_eligible``
  requires ``verify_logits_adjustments_are_noop``, evaluated before the verify launch; in a step
  holding an ASD row it is False, so that step verifies with the same graph and accepts eagerly
  (SGLang's path for a batch with a penalty or logit bias); other steps keep the fold. The
  function's other callers (simulated acceptance, the all-sampled accept graph, observability)
  take their eager, general path in those steps.
- Sampled and mixed batches: ASD rows are greedy by construction (a sampled request's receipt says
  ``sampling``); SGLang's ``SelectMixedAccept`` result is kept for every other row.
- Upstream: none yet. An accept-policy hook in ``accept_and_finalize`` (and a fold opt-out) would
  replace all three; patches/0001 proposes it for ``eagle_sample``.
- Removal: when SGLang exposes an acceptance-policy extension point for block drafters.
- Tested on: sglang 0.5.23 (CPU, static mode; the cap layout in unit tests).
"""

from __future__ import annotations

import torch

from sglang_asd.hooks.arguments import NamedArguments
from sglang_asd.hooks.registry import Seam, resolve
from sglang_asd.sglang_seams.step import verify_step

_WORKER = "sglang.srt.speculative.dspark_components.dspark_worker_v2.DSparkWorkerV2"
_VERIFY = "sglang.srt.speculative.dspark_components.dspark_verify"
FORWARD_DECODE = f"{_WORKER}._forward_decode"
ACCEPT_DRAFT_TOKENS = f"{_VERIFY}.accept_draft_tokens"
ADJUSTMENTS_NOOP = f"{_VERIFY}.verify_logits_adjustments_are_noop"
# Modules holding a by-name binding that must be the wrapped one.
ACCEPT_BINDINGS = (_VERIFY, "sglang.srt.speculative.dspark_components.dspark_sampling_accept_graph")
ADJUSTMENTS_BINDINGS = (_VERIFY, "sglang.srt.speculative.dspark_components.dspark_worker_v2",
                        "sglang.srt.speculative.dspark_components.dspark_observability")
FORWARD_DECODE_ARGS = NamedArguments(FORWARD_DECODE, ("self", "batch"))
ACCEPT_ARGS = NamedArguments(ACCEPT_DRAFT_TOKENS, ("candidates", "target_logits", "cutoff_layout", "sampling_info"))


def check_signatures(forward_decode_fn, accept_fn) -> None:
    """At install: bind the hooks to SGLang's parameters; raise if one they read was renamed."""
    FORWARD_DECODE_ARGS.bind(forward_decode_fn)
    ACCEPT_ARGS.bind(accept_fn)


def forward_decode_around(original, *args, **kwargs):
    worker, batch = FORWARD_DECODE_ARGS.of(args, kwargs)
    return verify_step.run_block_step(original, args, kwargs, batch, _tp_sync(worker))


def accept_draft_tokens_around(original, *args, **kwargs):
    correct_len, bonus, cap_trim_lens = original(*args, **kwargs)  # each [bs]
    step = verify_step.current()
    if step is None:
        return correct_len, bonus, cap_trim_lens
    candidates, target_logits, cutoff_layout, sampling_info = ACCEPT_ARGS.of(args, kwargs)
    verify_lens = None if cutoff_layout is None else cutoff_layout.verify_lens
    asd_len, asd_bonus, active = verify_step.decide_chain(step, candidates, target_logits, verify_lens,
                                                          sync_site=accept_site(sampling_info))
    return (torch.where(active, asd_len.to(correct_len.dtype), correct_len),
            torch.where(active, asd_bonus.to(bonus.dtype), bonus),
            torch.where(active, torch.zeros_like(cap_trim_lens), cap_trim_lens))


def accept_site(sampling_info) -> str:
    """The ``SpecTpSyncSite`` SGLang's ``accept_and_finalize`` broadcasts this accept at (its rule,
    on the ``sampling_info`` it passed the accept: None under simulated acceptance): greedy for an
    all-greedy batch, sample otherwise. ``build_accept_outs`` broadcasts rank 0's
    ``(correct_len, bonus, cap_trim_lens)``, ASD's merged values included, only where that site is
    on; ASD broadcasts its decision, and so its regret, over the same site's group."""
    greedy = sampling_info is None or sampling_info.is_all_greedy
    return "DSPARK_ACCEPT_GREEDY" if greedy else "DSPARK_ACCEPT_SAMPLE"


def adjustments_noop_around(original, *args, **kwargs):
    step = verify_step.current()
    if step is not None and step.holds_asd:
        return False
    return original(*args, **kwargs)


def _tp_sync(worker):
    try:
        return worker._verify_executor._tp_sync
    except AttributeError as e:
        raise RuntimeError(f"sglang_asd: DSPARK's TP sync is not where this version keeps it ({e}); "
                           "this sglang_asd does not support this SGLang version") from e


def hooks():
    return [
        (FORWARD_DECODE, forward_decode_around),
        (ACCEPT_DRAFT_TOKENS, accept_draft_tokens_around),
        (ADJUSTMENTS_NOOP, adjustments_noop_around),
    ]


SEAMS = (Seam("scheduler", hooks, bindings={ACCEPT_DRAFT_TOKENS: ACCEPT_BINDINGS, ADJUSTMENTS_NOOP: ADJUSTMENTS_BINDINGS},
              check=lambda: check_signatures(resolve(FORWARD_DECODE), resolve(ACCEPT_DRAFT_TOKENS))),)
