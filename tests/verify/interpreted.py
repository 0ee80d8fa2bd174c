"""Run a test file's Triton kernels in Triton's interpreter on a CPU-only machine.

Import this before anything imports triton: without CUDA it turns ``TRITON_INTERPRET=1`` on (it
must be on before triton is first imported: triton's own ``tl.max``, ``tl.sum``... are decorated
then). If this process imported triton earlier with the interpreter off, ``DELEGATE`` is true and
the file's ``test_in_fresh_process`` (``fresh_process``) runs the whole file in a new process.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest
import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None
DELEGATE = False
if HAS_TRITON and not torch.cuda.is_available():
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
    import triton.language.standard as _std

    DELEGATE = type(_std.max).__name__ != "InterpretedFunction"

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def skip_unless_here(request) -> None:
    """For an autouse fixture: skip every test but ``test_in_fresh_process`` when delegating."""
    if DELEGATE and request.node.name != "test_in_fresh_process":
        pytest.skip("triton was imported without the interpreter: run by test_in_fresh_process")


def fresh_process(path: str) -> None:
    """Run the test file ``path`` in a fresh process with the interpreter on; assert it passes."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path],
                       cwd=pathlib.Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


def torch_math_for_libdevice(monkeypatch) -> None:
    """Under the interpreter, libdevice (the sampled kernel's ``CHARGES_IN_KERNEL``) cannot run:
    stand torch's float64 ``pow``/``log``/``log1p`` in for it, so a test checks the kernel's
    expression (order of operations, clamps, branches) against torch's; the libm is a device check."""
    import types

    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    from sglang_asd.verify import triton_sampled_kernels

    def lift(fn):
        def op(*xs):
            out = fn(*(torch.from_numpy(np.ascontiguousarray(x.handle.data)) for x in xs)).numpy()
            return tl.tensor(TensorHandle(out, xs[0].handle.dtype), xs[0].type)

        return op

    monkeypatch.setattr(triton_sampled_kernels, "libdevice",
                        types.SimpleNamespace(pow=lift(torch.pow), log=lift(torch.log), log1p=lift(torch.log1p)))
