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
