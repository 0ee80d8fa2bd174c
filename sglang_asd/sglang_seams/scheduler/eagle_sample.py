"""Seam: ``sglang.srt.speculative.eagle_utils.eagle_sample`` (+ the ``verify_tree_greedy_func`` it calls).

- Hook kind: AROUND on both, each calls the original.
- Process: scheduler (every TP rank), in the verify step of EAGLE/EAGLE3/NEXTN (EAGLEWorkerV2,
  MultiLayerEagleWorkerV2), STANDALONE (StandaloneWorkerV2) and NGRAM (NGRAMWorker).
- Why: ASD replaces strict greedy acceptance with the request's rule (docs/ASD_SPEC.md for asd;
  local, margin, threshold: ``policy.config``; via ``sglang_asd.verify``) for the rows of requests
  that carry a budget, and leaves every other row exactly as SGLang computed it.
- How: ``eagle_sample`` is wrapped to publish the step (final logits, tree, ledger rows) in a
  context variable; SGLang then applies penalties, logit bias and the grammar mask to the logits in
  place and, on the greedy branch, computes ``target_predict = argmax`` and calls
  ``verify_tree_greedy_func``. That call is wrapped: the strict result is computed first, then
  ``asd_verify`` reuses ``target_predict`` (no second pass over the vocabulary: regrets are two
  gathers) and the ASD rows are merged in with ``torch.where``. On SGLang's sampling branch (a
  GPU batch mixing sampled and greedy rows) the argmax is computed here for the ASD rows' sake.
  The per-row results are attached to the logits output as a ``DeviceAuxiliaryOutput``, which
  SGLang copies to the host with the batch results and hands back after committing tokens
  (``aux_output.py``). No host sync, no Python loop over requests.
- Ordering (overlap scheduler, CUDA graphs): ``eagle_sample`` runs eagerly after the target's
  verify forward (graph replay or not), on the stream that runs the forward. The ledger rows are
  read and charged there (``ledger_table.py``: admissions and releases are staged on the host and
  applied by this step first, so every write to the table is in this stream's order). The host
  ledger trails the device by one round under overlap; receipts come from the per-round results
  of rounds whose tokens were committed, so a request finished in round N is not charged for the
  round N+1 it was still part of. The rules add no ordering of their own: a row's rule id is
  written only with its admission (staged, applied first by this step), the kernel choice reads
  the host view that matches exactly the rows applied at this step's issue, and only asd rows'
  ``remaining`` changes from round to round (local, margin and threshold rows keep B, so a lagging
  round cannot leave them a stale value).
- Rules: each row's rule id comes from the ledger table with its other columns; the kernel is
  chosen from the table's host view of the rules in use (``ledger_table.rules_active``: no sync):
  the fused Triton kernel when every ASD row is asd or local, the torch verifier otherwise.
  Only asd rows are charged (local keeps B per block; margin and threshold have no ledger), and
  every rule's spent regret reaches the host ledger through the round output.
- NGRAM (``batch.spec_algorithm.is_ngram()``, host-known): SGLang's ``max_tree_depth`` is the
  draft width, so K = ``max_tree_depth - 1`` is only a loop bound; the gate uses each row's real
  tree depth (``tree_depth_gate``), computed by the verifier on the device. EAGLE and STANDALONE
  keep K = ``speculative_num_steps`` (spec section 5).
- Depth 0 (``--speculative-adaptive`` at large batch sizes verifies the root alone): no draft
  token, nothing to decide; SGLang's result is returned as is.
- Every binding: ``eagle_sample`` is imported by name into ``eagle_worker_common`` and
  ``ngram_worker``; SGLang's HookRegistry rebinds stale ``from X import Y`` names in loaded modules,
  and ``check_installed`` verifies each binding at start-up. SGLang's arguments are bound by
  signature, and ``check_signatures`` stops the start if a parameter we read was renamed.
- Upstream: none yet. A verify-acceptance policy hook in ``eagle_sample`` would replace both
  wrappers; proposed in patches/ (0001).
- Removal: when SGLang exposes an acceptance-policy extension point.
- Tested on: sglang 0.5.23 (CPU; the overlap scheduler through a test-only CPU hook).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
from typing import FrozenSet, Optional

import torch

from sglang.srt.managers.auxiliary_output import append_auxiliary_output
from sglang.srt.speculative import eagle_utils

from sglang_asd.sglang_seams.state.round_output import ASDRoundOutput
from sglang_asd.sglang_seams.scheduler.verify_warmup import note_variant
from sglang_asd.verify import ASDVerifyOutput, asd_verify
from sglang_asd.sglang_seams.state.ledger_table import LedgerRows
from sglang_asd.verify.rules import needs_torch_path, row_traits, rows_on

EAGLE_SAMPLE = "sglang.srt.speculative.eagle_utils.eagle_sample"
VERIFY_TREE_GREEDY = "sglang.kernels.ops.speculative.spec_tree.verify_tree_greedy_func"
# Modules holding a by-name binding of eagle_sample that must be the wrapped one.
EAGLE_SAMPLE_BINDINGS = (
    "sglang.srt.speculative.eagle_utils",
    "sglang.srt.speculative.eagle_worker_common",
    "sglang.srt.speculative.ngram_worker",
)
VERIFY_TREE_GREEDY_BINDINGS = (
    "sglang.kernels.ops.speculative.spec_tree",
    "sglang.srt.speculative.eagle_utils",
)
# The parameters of SGLang's functions that the hooks read or write, by name.
EAGLE_SAMPLE_PARAMS = ("verify_input", "batch", "logits_output")
VERIFY_TREE_GREEDY_PARAMS = ("predicts", "accept_index", "accept_token_num", "candidates", "retrieve_next_token",
                             "retrieve_next_sibling", "target_predict")


class SeamSignatureMismatch(RuntimeError):
    pass


@functools.lru_cache(maxsize=8)
def _signature(fn) -> inspect.Signature:
    return inspect.signature(fn)


def check_signatures(eagle_sample_fn, verify_tree_greedy_fn) -> None:
    """Raise unless SGLang's functions still take every parameter the hooks bind by name."""
    for fn, names in ((eagle_sample_fn, EAGLE_SAMPLE_PARAMS), (verify_tree_greedy_fn, VERIFY_TREE_GREEDY_PARAMS)):
        params = _signature(fn).parameters
        missing = [n for n in names if n not in params]
        if missing:
            raise SeamSignatureMismatch(
                f"sglang_asd: {fn.__module__}.{fn.__qualname__} no longer takes {missing} "
                f"(signature {_signature(fn)}); this sglang_asd does not support this SGLang version"
            )


def _bind(fn, args, kwargs) -> dict:
    bound = _signature(fn).bind(*args, **kwargs)
    return bound.arguments


@dataclasses.dataclass
class _VerifyStep:
    logits: torch.Tensor  # [bs*W, V] final logits (SGLang modifies them in place before argmax)
    rows: LedgerRows  # the batch's ledger rows: remaining, gate, cap [bs]; stop_tokens [bs, T]; rule [bs]
    rules_active: FrozenSet[str]  # host view: the rules the table's ASD rows use (superset of this batch's)
    depth: int  # K
    tree_depth_gate: bool  # NGRAM: the gate's K is each row's tree depth
    active: torch.Tensor  # [bs] bool: rows decided by ASD (``verify.rules.rows_on``)
    out: Optional[ASDVerifyOutput] = None


_STEP: contextvars.ContextVar[Optional[_VerifyStep]] = contextvars.ContextVar("asd_verify_step", default=None)


def _run_asd(step: _VerifyStep, candidates, retrive_next_token, retrive_next_sibling, target_predict):
    r = step.rows
    if not needs_torch_path(step.rules_active):  # the Triton kernel on CUDA: note its variant
        note_variant(candidates, step.logits, step.depth, r.stop_tokens, target_predict)
    return _tp_consistent(asd_verify(
        candidates,
        step.logits,
        retrive_next_token,
        retrive_next_sibling,
        r.remaining,
        r.gate,
        r.cap,
        step.depth,
        stop_tokens=r.stop_tokens,
        target_predict=target_predict,
        rule=r.rule,
        rules_present=step.rules_active,
        tree_depth_gate=step.tree_depth_gate,
    ))


def _tp_consistent(out: ASDVerifyOutput) -> ASDVerifyOutput:
    """Make every TP rank take rank 0's decision where SGLang does the same for strict greedy.

    On CUDA every rank holds the same all-gathered logits and drafts, and the verifier is
    deterministic, so ranks agree without communication (see ``sglang_asd.verify.triton_verify``).
    On ROCm SGLang broadcasts the greedy result because per-rank drafts can differ; ASD then
    broadcasts its whole decision (one collective), so the ledgers stay identical across ranks too.
    """
    if not eagle_utils._is_hip:
        return out
    from sglang.srt.layers.dp_attention import is_dp_attention_enabled
    from sglang.srt.runtime_context import get_parallel

    group = get_parallel().attn_tp_group if is_dp_attention_enabled() else get_parallel().tp_group
    if group.world_size == 1:
        return out
    from sglang_asd.verify.tp import broadcast_decision

    return broadcast_decision(out, group=group.device_group, src=0)


def _merge(rows, out: ASDVerifyOutput, predict, accept_index, num_correct_drafts, W: int):
    """Take the ASD result on ``rows`` ([bs] bool), SGLang's own everywhere else. In place."""
    bs = rows.shape[0]
    predict.view(bs, W).copy_(torch.where(rows[:, None], out.predict.view(bs, W).to(predict.dtype), predict.view(bs, W)))
    accept_index.copy_(torch.where(rows[:, None], out.accept_index.to(accept_index.dtype), accept_index))
    num_correct_drafts.copy_(torch.where(rows, out.num_correct_drafts.to(num_correct_drafts.dtype), num_correct_drafts))


def verify_tree_greedy_around(original, *args, **kwargs):
    step = _STEP.get()
    predicts, accept_index, accept_token_num = original(*args, **kwargs)
    if step is None or step.out is not None:
        return predicts, accept_index, accept_token_num
    a = _bind(original, args, kwargs)
    out = _run_asd(step, a["candidates"], a["retrieve_next_token"], a["retrieve_next_sibling"], a["target_predict"])
    W = a["candidates"].shape[1]
    _merge(step.active, out, predicts, accept_index, accept_token_num, W)
    step.out = out
    return predicts, accept_index, accept_token_num


def eagle_sample_around(original, *args, **kwargs):
    a = _bind(original, args, kwargs)
    verify_input, batch, logits_output = a["verify_input"], a["batch"], a["logits_output"]
    table = getattr(batch.req_to_token_pool, "_asd_table", None)
    K = verify_input.max_tree_depth - 1
    if table is None or table.num_active == 0 or K == 0 or batch.forward_mode.is_idle():
        return original(*args, **kwargs)

    rows = batch.req_pool_indices  # [bs] device
    ledger_rows = table.begin_verify(rows)  # applies staged admissions first: rules_active is exact now
    step = _VerifyStep(
        logits=logits_output.next_token_logits,
        rows=ledger_rows,
        rules_active=table.rules_active,
        depth=K,
        tree_depth_gate=batch.spec_algorithm.is_ngram(),
        active=rows_on(ledger_rows.remaining, ledger_rows.gate, ledger_rows.cap, ledger_rows.rule),
    )
    token = _STEP.set(step)
    try:
        predict, accept_lens, accept_index = original(*args, **kwargs)
    finally:
        _STEP.reset(token)

    bs = rows.shape[0]
    W = verify_input.draft_token_num
    candidates = verify_input.draft_token.reshape(bs, W)
    if step.out is None:
        # SGLang took a sampling branch (mixed batch on GPU): ASD rows are greedy, decide them here.
        step.out = _run_asd(step, candidates, verify_input.retrieve_next_token, verify_input.retrieve_next_sibling, None)
        num_correct = accept_lens - 1
        _merge(step.active, step.out, predict, accept_index, num_correct, W)
        accept_lens = num_correct + 1

    out, active = step.out, step.active
    # Charge the device ledger: asd rows only (strict rows spend 0; padding rows map to the all-zero
    # slot 0; local rows keep B for the next block; margin and threshold rows have no ledger).
    charged = active & row_traits(ledger_rows.rule, bs, ledger_rows.rule.device).ledger
    table.charge(rows, ledger_rows.remaining - torch.where(charged, out.spent, torch.zeros_like(out.spent)))
    logits_output.auxiliary_device_output = append_auxiliary_output(
        logits_output.auxiliary_device_output, _round_output(out, active, candidates, K))
    return predict, accept_lens, accept_index


def _round_output(out: ASDVerifyOutput, active: torch.Tensor, candidates: torch.Tensor, K: int) -> ASDRoundOutput:
    """What the host ledger needs of one round, per draft position i = 0..K-1 of the accepted path."""
    bs, W = candidates.shape
    # Local node id of each path position 1..K (draft positions 0..K-1); -1 padding -> node 0.
    path = out.accept_index[:, 1:].to(torch.int64) - torch.arange(bs, device=candidates.device)[:, None] * W
    accepted = torch.arange(K, device=candidates.device) < out.num_correct_drafts[:, None]  # [bs, K]
    after_first_exception = out.exception_mask.cumsum(dim=1) > 0
    return ASDRoundOutput(
        active=active,
        exception_mask=out.exception_mask,
        suffix_mask=accepted & ~out.exception_mask & after_first_exception,
        exception_regret=out.exception_regret,
        draft_token=candidates.gather(1, path.clamp(min=0)),
        target_token=out.target_token,
    )
