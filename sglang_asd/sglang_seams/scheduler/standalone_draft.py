"""Seam: the STANDALONE draft's KV convention (``StandaloneDraftWorker`` + ``prepare_for_draft[_extend]``).

Targets (all AROUND, each calls the original):
- ``sglang.srt.speculative.standalone_worker_v2.StandaloneDraftWorker._draft_extend_for_prefill``
  (inherited from ``EagleDraftWorker``; the hook is set on the STANDALONE subclass only),
- ``sglang.srt.speculative.eagle_worker_common.prepare_for_draft`` and
  ``...eagle_worker_common.prepare_for_draft_extend`` (shared with EAGLE; both pass straight
  through unless ``draft_model_runner.spec_algorithm.is_standalone()``). By-name bindings in
  ``eagle_worker_v2`` and ``multi_layer_eagle_worker_v2`` are rebound by the registry and checked.
  The parameters of ``prepare_for_draft`` its hook reads are bound by name once at install
  (``check_signatures``, ``arguments.py``), which stops the start if one was renamed.

Process: scheduler (every TP rank), STANDALONE speculative decoding only.

Why: SGLang 0.5.23 runs STANDALONE through EAGLE's draft flow, whose draft input at position t is
(token x_{t+1}, target hidden h_t). A STANDALONE draft is a plain LM and gets no hidden state, so
its KV cache ends up holding x_{t+1} at position t: the prefill draft-extend shifts each prompt
left by one (``_draft_extend_for_prefill``), and the draft-extend after verify feeds the verify's
``predict`` (the token *after* each tree node) at the node's position. RoPE makes the uniform
shift itself harmless, but the draft never sees x_0, so it predicts from x_1..x_t what the target
predicts from x_0..x_t. Measured on a random 2-layer Llama with draft == target (CPU, float32):
the draft's first proposal (980) equals the model's argmax on x_1..x_n, not on x_0..x_n (1619);
accept length 1.26-1.33 where it must be num_steps + 1. A second fault follows from the same
convention: STANDALONE uses the radix cache with plain (unigram) keys (only EAGLE gets bigram
keys), yet the draft KV at the last position of a cached prefix depends on the *next* token of
the request that wrote it. A request diverging right after the shared prefix reuses that stale
entry (measured: draft proposal 1310 = model on ``[501, 502, 503, 504(stale), 778, 546]``).
Drafts never change what greedy verification outputs, only how much of it is accepted.

How: the draft KV at position p holds x_p, exactly like the target's, so a radix hit is exact:
1. Prefill draft-extend: the chunk's own tokens, unshifted. SGLang's rotation is kept and undone
   from outside: the input is pre-rotated right by one per request and each request's last chunk
   token is passed as the rotation's tail; ``bonus_tokens`` is then reset to the target's tokens.
2. Draft-extend after verify: ``[root, predict[:W-1]]`` per request instead of ``predict`` (the
   root is the tree's node 0, the previous bonus). Positions < seq_len + accept_len are then the
   accepted tokens themselves; later rows are overwritten by the next round.
3. Draft: the draft-extend's logits now predict the bonus b (already known), so each round starts
   with a one-token "root forward" of b at position seq_len into the slot that verify writes there
   too (allocated: it is the first slot of the verify window). Its argmax / top-k / proposal is
   the first draft token. ``prepare_for_draft`` then runs with ``seq_lens + 1`` (restored before
   the verify tree is built), so the draft's positions and slots move up by one. Its last write,
   seq_len + topk*num_steps - 1 at most (chain: seq_len + num_steps - 1 < seq_len + W), stays
   inside what SGLang allocates per round: committed length + 2*max(topk*num_steps, W), where the
   committed length trails seq_len by at most one round (W) under the overlap scheduler. The
   window plan (``target_translator``, CUDA chain only) is not used under the shift, since it
   would start one slot late; the verify then computes its own ``out_cache_loc`` as it does for
   trees and on CPU.
Cost: one extra one-token draft forward per round (eager; outside the draft CUDA graph), and the
draft-extend logits go unused. No KV allocation changes, no host sync.

Upstream: ``patches/sglang-0.5.23/0003-standalone-draft-kv-holds-its-own-tokens.patch`` is this
fix inside SGLang (tested on stock SGLang: tests/integration/test_standalone_patch.py); a
draft-extend window one slot wider would save the root forward but needs one more KV slot per
request and round, and one at prefill.
Removal: when SGLang's STANDALONE flow keeps the draft's KV unshifted (check with
``tests/integration/test_standalone_self_draft.py``: a draft equal to the target accepts every token).
Tested on: sglang 0.5.23, CPU (intel_amx + sglang_asd.cpu_backend), page size 1, topk 1 and 2,
radix cache on. Not exercised here: CUDA graphs, the overlap scheduler, DP attention (idle
batches run an idle root forward so collectives stay matched), page size > 1 with topk > 1,
rejection sampling, multimodal inputs (their embeddings are pre-rotated with the ids; SGLang
leaves each request's last row to the model, as before).
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

from sglang_asd.hooks.arguments import NamedArguments
from sglang_asd.hooks.registry import Seam, resolve

PREFILL = "sglang.srt.speculative.standalone_worker_v2.StandaloneDraftWorker._draft_extend_for_prefill"
PREPARE_FOR_DRAFT = "sglang.srt.speculative.eagle_worker_common.prepare_for_draft"
PREPARE_FOR_DRAFT_EXTEND = "sglang.srt.speculative.eagle_worker_common.prepare_for_draft_extend"
# Modules that import the two shared functions by name (the registry rebinds them; checked at start-up).
BINDINGS = (
    "sglang.srt.speculative.eagle_worker_common",
    "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.speculative.multi_layer_eagle_worker_v2",
)
PRELOAD = BINDINGS + ("sglang.srt.speculative.standalone_worker_v2",)

# Set while the root forward builds its one-token draft-extend batch.
_IN_ROOT_FORWARD: contextvars.ContextVar[bool] = contextvars.ContextVar("asd_standalone_root", default=False)


def _is_standalone(draft_model_runner) -> bool:
    algorithm = getattr(draft_model_runner, "spec_algorithm", None)
    return algorithm is not None and algorithm.is_standalone()


@contextlib.contextmanager
def _saved(obj, names):
    values = {name: getattr(obj, name) for name in names}
    try:
        yield
    finally:
        for name, value in values.items():
            setattr(obj, name, value)


# --- 1. prefill draft-extend -------------------------------------------------------------------


def draft_extend_for_prefill_around(original, self, batch, target_hidden_states, next_token_ids,
                                    mm_input_embeds=None, *args, **kwargs):
    """Make SGLang's left rotation reproduce the chunk's own tokens (see module docstring, 1)."""
    if batch.forward_mode.is_idle():
        return original(self, batch, target_hidden_states, next_token_ids, mm_input_embeds, *args, **kwargs)
    ids = batch.input_ids  # [T] this chunk's tokens, requests back to back
    lens = torch.as_tensor(list(batch.extend_lens), dtype=torch.int64)  # [bs] host
    last = (torch.cumsum(lens, 0) - 1).to(ids.device)  # [bs] each request's last row
    tails = ids[last]  # [bs] becomes the rotation's tail
    rolled = torch.cat((ids[:1], ids[:-1]))  # [T] rolled[j] = ids[j-1]; each request's row 0 is dropped
    if mm_input_embeds is not None:
        mm_input_embeds = torch.cat((mm_input_embeds[:1], mm_input_embeds[:-1]))  # [T, H] same roll
    with _saved(batch, ("chunked_req_next_prompt_token",)):
        batch.input_ids = rolled
        batch.chunked_req_next_prompt_token = None  # the tail of a non-final chunk is its own last token
        draft_input = original(self, batch, target_hidden_states, tails, mm_input_embeds, *args, **kwargs)
    draft_input.bonus_tokens = next_token_ids  # [bs] the target's tokens, the next round's roots
    return draft_input


# --- 2. draft-extend after verify --------------------------------------------------------------


def prepare_for_draft_extend_around(original, draft_extend_input, batch, predict, num_draft_tokens,
                                    draft_model_runner, *args, **kwargs):
    """Feed each verify-window position its own token, not the next one (module docstring, 2)."""
    if (not _is_standalone(draft_model_runner) or batch.forward_mode.is_idle()
            or _IN_ROOT_FORWARD.get()):
        return original(draft_extend_input, batch, predict, num_draft_tokens, draft_model_runner, *args, **kwargs)
    verify_input = batch.spec_info
    if verify_input is None or not verify_input.is_verify_input():
        raise RuntimeError(
            "sglang_asd standalone_draft: prepare_for_draft_extend expects the verify input on "
            f"batch.spec_info, got {type(verify_input).__name__}"
        )
    if draft_extend_input.num_front_tokens:
        raise RuntimeError(
            "sglang_asd standalone_draft: a widened draft-extend window is not supported, got "
            f"num_front_tokens={draft_extend_input.num_front_tokens}"
        )
    bs, W = batch.seq_lens.shape[0], num_draft_tokens
    shifted = predict.view(bs, W)  # [bs, W] token after node i (accepted path compacted to the front)
    root = verify_input.draft_token.view(bs, W)[:, :1].to(shifted.dtype)  # [bs, 1] node 0
    unshifted = torch.cat((root, shifted[:, :-1]), dim=1).reshape(-1)  # [bs*W] token at node i
    return original(draft_extend_input, batch, unshifted, num_draft_tokens, draft_model_runner, *args, **kwargs)


# --- 3. draft: root forward, then the chain one position up ------------------------------------

# The parameters of SGLang's prepare_for_draft that the hook reads or sets, by name (bound at install).
PREPARE_FOR_DRAFT_ARGS = NamedArguments(
    PREPARE_FOR_DRAFT, ("draft_input", "req_to_token_pool", "batch", "draft_model_runner", "topk", "target_translator"))


def check_signatures(prepare_for_draft_fn) -> None:
    """At install: bind the hook to SGLang's parameters; raise if one it reads was renamed."""
    PREPARE_FOR_DRAFT_ARGS.bind(prepare_for_draft_fn)


def prepare_for_draft_around(original, *args, **kwargs):
    """Root forward, then SGLang's draft preparation one position up (module docstring, 3)."""
    draft_input, req_to_token_pool, batch, runner, topk, _ = PREPARE_FOR_DRAFT_ARGS.of(args, kwargs)
    if not _is_standalone(runner):
        return original(*args, **kwargs)
    _root_forward(draft_input, req_to_token_pool, batch, runner, topk)
    if batch.forward_mode.is_idle():
        return original(*args, **kwargs)
    # A window plan would start at seq_lens + 1; verify plans its own.
    args, kwargs = PREPARE_FOR_DRAFT_ARGS.replaced(args, kwargs, "target_translator", None)
    with _seq_lens_plus_one(batch):
        return original(*args, **kwargs)


@contextlib.contextmanager
def _seq_lens_plus_one(batch):
    """The root b now sits at position seq_len in the draft cache: the chain starts one later."""
    with _saved(batch, ("seq_lens", "seq_lens_cpu", "seq_lens_sum")):
        bs = batch.seq_lens.shape[0]
        batch.seq_lens = batch.seq_lens + 1  # [bs] new tensor; the batch's own is restored
        if batch.seq_lens_cpu is not None:
            batch.seq_lens_cpu = batch.seq_lens_cpu + 1
        if batch.seq_lens_sum is not None:
            batch.seq_lens_sum = batch.seq_lens_sum + bs
        yield


def _root_forward(draft_input, req_to_token_pool, batch, runner, topk: int) -> None:
    """Write the root b's draft KV at position seq_len and take the first draft token from it."""
    from sglang.srt.speculative import eagle_worker_common
    from sglang.srt.speculative.eagle_info import EagleDraftExtendInput

    idle = batch.forward_mode.is_idle()
    bs = batch.seq_lens.shape[0]
    device = batch.seq_lens.device
    names = ("spec_info", "input_ids", "out_cache_loc", "prefix_lens", "extend_lens", "extend_num_tokens",
             "forward_mode")
    with _saved(batch, names):
        token = _IN_ROOT_FORWARD.set(True)
        try:
            if idle:
                roots = torch.empty((0,), dtype=torch.int64, device=device)
            else:
                rows = batch.req_pool_indices.to(torch.int64)  # [bs]
                batch.out_cache_loc = req_to_token_pool.req_to_token[rows, batch.seq_lens.to(torch.int64)].to(
                    torch.int64)  # [bs] the slot of position seq_len (first of the verify window)
                roots = draft_input.bonus_tokens.to(torch.int64)  # [bs]
            extend_input = EagleDraftExtendInput(
                hidden_states=None,
                num_correct_drafts=torch.zeros((bs,), dtype=torch.int32, device=device),
                num_accept_tokens=torch.ones((bs,), dtype=torch.int32, device=device),
                num_tokens_per_req=1,
                num_tokens_for_logprob_per_req=1,
            )
            forward_batch = eagle_worker_common.prepare_for_draft_extend(
                extend_input, batch, roots, 1, runner, None, return_hidden_states_before_norm=False)
            forward_batch.return_logprob = False
            logits = runner.forward(forward_batch).logits_output.next_token_logits  # [bs, V]
        finally:
            _IN_ROOT_FORWARD.reset(token)
    if idle:
        return
    _set_first_draft_token(draft_input, logits, batch, topk)


def _set_first_draft_token(draft_input, logits: torch.Tensor, batch, topk: int) -> None:
    """The same choice SGLang makes from the draft-extend logits (``_draft_extend_for_decode``)."""
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_utils import renorm_draft_probs, sample_draft_proposal
    from sglang.srt.utils.common import fast_topk

    if get_spec().speculative_use_rejection_sampling:
        info = batch.sampling_info
        draft_input.draft_probs, draft_input.topk_p, draft_input.topk_index = sample_draft_proposal(
            logits, info.temperatures, info.top_ks, sampling_seed=info.sampling_seed, positions=batch.seq_lens)
    elif topk == 1:
        draft_input.topk_index = torch.argmax(logits, dim=-1, keepdim=True)  # [bs, 1]
        draft_input.topk_p = torch.ones_like(draft_input.topk_index, dtype=torch.float32)
    else:
        probs = renorm_draft_probs(logits, batch.sampling_info, False)  # [bs, V]
        draft_input.topk_p, draft_input.topk_index = fast_topk(probs, topk, dim=-1)  # [bs, topk]


def hooks():
    return [
        (PREFILL, draft_extend_for_prefill_around),
        (PREPARE_FOR_DRAFT, prepare_for_draft_around),
        (PREPARE_FOR_DRAFT_EXTEND, prepare_for_draft_extend_around),
    ]


SEAMS = (Seam("scheduler", hooks, bindings={PREPARE_FOR_DRAFT: BINDINGS, PREPARE_FOR_DRAFT_EXTEND: BINDINGS},
              preload=PRELOAD, check=lambda: check_signatures(resolve(PREPARE_FOR_DRAFT)),
              opt_in="standalone_draft_fix"),)
