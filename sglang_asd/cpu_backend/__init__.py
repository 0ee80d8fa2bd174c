"""Plain-torch stand-in for the CPU build of ``sgl_kernel``.

What it replaces
    SGLang's CPU path (``SGLANG_USE_CPU_ENGINE=1``, ``--device cpu``) imports
    ``sgl_kernel``, the compiled kernel package, at module import time and calls
    its CPU ops every step: KV-slot bookkeeping (``assign_*_cpu``,
    ``copy_all_layer_kv_cache_cpu``, ``build_draft_decode_metadata_cpu``,
    ``fill_accept_out_cache_loc_cpu``), speculative-tree ops
    (``build_tree_kernel_efficient_cpu``, ``verify_tree_greedy_cpu``,
    ``reconstruct_indices_from_tree_mask``, ``fill_bonus_tokens_cpu``,
    ``rotate_input_ids_cpu``) and the ``intel_amx`` attention backend's
    ``decode_attention_cpu`` / ``extend_attention_cpu``. This package provides
    those ops in plain torch (``kv_cache_ops``, ``spec_tree_ops``,
    ``attention_ops``, ``runtime_ops``), registered as ``torch.ops.sgl_kernel.<name>``,
    plus ``sgl_kernel`` / ``sgl_kernel.speculative`` modules that expose the
    Python names SGLang imports.

Why
    The only ``sgl_kernel`` wheel on the registry is the CUDA build, which
    cannot be imported without ``libcuda``; the CPU build must be compiled
    from source. Without these ops SGLang cannot run EAGLE / EAGLE3 /
    STANDALONE / NGRAM speculative decoding on CPU at all (the ``torch_native``
    attention backend refuses EAGLE).

When it is active
    Only after ``install()`` returned True in the current process. ``install()``
    does nothing when a real ``sgl_kernel`` is importable (it never shadows
    one) or when CUDA/XPU is available, so it is never active on a GPU
    install. (Test-only exception, the kit's code, not the package's: with the
    GPU e2e kit's explicit opt-in ``SGLANG_ASD_KERNEL_STANDIN=cuda-e2e``,
    ``install()`` imports the kit's ``cuda_standin`` module from ``sys.path``
    (``scripts/device/cuda_standin/``) and installs its stand-in for SGLang's
    CUDA path instead; docs/GPU.md.) Spawned SGLang processes start clean:
    ``install()`` must run in each one before SGLang's modules are imported.
    Its environment switches are read in ``env.py``.

Deliberately absent
    ``convert_weight_packed`` (SGLang reads its presence as "AMX kernels
    available" and would route every layer to AMX-only ops; without it norms,
    activations and rotary embeddings use SGLang's native-torch paths),
    ``fused_qk_norm_cpu`` (probed with ``hasattr``), the ``scalar_type``
    submodule (SGLang then uses its own fallback), ``__version__`` (SGLang
    checks the version only on CUDA), the shared-memory collectives
    (``shm_allreduce`` / ``shm_allgather``: SGLang calls them only on AMX or arm64
    CPUs; elsewhere its TP all-reduce and all-gather are gloo's, which the stand-in
    keeps: ``seams/tensor_parallel.py``; on arm64 ``initialize`` refuses more than
    one rank) and every GPU op.

Importable without SGLang; needs only torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading

import torch

__all__ = ["install", "is_installed"]

# Set on the stand-in modules so the stand-in can be told apart from a real sgl_kernel.
_MARKER = "__sglang_asd_cpu_backend__"
_LOCK = threading.Lock()


def is_installed() -> bool:
    """True when this process's ``sgl_kernel`` is the stand-in."""
    return bool(getattr(sys.modules.get("sgl_kernel"), _MARKER, False))


def _real_sgl_kernel_present() -> bool:
    if "sgl_kernel" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("sgl_kernel") is not None
    except (ImportError, ValueError):
        return True  # something named sgl_kernel exists but is odd: do not touch it


def _accelerator_available() -> bool:
    if torch.cuda.is_available():
        return True
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available())


def install() -> bool:
    """Make ``import sgl_kernel`` resolve to the stand-in; return whether it is active.

    Idempotent. Returns False and changes nothing if a real ``sgl_kernel`` is
    importable or CUDA/XPU is available; otherwise registers the ops under
    ``torch.ops.sgl_kernel``, puts the ``sgl_kernel`` and
    ``sgl_kernel.speculative`` modules in ``sys.modules`` and returns True.
    Call it before SGLang's modules are imported, in every process.
    """
    with _LOCK:
        if is_installed():
            return True
        if _cuda_standin_install():
            return False
        if _real_sgl_kernel_present() or _accelerator_available():
            return False
        from . import _registry

        _registry.register_ops()
        sys.modules.update(_registry.build_modules(_MARKER))
        return True


def _cuda_standin_install() -> bool:
    """TEST-ONLY opt-in of the GPU e2e kit (``SGLANG_ASD_KERNEL_STANDIN=cuda-e2e``).

    Imports the kit's module (``env.CUDA_STANDIN_MODULE``, in ``scripts/device``, which the kit puts
    on ``PYTHONPATH``), installs its stand-in (an ``sgl_kernel`` for SGLang's CUDA path) and returns
    True; the CPU stand-in then stays off and ``install()`` returns False, so the rest of sglang_asd
    behaves as on a real GPU install. Refuses, loudly, without CUDA, without the kit's module on
    ``sys.path`` or beside a real ``sgl_kernel``.
    """
    from . import env

    if env.kernel_standin() is None:
        return False
    opt_in = f"{env.KERNEL_STANDIN_ENV}={env.CUDA_E2E}"
    if not torch.cuda.is_available():
        raise RuntimeError(f"{opt_in} needs a CUDA device (it is the GPU e2e kit's stand-in)")
    try:
        standin = importlib.import_module(env.CUDA_STANDIN_MODULE)
    except ModuleNotFoundError as e:
        if e.name != env.CUDA_STANDIN_MODULE:
            raise
        raise RuntimeError(f"{opt_in}: the GPU e2e kit's module {env.CUDA_STANDIN_MODULE!r} is not importable; "
                           "put the kit's scripts/device on PYTHONPATH (scripts/device_e2e.sh does)") from None
    if not standin.is_installed() and _real_sgl_kernel_present():
        raise RuntimeError(f"{opt_in} refused: a real sgl_kernel is installed; unset it")
    standin.install()
    return True
