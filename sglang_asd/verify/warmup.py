"""Compile and load, at start-up, every variant of the fused verify a server can launch.

Triton compiles a kernel *specialization* (a compiled variant) at its first launch with a new
JIT cache key, and loads its module onto the GPU then. A first launch while serving costs a
compile and needs device memory outside the torch allocator; SGLang warns about it
(``sglang.srt.utils.triton_load_watch``), and dies with
``SGLANG_CRASH_ON_TRITON_LOAD_AFTER_READY=1``. So the variants are few, known from the server's
configuration, and ``warmup`` launches each once before serving.

The variants themselves (what creates one, why the enumeration is complete) are modelled in
``variants.py``; this module only launches them. ``key_of_call`` and ``verify_shapes`` are
re-exported for the scheduler seam (``sglang_seams/step/warmup.py``).
"""

from __future__ import annotations

from typing import FrozenSet, Iterable, Optional, Tuple

import torch

from sglang_asd.verify.variants import (
    SpecializationKey,
    enumerate_specializations,
    example_call,
    key_of_call,
    verify_shapes,
)

__all__ = ["SpecializationKey", "enumerate_specializations", "key_of_call", "verify_shapes", "warmup"]


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
    return keys
