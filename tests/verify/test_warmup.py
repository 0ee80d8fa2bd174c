"""``sglang_asd.verify.variants`` and ``warmup``: the enumerated specializations cover every call a server makes.

1. The keys (pure, from shapes): ``enumerate_specializations`` of a server's settings contains
   ``key_of_call`` of every call over a sweep of bs, (W, K), stop widths, with and without
   ``target_predict``.
2. Triton's own JIT keys, in a fresh process with the interpreter off (the interpreter compiles
   nothing, so it cannot count variants; Triton's binder computes the key a launch would look
   up in ``JITFunction``'s cache, with no GPU): after the warm-up calls, a sweep of calls adds
   no new JIT key; the number of variants is what ``variants``' docstring says; equal keys of
   ours always mean equal JIT keys (ours is complete).
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

from sglang_asd.verify.variants import (
    SpecializationKey,
    enumerate_specializations,
    key_of_call,
    specialization_key,
    verify_shapes,
)
from sglang_asd.verify.warmup import warmup

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_BS = 64
# a topk-1 chain with adaptive steps [0, 1, 3] (SGLang's default config for bs >= 8), an EAGLE
# topk tree, and NGRAM
SERVERS = [
    dict(num_steps=3, num_draft_tokens=4, adaptive_steps=(0, 1, 3)),
    dict(num_steps=5, num_draft_tokens=16),
    dict(num_steps=0, num_draft_tokens=8, ngram=True),
]
STOP_WIDTHS = (None, 0, 1, 2, 7, 16)


def sweep_tensors(bs, W, K, V, stop_width, target_predict, dtype=torch.bfloat16):
    """A call's tensors (values irrelevant: keys read metadata only)."""
    candidates = torch.empty((bs, W), dtype=torch.int64)
    logits = torch.empty((bs * W, V), dtype=dtype)
    stop = None if stop_width is None else torch.full((bs, stop_width), -1)
    tp = torch.empty((bs, W), dtype=torch.int64) if target_predict else None
    return candidates, logits, stop, tp


def test_verify_shapes_follow_sglang_settings():
    assert verify_shapes(3, 4, adaptive_steps=(0, 1, 3)) == {(4, 3), (1, 0), (2, 1)}
    assert verify_shapes(5, 16) == {(16, 5)}
    assert verify_shapes(0, 8, ngram=True) == {(8, 7)}  # NGRAM: max_tree_depth = draft width


@pytest.mark.parametrize("V", [32000, 151936, 32003])
@pytest.mark.parametrize("server", SERVERS, ids=["adaptive-chain", "eagle-tree", "ngram"])
def test_every_call_of_a_server_has_an_enumerated_key(server, V):
    shapes = verify_shapes(**server)
    keys = enumerate_specializations(shapes, V, ("bfloat16",))
    assert len(keys) == 2 * len(shapes)  # with and without target_predict
    seen = set()
    for bs, (W, K), stop_width, tp in itertools.product(range(1, MAX_BS + 1), shapes, STOP_WIDTHS, (False, True)):
        candidates, logits, stop, target_predict = sweep_tensors(bs, W, K, V, stop_width, tp)
        key = key_of_call(candidates, logits, K, stop_tokens=stop, target_predict=target_predict)
        assert key in keys, key
        assert key == specialization_key(bs, W, K, V, stop_width or 0, torch.bfloat16, tp)
        seen.add(key)
    assert seen == keys  # and each enumerated key is reachable


def test_key_fields_name_the_variants():
    key = specialization_key(8, 4, 3, 151936, 2, torch.bfloat16, False)
    assert key == SpecializationKey("bfloat16", 4, 3, False, 16, True)
    assert specialization_key(8, 4, 3, 32003, 2, "float32", False).vocab_unit == 1  # V not a multiple of 16
    assert specialization_key(8, 4, 3, 32000, 2, "float32", False, logits_row_stride=32001).vocab_unit == 1
    assert specialization_key(8, 4, 3, 32003, 2, "float32", True) == SpecializationKey("float32", 4, 3, True, None, None)
    unaligned = torch.empty(2 * 4 * 64 + 1)[1:].view(8, 64)  # 4 bytes off a 16-byte boundary
    assert key_of_call(torch.empty((2, 4), dtype=torch.int64), unaligned, 3).logits_aligned is False
    with pytest.raises(ValueError, match="logits dtype must be one of bfloat16, float16, float32, got torch.int8"):
        specialization_key(1, 4, 3, 64, 0, torch.int8, False)
    with pytest.raises(ValueError, match="W must be an integer >= 1, got 0"):
        specialization_key(1, 0, 0, 64, 0, torch.float32, False)


def test_warmup_on_a_cpu_device_compiles_nothing_and_returns_the_keys(monkeypatch):
    monkeypatch.setitem(sys.modules, "sglang_asd.verify.triton_verify", None)  # any import would fail
    shapes = verify_shapes(3, 4, adaptive_steps=(0, 1, 3))
    assert warmup("cpu", shapes, 32000) == enumerate_specializations(shapes, 32000, ("bfloat16",))


def test_triton_compiles_nothing_new_after_warmup():
    if importlib.util.find_spec("triton") is None:  # not imported here: see test_triton_parity.py
        pytest.skip("triton is not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.count("ok V=") == len(SERVERS) * 2 and "ok unaligned" in p.stdout, p.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: compiles and loads the kernels")
def test_after_warmup_on_cuda_a_sweep_of_calls_compiles_nothing():
    """On the device: Triton's compilation listener (what SGLang's triton_load_watch hooks) hears
    nothing after ``warmup`` over batch sizes, stop widths and both target_predict modes."""
    pytest.importorskip("triton")
    import triton.knobs as knobs

    from sglang_asd.verify.triton_verify import asd_verify_triton
    from sglang_asd.verify.variants import example_call

    V, shapes = 151936, verify_shapes(3, 4, adaptive_steps=(0, 1, 3)) | {(16, 5)}
    warmup("cuda", shapes, V)
    compiled, previous = [], knobs.compilation.listener
    knobs.compilation.listener = lambda **kw: compiled.append(getattr(kw["src"], "name", "?"))
    try:
        for (W, K), bs, stop_width, tp in itertools.product(shapes, (1, 3, 8, 64, 256), (0, 1, 3), (False, True)):
            key = specialization_key(bs, W, K, V, stop_width, "bfloat16", tp)
            args, kwargs = example_call(key, V, "cuda", bs=bs)
            kwargs["stop_tokens"] = torch.full((bs, stop_width), -1, device="cuda") if stop_width else None
            asd_verify_triton(*args, **kwargs)
        torch.cuda.synchronize()
    finally:
        knobs.compilation.listener = previous
    assert compiled == []


class _JitKeys:
    """Stands in for a @triton.jit kernel: ``kernel[grid](*args, **meta)`` records the key that
    the launch would look up in ``JITFunction``'s cache (Triton's binder, for an sm_90 target),
    and runs nothing."""

    def __init__(self, kernel, backend):
        from triton.runtime.jit import create_function_from_signature

        self.name = kernel.fn.__name__
        self.binder = create_function_from_signature(kernel.signature, kernel.params, backend)
        self.last = None

    def __getitem__(self, grid):
        from triton.runtime.jit import compute_cache_key

        def launch(*args, **meta):
            _, specialization, options = self.binder(*args, **meta, debug=False)
            self.last = (self.name, compute_cache_key({}, specialization, options))

        return launch


def _jit_key_sweep() -> None:
    sys.path.insert(0, str(ROOT))
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    from sglang_asd.verify import triton_verify as tv
    from sglang_asd.verify.variants import example_call

    backend = make_backend(GPUTarget("cuda", 90, 32))
    kernels = {"vocab": _JitKeys(tv.row_argmax_partials_kernel, backend), "select": _JitKeys(tv.asd_select_kernel, backend)}
    tv.row_argmax_partials_kernel, tv.asd_select_kernel = kernels["vocab"], kernels["select"]
    tv._sm_count = lambda device: 132  # an H100's split choices, which change with bs

    def jit_keys(args, kwargs):
        for k in kernels.values():
            k.last = None
        tv.asd_verify_triton(*args, **kwargs)
        return frozenset(k.last for k in kernels.values() if k.last is not None)

    dtypes = ("bfloat16", "float32")
    for server, V in itertools.product(SERVERS, (32000, 32003)):
        shapes = verify_shapes(**server)
        ours = enumerate_specializations(shapes, V, dtypes)
        after_warmup = {key: jit_keys(*example_call(key, V, "cpu")) for key in ours}  # warmup's launches
        compiled = frozenset().union(*after_warmup.values())
        n_select = len({k for k in compiled if k[0] == "asd_select_kernel"})
        n_vocab = len({k for k in compiled if k[0] == "row_argmax_partials_kernel"})
        assert (n_select, n_vocab) == (2 * len(shapes) * len(dtypes), len(dtypes)), (n_select, n_vocab)

        logits_buffers = {d: torch.empty((MAX_BS * 16, V), dtype=getattr(torch, d)) for d in dtypes}
        index_dtypes = itertools.cycle([torch.int64, torch.int32])
        calls = 0
        for bs, (W, K), stop_width, tp, dtype in itertools.product(range(1, MAX_BS + 1), shapes, (None, 1, 5),
                                                                   (False, True), dtypes):
            ix = next(index_dtypes)  # the wrapper casts index and ledger tensors: no variant
            logits = logits_buffers[dtype][: bs * W]
            kwargs = {"stop_tokens": None if stop_width is None else torch.full((bs, stop_width), -1, dtype=ix)}
            if tp:
                kwargs["target_predict"] = torch.zeros((bs, W), dtype=ix)
            args = (torch.zeros((bs, W), dtype=ix), logits, torch.full((bs, W), -1, dtype=ix),
                    torch.full((bs, W), -1, dtype=ix), torch.ones(bs, dtype=torch.float64), torch.ones(bs),
                    torch.ones(bs, dtype=ix), K)
            got = jit_keys(args, kwargs)
            key = key_of_call(args[0], logits, K, kwargs["stop_tokens"], kwargs.get("target_predict"))
            assert key in ours and got == after_warmup[key], (bs, W, K, stop_width, tp, dtype, key)
            calls += 1
        print(f"ok V={V} {server}: {calls} calls, {n_select} selection + {n_vocab} vocabulary variants, none new")

    # The one address specialization: unaligned logits are a variant of their own, and its key says so.
    key = specialization_key(4, 4, 3, 32000, 0, "float32", False, logits_aligned=False)
    args, kwargs = example_call(key, 32000, "cpu")
    assert key_of_call(args[0], args[1], 3) == key and args[1].data_ptr() % 16 != 0
    new = jit_keys(args, kwargs) - jit_keys(*example_call(key._replace(logits_aligned=True), 32000, "cpu"))
    assert [name for name, _ in new] == ["row_argmax_partials_kernel"], new
    print("ok unaligned logits: one more vocabulary variant, named by logits_aligned=False")


if __name__ == "__main__":
    _jit_key_sweep()
