"""Register the stand-in ops under ``torch.ops.sgl_kernel`` and build the ``sgl_kernel`` modules."""

from __future__ import annotations

import functools
import importlib.machinery
import types

import torch

from . import attention_core, attention_ops, env, kv_cache_ops, runtime_ops, spec_tree_ops

# All ops, by family: name -> (schema without the name, plain-torch implementation).
ALL_OPS = {**kv_cache_ops.OPS, **spec_tree_ops.OPS, **attention_ops.OPS, **runtime_ops.OPS}

# What `from sgl_kernel import X` must find (SGLang 0.5.23 imports these when is_cpu()).
TOP_LEVEL_FUNCTIONS = (
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_draft_decode_metadata_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "rotate_input_ids_cpu",
    "verify_tree_greedy_cpu",
)
# What `from sgl_kernel.speculative import X` must find (kernels/ops/speculative/reconstruct_tree.py).
SPECULATIVE_FUNCTIONS = TOP_LEVEL_FUNCTIONS + ("reconstruct_indices_from_tree_mask",)

# Kept alive for the life of the process: dropping the Library deregisters the ops.
_LIBRARY: torch.library.Library | None = None


def _takes_tensors(schema: str) -> bool:
    return "Tensor" in schema.split("->")[0]


def register_ops() -> None:
    """Define every op in ``ALL_OPS`` as ``sgl_kernel::<name>`` with its torch implementation, the
    attention kernel chosen by ``SGLANG_ASD_CPU_ATTENTION``."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    attention_core.FUSED = env.cpu_attention() == "fused"
    clashes = [name for name in ALL_OPS if _op_exists(name)]
    if clashes:
        raise RuntimeError(f"torch.ops.sgl_kernel already defines {clashes}; refusing to shadow them")
    lib = torch.library.Library("sgl_kernel", "FRAGMENT")
    for name, (schema, fn) in ALL_OPS.items():
        lib.define(name + schema)
        lib.impl(name, fn, "CPU" if _takes_tensors(schema) else "CompositeExplicitAutograd")
    _LIBRARY = lib


def _op_exists(name: str) -> bool:
    return hasattr(torch.ops.sgl_kernel, name)


def _dispatching(name: str):
    """A Python function with the implementation's signature that calls ``torch.ops.sgl_kernel.<name>``."""
    impl = ALL_OPS[name][1]

    @functools.wraps(impl)
    def call(*args, **kwargs):
        return getattr(torch.ops.sgl_kernel, name)(*args, **kwargs)

    return call


def build_modules(marker: str) -> dict[str, types.ModuleType]:
    """The ``sgl_kernel`` and ``sgl_kernel.speculative`` stand-in modules (not yet in ``sys.modules``)."""
    origin = "sglang_asd.cpu_backend (plain-torch stand-in for the sgl_kernel CPU build)"
    top = types.ModuleType("sgl_kernel", "Stand-in for sgl_kernel's CPU ops; see sglang_asd.cpu_backend.")
    top.__spec__ = importlib.machinery.ModuleSpec("sgl_kernel", None, origin=origin)
    spec = types.ModuleType("sgl_kernel.speculative", "Stand-in for sgl_kernel.speculative.")
    spec.__spec__ = importlib.machinery.ModuleSpec("sgl_kernel.speculative", None, origin=origin)
    spec.__package__ = top.__package__ = "sgl_kernel"
    for name in TOP_LEVEL_FUNCTIONS:
        setattr(top, name, _dispatching(name))
    for name in SPECULATIVE_FUNCTIONS:
        setattr(spec, name, _dispatching(name))
    top.speculative = spec
    setattr(top, marker, True)
    setattr(spec, marker, True)
    return {"sgl_kernel": top, "sgl_kernel.speculative": spec}
