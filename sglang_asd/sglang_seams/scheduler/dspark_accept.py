"""Seam: DSPARK's greedy accept (``dspark_components``: ``dspark_verify.accept_draft_tokens``, inside
``DSparkWorkerV2._forward_decode``).

- Hook kind: AROUND on all three targets, each calls the original.
  - ``DSparkWorkerV2._forward_decode``: publishes the step (``verify_round.BlockStep``: the ledger
    table, the batch's slots, the host view of whether it holds an ASD row, the TP group), then
    attaches the round's output to the result's logits output.
  - ``dspark_verify.accept_draft_tokens`` (bound by name in ``dspark_verify`` and
    ``dspark_sampling_accept_graph``): SGLang's ``(correct_len, bonus, cap_trim_lens)``, then the
    ASD rows' decision merged in (``verify_round.decide_chain``).
  - ``dspark_verify.verify_logits_adjustments_are_noop`` (bound by name in ``dspark_worker_v2`` and
    ``dspark_observability``): False in a step that holds an ASD row, so the accept is not folded
    into the verify CUDA graph (below).
- Process: scheduler (every TP rank), in the decode step of DSPARK (``DSparkWorkerV2``).
- Why: ASD replaces strict greedy acceptance for the rows of requests that carry a budget and
  leaves every other row as SGLang computed it. ``accept_draft_tokens`` returns the only three
  values the rest of the step reads the accept from: ``build_accept_outs`` broadcasts them (TP),
  derives the commit lengths, new sequence lengths and output tokens, and every consumer (the
  draft KV inject of the committed positions, the FutureMap, spec logprobs, the next draft's
  anchor, the result) follows. The verify forward already wrote the target KV of the whole
  window; committing fewer or more of it only moves the sequence lengths.
- How, one decode step:
  1. ``_forward_decode`` (an idle batch, or a table without ASD rows: SGLang's step as is)
     publishes the step.
  2. The target verify runs; penalties, logit bias and the grammar mask are applied to the logits
     in place (``run_non_compact`` / ``run_compact``, then the mask).
  3. ``accept_draft_tokens``: SGLang's result first (greedy, sampled or mixed; with a cap layout in
     cap-accept and compact modes), then ``decide_chain`` on the same final logits: candidates
     ``[bs, W]`` = anchor + gamma drafts, K = gamma, each row's chain ending at ``verify_lens - 1``
     under a layout. ASD rows take ``correct_len`` = ASD's accepted drafts, ``bonus`` = the
     target's argmax after them, ``cap_trim_lens`` = 0 (ASD never reads past a row's verify
     length, so nothing is trimmed from its decision); the others keep SGLang's.
  4. The ledger is charged in ``decide_chain``; ``_forward_decode`` attaches the round output to
     ``result.logits_output`` for the receipts.
- Folded accept: with CUDA graphs, DSPARK can run ``AcceptGreedy`` and ``build_accept_outs``
  inside the verify graph (``DsparkVerifyEpilogue``: compact mode, or a static DeepSeek-V4.1
  target with a MoE draft), where no Python hook runs. ``fold_eligible`` requires
  ``verify_logits_adjustments_are_noop``, evaluated before the verify launch; in a step that holds
  an ASD row it is False, so that step verifies with the same graph and accepts eagerly (the
  non-folded path SGLang takes for a batch with a penalty or logit bias). Steps without ASD rows
  keep the fold. The other callers of the function (simulated acceptance, the all-sampled accept
  graph, observability) only see False in those steps: they take their eager, general path.
- Ordering (overlap scheduler, CUDA graphs): the accept runs eagerly after the verify forward on
  the forward stream; the ledger is read (staged writes applied first) and charged there
  (``state/ledger_table.py``, the DSPARK/DFLASH paragraph). ``on_publish(new_seq_lens)`` comes
  after the accept, so batch N+1 reads ASD's lengths and bonus.
- Tensor parallelism: SGLang broadcasts rank 0's ``(correct_len, bonus, cap_trim_lens)`` when its
  TP sync site ``DSPARK_ACCEPT_GREEDY`` is on (the default with TP > 1), which takes ASD's merged
  values from rank 0. ASD broadcasts its own decision over the same group first
  (``verify.tp.rank_consistent``), so every rank charges rank 0's regret.
- Sampled and mixed batches: ASD rows are greedy by construction (a sampled request's receipt says
  ``sampling``); SGLang's ``SelectMixedAccept`` result is kept for every other row.
- Upstream: none yet. An accept-policy hook in ``accept_and_finalize`` (and a fold opt-out) would
  replace all three; patches/0001 proposes it for ``eagle_sample``.
- Removal: when SGLang exposes an acceptance-policy extension point for block drafters.
- Tested on: sglang 0.5.23 (CPU, static mode; the cap layout in unit tests).
"""

from __future__ import annotations

import torch

from sglang_asd.sglang_seams.scheduler.arguments import NamedArguments
from sglang_asd.sglang_seams.scheduler.verify_round import current_step, decide_chain, run_step

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
ACCEPT_ARGS = NamedArguments(ACCEPT_DRAFT_TOKENS, ("candidates", "target_logits", "cutoff_layout"))


def check_signatures(forward_decode_fn, accept_fn) -> None:
    """At install: bind the hooks to SGLang's parameters; raise if one they read was renamed."""
    FORWARD_DECODE_ARGS.bind(forward_decode_fn)
    ACCEPT_ARGS.bind(accept_fn)


def forward_decode_around(original, *args, **kwargs):
    worker, batch = FORWARD_DECODE_ARGS.of(args, kwargs)
    return run_step(original, args, kwargs, batch, _tp_sync(worker), "DSPARK_ACCEPT_GREEDY")


def accept_draft_tokens_around(original, *args, **kwargs):
    correct_len, bonus, cap_trim_lens = original(*args, **kwargs)  # each [bs]
    step = current_step()
    if step is None:
        return correct_len, bonus, cap_trim_lens
    candidates, target_logits, cutoff_layout = ACCEPT_ARGS.of(args, kwargs)
    verify_lens = None if cutoff_layout is None else cutoff_layout.verify_lens
    asd_len, asd_bonus, active = decide_chain(step, candidates, target_logits, verify_lens)
    return (torch.where(active, asd_len.to(correct_len.dtype), correct_len),
            torch.where(active, asd_bonus.to(bonus.dtype), bonus),
            torch.where(active, torch.zeros_like(cap_trim_lens), cap_trim_lens))


def adjustments_noop_around(original, *args, **kwargs):
    step = current_step()
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
