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
    assert p.stdout.count("ok ") == 4, p.stdout


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
        # what the JIT specializes at launch: stride 1 -> constexpr, 16-divisible ints and pointers
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

    vocab = build(k.row_argmax_partials_kernel,
                  {"logits_ptr": "*bf16", "stride_row": "i32", "part_max_ptr": "*fp32", "part_idx_ptr": "*i32",
                   "V": "i32", "chunk": "i32"},
                  {"stride_col": 1, "SPLIT": 8, "BLOCK_V": 2048}, 8,
                  aligned=("logits_ptr", "stride_row", "part_max_ptr", "part_idx_ptr", "V", "chunk"))
    assert "ld.global.v4.b32" in vocab, "the vocabulary pass does not load 16 bytes per access"
    print("ok vocab pass bf16")

    sig = {n: "*i64" for n in ("cand_ptr", "next_token_ptr", "next_sibling_ptr", "tp_ptr", "stop_ptr", "ttok_ptr")}
    sig.update({n: "*i32" for n in ("part_idx_ptr", "cap_ptr", "predict_ptr", "accept_ptr", "ncd_ptr", "nexc_ptr",
                                    "nsuf_ptr")})
    sig.update({n: "*fp32" for n in ("part_max_ptr", "remaining_ptr", "gate_ptr", "spent_ptr", "ereg_ptr")})
    sig.update({"logits_ptr": "*bf16", "stride_row": "i32", "stride_col": "i32", "V": "i32", "T": "i32",
                "emask_ptr": "*i1"})
    for W, K, tp, warps in ((4, 3, False, 1), (16, 5, True, 1), (64, 8, False, 4)):
        BW = triton.next_power_of_2(W)
        build(k.asd_select_kernel, sig,
              {"W": W, "K": K, "SPLIT": 1 if tp else 8, "HAS_TP": tp, "HAS_STOP": True, "BW": BW,
               "BS": triton.next_power_of_2(K + 1), "BSPLIT": 1 if tp else 8, "BT": 4}, warps)
        print(f"ok selection W={W} K={K} target_predict={tp}")


if __name__ == "__main__":
    _compile_all()
