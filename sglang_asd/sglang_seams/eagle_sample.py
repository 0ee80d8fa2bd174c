"""Seam: ``sglang.srt.speculative.eagle_utils.eagle_sample`` (+ the ``verify_tree_greedy_func`` it calls).

- Hook kind: AROUND on both, each calls the original.
- Process: scheduler (every TP rank), in the verify step of EAGLE/EAGLE3/NEXTN (EAGLEWorkerV2,
  MultiLayerEagleWorkerV2), STANDALONE (StandaloneWorkerV2) and NGRAM (NGRAMWorker).
- Why: ASD replaces strict greedy acceptance with the budgeted rule (docs/ASD_SPEC via
  ``sglang_asd.verify``) for the rows of requests that carry a budget, and leaves every other row
  exactly as SGLang computed it.
- How: ``eagle_sample`` is wrapped to publish the step (final logits, tree, ledger rows) in a
  context variable; SGLang then applies penalties, logit bias and the grammar mask to the logits in
  place and, on the greedy branch, computes ``target_predict = argmax`` and calls
  ``verify_tree_greedy_func``. That call is wrapped: the strict result is computed first, then
  ``asd_verify`` reuses ``target_predict`` (no second pass over the vocabulary: regrets are two
  gathers) and the ASD rows are merged in with ``torch.where``. On SGLang's sampling branch (a
  GPU batch mixing sampled and greedy rows) the argmax is computed here for the ASD rows' sake.
  The ledger rows are charged on the device and the per-row results are attached to the logits
  output as a ``DeviceAuxiliaryOutput``, which SGLang copies to the host with the batch results
  and hands back after committing tokens (``sglang_seams/aux_output.py``). No host sync.
- Every binding: ``eagle_sample`` is imported by name into ``eagle_worker_common`` and
  ``ngram_worker``; SGLang's HookRegistry rebinds stale ``from X import Y`` names in loaded modules,
  and ``check_installed`` verifies each binding at start-up.
- Upstream: none yet. A verify-acceptance policy hook in ``eagle_sample`` would replace both
  wrappers; proposed in patches/.
- Removal: when SGLang exposes an acceptance-policy extension point.
- Tested on: sglang 0.5.23.
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Optional

import torch

from sglang.srt.managers.auxiliary_output import append_auxiliary_output
from sglang.srt.speculative import eagle_utils

from sglang_asd.sglang_seams.aux_output import ASDDeviceOutput
from sglang_asd.verify import ASDVerifyOutput, asd_verify

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


@dataclasses.dataclass
class _VerifyStep:
    logits: torch.Tensor  # [bs*W, V] final logits (SGLang modifies them in place before argmax)
    remaining: torch.Tensor  # [bs] float32
    gate: torch.Tensor  # [bs] float32
    cap: torch.Tensor  # [bs] int32
    stop_tokens: torch.Tensor  # [bs, T] int64, -1 padded
    depth: int  # K
    active: torch.Tensor  # [bs] bool: rows decided by ASD (remaining, gate and cap all > 0)
    out: Optional[ASDVerifyOutput] = None


_STEP: contextvars.ContextVar[Optional[_VerifyStep]] = contextvars.ContextVar("asd_verify_step", default=None)


def _run_asd(step: _VerifyStep, candidates, retrive_next_token, retrive_next_sibling, target_predict):
    return _tp_consistent(asd_verify(
        candidates,
        step.logits,
        retrive_next_token,
        retrive_next_sibling,
        step.remaining,
        step.gate,
        step.cap,
        step.depth,
        stop_tokens=step.stop_tokens,
        target_predict=target_predict,
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
    bound = _bind_verify_args(args, kwargs)
    out = _run_asd(step, bound["candidates"], bound["retrieve_next_token"], bound["retrieve_next_sibling"],
                   bound["target_predict"])
    W = bound["candidates"].shape[1]
    _merge(step.active, out, predicts, accept_index, accept_token_num, W)
    step.out = out
    return predicts, accept_index, accept_token_num


_VERIFY_ARG_NAMES = ("predicts", "accept_index", "accept_token_num", "candidates", "retrieve_index",
                     "retrieve_next_token", "retrieve_next_sibling", "target_predict", "topk")


def _bind_verify_args(args, kwargs) -> dict:
    bound = dict(zip(_VERIFY_ARG_NAMES, args))
    bound.update(kwargs)
    return bound


def eagle_sample_around(original, verify_input, batch, logits_output, *args, **kwargs):
    pool = batch.req_to_token_pool
    table = getattr(pool, "_asd_table", None)
    if table is None or table.num_active == 0 or batch.forward_mode.is_idle():
        return original(verify_input, batch, logits_output, *args, **kwargs)

    rows = batch.req_pool_indices  # [bs] device
    remaining, gate, cap = table.remaining[rows], table.gate[rows], table.cap[rows]
    step = _VerifyStep(
        logits=logits_output.next_token_logits,
        remaining=remaining,
        gate=gate,
        cap=cap,
        stop_tokens=table.stop_tokens[rows],
        depth=verify_input.max_tree_depth - 1,
        active=(remaining > 0) & (gate > 0) & (cap > 0),
    )
    token = _STEP.set(step)
    try:
        predict, accept_lens, accept_index = original(verify_input, batch, logits_output, *args, **kwargs)
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
    # Charge the device ledger (strict rows spend 0; padding rows map to the all-zero slot 0).
    table.remaining.index_put_((rows,), step.remaining - torch.where(active, out.spent, torch.zeros_like(out.spent)))
    accepted_tokens = candidates.gather(1, _path_nodes(out.accept_index, bs, W))  # [bs, K] tokens on the path
    logits_output.auxiliary_device_output = append_auxiliary_output(
        logits_output.auxiliary_device_output,
        ASDDeviceOutput.from_verify(out, active, accepted_tokens),
    )
    return predict, accept_lens, accept_index


def _path_nodes(accept_index: torch.Tensor, bs: int, W: int) -> torch.Tensor:
    """Local node ids of path positions 1..K (draft positions 0..K-1); -1 padding -> node 0."""
    nodes = accept_index[:, 1:].to(torch.int64) - torch.arange(bs, device=accept_index.device)[:, None] * W
    return nodes.clamp(min=0)  # [bs, K]
