"""Seam: ``sglang.srt.speculative.eagle_utils.eagle_sample`` and the two verify functions its branches
call, ``verify_tree_greedy_func`` (greedy) and ``tree_speculative_sampling_target_only`` (sampling).

- Kind: AROUND on all three, each calls the original. Process: scheduler (every TP rank), in the
  verify step of EAGLE/EAGLE3/NEXTN (EAGLEWorkerV2, MultiLayerEagleWorkerV2), STANDALONE
  (StandaloneWorkerV2) and NGRAM (NGRAMWorker).
- Why: ASD replaces strict greedy acceptance with the request's rule for the rows of greedy
  requests that carry a budget, SGLang's exact sampling walk with the sampled rule for the rows of
  sampled requests that carry one, and leaves every other row exactly as SGLang computed it.
- How: the ASD verify step (``step/verify_step.py``: the numbered step, its ordering under the
  overlap scheduler and CUDA graphs, and tensor parallelism). ``eagle_sample_around`` opens it
  (depth 0, ``--speculative-adaptive``'s root-only verify, or an idle batch: SGLang's result as
  is) and settles it; SGLang's branch decides inside it: ``verify_tree_greedy_around`` the greedy
  rows (reusing SGLang's ``target_predict``), ``tree_sampling_around`` the sampled rows (same coins
  and probabilities as SGLang's kernel, run first on every row). When SGLang took its sampling
  branch the greedy rows are decided after it returns. Each merges the rows ASD decided into
  SGLang's in-place result before SGLang's own code after the call (its TP broadcast,
  ``accept_lens``) reads it. NGRAM: ``max_tree_depth`` is the draft width, so the gate uses each
  row's real tree depth (``tree_depth_gate``); EAGLE and STANDALONE keep K =
  ``speculative_num_steps`` (spec section 5).
- Bindings: ``eagle_sample`` is imported by name into ``eagle_worker_common`` and ``ngram_worker``,
  the two verify functions into ``eagle_utils``; the registry rebinds them and the install checks
  each (``SEAMS``), and binds the parameters the hooks read by name (``check_signatures``).
  Where the platform has no ``tree_speculative_sampling_target_only`` (CPU, unless
  ``SGLANG_ASD_CPU_SAMPLING=on`` serves one: ``cpu_backend/seams/sampling.py``) that hook is not
  registered and sampled requests get ``"reason": "sampling"`` (``scheduler.sampling_reason``).
- Block drafters: DFLASH's sampling accept calls ``tree_speculative_sampling_target_only`` too (its
  module's binding of it is rebound with the others); in a block drafter's step (``step.chain``) both
  hooks return SGLang's result untouched and the accept's seam decides (``dflash_accept.py``).
- Not hooked: rejection sampling (``--speculative-use-rejection-sampling``) and UNO's sparse target
  sampling decide sampled rows without this kernel (``"reason": "rejection_sampling"``).
- Upstream: none yet. A verify-acceptance policy hook in ``eagle_sample`` would replace the
  wrappers; proposed in patches/ (0001, greedy branch).
- Removal: when SGLang exposes an acceptance-policy extension point.
- Tested on: sglang 0.5.23 (CPU; the overlap scheduler through a test-only CPU hook).
"""

from __future__ import annotations

import torch

from sglang.srt.speculative import eagle_utils

from sglang_asd.hooks.arguments import NamedArguments
from sglang_asd.hooks.registry import Seam, resolve
from sglang_asd.sglang_seams.step import verify_step
from sglang_asd.sglang_seams.step.verify_step import Branch

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


def eagle_sample_around(original, *args, **kwargs):
    """Open the step, run SGLang's ``eagle_sample`` with it published, settle it."""
    verify_input, batch, logits_output = EAGLE_SAMPLE_ARGS.of(args, kwargs)
    K = verify_input.max_tree_depth - 1
    ngram = batch.spec_algorithm.is_ngram()
    step = None if K == 0 else verify_step.open(
        batch, _broadcast_group(batch), sampled=True, logits=logits_output.next_token_logits, depth=K,
        tree_depth_gate=ngram)
    if step is None:
        if K == 0:
            verify_step.advance_zero_step(batch, verify_input.draft_token)
        return original(*args, **kwargs)
    if step.sampled_active is not None and not ngram:
        step.max_children = verify_input.tree_topk
    with verify_step.published(step):
        predict, accept_lens, accept_index = original(*args, **kwargs)
    bs, W = step.slots.shape[0], verify_input.draft_token_num
    candidates = verify_input.draft_token.reshape(bs, W)  # [bs, W]
    num_correct = accept_lens - 1
    if step.branch is not Branch.GREEDY and step.rules_active:  # SGLang took its sampling branch
        verify_step.decide(step, candidates, step.logits, verify_input.retrieve_next_token,
                           verify_input.retrieve_next_sibling, K, tree_depth_gate=ngram)
        _merge(step, candidates, predict, accept_index, num_correct)
        accept_lens = num_correct + 1
    verify_step.settle(step, candidates, K, (predict, accept_index, num_correct))
    verify_step.attach(logits_output, step.round_output)
    return predict, accept_lens, accept_index


def verify_tree_greedy_around(original, *args, **kwargs):
    """SGLang's greedy branch: its strict result, then the greedy ASD rows decided and merged in."""
    predicts, accept_index, accept_token_num = original(*args, **kwargs)
    step = verify_step.current()
    if step is None or step.chain:  # outside an ASD step, a second call in one, or a block drafter's step
        return predicts, accept_index, accept_token_num
    step.branch = Branch.GREEDY
    if step.rules_active:  # the table holds a greedy ASD row
        candidates, next_token, next_sibling, target_predict = VERIFY_TREE_GREEDY_ARGS.of(args, kwargs)
        verify_step.decide(step, candidates, step.logits, next_token, next_sibling, step.depth,
                           target_predict=target_predict, tree_depth_gate=step.tree_depth_gate)
        _merge(step, candidates, predicts, accept_index, accept_token_num)
    return predicts, accept_index, accept_token_num


def tree_sampling_around(original, *args, **kwargs):
    """SGLang's sampling branch: its exact walk on every row, then the sampled ASD rows decided
    (rank 0's on every rank) and merged into its in-place outputs."""
    result = original(*args, **kwargs)
    step = verify_step.current()
    if step is None or step.chain:
        # outside an ASD step, a second call in one, or a block drafter's step: DFLASH's sampling accept
        # (``compute_dflash_sampling_correct_drafts_and_bonus``) calls this kernel; its accept hook decides
        return result
    step.branch = Branch.SAMPLING
    if step.sampled_active is None:
        return result  # no sampled row in the table
    predicts, accept_index, accept_token_num, *call = TREE_SAMPLING_ARGS.of(args, kwargs)
    ours = torch.zeros_like(predicts), torch.full_like(accept_index, -1), torch.zeros_like(accept_token_num)
    verify_step.decide_sampled(step, *ours, *call, group=_sampling_group())
    on = step.sampled_active
    bs, W = call[0].shape  # candidates
    predicts.view(bs, W).copy_(torch.where(on[:, None], ours[0].view(bs, W), predicts.view(bs, W)))
    accept_index.copy_(torch.where(on[:, None], ours[1], accept_index))
    accept_token_num.copy_(torch.where(on, ours[2], accept_token_num))
    return result


def _merge(step, candidates, predict, accept_index, num_correct_drafts) -> None:
    """The greedy ASD rows take ``step.decision`` in SGLang's ``predict`` [bs*W], ``accept_index``
    [bs, K+1], ``num_correct_drafts`` [bs] (in place); every other row keeps SGLang's."""
    out, rows = step.decision, step.active
    bs, W = candidates.shape
    predict.view(bs, W).copy_(torch.where(rows[:, None], out.predict.view(bs, W).to(predict.dtype),
                                          predict.view(bs, W)))
    accept_index.copy_(torch.where(rows[:, None], out.accept_index.to(accept_index.dtype), accept_index))
    num_correct_drafts.copy_(torch.where(rows, out.num_correct_drafts.to(num_correct_drafts.dtype),
                                         num_correct_drafts))


def _broadcast_group(batch):
    """The group SGLang broadcasts this batch's verify result over from rank 0, or None: where it
    does, ASD's greedy decision is rank 0's too, so every rank commits the tokens and charges the
    regret SGLang's broadcast makes every rank commit. SGLang broadcasts unless the batch takes its
    plain greedy branch off ROCm: on ROCm's greedy branch (per-rank drafts can differ), on UNO's
    sparse target sampling, and on the sampling branch (a batch holding a sampled request: its
    greedy rows are decided after SGLang's broadcast, so only ASD's own broadcast makes them rank
    0's). The predicate is SGLang's own ``_verify_uses_greedy`` with its arguments, read as
    ``eagle_sample`` reads them (host values: no sync)."""
    all_greedy = batch.sampling_info.is_all_greedy
    greedy = all_greedy or eagle_utils._verify_uses_greedy(  # an all-greedy batch always takes it
        is_all_greedy=all_greedy, is_cpu=eagle_utils._is_cpu, is_hip=eagle_utils._is_hip,
        is_xpu=eagle_utils._is_xpu, use_rejection_sampling=eagle_utils.get_spec().speculative_use_rejection_sampling)
    return verify_step.tp_group() if eagle_utils._is_hip or not greedy else None


def _sampling_group():
    """SGLang broadcasts its sampling branch's result from rank 0 on every platform."""
    return verify_step.tp_group()


def hooks():
    return [(EAGLE_SAMPLE, eagle_sample_around), (VERIFY_TREE_GREEDY, verify_tree_greedy_around)] + sampling_hooks()


def sampling_hooks():
    """The sampling branch's hook, where the platform has the kernel (never wrap a None: SGLang's
    HookRegistry would rebind every module attribute that is None)."""
    return [(TREE_SAMPLING, tree_sampling_around)] if callable(tree_sampling_kernel()) else []


SEAMS = (Seam("scheduler", hooks, bindings={EAGLE_SAMPLE: EAGLE_SAMPLE_BINDINGS,
                                           VERIFY_TREE_GREEDY: VERIFY_TREE_GREEDY_BINDINGS,
                                           TREE_SAMPLING: TREE_SAMPLING_BINDINGS},
              check=lambda: check_signatures(resolve(EAGLE_SAMPLE), resolve(VERIFY_TREE_GREEDY), tree_sampling_kernel())),)
