"""Compile and load, at start-up, every variant of the fused verify a server can launch.

Triton compiles a kernel *specialization* (a compiled variant) at its first launch with a new
JIT cache key, and loads its module onto the GPU then. A first launch while serving costs a
compile and needs device memory outside the torch allocator; SGLang warns about it
(``sglang.srt.utils.triton_load_watch``), and dies with
``SGLANG_CRASH_ON_TRITON_LOAD_AFTER_READY=1``. So the variants are few, known from the server's
configuration, and ``warmup`` launches each once before serving.

The variants themselves (what creates one, why the enumeration is complete) are modelled in
``variants.py``; this module only launches them: the greedy kernels' and the sampled kernels'
(``warmup_sampled``, called by ``warmup``, so the scheduler seam warms both). ``key_of_call`` and
``verify_shapes`` are re-exported for the scheduler seam (``sglang_seams/step/warmup.py``).
"""

from __future__ import annotations

from typing import FrozenSet, Iterable, Optional, Tuple

import torch

from sglang_asd.verify.variants import (
    SampledKey,
    SpecializationKey,
    enumerate_specializations,
    example_call,
    key_of_call,
    sampled_example_call,
    sampled_key,
    verify_shapes,
)

__all__ = ["SampledKey", "SpecializationKey", "enumerate_specializations", "key_of_call", "verify_shapes", "warmup",
           "warmup_sampled"]


def warmup(device, shapes: Iterable[Tuple[int, int]], V: int, logits_dtypes: Iterable = ("bfloat16",), *,
           logits_row_stride: Optional[int] = None) -> FrozenSet[SpecializationKey]:
    """Launch the fused verify once per key of ``enumerate_specializations`` on ``device``, so
    every variant is compiled and loaded before serving; -> the keys. On a device that is not
    CUDA ``asd_verify`` runs the torch verifier (nothing to compile): returns the keys only."""
    keys = enumerate_specializations(shapes, V, logits_dtypes, logits_row_stride=logits_row_stride)
    device = torch.device(device)
    if device.type != "cuda":
        return keys
    from sglang_asd.verify.triton_verify import asd_verify_triton

    with torch.cuda.device(device):  # Triton compiles and loads for the current device
        for key in sorted(keys, key=repr):
            args, kwargs = example_call(key, V, device, logits_row_stride=logits_row_stride)
            asd_verify_triton(*args, **kwargs)
        torch.cuda.synchronize(device)  # start-up, not the hot path: surface a launch error here
    warmup_sampled(device, shapes, V)
    return keys


def warmup_sampled(device, shapes: Iterable[Tuple[int, int]], V: int) -> FrozenSet[SampledKey]:
    """Launch the fused sampled verify once per ``variants.sampled_key`` of the (W, K) shapes on
    ``device`` (a no-op elsewhere than CUDA); -> the keys. ``warmup`` calls it: every speculative
    server warms its sampling branch too, one variant per draft-width class, whether or not a
    sampled request ever comes (a few launches at start-up)."""
    first = {}
    for W, K in sorted(shapes):
        first.setdefault(sampled_key(W), (W, K))
    device = torch.device(device)
    if device.type != "cuda":
        return frozenset(first)
    from sglang_asd.verify.triton_sampled_verify import asd_sampled_verify_triton

    with torch.cuda.device(device):
        for key, (W, K) in sorted(first.items()):
            asd_sampled_verify_triton(*sampled_example_call(W, K, V, device))
        torch.cuda.synchronize(device)
    return frozenset(first)
