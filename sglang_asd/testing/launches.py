"""Count what one verify call dispatches: aten ops (a ``TorchDispatchMode``) and Triton kernel launches.

    from sglang_asd.testing.launches import count_call
    counts = count_call(lambda: asd_sampled_verify(...), kernels=[(triton_sampled_verify, "sampled_walk_kernel"), ...])

On a GPU each aten op that computes is a kernel launch of several microseconds, whatever its
size, so the count, not the CPU time, is what a verify step costs there at small batch sizes.
``count_call`` replaces the named ``@triton.jit`` kernels with counting wrappers for the call
(each ``kernel[grid](...)`` counts one launch and runs with the dispatch counter paused, so the
interpreter's own tensor copies on a CPU are not counted) and classifies the aten ops:

- ``views``: ops that return a view (no launch);
- ``allocations``: ``empty*`` (no launch; the caching allocator);
- ``compute``: everything else (one launch each on a GPU, scalar fills and copies included).

``gpu_launches = compute + triton``: what the call launches on a GPU.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from typing import Callable, Iterable, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes


class _Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func] += 1
        return func(*args, **(kwargs or {}))


@dataclasses.dataclass(frozen=True)
class Counts:
    views: int
    allocations: int
    compute: int
    triton: int

    @property
    def aten(self) -> int:
        return self.views + self.allocations + self.compute

    @property
    def gpu_launches(self) -> int:
        return self.compute + self.triton


class _CountingKernel:
    """Stands in for a ``@triton.jit`` kernel: ``kernel[grid](...)`` counts, then launches the real one."""

    def __init__(self, kernel, tally: list):
        self.kernel, self.tally = kernel, tally

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.tally[0] += 1
            with _disable_current_modes():
                return self.kernel[grid](*args, **kwargs)

        return launch

    def __getattr__(self, name):
        return getattr(self.kernel, name)


@contextlib.contextmanager
def _counting_kernels(kernels: Iterable[Tuple[object, str]], tally: list):
    replaced = [(module, name, getattr(module, name)) for module, name in kernels]
    try:
        for module, name, kernel in replaced:
            setattr(module, name, _CountingKernel(kernel, tally))
        yield
    finally:
        for module, name, kernel in replaced:
            setattr(module, name, kernel)


def count_call(fn: Callable[[], object], kernels: Iterable[Tuple[object, str]] = ()) -> Counts:
    """Run ``fn()`` once and count its dispatches (module docstring). ``kernels``: (module, name)
    of every ``@triton.jit`` kernel ``fn`` may launch, as the module that launches it names it."""
    tally = [0]
    with _counting_kernels(kernels, tally), _Counter() as counter:
        fn()
    views = allocations = compute = 0
    for func, n in counter.ops.items():
        name = func.overloadpacket.__name__
        if func.is_view:
            views += n
        elif name.startswith("empty"):
            allocations += n
        else:
            compute += n
    return Counts(views=views, allocations=allocations, compute=compute, triton=tally[0])
