"""Compile the verify kernels for Hopper (sm_90a) on a machine without a GPU.

The interpreter runs the kernels as numpy and misses what only the compiler checks (globals
that are not constexpr, loop-carried values changing shape, ops without broadcasting).
``triton.compile`` with an explicit target needs no GPU, and Triton ships ``ptxas``, so this
also checks the facts the speed rests on: the vocabulary pass loads 16 bytes per access and
nothing spills. Runs in a subprocess: the kernels must be decorated with the interpreter off.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_kernels_compile_for_sm90_without_spills():
    if importlib.util.find_spec("triton") is None:  # not imported here: see test_triton_parity.py
        pytest.skip("triton is not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.count("ok ") == 5, p.stdout


def _compile_all() -> None:
    import re
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sys.path.insert(0, str(ROOT))
    from sglang_asd.verify import triton_kernels as k

    ptxas = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    target = GPUTarget("cuda", 90, 32)

    def build(fn, sig, consts, num_warps, aligned=()):
        # ``aligned``: arguments the JIT marks 16-divisible at launch
        attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
        src = ASTSource(fn, signature={**sig, **{c: "constexpr" for c in consts}}, constexprs=consts, attrs=attrs)
        ptx = triton.compile(src, target=target, options={"num_warps": num_warps}).asm["ptx"]
        with tempfile.TemporaryDirectory() as d:
            (pathlib.Path(d) / "k.ptx").write_text(ptx)
            r = subprocess.run([str(ptxas), "-v", "--gpu-name", "sm_90a", "k.ptx", "-o", "k.cubin"], cwd=d,
                               capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
        assert spills and all(s == ("0", "0") for s in spills), r.stderr
        return ptx

    # What the JIT passes at launch: the logits pointer's 16-byte alignment is the one value
    # specialization left (variants.py); every other runtime int is do_not_specialize.
    vocab_sig = {"logits_ptr": "*bf16", "row_stride_units": "i32", "part_max_ptr": "*fp32", "part_idx_ptr": "*i32",
                 "V_units": "i32", "split": "i32", "tiles_per_slice": "i32"}
    vocab = build(k.row_argmax_partials_kernel, vocab_sig, {"BLOCK_V": 2048, "UNIT": 16}, 8, aligned=("logits_ptr",))
    assert "ld.global.v4.b32" in vocab, "the vocabulary pass does not load 16 bytes per access"
    print("ok vocab pass bf16")

    sig = {n: "*i64" for n in ("candidates_ptr", "next_token_ptr", "next_sibling_ptr", "target_predict_ptr",
                               "stop_tokens_ptr", "target_token_ptr")}
    sig.update({n: "*i32" for n in ("part_idx_ptr", "cap_ptr", "predict_ptr", "accept_index_ptr",
                                    "num_correct_drafts_ptr", "num_exceptions_ptr", "num_suffix_tokens_ptr")})
    sig.update({n: "*fp32" for n in ("part_max_ptr", "remaining_ptr", "gate_ptr", "spent_ptr", "exception_regret_ptr")})
    sig.update({"logits_ptr": "*bf16", "stride_row": "i32", "V": "i32", "split": "i32", "T": "i32", "tree_depth_gate": "i32",
                "exception_mask_ptr": "*i1"})
    for W, K, tp, warps in ((1, 0, True, 1), (4, 3, False, 1), (16, 5, True, 1), (64, 8, False, 4)):
        W_PAD = triton.next_power_of_2(W)
        build(k.asd_select_kernel, sig,
              {"W": W, "K": K, "HAS_TARGET_PREDICT": tp, "W_PAD": W_PAD, "S_PAD": triton.next_power_of_2(K + 1)},
              warps)
        print(f"ok selection W={W} K={K} target_predict={tp}")


if __name__ == "__main__":
    _compile_all()
