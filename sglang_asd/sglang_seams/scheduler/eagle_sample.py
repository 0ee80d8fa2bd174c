"""Seam: ``sglang.srt.speculative.eagle_utils.eagle_sample`` (+ the ``verify_tree_greedy_func`` it calls).

- Hook kind: AROUND on both, each calls the original.
- Process: scheduler (every TP rank), in the verify step of EAGLE/EAGLE3/NEXTN (EAGLEWorkerV2,
  MultiLayerEagleWorkerV2), STANDALONE (StandaloneWorkerV2) and NGRAM (NGRAMWorker).
- Why: ASD replaces strict greedy acceptance with the request's rule (docs/ASD_SPEC.md for asd;
  local, margin, threshold: ``policy.config``; via ``sglang_asd.verify``) for the rows of requests
  that carry a budget, and leaves every other row exactly as SGLang computed it.
- How, one verify step (``eagle_sample_around``, numbered as in the code):
  1. The step's ASD rows: the ledger table applies its staged admissions and releases, then
     hands out the batch's rows (remaining, gate, cap, stop tokens, rule). With no ASD row, an
     idle batch or depth 0, SGLang's result is returned as is.
  2. SGLang's ``eagle_sample`` runs with the step published in a context variable. It applies
     penalties, logit bias and the grammar mask to the logits in place and, on its greedy
     branch, computes ``target_predict = argmax`` and calls ``verify_tree_greedy_func``. That
     call's hook computes the strict result first, then decides the ASD rows with ``asd_verify``
     reusing ``target_predict`` (no second pass over the vocabulary: regrets are two gathers),
     merges them in with ``torch.where`` and leaves the decision on the step.
  3. No decision on the step means SGLang took its sampling branch (a GPU batch mixing sampled
     and greedy rows), which calls no ``verify_tree_greedy_func``: the ASD rows are greedy, so
     they are decided and merged here, the verifier computing their argmax.
  4. The device ledger is charged (asd rows only).
  5. The per-round results (``ASDRoundOutput.of_round``) are attached to the logits output as a
     ``DeviceAuxiliaryOutput``, which SGLang copies to the host with the batch results and hands
     back after committing tokens (``state/round_output.py``).
  No host sync, no Python loop over requests.
- Ordering (overlap scheduler, CUDA graphs): ``eagle_sample`` runs eagerly after the target's
  verify forward (graph replay or not), on the stream that runs the forward. The ledger rows are
  read and charged there (``ledger_table.py``: admissions and releases are staged on the host and
  applied by step 1 first, so every write to the table is in this stream's order). The host
  ledger trails the device by one round under overlap; receipts come from the per-round results
  of rounds whose tokens were committed, so a request finished in round N is not charged for the
  round N+1 it was still part of. The rules add no ordering of their own: a row's rule id is
  written only with its admission (staged, applied first by step 1), the kernel choice reads
  the host view that matches exactly the rows applied at this step's issue, and only asd rows'
  ``remaining`` changes from round to round (local, margin and threshold rows keep B, so a lagging
  round cannot leave them a stale value).
- Rules: each row's rule id comes from the ledger table with its other columns; the kernel is
  chosen from the table's host view of the rules in use (``ledger_table.rules_active``: no sync):
  the fused Triton kernel when every ASD row is asd or local, the torch verifier otherwise.
  Only asd rows are charged (local keeps B per block; margin and threshold have no ledger), and
  every rule's spent regret reaches the host ledger through the round output.
- Fused-kernel variants: the first call of each shape (everything a variant key reads: a set
  lookup per step) is checked against the start-up warm-up's list (``verify_warmup.py``).
- Tensor parallelism: ranks agree by construction on CUDA; on ROCm, where SGLang broadcasts its
  own greedy result from rank 0, the ASD decision is broadcast too (``verify/tp.py``).
- NGRAM (``batch.spec_algorithm.is_ngram()``, host-known): SGLang's ``max_tree_depth`` is the
  draft width, so K = ``max_tree_depth - 1`` is only a loop bound; the gate uses each row's real
  tree depth (``tree_depth_gate``), computed by the verifier on the device. EAGLE and STANDALONE
  keep K = ``speculative_num_steps`` (spec section 5).
- Depth 0 (``--speculative-adaptive`` at large batch sizes verifies the root alone): no draft
  token, nothing to decide; SGLang's result is returned as is.
- Every binding: ``eagle_sample`` is imported by name into ``eagle_worker_common`` and
  ``ngram_worker``; SGLang's HookRegistry rebinds stale ``from X import Y`` names in loaded modules,
  and ``check_installed`` verifies each binding at start-up. The parameters the hooks read are
  bound by name once at install (``check_signatures``, ``arguments.py``), which stops the start
  if one was renamed.
- Upstream: none yet. A verify-acceptance policy hook in ``eagle_sample`` would replace both
  wrappers; proposed in patches/ (0001).
- Removal: when SGLang exposes an acceptance-policy extension point.
- Tested on: sglang 0.5.23 (CPU; the overlap scheduler through a test-only CPU hook).
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import FrozenSet, Optional

import torch

from sglang.srt.speculative import eagle_utils

from sglang_asd.sglang_seams.scheduler.arguments import NamedArguments
from sglang_asd.sglang_seams.scheduler.verify_round import attach_round_output, settle_round
from sglang_asd.sglang_seams.scheduler.verify_warmup import check_variant
from sglang_asd.sglang_seams.state.ledger_table import LedgerRows
from sglang_asd.verify import ASDVerifyOutput, asd_verify
from sglang_asd.verify.rules import rows_on
from sglang_asd.verify.tp import rank_consistent

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
# The parameters of SGLang's functions that the hooks read, by name (bound at install).
EAGLE_SAMPLE_ARGS = NamedArguments(EAGLE_SAMPLE, ("verify_input", "batch", "logits_output"))
VERIFY_TREE_GREEDY_ARGS = NamedArguments(
    VERIFY_TREE_GREEDY, ("candidates", "retrieve_next_token", "retrieve_next_sibling", "target_predict"))


def check_signatures(eagle_sample_fn, verify_tree_greedy_fn) -> None:
    """At install: bind both hooks to SGLang's parameters; raise if one they read was renamed."""
    EAGLE_SAMPLE_ARGS.bind(eagle_sample_fn)
    VERIFY_TREE_GREEDY_ARGS.bind(verify_tree_greedy_fn)


@dataclasses.dataclass
class _VerifyStep:
    """One verify step, handed from ``eagle_sample_around`` to ``verify_tree_greedy_around``."""

    logits: torch.Tensor  # [bs*W, V] final logits (SGLang modifies them in place before argmax)
    rows: LedgerRows  # the batch's ledger rows: remaining, gate, cap [bs]; stop_tokens [bs, T]; rule [bs]
    rules_active: FrozenSet[str]  # host view: the rules the table's ASD rows use (superset of this batch's)
    depth: int  # K
    tree_depth_gate: bool  # NGRAM: the gate's K is each row's tree depth
    active: torch.Tensor  # [bs] bool: rows decided by ASD (``verify.rules.rows_on``)
    decision: Optional[ASDVerifyOutput] = None  # set by whichever hook decided the ASD rows (step 2 or 3)


_STEP: contextvars.ContextVar[Optional[_VerifyStep]] = contextvars.ContextVar("asd_verify_step", default=None)


def eagle_sample_around(original, *args, **kwargs):
    """One verify step, steps 1-5 of the module docstring."""
    verify_input, batch, logits_output = EAGLE_SAMPLE_ARGS.of(args, kwargs)
    # 1. The step's ASD rows (staged admissions applied first: rules_active is exact now), if any.
    table = getattr(batch.req_to_token_pool, "_asd_table", None)
    K = verify_input.max_tree_depth - 1
    if table is None or table.num_active == 0 or K == 0 or batch.forward_mode.is_idle():
        return original(*args, **kwargs)
    rows = batch.req_pool_indices  # [bs] device
    ledger_rows = table.begin_verify(rows)
    step = _VerifyStep(
        logits=logits_output.next_token_logits,
        rows=ledger_rows,
        rules_active=table.rules_active,
        depth=K,
        tree_depth_gate=batch.spec_algorithm.is_ngram(),
        active=rows_on(ledger_rows.remaining, ledger_rows.gate, ledger_rows.cap, ledger_rows.rule),
    )

    # 2. SGLang's eagle_sample; its greedy branch decides the ASD rows in verify_tree_greedy_around.
    token = _STEP.set(step)
    try:
        predict, accept_lens, accept_index = original(*args, **kwargs)
    finally:
        _STEP.reset(token)

    bs, W = rows.shape[0], verify_input.draft_token_num
    candidates = verify_input.draft_token.reshape(bs, W)  # [bs, W]
    # 3. Undecided: SGLang took its sampling branch (no verify_tree_greedy_func). Decide here.
    if step.decision is None:
        num_correct = accept_lens - 1
        _decide(step, candidates, verify_input.retrieve_next_token, verify_input.retrieve_next_sibling, None,
                predict, accept_index, num_correct)
        accept_lens = num_correct + 1

    # 4. Charge the device ledger (asd rows only) and 5. hand the round's results to SGLang, for the
    # host ledger once SGLang has committed the tokens.
    attach_round_output(logits_output, settle_round(table, rows, ledger_rows, step.decision, step.active,
                                                    candidates, K))
    return predict, accept_lens, accept_index


def verify_tree_greedy_around(original, *args, **kwargs):
    """Step 2 on SGLang's greedy branch: its strict result, then the ASD rows' decision merged in."""
    predicts, accept_index, accept_token_num = original(*args, **kwargs)
    step = _STEP.get()
    if step is None or step.decision is not None:  # outside an ASD step (or a second call in one)
        return predicts, accept_index, accept_token_num
    candidates, next_token, next_sibling, target_predict = VERIFY_TREE_GREEDY_ARGS.of(args, kwargs)
    _decide(step, candidates, next_token, next_sibling, target_predict, predicts, accept_index, accept_token_num)
    return predicts, accept_index, accept_token_num


def _decide(step: _VerifyStep, candidates, retrieve_next_token, retrieve_next_sibling, target_predict,
            predict, accept_index, num_correct_drafts) -> None:
    """Decide the ASD rows, take every TP rank to one decision, merge it into SGLang's result
    ``predict`` [bs*W], ``accept_index`` [bs, K+1], ``num_correct_drafts`` [bs] (in place), and
    leave it on ``step.decision``. ``target_predict`` [bs, W]: SGLang's argmax, or None."""
    r, logits = step.rows, step.logits
    check_variant(candidates, logits, step.depth, r.stop_tokens, target_predict, step.rules_active)
    out = asd_verify(
        candidates,
        logits,
        retrieve_next_token,
        retrieve_next_sibling,
        r.remaining,
        r.gate,
        r.cap,
        step.depth,
        stop_tokens=r.stop_tokens,
        target_predict=target_predict,
        rule=r.rule,
        rules_present=step.rules_active,
        tree_depth_gate=step.tree_depth_gate,
    )
    out = rank_consistent(out, _broadcast_group())
    # Merge: the ASD rows take the decision, every other row keeps SGLang's result.
    bs, W = candidates.shape
    rows = step.active[:, None]  # [bs, 1]
    predict.view(bs, W).copy_(torch.where(rows, out.predict.view(bs, W).to(predict.dtype), predict.view(bs, W)))
    accept_index.copy_(torch.where(rows, out.accept_index.to(accept_index.dtype), accept_index))
    num_correct_drafts.copy_(torch.where(step.active, out.num_correct_drafts.to(num_correct_drafts.dtype),
                                         num_correct_drafts))
    step.decision = out


def _broadcast_group():
    """The group over which SGLang broadcasts its own greedy result (ROCm, more than one rank),
    for ``verify.tp.rank_consistent``; None where ranks agree without communication."""
    if not eagle_utils._is_hip:
        return None
    from sglang.srt.layers.dp_attention import is_dp_attention_enabled
    from sglang.srt.runtime_context import get_parallel

    group = get_parallel().attn_tp_group if is_dp_attention_enabled() else get_parallel().tp_group
    return group.device_group if group.world_size > 1 else None


def hooks():
    return [
        (EAGLE_SAMPLE, eagle_sample_around),
        (VERIFY_TREE_GREEDY, verify_tree_greedy_around),
    ]
