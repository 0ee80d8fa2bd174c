"""The kernel-variant model of the fused verify: which compiled variants (Triton specializations) a call
launches, as keys computed from shapes and dtypes, and every key a server can produce.

Pure and cheap: torch for tensor metadata, no Triton. ``triton_verify.py`` reads ``vocab_unit`` from
here; ``warmup.py`` launches one call per key of ``enumerate_specializations`` at start-up.

What creates a variant (triton 3.8's JIT key: signature types, specialization attributes,
constexprs, launch options), by kernel (``triton_kernels.py``):

- ``asd_select_kernel`` (every call):
  ``W``, ``K``: constexprs (tile shapes and loop bounds; ``W_PAD``, ``S_PAD`` and num_warps
  follow from them); ``has_target_predict``: the constexpr ``HAS_TARGET_PREDICT`` (the seam
  passes SGLang's argmax on its greedy branch, none on its sampling branch); the logits dtype:
  the logits pointer's type.
- ``row_argmax_partials_kernel`` (calls without ``target_predict``): the logits dtype;
  ``vocab_unit``: the constexpr ``UNIT``, 16 when V and the logits' row stride are multiples of
  16, else 1 (fixed by the model); ``logits_aligned``: Triton's own 16-byte alignment
  specialization of the logits pointer, kept on purpose (the 16-byte loads need it; every freshly
  allocated tensor is aligned). ``BLOCK_V`` and num_warps are module constants.

What creates none: ``bs`` (the grids only); V and every stride (runtime ints marked
``do_not_specialize``, so Triton's ==1 and %16 value specializations never fork them); the
vocabulary ``split``, chosen from ``bs`` (a runtime int, the slices are reduced in a runtime
loop); the stop-token width ``T`` (a runtime loop bound); the address of every other tensor
(``do_not_specialize_on_alignment``); the dtypes of the index and ledger tensors (the wrapper
casts them to the contract's). A runtime int >= 2**31 would turn its type to i64: V, the row
stride, split and T stay far below.

Why ``enumerate_specializations`` is complete: a key is a function of (logits dtype, W, K,
has_target_predict, V and the row stride, the logits' alignment) only, as listed above; a server
fixes V and the logits dtype, its verify shapes are ``verify_shapes`` of its speculative
settings (plus every adaptive candidate step), and ``has_target_predict`` takes both values.
``tests/verify/test_warmup.py`` checks it against Triton's own JIT keys over a sweep of calls.
"""

from __future__ import annotations

from typing import FrozenSet, Iterable, NamedTuple, Optional, Set, Tuple

import torch

ALIGN = 16  # elements: the vocabulary pass's UNIT when V and the row stride are multiples of it
LOGITS_DTYPES = ("bfloat16", "float16", "float32")


class SpecializationKey(NamedTuple):
    """The compiled variants one ``asd_verify`` call on CUDA launches."""

    logits_dtype: str  # "bfloat16" | "float16" | "float32"
    W: int
    K: int
    has_target_predict: bool
    vocab_unit: Optional[int]  # UNIT of the vocabulary pass; None with target_predict (no pass)
    logits_aligned: Optional[bool]  # 16-byte aligned logits pointer; None with target_predict


def vocab_unit(V: int, row_stride: int) -> int:
    """The vocabulary pass's ``UNIT``: ``ALIGN`` when V and the row stride are multiples of it, else 1."""
    return ALIGN if V % ALIGN == 0 and row_stride % ALIGN == 0 else 1


def _dtype_name(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in LOGITS_DTYPES:
        raise ValueError(f"logits dtype must be one of {', '.join(LOGITS_DTYPES)}, got {dtype}")
    return name


def specialization_key(
    bs: int,
    W: int,
    K: int,
    V: int,
    stop_width: int,
    logits_dtype,  # torch.dtype or its name
    has_target_predict: bool,
    *,
    logits_row_stride: Optional[int] = None,  # default V (contiguous logits)
    logits_aligned: bool = True,  # the logits' data pointer is 16-byte aligned
) -> SpecializationKey:
    """The key of a call with these shapes. Pure and cheap (no Triton, no tensor). ``bs`` and
    ``stop_width`` are taken so a caller can pass a call's shapes as they come: neither creates
    a variant."""
    for name, value in (("bs", bs), ("W", W), ("K", K), ("V", V), ("stop_width", stop_width)):
        if not isinstance(value, int) or isinstance(value, bool) or value < (1 if name in ("W", "V") else 0):
            raise ValueError(f"{name} must be an integer >= {1 if name in ('W', 'V') else 0}, got {value!r}")
    if has_target_predict:
        return SpecializationKey(_dtype_name(logits_dtype), W, K, True, None, None)
    stride = V if logits_row_stride is None else logits_row_stride
    return SpecializationKey(_dtype_name(logits_dtype), W, K, False, vocab_unit(V, stride), bool(logits_aligned))


def key_of_call(
    candidates: torch.Tensor,  # [bs, W]
    logits: torch.Tensor,  # [bs*W, V]
    depth: int,  # K
    stop_tokens: Optional[torch.Tensor] = None,  # [bs, T]
    target_predict: Optional[torch.Tensor] = None,  # [bs, W]
) -> SpecializationKey:
    """``specialization_key`` of an ``asd_verify`` call, from its tensors' metadata (shapes,
    dtype, strides, address: no sync), on any device."""
    bs, W = candidates.shape
    if logits.stride(1) != 1:  # the wrapper makes such logits contiguous first
        row_stride, aligned = logits.shape[1], True
    else:
        row_stride, aligned = logits.stride(0), logits.data_ptr() % 16 == 0
    return specialization_key(bs, W, depth, logits.shape[1], 0 if stop_tokens is None else stop_tokens.shape[1],
                              logits.dtype, target_predict is not None, logits_row_stride=row_stride,
                              logits_aligned=aligned)


def verify_shapes(num_steps: int, num_draft_tokens: int, *, ngram: bool = False,
                  adaptive_steps: Iterable[int] = ()) -> Set[Tuple[int, int]]:
    """The (W, K) pairs SGLang 0.5.23's verify passes for these settings: EAGLE, EAGLE3,
    STANDALONE (``speculative_num_draft_tokens``, ``speculative_num_steps``); NGRAM
    (``speculative_num_draft_tokens``, that - 1: its ``max_tree_depth`` is the draft width);
    with ``--speculative-adaptive`` (topk 1 only) also (s + 1, s) for every candidate step s
    (``AdaptiveController.init_states``), s = 0 included (a verify of the root alone)."""
    shapes = {(num_draft_tokens, num_draft_tokens - 1 if ngram else num_steps)}
    shapes |= {(s + 1, s) for s in adaptive_steps}
    return shapes


def enumerate_specializations(
    shapes: Iterable[Tuple[int, int]],  # (W, K) pairs: ``verify_shapes``
    V: int,
    logits_dtypes: Iterable = ("bfloat16",),
    *,
    target_predict: Iterable[bool] = (False, True),
    logits_row_stride: Optional[int] = None,
    logits_aligned: Iterable[bool] = (True,),
) -> FrozenSet[SpecializationKey]:
    """Every key a server with these settings can produce (see the module docstring)."""
    return frozenset(
        specialization_key(1, W, K, V, 0, dtype, tp, logits_row_stride=logits_row_stride, logits_aligned=aligned)
        for W, K in shapes for dtype in logits_dtypes for tp in target_predict for aligned in logits_aligned
    )


def example_call(key: SpecializationKey, V: int, device, *, logits_row_stride: Optional[int] = None, bs: int = 1):
    """(args, kwargs) of an ``asd_verify`` call on dummy tensors whose key is ``key``."""
    W, K = key.W, key.K
    rows, stride = bs * W, V if logits_row_stride is None else logits_row_stride
    dtype = getattr(torch, key.logits_dtype)
    shift = 0 if key.logits_aligned in (True, None) else 1  # one element off a 16-byte boundary
    logits = torch.zeros(rows * stride + shift, dtype=dtype, device=device)[shift:].view(rows, stride)[:, :V]
    none = torch.full((bs, W), -1, dtype=torch.int64, device=device)
    zeros = torch.zeros(bs, dtype=torch.float32, device=device)
    args = (torch.zeros((bs, W), dtype=torch.int64, device=device), logits, none, none, zeros, zeros,
            torch.zeros(bs, dtype=torch.int32, device=device), K)
    kwargs = {"stop_tokens": torch.full((bs, 1), -1, dtype=torch.int64, device=device)}
    if key.has_target_predict:
        kwargs["target_predict"] = torch.zeros((bs, W), dtype=torch.int64, device=device)
    return args, kwargs


# --- the fused sampled verify (``triton_sampled_kernels.py``)
#
# What creates a variant: ``W_PAD = next_pow2(W)``, the one constexpr that varies (tile shapes; the
# warps follow from it; ``BLOCK_V`` is a module constant). What creates none: bs (the grids), K, W
# itself, V, the strides, the stop-token width and the sibling bound (runtime ints marked
# ``do_not_specialize``), every address (``do_not_specialize_on_alignment``), the thresholds
# (float32 arguments), the dtypes (the wrapper casts the index, coin and ledger tensors to the
# contract's; ``dispatch.asd_sampled_verify`` sends only float32 probabilities and int32 outputs).
# So a server's sampled variants are one per W_PAD of its verify shapes.


class SampledKey(NamedTuple):
    """The compiled variants (both kernels) of one fused sampled verify call."""

    kernel: str  # "asd_sampled"
    W_PAD: int


def sampled_key(W: int) -> SampledKey:
    if not isinstance(W, int) or isinstance(W, bool) or W < 1:
        raise ValueError(f"W must be an integer >= 1, got {W!r}")
    return SampledKey("asd_sampled", 1 << (W - 1).bit_length())


def sampled_keys(shapes: Iterable[Tuple[int, int]]) -> FrozenSet[SampledKey]:
    """Every sampled key a server with these (W, K) verify shapes can produce."""
    return frozenset(sampled_key(W) for W, _ in shapes)


def sampled_example_call(W: int, K: int, V: int, device, *, bs: int = 1, stop_width: int = 1):
    """The positional args of a ``asd_sampled_verify_triton`` call on dummy tensors of these shapes."""
    ix = dict(dtype=torch.int64, device=device)
    f32 = dict(dtype=torch.float32, device=device)
    none = torch.full((bs, W), -1, **ix)
    return (torch.zeros(bs * W, dtype=torch.int32, device=device), torch.full((bs, K + 1), -1, dtype=torch.int32,
                                                                                device=device),
            torch.zeros(bs, dtype=torch.int32, device=device), torch.zeros((bs, W), **ix),
            torch.arange(bs * W, **ix).view(bs, W), none, none, torch.zeros((bs, W), **f32), torch.zeros(bs, **f32),
            torch.full((bs, W, V), 1.0 / V, **f32), torch.zeros(bs, **f32), torch.zeros(bs, **f32),
            torch.zeros(bs, dtype=torch.int32, device=device), torch.zeros(bs, **f32),
            torch.full((bs, stop_width), -1, **ix))
