"""TEST-ONLY: serve real SGLang on a CUDA machine that has no ``sgl_kernel`` wheel (the GPU e2e kit).

Part of the kit, not of the package. Opt-in, never automatic: ``SGLANG_ASD_KERNEL_STANDIN=cuda-e2e``
in the environment of every SGLang process and ``scripts/device`` on its ``PYTHONPATH``
(``scripts/device_e2e.sh`` sets both; ``e2e_lib.ServerPool`` keeps the path for every server it
starts). ``sglang_asd.cpu_backend.install()`` then imports this module by name
(``cpu_backend.env.CUDA_STANDIN_MODULE``) and calls :func:`install` instead of installing the CPU
stand-in. Production GPU installs use the real ``sglang-kernel`` wheel (373 MB, more than the
device tool may carry); see docs/GPU.md.

What it does, before SGLang is imported:

1. ``sgl_kernel``: a module tree served by a meta-path finder. Names SGLang's CUDA path imports get
   the plain-torch versions in ``ops.py``; any other name resolves (imports must not fail on
   the CUDA path's many optional kernels) to a function that raises ``NotImplementedError`` naming
   it when called and appends the name to ``$SGLANG_ASD_STANDIN_LOG`` (the e2e report lists them).
   ``sgl_kernel.scalar_type`` is absent (SGLang then uses its own fallback), as on CPU.
2. SGLang's JIT-compiled kernels on the serving path (``sglang.kernels.ops.speculative.tree`` and
   ``.sampling``, ``kvcache.store_cache``: nvcc + tvm-ffi at first use, the sampling one also with
   flashinfer's headers) are replaced as soon as their module is loaded, so every by-name import
   sees the replacement: tree build, greedy tree verify and NGRAM tree reconstruction by SGLang's
   own Triton versions of the same ops (its XPU path), target-only tree sampling by
   ``ops.py``' torch port, and the ``store_cache`` probe answers False (SGLang's torch
   fallback writes the KV cache). Any other JIT module still compiles where nvcc works.

The rest of the kernel supply is SGLang's own, chosen by the kit's flags: the Triton attention
backend, ``--sampling-backend pytorch`` and ``SGLANG_FORCE_FUSED_OP_BACKEND=torch`` (native forwards
of norm, activation, rotary and the other fused ops). Speed measured this way is not a production
SGLang's.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types

from sglang_asd.cpu_backend.env import CUDA_E2E as VALUE
from sglang_asd.cpu_backend.env import KERNEL_STANDIN_ENV as ENV

from . import ops
LOG_ENV = "SGLANG_ASD_STANDIN_LOG"
MARKER = "__sglang_asd_cuda_e2e__"
VERSION = "0.4.10"  # the sglang-kernel version SGLang 0.5.23 pins; the kit also skips its version check
ABSENT = frozenset({"sgl_kernel.scalar_type"})

# Module -> {name: "target"}; target "module:function" is imported when first called.
JIT_REPLACEMENTS = {
    "sglang.kernels.ops.speculative.tree": {
        "build_tree_kernel_efficient": "sglang.kernels.ops.speculative.spec_tree:sgl_build_tree_kernel_triton",
        "verify_tree_greedy": "sglang.kernels.ops.speculative.spec_tree:verify_tree_greedy_triton",
        "reconstruct_indices_from_tree_mask":
            "sglang.kernels.ops.speculative.reconstruct_tree:reconstruct_indices_from_tree_mask_triton",
    },
    "sglang.kernels.ops.speculative.sampling": {
        "tree_speculative_sampling_target_only":
            "cuda_standin.ops:tree_speculative_sampling_target_only",
    },
    "sglang.kernels.ops.kvcache.kvcache": {  # SGLang then stores the KV cache with its torch fallback
        "can_use_store_cache": "cuda_standin.ops:can_use_store_cache",
    },
}
# SGLang calls the JIT ops with the sgl_kernel schema's keyword names; the Triton versions spell them out.
_KWARG_RENAMES = {"retrive_index": "retrieve_index", "retrive_next_token": "retrieve_next_token",
                  "retrive_next_sibling": "retrieve_next_sibling"}


def is_installed() -> bool:
    return bool(getattr(sys.modules.get("sgl_kernel"), MARKER, False))


def missing_op(name: str):
    """A stand-in for an op the kit does not provide: raises, and records the name, when called."""

    def call(*args, **kwargs):
        log = os.environ.get(LOG_ENV)
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {name}\n")
        raise NotImplementedError(
            f"{name} has no plain-torch stand-in in sglang_asd's CUDA e2e kit ({ENV}={VALUE}, test-only); "
            "add it to scripts/device/cuda_standin/ops.py or serve with the real sglang-kernel wheel")

    call.__name__ = call.__qualname__ = name.rsplit(".", 1)[-1]
    call.__sglang_asd_missing__ = True
    return call


def _module(fullname: str) -> types.ModuleType:
    mod = types.ModuleType(fullname, f"sglang_asd CUDA e2e stand-in for {fullname} (test-only).")
    mod.__path__ = []  # a package, so that any submodule import reaches the finder
    mod.__version__ = VERSION
    setattr(mod, MARKER, True)
    sub = fullname.partition(".")[2]
    mod.__dict__.update(ops.TOP_LEVEL if not sub else ops.SUBMODULES.get(sub, {}))

    def __getattr__(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        fn = missing_op(f"{fullname}.{attr}")
        setattr(mod, attr, fn)
        return fn

    mod.__getattr__ = __getattr__
    return mod


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``sgl_kernel`` and its submodules; wraps the loaders of ``JIT_REPLACEMENTS``' modules."""

    def find_spec(self, fullname, path, target=None):
        if fullname in ABSENT:
            raise ModuleNotFoundError(f"No module named {fullname!r} (absent in the CUDA e2e stand-in)",
                                      name=fullname)
        if fullname == "sgl_kernel" or fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if fullname in JIT_REPLACEMENTS:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _PatchingLoader(spec.loader, fullname)
            return spec
        return None

    def create_module(self, spec):
        return _module(spec.name)

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, module)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, fullname: str):
        self._loader, self._name = loader, fullname

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        replace_jit_ops(module, self._name)

    def __getattr__(self, attr):  # get_source, is_package, ... for tracebacks and inspect
        return getattr(self._loader, attr)


def _lazy(target: str, jit_name: str):
    mod_name, fn_name = target.split(":")

    def call(*args, **kwargs):
        fn = getattr(importlib.import_module(mod_name), fn_name)
        kwargs = {_KWARG_RENAMES.get(k, k): v for k, v in kwargs.items()}
        return fn(*args, **kwargs)

    call.__name__ = call.__qualname__ = jit_name
    call.__doc__ = f"CUDA e2e stand-in (test-only) for SGLang's JIT {jit_name}: calls {target}."
    call.__sglang_asd_replaces__ = target
    return call


def replace_jit_ops(module: types.ModuleType, name: str) -> None:
    for fn_name, target in JIT_REPLACEMENTS[name].items():
        if not hasattr(module, fn_name):
            raise RuntimeError(f"{name}.{fn_name} not found: this SGLang differs from 0.5.23, update scripts/device/cuda_standin")
        setattr(module, fn_name, _lazy(target, fn_name))


def install() -> None:
    """Install the ``sgl_kernel`` stand-in and the JIT-op replacements in this process (idempotent).

    Must run before SGLang's modules are imported; refuses when a real ``sgl_kernel`` is loaded or
    when a module it patches was imported already (its by-name bindings would keep the JIT op).
    """
    if is_installed():
        return
    if "sgl_kernel" in sys.modules:
        raise RuntimeError(f"{ENV}={VALUE}: a real sgl_kernel is already imported; the stand-in never shadows it")
    early = sorted(m for m in JIT_REPLACEMENTS if m in sys.modules)
    if early:
        raise RuntimeError(f"{ENV}={VALUE}: install before SGLang is imported; already loaded: {early}")
    sys.meta_path.insert(0, _Finder())
    import sgl_kernel  # noqa: F401  (through the finder)
