"""The verify warm-up: every verify kernel variant compiled before ready, and serving checked against it.

Hooks nothing itself: ``Scheduler.init_model_worker``'s AROUND hook (``scheduler/scheduler.py``, the
module that holds every ``Scheduler`` hook) calls ``warm_up`` once per scheduler process (every TP rank),
after the model, the draft and the CUDA graphs are set up and before the scheduler reports ready.

- Why: Triton compiles and loads a kernel variant at its first launch. A variant first met while
  serving costs a compile mid-request and a module load after ready, which SGLang warns about
  (``srt/utils/triton_load_watch.py``) and treats as fatal with
  ``SGLANG_CRASH_ON_TRITON_LOAD_AFTER_READY=1``.
- How: ``sglang_asd.verify.warmup`` lists every variant this server's verify can launch (its
  (W, K) shapes, adaptive candidate steps included, x the logits dtypes x with and without
  SGLang's argmax) and launches each once on this rank's GPU; on CPU nothing compiles and only the
  list is kept. While serving, the verify step (``verify_step.decide``, for every drafter) calls
  ``check_variant``, which calls ``note_variant`` the first time it meets a call shape (a set lookup per step; the variant key is computed only then,
  from tensor metadata: no sync), which logs, once per variant, one seen (INFO) and one that was
  not warmed up (WARNING): the check that the enumeration is what serving produces.
- Logits dtypes: SGLang hands the verify float32 logits from its own buffer, or a slice in the
  model's dtype; both are warmed.
- Upstream: none needed (a plain extension of start-up). Removal: never, while the kernel is ours.
- Tested on: sglang 0.5.23, CPU (the list and the serving check); CUDA: scripts/device_e2e.sh.
"""

from __future__ import annotations

import logging

import torch

from sglang_asd.sglang_seams.modes import process_unsupported_mode
from sglang_asd.sglang_seams.state.runtime import get_runtime
from sglang_asd.verify.rules import needs_torch_path
from sglang_asd.verify.warmup import key_of_call, verify_shapes, warmup

logger = logging.getLogger(__name__)


BLOCK_DRAFTERS = ("DSPARK", "DFLASH")


def block_width(draft_worker) -> int:
    """W of a block drafter's verify: DSPARK's ``verify_num_draft_tokens`` (gamma + 1, gamma often
    read from the draft checkpoint), DFLASH's ``block_size``."""
    width = getattr(draft_worker, "verify_num_draft_tokens", None) or getattr(draft_worker, "block_size", None)
    if width is None:
        raise RuntimeError(f"sglang_asd: {type(draft_worker).__name__} has neither verify_num_draft_tokens nor "
                           "block_size; this sglang_asd does not support this SGLang version")
    return int(width)


def server_verify_shapes(spec, draft_worker=None) -> set:
    """The (W, K) pairs this server's verify can see (``verify.warmup.verify_shapes``), from its
    resolved speculative settings (``get_spec()``; ``modes.process_unsupported_mode`` says why not
    ``ServerArgs``: e.g. NGRAM's default of 12 draft tokens is None there). A block drafter
    (DSPARK, DFLASH) verifies one chain of its block width W, K = W - 1, read from its worker
    (SGLang sets ``speculative_num_steps`` to 1 for both)."""
    if (spec.speculative_algorithm or "").upper() in BLOCK_DRAFTERS:
        W = block_width(draft_worker)
        return {(W, W - 1)}
    adaptive_steps = ()
    if getattr(spec, "speculative_adaptive", False):
        from sglang.srt.speculative.adaptive_spec_params import resolve_candidate_steps_from_config

        adaptive_steps = resolve_candidate_steps_from_config(cfg_path=spec.speculative_adaptive_config)
    return verify_shapes(spec.speculative_num_steps, spec.speculative_num_draft_tokens,
                         ngram=(spec.speculative_algorithm or "").upper() == "NGRAM",
                         adaptive_steps=adaptive_steps)


def warm_up(scheduler) -> None:
    """Compile every verify variant of this server on ``scheduler``'s device (a speculative server
    in a supported mode), and keep their keys for ``note_variant``."""
    if scheduler.spec_algorithm.is_none() or process_unsupported_mode():
        return
    from sglang.srt.runtime_context import get_spec

    dtypes = sorted({"float32", str(scheduler.model_config.dtype).removeprefix("torch.")})
    device = (torch.device("cuda", torch.cuda.current_device()) if scheduler.device == "cuda"
              else torch.device(scheduler.device))
    shapes = server_verify_shapes(get_spec(), scheduler.draft_worker)
    keys = warmup(device, shapes, V=scheduler.model_config.vocab_size, logits_dtypes=dtypes)
    get_runtime().warmed_variants = frozenset(keys)
    logger.info("sglang_asd: verify warm-up on %s: %d variants %s", device, len(keys), sorted(keys, key=repr))


# Fused-kernel call shapes already checked against the warm-up's list (``check_variant``).
_CHECKED_SHAPES: set = set()


def check_variant(candidates, logits, depth, stop_tokens, target_predict, rules_active) -> None:
    """The verify step, per call: the fused kernel (on CUDA) runs one compiled variant per call
    shape, so a shape met for the first time is checked against the warm-up's list (the shape holds
    all that a variant key reads; bs and T create none). A set lookup per call, no sync."""
    if needs_torch_path(rules_active):
        return
    shape = (candidates.shape[1], depth, logits.dtype, logits.shape[1], logits.stride(),
             logits.data_ptr() % 16 == 0, target_predict is None)
    if shape not in _CHECKED_SHAPES:
        _CHECKED_SHAPES.add(shape)
        note_variant(candidates, logits, depth, stop_tokens, target_predict)


def note_variant(candidates, logits, depth, stop_tokens, target_predict) -> None:
    """Log a verify call's kernel variant the first time it is seen (and warn if not warmed up)."""
    runtime = get_runtime()
    if runtime.warmed_variants is None:
        return
    key = key_of_call(candidates, logits, depth, stop_tokens, target_predict)
    if key in runtime.seen_variants:
        return
    runtime.seen_variants.add(key)
    if key in runtime.warmed_variants:
        logger.info("sglang_asd: verify variant seen: %r", key)
    else:
        logger.warning("sglang_asd: verify variant %r was not warmed up at start-up; on CUDA it compiles now", key)
