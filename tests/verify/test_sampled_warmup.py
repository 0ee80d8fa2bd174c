"""The fused sampled verify's compiled variants: one per ``W_PAD``, and ``warmup`` launches them all.

1. ``variants.sampled_keys`` of a server's verify shapes, and what ``warmup`` returns for them on a
   CPU device (nothing compiled there).
2. Triton's own JIT keys (``test_warmup._JitKeys``: Triton's binder computes the key a launch would
   look up, no GPU), in a fresh process with the interpreter off: after ``warmup_sampled``'s
   launches, a sweep of calls (bs, stop widths, sibling bounds above and below W - 1, thresholds,
   index dtypes, strided probabilities) adds no new key, and there is one key per ``W_PAD`` and
   kernel.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from sglang_asd.verify.variants import SampledKey, sampled_key, sampled_keys, verify_shapes
from sglang_asd.verify.warmup import warmup_sampled

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVERS = [dict(num_steps=3, num_draft_tokens=4, adaptive_steps=(0, 1, 3)), dict(num_steps=5, num_draft_tokens=16),
           dict(num_steps=0, num_draft_tokens=12, ngram=True), dict(num_steps=6, num_draft_tokens=64)]


def test_one_key_per_width_class():
    assert sampled_key(1) == SampledKey("asd_sampled", 1)
    assert sampled_key(5) == sampled_key(8) == SampledKey("asd_sampled", 8)
    shapes = verify_shapes(3, 4, adaptive_steps=(0, 1, 3))  # W in {4, 1, 2}
    assert sampled_keys(shapes) == {SampledKey("asd_sampled", w) for w in (1, 2, 4)}
    assert warmup_sampled("cpu", shapes, 32000) == sampled_keys(shapes)
    with pytest.raises(ValueError, match="W must be an integer >= 1"):
        sampled_key(0)


def test_triton_compiles_nothing_new_after_the_sampled_warmup():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.count("ok ") == len(SERVERS), p.stdout


def _jit_key_sweep() -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests" / "verify"))
    from test_warmup import _JitKeys
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    from sglang_asd.verify import triton_sampled_verify as tsv
    from sglang_asd.verify.variants import sampled_example_call

    backend = make_backend(GPUTarget("cuda", 90, 32))
    kernels = [_JitKeys(tsv.sampled_node_q_kernel, backend), _JitKeys(tsv.sampled_walk_kernel, backend)]
    tsv.sampled_node_q_kernel, tsv.sampled_walk_kernel = kernels

    def jit_keys(*args, **kwargs):
        for k in kernels:
            k.last = None
        tsv.asd_sampled_verify_triton(*args, **kwargs)
        return frozenset(k.last for k in kernels)

    V = 1000
    for server in SERVERS:
        shapes = verify_shapes(**server)
        warmed = {sampled_key(W): jit_keys(*sampled_example_call(W, K, V, "cpu")) for W, K in sorted(shapes)}
        compiled = frozenset().union(*warmed.values())
        assert len(compiled) == 2 * len(sampled_keys(shapes)), (len(compiled), sampled_keys(shapes))
        calls = 0
        for bs, (W, K), stop, bound, ix in itertools.product((1, 2, 7, 64), sorted(shapes), (None, 1, 5),
                                                              (None, 1, 4, 99), (torch.int64, torch.int32)):
            args = list(sampled_example_call(W, K, V, "cpu", bs=bs, stop_width=stop or 1))
            args[3:7] = [a.to(ix) for a in args[3:7]]  # the wrapper casts index tensors: no variant
            args[14] = None if stop is None else args[14].to(ix)
            if bs == 7:  # probabilities in a wider buffer: strided rows
                args[9] = torch.zeros(bs, W, V + 8)[:, :, :V]
            got = jit_keys(*args, 0.7 if bs == 2 else 1.0, 0.9, bound)
            assert got == warmed[sampled_key(W)], (server, bs, W, K, stop, bound, ix)
            calls += 1
        print(f"ok {server}: {calls} calls, {len(compiled)} variants, none new")


if __name__ == "__main__":
    _jit_key_sweep()
