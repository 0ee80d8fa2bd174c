"""Seams on SGLang's CPU paths, only with the CPU stand-in (never on a GPU install).

Process: scheduler (ASD and stock servers alike, so both arms of every comparison run the same
arithmetic). Nothing here touches the verify step or the ledger: these are the host's own forward
passes, synchronous on the CPU, so the overlap scheduler's one-step lag and stream order do not
arise (SGLang turns its overlap scheduler off for CPU speculative decoding anyway).

``sglang.srt.mem_cache.allocation.get_last_loc``
- Kind: AROUND; calls SGLang's own ``get_last_loc_torch`` instead of the original.
- Why: ``get_last_loc`` picks its Triton kernel for every attention backend except
  ``torch_native``/``ascend``; with ``intel_amx`` on a CPU, Triton has no driver and the first
  decode with ``--page-size`` > 1 dies ("0 active drivers"). SGLang's plain-torch version computes
  the same thing.
- Upstream: none yet; the dispatch should also route ``device == "cpu"`` to the torch version.
  Removal: when SGLang's dispatch does that.

``UnquantizedLinearMethod.process_weights_after_loading``, ``UnquantizedLinearMethod.apply`` and
``UnquantizedLinearMethod.apply_into`` (``sglang.srt.layers.quantization.unquant``): bf16 / fp16
linear layers with float32 accumulation.
- Kind: AROUND, all three. After SGLang's own post-load step, a 16-bit linear weight on the CPU is
  widened to float32 once (exact: every bf16 and fp16 value is a float32 value) and the layer is
  marked; ``apply`` (and ``apply_into``, which writes into a caller's buffer) of a marked layer
  computes ``F.linear`` in float32 on the widened input and rounds the output to the activation
  dtype, once. That is a bf16 linear with float32
  accumulation: the arithmetic of SGLang's GPU GEMMs (cuBLAS accumulates bf16 products in float32)
  and of torch's own CPU bf16 kernel; only the order of the summation differs, so an output element
  can land one bf16 rounding step away from torch's bf16 kernel (about 2 in 10^4 elements on the
  Qwen2.5 1.5B layer shapes). Activations, the KV cache, norms and embeddings stay in the model's
  dtype.
- Why: on x86 CPUs without bf16 instructions (AVX-512 BF16, AMX) torch's bf16 GEMM is several
  times slower than float32 (docs/measurements/cpu_gemm_ab/NOTES.md); with them it is the faster one
  (docs/measurements/cpu_round_profile/NOTES.md). So the default mode, ``auto``,
  installs these hooks only on a CPU without them (``cpu_backend.env.gemm_mode``).
- Cost: a widened weight takes twice the memory (the 1.5B model's linear weights: 2.6 -> 5.2 GB).
- Modes: ``SGLANG_ASD_CPU_GEMM=fp32-accumulate`` installs the hooks on any CPU, ``native`` on none
  (read when the hooks are installed). The model-loading log says once per process when layers
  were widened; benchmarks record the resolved mode with the server's identity.
- Upstream: SGLang packs CPU weights after loading for AMX only (``_amx_process_weight_after_loading``);
  a float32-accumulate layout for CPUs without bf16 units would belong beside it.
- Tested on: sglang 0.5.23.

``LogitsProcessor._compute_lm_head`` (``sglang.srt.layers.logits_processor``): the LM head, the same
way, with the same opt-out.
- Kind: AROUND. Where SGLang would take its plain branch (``hidden.to(w.dtype) @ w.T``: a 16-bit
  weight on the CPU, no LoRA, no quantized LM head, no AMX packing, no ``--enable-fp32-lm-head``,
  no RL on-policy target), the logits are a float32 GEMM against a float32 copy of the weight,
  rounded once to the weight's dtype: the bf16 logits a GPU computes. Any other case runs SGLang's.
- Why a copy, not in-place widening: the LM head weight is often the token embedding itself
  (tied), whose lookups must keep returning the model's dtype. The copy is rebuilt when the weight
  changes (a new tensor, or an in-place write such as a weight update: torch's version counter).
- Why: after the linear layers, the bf16 LM head was 23% of a bf16 Qwen2.5 1.5B scheduler's samples
  under py-spy (vocabulary 151936: the largest GEMM of a step).
- Cost: the copy (Qwen2.5 1.5B: 0.9 GB).
"""

from __future__ import annotations

import logging

from sglang_asd.cpu_backend.env import GEMM_ENV, gemm_mode
from sglang_asd.hooks.registry import Seam

logger = logging.getLogger(__name__)

GET_LAST_LOC = "sglang.srt.mem_cache.allocation.get_last_loc"
UNQUANT_LINEAR = "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod"
LINEAR_POSTLOAD = UNQUANT_LINEAR + ".process_weights_after_loading"
LINEAR_APPLY = UNQUANT_LINEAR + ".apply"
LINEAR_APPLY_INTO = UNQUANT_LINEAR + ".apply_into"
LM_HEAD = "sglang.srt.layers.logits_processor.LogitsProcessor._compute_lm_head"

WIDENED = "_sglang_asd_fp32_accumulate"  # attribute marking a widened layer
LM_HEAD_COPY = "_sglang_asd_fp32_weight"  # (source data_ptr, source version, float32 copy) on an LM head
_ANNOUNCED = False
_LM_HEAD_ANNOUNCED = False


def get_last_loc_around(original, req_to_token, req_pool_indices_tensor, prefix_lens_tensor):
    from sglang.srt.mem_cache.allocation import get_last_loc_torch

    return get_last_loc_torch(req_to_token, req_pool_indices_tensor, prefix_lens_tensor)


def widen_linear_weight(layer) -> bool:
    """Widen ``layer.weight`` (bf16 / fp16, on the CPU) to float32 in place and mark the layer.

    Returns whether it did. The Parameter object stays the same (only its data changes), so nothing
    holding the parameter is left with a stale tensor.
    """
    import torch

    weight = getattr(layer, "weight", None)
    if (not isinstance(weight, torch.Tensor) or weight.device.type != "cpu"
            or weight.dtype not in (torch.bfloat16, torch.float16) or weight.dim() != 2):
        return False
    weight.data = weight.data.to(torch.float32)
    setattr(layer, WIDENED, True)
    return True


def fp32_accumulate_linear(x, weight, bias=None):
    """``F.linear(x, weight, bias)`` for a 16-bit ``x`` and a widened float32 ``weight``: float32
    products and sums, rounded once to ``x.dtype``. The plain-torch definition the hook serves."""
    import torch
    import torch.nn.functional as F

    out = F.linear(x.to(torch.float32), weight, None if bias is None else bias.to(torch.float32))
    return out.to(x.dtype)


def linear_postload_around(original, method, layer, *args, **kwargs):
    global _ANNOUNCED
    result = original(method, layer, *args, **kwargs)
    dtype = getattr(getattr(layer, "weight", None), "dtype", None)
    if widen_linear_weight(layer) and not _ANNOUNCED:  # once per process, in the model-loading log
        _ANNOUNCED = True
        logger.info("sglang_asd: %s linear layers run with float32 accumulation (weights widened to float32 "
                    "at load; %s=native keeps torch's kernel)", str(dtype).removeprefix("torch."), GEMM_ENV)
    return result


def linear_apply_around(original, method, layer, x, bias=None, *args, **kwargs):
    if getattr(layer, WIDENED, False) and x.dtype != layer.weight.dtype and not args and not kwargs:
        return fp32_accumulate_linear(x, layer.weight, bias)
    return original(method, layer, x, bias, *args, **kwargs)


def linear_apply_into_around(original, method, layer, x, output, bias=None, *args, **kwargs):
    if getattr(layer, WIDENED, False) and x.dtype != layer.weight.dtype and not args and not kwargs:
        return output.copy_(fp32_accumulate_linear(x, layer.weight, bias))
    return original(method, layer, x, output, bias, *args, **kwargs)


def _plain_lm_head(processor, lm_head) -> bool:
    """Whether ``_compute_lm_head`` would take SGLang's plain ``hidden @ weight.T`` branch with a
    16-bit weight on the CPU (the only case the hook takes over)."""
    import torch
    from sglang.srt.layers import logits_processor
    from sglang.srt.utils.common import use_intel_amx_backend

    weight = getattr(lm_head, "weight", None)
    return (isinstance(weight, torch.Tensor) and weight.device.type == "cpu" and weight.dim() == 2
            and weight.dtype in (torch.bfloat16, torch.float16)
            and not (hasattr(lm_head, "set_lora") and hasattr(lm_head, "apply_lora"))
            and not logits_processor.should_apply_lm_head_quant_method(lm_head, getattr(lm_head, "quant_method", None))
            and not getattr(processor, "use_fp32_lm_head", False)
            and not use_intel_amx_backend(lm_head)
            and getattr(processor, "rl_on_policy_target", None) is None)  # fmt: skip


def lm_head_fp32_weight(lm_head):
    """The float32 copy of ``lm_head.weight``, made on first use and again whenever the weight changed."""
    import torch

    weight = lm_head.weight
    key = (weight.data_ptr(), weight._version)
    cached = getattr(lm_head, LM_HEAD_COPY, None)
    if cached is None or cached[:2] != key:
        cached = (*key, weight.detach().to(torch.float32))
        setattr(lm_head, LM_HEAD_COPY, cached)
        if not _LM_HEAD_ANNOUNCED:  # once per process, at the first forward (the warm-up)
            _announce_lm_head(weight, cached[2])
    return cached[2]


def _announce_lm_head(weight, copy) -> None:
    global _LM_HEAD_ANNOUNCED
    _LM_HEAD_ANNOUNCED = True
    logger.info("sglang_asd: the %s LM head runs with float32 accumulation (a float32 copy of its weight, "
                "%.1f MiB; %s=native keeps torch's kernel)", str(weight.dtype).removeprefix("torch."),
                copy.numel() * copy.element_size() / 2**20, GEMM_ENV)


def lm_head_around(original, processor, hidden_states, lm_head, *args, **kwargs):
    if _plain_lm_head(processor, lm_head):
        return fp32_accumulate_linear(hidden_states.to(lm_head.weight.dtype), lm_head_fp32_weight(lm_head))
    return original(processor, hidden_states, lm_head, *args, **kwargs)


def linear_hooks() -> list:
    return [(LINEAR_POSTLOAD, linear_postload_around), (LINEAR_APPLY, linear_apply_around),
            (LINEAR_APPLY_INTO, linear_apply_into_around), (LM_HEAD, lm_head_around)]


def hooks() -> list:
    """The CPU hooks this process needs: none on a GPU install; the linear hooks unless opted out."""
    from sglang_asd import cpu_backend

    if not cpu_backend.is_installed():
        return []
    return [(GET_LAST_LOC, get_last_loc_around)] + (linear_hooks() if gemm_mode() == "fp32-accumulate" else [])


SEAMS = (Seam("scheduler", hooks),)
