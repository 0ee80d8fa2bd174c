"""The stand-ins' five environment switches, read and validated here and nowhere else.

- ``SGLANG_ASD_CPU_GEMM``: the CPU linear-layer mode (``seams/cpu_paths.py``): ``auto`` (default:
  ``native`` on a CPU with bf16 instructions, AVX-512 BF16 or AMX, whose bf16 kernel is the faster
  one, else ``fp32-accumulate``), ``fp32-accumulate`` (a bf16/fp16 weight widened to float32 once)
  or ``native`` (torch's bf16 kernel). Both run bf16 linear layers with float32 accumulation, in
  another summation order; figures in docs/measurements/cpu_round_profile/NOTES.md.
- ``SGLANG_ASD_CPU_ATTENTION``: the stand-in attention's kernel (``attention_core.py``), ``fused``
  (default: torch's ``scaled_dot_product_attention`` over the pool's dtype) or ``reference``
  (every step in float32). They differ in the last bits of a bf16 attention output.
- ``SGLANG_ASD_CPU_START_METHOD``: how the launcher's scheduler and detokenizer start on CPU
  (``seams/start_method.py``), ``fork`` (default) or ``spawn`` (SGLang's own).
- ``SGLANG_ASD_CPU_SAMPLING``: ``on`` (default) or ``off``: SGLang's speculative sampling verify
  served on CPU (``seams/sampling.py``), for ASD and stock servers alike. On, a sampled request is
  sampled as on a GPU: with its ``sampling_seed`` (``seed`` on the OpenAI routes) it reproduces,
  without one it draws fresh randomness. Off, stock SGLang's CPU path: it samples a request's first
  token and verifies every speculative round greedily, so a sampled speculative request decodes the
  greedy continuation of its first token, and ASD receipts say ``"reason": "sampling"``.
- ``SGLANG_ASD_KERNEL_STANDIN``: unset, or ``cuda-e2e``, the GPU end-to-end kit's test-only
  ``sgl_kernel`` stand-in for SGLang's CUDA path. It is the kit's code, not the package's:
  ``cpu_backend.install()`` imports it by name (``CUDA_STANDIN_MODULE``) from ``sys.path``, where
  the kit puts ``scripts/device`` for every process it starts (docs/GPU.md).

The first four are case- and space-insensitive, empty meaning the default; the last is exact. Each
function reads the environment when called (never at import), so a process sees the value it was
started with. A bad value is an error naming the variable, the value and what is accepted; the
launchers call :func:`check_cpu_switches` before any process starts, so it is one line there.
"""

from __future__ import annotations

import os
from typing import Optional

GEMM_ENV = "SGLANG_ASD_CPU_GEMM"
GEMM_MODES = ("auto", "fp32-accumulate", "native")
# /proc/cpuinfo flags of the instructions that make torch's bf16 GEMM the faster one
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
CPU_ATTENTION_ENV = "SGLANG_ASD_CPU_ATTENTION"
CPU_ATTENTION_KERNELS = ("fused", "reference")
START_METHOD_ENV = "SGLANG_ASD_CPU_START_METHOD"
START_METHODS = ("fork", "spawn")
CPU_SAMPLING_ENV = "SGLANG_ASD_CPU_SAMPLING"
CPU_SAMPLING_VALUES = ("on", "off")  # the first is the default
KERNEL_STANDIN_ENV = "SGLANG_ASD_KERNEL_STANDIN"
CUDA_E2E = "cuda-e2e"
CUDA_STANDIN_MODULE = "cuda_standin"  # scripts/device/cuda_standin/


def _choice(name: str, choices: tuple) -> str:
    """``$name``, lower-cased and stripped, which must be one of ``choices`` (the first when unset or empty)."""
    value = os.environ.get(name, choices[0]).strip().lower() or choices[0]
    if value not in choices:
        raise ValueError(f"{name}={value!r}: expected one of {', '.join(choices)}")
    return value


def gemm_mode() -> str:
    """The CPU linear-layer mode this process uses, ``fp32-accumulate`` or ``native`` (``auto``, the
    default, resolved for this CPU)."""
    mode = _choice(GEMM_ENV, GEMM_MODES)
    if mode == "auto":
        return "native" if cpu_has_native_bf16() else "fp32-accumulate"
    return mode


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU has bf16 instructions (``NATIVE_BF16_FLAGS``); False where it cannot be read."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return any(flag in line.split() for flag in NATIVE_BF16_FLAGS)
    except OSError:
        pass
    return False


def cpu_attention() -> str:
    """The stand-in attention's kernel in this process: ``fused`` (default) or ``reference``."""
    return _choice(CPU_ATTENTION_ENV, CPU_ATTENTION_KERNELS)


def start_method() -> str:
    """The start method of this launcher's children on CPU: ``fork`` (default) or ``spawn``."""
    return _choice(START_METHOD_ENV, START_METHODS)


def cpu_sampling() -> bool:
    """Whether this process serves SGLang's sampling verify on CPU (``on``, the default; ``off``)."""
    return _choice(CPU_SAMPLING_ENV, CPU_SAMPLING_VALUES) == "on"


def kernel_standin() -> Optional[str]:
    """``cuda-e2e`` when this process opts into the GPU e2e kit's stand-in, else None."""
    value = os.environ.get(KERNEL_STANDIN_ENV, "")
    if value and value != CUDA_E2E:
        raise RuntimeError(f"{KERNEL_STANDIN_ENV}={value!r} is not understood; the only value is {CUDA_E2E!r} "
                           "(GPU e2e kit, test-only)")
    return value or None


def check_cpu_switches() -> None:
    """Raise ``ValueError`` on a bad CPU linear-layer mode, attention kernel, start method or sampling
    switch (the launchers, on CPU)."""
    gemm_mode()
    cpu_attention()
    start_method()
    cpu_sampling()
