"""Seam: ``sglang.srt.speculative.eagle_utils.eagle_sample`` (+ the ``verify_tree_greedy_func`` and
``tree_speculative_sampling_target_only`` it calls).

- Hook kind: AROUND on all three, each calls the original.
- Process: scheduler (every TP rank), in the verify step of EAGLE/EAGLE3/NEXTN (EAGLEWorkerV2,
  MultiLayerEagleWorkerV2), STANDALONE (StandaloneWorkerV2) and NGRAM (NGRAMWorker).
- Why: ASD replaces strict greedy acceptance with the request's rule (docs/ASD_SPEC.md for asd;
  local, margin, threshold: ``policy.config``; via ``sglang_asd.verify``) for the rows of greedy
  requests that carry a budget, replaces SGLang's exact sampling walk with the sampled rule
  (``asd-sampled-1``, docs/SAMPLED.md; ``verify.sampled_verify``) for the rows of sampled requests
  that carry one, and leaves every other row exactly as SGLang computed it.
- How, one verify step (``eagle_sample_around``, numbered as in the code):
  1. The step's ASD rows: the ledger table applies its staged admissions and releases, then
     hands out the batch's rows (remaining, gate, cap, stop tokens, rule, power). With no ASD row,
     an idle batch or depth 0, SGLang's result is returned as is. Greedy rows (``rows_on``) and
     sampled rows (``sampled_rows_on``) are disjoint by rule id.
  2. SGLang's ``eagle_sample`` runs with the step published in a context variable. It applies
     penalties, logit bias and the grammar mask to the logits in place and, on its greedy
     branch, computes ``target_predict = argmax`` and calls ``verify_tree_greedy_func``. That
     call's hook computes the strict result first, then decides the ASD rows with ``asd_verify``
     reusing ``target_predict`` (no second pass over the vocabulary: regrets are two gathers),
     merges them in with ``torch.where`` and leaves the decision on the step.
  3. No decision on the step means SGLang took its sampling branch (a batch holding a sampled
     row, on a platform whose verify samples), which calls no ``verify_tree_greedy_func`` but
     ``tree_speculative_sampling_target_only`` with the target's processed probabilities (after
     temperature, top-k, top-p) and the step's coins. That call's hook runs SGLang's kernel on
     every row, then, if the table holds a sampled row (host view), ``asd_sampled_verify`` on fresh
     buffers with the same coins and probabilities (rows other than the step's sampled rows get
     remaining 0: SGLang's walk), takes rank 0's result (below) and merges the sampled rows into
     SGLang's in-place outputs with ``torch.where``, before SGLang's own code after the call
     (its TP broadcast, ``accept_lens``) reads them. Back in ``eagle_sample_around``, the greedy
     ASD rows of the batch, if the table holds any, are decided and merged here, the verifier
     computing their argmax.
  4. The device ledger is charged: asd rows with their regret, sampled rows with their KL
     (``spent`` of the sampled verifier), in one write.
  5. The per-round results (``ASDRoundOutput.of_round``) are attached to the logits output as a
     ``DeviceAuxiliaryOutput``, which SGLang copies to the host with the batch results and hands
     back after committing tokens (``state/round_output.py``).
  No host sync, no Python loop over requests.
- Ordering (overlap scheduler, CUDA graphs): ``eagle_sample`` runs eagerly after the target's
  verify forward (graph replay or not), on the stream that runs the forward; its sampling branch,
  and so the sampled verifier, too (it is never captured in a graph: it is host code between
  the forward and the draft-extend). The ledger rows are
  read and charged there (``ledger_table.py``: admissions and releases are staged on the host and
  applied by step 1 first, so every write to the table is in this stream's order). The host
  ledger trails the device by one round under overlap; receipts come from the per-round results
  of rounds whose tokens were committed, so a request finished in round N is not charged for the
  round N+1 it was still part of (sampled rows the same: the device charge of that extra round
  only lowers a finished request's row, which its release zeroes). The rules add no ordering of their own: a row's rule id is
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
  own greedy result from rank 0, the ASD decision is broadcast too (``verify/tp.py``). The
  sampling branch: SGLang broadcasts its sampled result from rank 0 on every platform (softmax,
  top-k and top-p may differ in the last bit across ranks); the sampled verifier's whole output
  (receipts and ``spent``) is broadcast from rank 0 before the merge, so every rank commits rank
  0's tokens (SGLang's broadcast after the call) and charges rank 0's KL.
- NGRAM (``batch.spec_algorithm.is_ngram()``, host-known): SGLang's ``max_tree_depth`` is the
  draft width, so K = ``max_tree_depth - 1`` is only a loop bound; the gate uses each row's real
  tree depth (``tree_depth_gate``), computed by the verifier on the device. EAGLE and STANDALONE
  keep K = ``speculative_num_steps`` (spec section 5).
- Depth 0 (``--speculative-adaptive`` at large batch sizes verifies the root alone): no draft
  token, nothing to decide; SGLang's result is returned as is.
- Every binding: ``eagle_sample`` is imported by name into ``eagle_worker_common`` and
  ``ngram_worker``, ``tree_speculative_sampling_target_only`` into ``eagle_utils``; SGLang's HookRegistry rebinds stale ``from X import Y`` names in loaded modules,
  and ``check_installed`` verifies each binding at start-up. The parameters the hooks read are
  bound by name once at install (``check_signatures``, ``arguments.py``), which stops the start
  if one was renamed. Where the platform has no ``tree_speculative_sampling_target_only`` (CPU:
  SGLang verifies sampled rows greedily there) that hook is not registered, and sampled requests
  get ``"reason": "sampling"`` (``scheduler.sampling_reason``); ``SGLANG_ASD_CPU_SAMPLING=on``
  serves SGLang's sampling branch on CPU with a torch kernel (``cpu_backend/seams/sampling.py``,
  applied before these hooks are chosen), which this hook then wraps.
- Not hooked: rejection sampling (``--speculative-use-rejection-sampling``: another sampler, with
  draft probabilities) and UNO's sparse target sampling (CUDA, UNO only) decide sampled rows
  without this kernel; sampled requests there get ``"reason": "rejection_sampling"``, and UNO is
  not served by ASD (``modes.py``).
- Upstream: none yet. A verify-acceptance policy hook in ``eagle_sample`` would replace the
  wrappers; proposed in patches/ (0001, greedy branch).
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
from sglang_asd.verify.rules import rows_on, sampled_rows_on
from sglang_asd.verify.dispatch import SampledVerifyOutput, asd_sampled_verify
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
TREE_SAMPLING = "sglang.kernels.ops.speculative.verify_sampling.tree_speculative_sampling_target_only"
TREE_SAMPLING_BINDINGS = (
    "sglang.kernels.ops.speculative.verify_sampling",
    "sglang.srt.speculative.eagle_utils",
)
# The parameters of SGLang's functions that the hooks read, by name (bound at install).
EAGLE_SAMPLE_ARGS = NamedArguments(EAGLE_SAMPLE, ("verify_input", "batch", "logits_output"))
VERIFY_TREE_GREEDY_ARGS = NamedArguments(
    VERIFY_TREE_GREEDY, ("candidates", "retrieve_next_token", "retrieve_next_sibling", "target_predict"))
TREE_SAMPLING_ARGS = NamedArguments(
    TREE_SAMPLING, ("predicts", "accept_index", "accept_token_num", "candidates", "retrive_index", "retrive_next_token",
                    "retrive_next_sibling", "uniform_samples", "uniform_samples_for_final_sampling", "target_probs",
                    "threshold_single", "threshold_acc"))


def check_signatures(eagle_sample_fn, verify_tree_greedy_fn, tree_sampling_fn=None) -> None:
    """At install: bind the hooks to SGLang's parameters; raise if one they read was renamed.
    ``tree_sampling_fn``: the platform's ``tree_speculative_sampling_target_only``, if it has one."""
    EAGLE_SAMPLE_ARGS.bind(eagle_sample_fn)
    VERIFY_TREE_GREEDY_ARGS.bind(verify_tree_greedy_fn)
    if tree_sampling_fn is not None:
        TREE_SAMPLING_ARGS.bind(tree_sampling_fn)


def tree_sampling_kernel():
    """The platform's ``tree_speculative_sampling_target_only`` (None where it has none: CPU)."""
    from sglang.kernels.ops.speculative import verify_sampling

    return verify_sampling.tree_speculative_sampling_target_only


@dataclasses.dataclass
class _VerifyStep:
    """One verify step, handed from ``eagle_sample_around`` to ``verify_tree_greedy_around`` and ``tree_sampling_around``."""

    logits: torch.Tensor  # [bs*W, V] final logits (SGLang modifies them in place before argmax)
    rows: LedgerRows  # the batch's ledger rows: remaining, gate, cap, rule, power [bs]; stop_tokens [bs, T]
    rules_active: FrozenSet[str]  # host view: the greedy rules the table's ASD rows use (superset of this batch's)
    depth: int  # K
    tree_depth_gate: bool  # NGRAM: the gate's K is each row's tree depth
    active: torch.Tensor  # [bs] bool: greedy rows decided by ASD (``verify.rules.rows_on``)
    sampled_active: Optional[torch.Tensor]  # [bs] bool: sampled rows (``sampled_rows_on``); None: none in the table
    max_children: Optional[int]  # host: EAGLE's topk bounding a node's children; None: W - 1 (NGRAM)
    decision: Optional[ASDVerifyOutput] = None  # set by whichever hook decided the ASD rows (step 2 or 3)
    sampled: Optional[SampledVerifyOutput] = None  # set by the sampling hook (step 3)


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
    r = ledger_rows
    ngram = batch.spec_algorithm.is_ngram()
    step = _VerifyStep(
        logits=logits_output.next_token_logits,
        rows=ledger_rows,
        rules_active=table.rules_active,
        depth=K,
        tree_depth_gate=ngram,
        active=rows_on(r.remaining, r.gate, r.cap, r.rule),
        sampled_active=sampled_rows_on(r.remaining, r.gate, r.cap, r.rule) if table.sampled_active else None,
        max_children=None if ngram or not table.sampled_active else verify_input.tree_topk,
    )

    # 2. SGLang's eagle_sample; its greedy branch decides the ASD rows in verify_tree_greedy_around.
    token = _STEP.set(step)
    try:
        predict, accept_lens, accept_index = original(*args, **kwargs)
    finally:
        _STEP.reset(token)

    bs, W = rows.shape[0], verify_input.draft_token_num
    candidates = verify_input.draft_token.reshape(bs, W)  # [bs, W]
    # 3. Undecided: SGLang took its sampling branch (no verify_tree_greedy_func; its sampled rows
    # were decided by tree_sampling_around). Decide the greedy ASD rows here, if the table has any.
    if step.decision is None:
        num_correct = accept_lens - 1
        if step.rules_active:
            _decide(step, candidates, verify_input.retrieve_next_token, verify_input.retrieve_next_sibling, None,
                    predict, accept_index, num_correct)
            accept_lens = num_correct + 1
        else:
            step.decision = _undecided(predict, accept_index, num_correct, K)

    # 4. Charge the device ledger (asd rows: regret, in settle_round; sampled rows: KL, folded into
    # the rows settle_round writes back, so the table takes one write) and 5. hand the round's
    # results to SGLang, for the host ledger once SGLang has committed the tokens.
    if step.sampled is not None:
        kl = torch.where(step.sampled_active, step.sampled.spent, torch.zeros_like(step.sampled.spent))
        ledger_rows = ledger_rows._replace(remaining=ledger_rows.remaining - kl)
    round_output = settle_round(table, rows, ledger_rows, step.decision, step.active, candidates, K)
    if step.sampled is not None:
        round_output = round_output.with_sampled(step.sampled, step.sampled_active)
    attach_round_output(logits_output, round_output)
    return predict, accept_lens, accept_index


def _undecided(predict, accept_index, num_correct_drafts, K: int) -> ASDVerifyOutput:
    """SGLang's own result as a decision with no exception (no greedy ASD row in the table)."""
    bs = accept_index.shape[0]
    zeros = torch.zeros(bs, K, dtype=torch.float32, device=accept_index.device)
    return ASDVerifyOutput(
        predict=predict, accept_index=accept_index, num_correct_drafts=num_correct_drafts,
        spent=torch.zeros(bs, dtype=torch.float32, device=accept_index.device),
        num_exceptions=torch.zeros_like(num_correct_drafts), exception_mask=zeros.bool(), exception_regret=zeros,
        target_token=torch.full((bs, K), -1, dtype=torch.int64, device=accept_index.device),
        num_suffix_tokens=torch.zeros_like(num_correct_drafts))


def tree_sampling_around(original, *args, **kwargs):
    """Step 3 on SGLang's sampling branch: its exact walk on every row, then the sampled rows'
    decision (``asd_sampled_verify``, same coins and probabilities) merged in, rank 0's on every rank."""
    result = original(*args, **kwargs)
    step = _STEP.get()
    if step is None or step.sampled_active is None or step.sampled is not None:
        return result  # outside an ASD step, no sampled row in the table, or a second call in one
    (predicts, accept_index, accept_token_num, candidates, retrieve_index, next_token, next_sibling, coins,
     final_coins, target_probs, threshold_single, threshold_acc) = TREE_SAMPLING_ARGS.of(args, kwargs)
    r, on = step.rows, step.sampled_active
    ours_predicts = torch.zeros_like(predicts)  # [bs*W]
    ours_accept_index = torch.full_like(accept_index, -1)  # [bs, K+1]
    ours_accept_num = torch.zeros_like(accept_token_num)  # [bs]
    out = asd_sampled_verify(
        ours_predicts, ours_accept_index, ours_accept_num, candidates, retrieve_index, next_token, next_sibling,
        coins, final_coins, target_probs,
        remaining=torch.where(on, r.remaining, torch.zeros_like(r.remaining)),
        floor=r.gate, cap=r.cap, power=r.power, stop_tokens=r.stop_tokens,
        threshold_single=threshold_single, threshold_acc=threshold_acc, max_children=step.max_children,
    )
    # Rank 0's receipts and charge on every rank; the merged tokens become rank 0's by SGLang's own
    # broadcast of predicts / accept_index / accept_token_num right after this call.
    out = rank_consistent(out, _sampling_group())
    bs, W = candidates.shape
    predicts.view(bs, W).copy_(torch.where(on[:, None], ours_predicts.view(bs, W), predicts.view(bs, W)))
    accept_index.copy_(torch.where(on[:, None], ours_accept_index, accept_index))
    accept_token_num.copy_(torch.where(on, ours_accept_num, accept_token_num))
    step.sampled = out
    return result


def verify_tree_greedy_around(original, *args, **kwargs):
    """Step 2 on SGLang's greedy branch: its strict result, then the ASD rows' decision merged in."""
    predicts, accept_index, accept_token_num = original(*args, **kwargs)
    step = _STEP.get()
    if step is None or step.decision is not None or not step.rules_active:
        return predicts, accept_index, accept_token_num  # outside an ASD step, a second call, or no greedy ASD row
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


def _sampling_group():
    """The group over which SGLang broadcasts its sampling branch's result (every platform, more
    than one rank); None with one rank."""
    from sglang.srt.layers.dp_attention import is_dp_attention_enabled
    from sglang.srt.runtime_context import get_parallel

    group = get_parallel().attn_tp_group if is_dp_attention_enabled() else get_parallel().tp_group
    return group.device_group if group.world_size > 1 else None


def hooks():
    return [
        (EAGLE_SAMPLE, eagle_sample_around),
        (VERIFY_TREE_GREEDY, verify_tree_greedy_around),
    ] + sampling_hooks()


def sampling_hooks():
    """The sampling branch's hook, where the platform has the kernel (never wrap a None: SGLang's
    HookRegistry would rebind every module attribute that is None)."""
    return [(TREE_SAMPLING, tree_sampling_around)] if callable(tree_sampling_kernel()) else []
