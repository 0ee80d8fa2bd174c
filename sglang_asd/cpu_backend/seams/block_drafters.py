"""Seams that let SGLang's block drafters, DSPARK and DFLASH, serve on CPU, only with the CPU stand-in.

Stock SGLang 0.5.23 refuses both on CPU and, past the refusal, reaches CUDA-only code. Nothing here
changes what a drafter proposes or how the target verifies it: the draft and the verify run SGLang's
own code, on the stand-in's plain-torch ``intel_amx`` attention. Installed in ASD and stock servers
alike (``cpu_backend.seams.install_launcher_cpu_hooks`` / ``install_cpu_path_hooks``), never on a GPU
install (``launcher_hooks()`` and ``scheduler_hooks()`` are empty unless ``sglang_asd.cpu_backend`` is
active). Tested on: sglang 0.5.23.

Launcher process (argument resolution):

``sglang.srt.arg_groups.speculative_hook._handle_dspark`` and ``._handle_dflash``
- Kind: AROUND, calling the original. With ``--device cpu`` the original runs with the resolving
  view's ``device`` presented as ``xpu`` (one declaration pushed on SGLang's own resolution stash
  for the length of the call and removed after it; no trace in the resolved arguments).
- Why: ``_handle_dspark`` raises for any device but cuda/npu/xpu, ``_handle_dflash`` likewise
  unless an out-of-tree platform claims DFLASH. Nothing else in either handler reads the device
  except the DP-attention branches, where ``xpu`` refuses as CPU would.
- Upstream: none; the CPU platform could claim both algorithms (``supports_speculative_algorithm``).
  Removal: when SGLang's CPU platform serves them.

``sglang.srt.arg_groups.choices.DRAFT_ATTENTION_BACKEND_CHOICES`` += ``intel_amx``
- Kind: SGLang's extension point ``add_draft_attention_backend_choices`` (launcher and scheduler).
- Why: a draft backend outside the list falls back to ``flashinfer`` (``_resolve_dflash_draft_
  attention_backend``, ``draft_worker_common.resolve_draft_worker_attention_backend``), which has no
  CPU build. The stand-in's ``intel_amx`` ops serve the draft's non-causal block attention.
- Removal: when SGLang lists a CPU draft backend.

Scheduler process:

``sglang.srt.speculative.dflash_info.DFlashVerifyInput.__init__``
- Kind: AROUND, calling the original, then ``tree_topk = 1`` on the instance.
- Why: ``intel_amx``'s TARGET_VERIFY and draft paths read ``spec_info.tree_topk``; EAGLE's and
  NGRAM's inputs define it, ``DFlashVerifyInput`` (the spec_info of the DFlash and DSpark verify
  and draft block) does not: AttributeError. A block is one chain, so topk 1 is its shape.
- Upstream: ``DFlashVerifyInput`` could define ``tree_topk = 1``. Removal: when it does.

``torch.Tensor.record_stream``
- Kind: AROUND, calling the original except on a CPU tensor, where it does nothing.
- Why: ``DSparkWorkerV2._forward_decode`` and ``DFlashWorkerV2.forward_batch_generation`` call
  ``batch.seq_lens.record_stream(current_stream())`` unconditionally (a CUDA caching-allocator
  hint for a tensor made on another stream); on a CPU tensor torch raises ``RuntimeError: unknown
  parameter type``. A CPU tensor has no stream to record, so the call can only fail there: the
  hook turns that failure into the no-op it means. Hooked on torch, not on the two workers,
  because the ASD seams wrap those same worker methods (``sglang_seams/scheduler``).
- Upstream: guard the two calls by device. Removal: when guarded.

``sglang.srt.model_executor.model_runner.ModelRunner._extend_forward_kwargs``
- Kind: AROUND, calling the original; where it cast a float32 CPU ``forward_batch.input_embeds`` to
  bf16 (``input_embeds.bfloat16()``, unconditional in 0.5.23) and no embedding replacement is in
  play, the kwargs get the embeddings back in their own dtype (the model's). Any other case
  (a bf16 model, replacement embeddings, a GPU tensor) keeps SGLang's result.
- Why: the DFlash draft block is the only extend that passes ``input_embeds`` (the target's
  embedding of ``[anchor, mask...]``); a float32 draft then gets bf16 activations against float32
  weights: ``RuntimeError: expected m1 and m2 to have the same dtype``. (DSpark embeds inside its
  model, ``forward_embed``, and never meets the cast.)
- Upstream: cast to the model's dtype instead of bf16. Removal: when it does.

Overlap scheduler: SGLang turns it off for EAGLE-family and NGRAM on CPU
(``_disable_overlap_schedule_for_cpu``) but not for DSPARK or DFLASH, so on CPU these two run
SGLang's overlap event loop (``event_loop_overlap``: batch N+1 is scheduled before batch N's results
are processed) unless ``--disable-overlap-schedule`` is given. Both ways serve correctly here, so
nothing forces it off: with the noisy and the exact tiny drafts, 12 concurrent requests equal the
same requests one at a time and plain greedy decoding, token for token, and overlap on and off give
the same tokens and the same verify rounds (``tests/integration/test_block_drafters_stock.py`` runs
overlap on; off was checked by hand with the noisy DSpark draft). What a CPU cannot show is stream asynchrony: every op runs
when it is launched. (EAGLE's overlap path needs a Triton gather these drafters do not use,
``tests/cpu_overlap.py``.)
"""

from __future__ import annotations

import contextlib
import logging

from sglang_asd.hooks.registry import Seam

logger = logging.getLogger(__name__)

SPEC_HOOK = "sglang.srt.arg_groups.speculative_hook"
HANDLE_DSPARK = SPEC_HOOK + "._handle_dspark"
HANDLE_DFLASH = SPEC_HOOK + "._handle_dflash"
DFLASH_VERIFY_INIT = "sglang.srt.speculative.dflash_info.DFlashVerifyInput.__init__"
RECORD_STREAM = "torch.Tensor.record_stream"
EXTEND_KWARGS = "sglang.srt.model_executor.model_runner.ModelRunner._extend_forward_kwargs"
SCHEDULER_PRELOAD = ("sglang.srt.speculative.dflash_info", "sglang.srt.model_executor.model_runner")
DRAFT_BACKEND = "intel_amx"
PRESENTED_DEVICE = "xpu"
_SOURCE = "sglang_asd.cpu_backend.seams.block_drafters"  # the name on our transient declaration


@contextlib.contextmanager
def device_presented_as(server_args, device: str):
    """Within the block, SGLang's resolving view reads ``device`` as ``device``: one entry on the
    resolution stash (``_resolved_overrides``, read newest first), removed on exit."""
    stash = getattr(server_args, "_resolved_overrides", None)
    if stash is None:
        stash = server_args._resolved_overrides = []
    entry = (_SOURCE, {"device": device})
    stash.append(entry)
    try:
        yield
    finally:
        for i in range(len(stash) - 1, -1, -1):
            if stash[i] is entry:
                del stash[i]
                break


def handle_block_drafter_around(original, server_args, *args, **kwargs):
    from sglang.srt.arg_groups.overrides import resolving_view

    if resolving_view(server_args).device != "cpu":
        return original(server_args, *args, **kwargs)
    with device_presented_as(server_args, PRESENTED_DEVICE):
        return original(server_args, *args, **kwargs)


def add_draft_backend() -> None:
    """List ``intel_amx`` among SGLang's draft attention backends (idempotent)."""
    from sglang.srt.arg_groups.choices import DRAFT_ATTENTION_BACKEND_CHOICES, add_draft_attention_backend_choices

    if DRAFT_BACKEND not in DRAFT_ATTENTION_BACKEND_CHOICES:
        add_draft_attention_backend_choices([DRAFT_BACKEND])


def draft_backend_listed() -> bool:
    from sglang.srt.arg_groups.choices import DRAFT_ATTENTION_BACKEND_CHOICES

    return DRAFT_BACKEND in DRAFT_ATTENTION_BACKEND_CHOICES


def dflash_verify_init_around(original, self, *args, **kwargs):
    original(self, *args, **kwargs)
    if getattr(self, "tree_topk", None) is None:
        self.tree_topk = 1  # a block is one chain


def record_stream_around(original, tensor, stream):
    if tensor.device.type == "cpu":
        return None  # no stream to record a CPU tensor on
    return original(tensor, stream)


def extend_forward_kwargs_around(original, runner, forward_batch, *args, **kwargs):
    import torch

    out = original(runner, forward_batch, *args, **kwargs)
    embeds = forward_batch.input_embeds  # [tokens, H]
    if (embeds is not None and embeds.device.type == "cpu" and embeds.dtype == torch.float32
            and forward_batch.replace_embeds is None and out.get("input_embeds") is not None
            and out["input_embeds"].dtype == torch.bfloat16):
        out["input_embeds"] = embeds
    return out


def launcher_hooks() -> list:
    """Argument-resolution hooks (launcher): none on a GPU install."""
    from sglang_asd import cpu_backend

    if not cpu_backend.is_installed():
        return []
    return [(HANDLE_DSPARK, handle_block_drafter_around), (HANDLE_DFLASH, handle_block_drafter_around)]


def scheduler_hooks() -> list:
    """Scheduler-process hooks: none on a GPU install."""
    from sglang_asd import cpu_backend

    if not cpu_backend.is_installed():
        return []
    return [(DFLASH_VERIFY_INIT, dflash_verify_init_around), (RECORD_STREAM, record_stream_around),
            (EXTEND_KWARGS, extend_forward_kwargs_around)]


SEAMS = (Seam("launcher", launcher_hooks, preload=(SPEC_HOOK,), owned=True),
         Seam("scheduler", scheduler_hooks, preload=SCHEDULER_PRELOAD, owned=True))
