"""Compile the fused sampled verify's kernels for Hopper (sm_90a) on a machine without a GPU.

The interpreter runs the kernels as numpy and misses what only the compiler checks (loop-carried
values changing type, scalar/vector mixes, float64 scans); ``triton.compile`` with an explicit
target needs no GPU and Triton ships ``ptxas``, which also reports spills (a few bytes of
the walk's scalar state at most, ``MAX_SPILL``). The signatures are
what the wrapper launches (every runtime int ``i32``, no alignment specialization). Runs in a
subprocess: the kernels must be decorated with the interpreter off.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
WIDTHS = (1, 16, 32, 64)
MAX_SPILL = 16  # bytes: ptxas spills a scalar or two of the walk's loop state (L1-resident), never a tile


def test_sampled_kernels_compile_for_sm90_without_spills():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stdout.count("ok ") == 2 * len(WIDTHS) + 1, p.stdout


def _compile_all() -> None:
    import re
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sys.path.insert(0, str(ROOT))
    from sglang_asd.verify import triton_sampled_kernels as k
    from sglang_asd.verify.triton_sampled_verify import block_v_for, select_warps

    ptxas = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    target = GPUTarget("cuda", 90, 32)

    def build(fn, sig, consts, num_warps, **options):
        src = ASTSource(fn, signature={**sig, **{c: "constexpr" for c in consts}}, constexprs=consts)
        ptx = triton.compile(src, target=target, options={"num_warps": num_warps, **options}).asm["ptx"]
        with tempfile.TemporaryDirectory() as d:
            (pathlib.Path(d) / "k.ptx").write_text(ptx)
            r = subprocess.run([str(ptxas), "-v", "--gpu-name", "sm_90a", "k.ptx", "-o", "k.cubin"], cwd=d,
                               capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
        regs = re.findall(r"Used (\d+) registers", r.stderr)
        assert spills and all(int(a) <= MAX_SPILL and int(b) <= MAX_SPILL for a, b in spills), r.stderr[-600:]
        return regs, spills

    q_sig = {"candidates_ptr": "*i64", "next_token_ptr": "*i64", "next_sibling_ptr": "*i64", "probs_ptr": "*fp32",
             "stride_b": "i32", "stride_n": "i32", "q_ptr": "*fp32", "W": "i32", "V": "i32"}
    walk_sig = {n: "*i64" for n in ("candidates_ptr", "retrieve_index_ptr", "next_token_ptr", "next_sibling_ptr",
                                    "stop_tokens_ptr", "relaxed_token_ptr")}
    walk_sig.update({n: "*i32" for n in ("predicts_ptr", "accept_index_ptr", "accept_num_ptr", "cap_ptr",
                                         "num_relaxed_ptr")})
    walk_sig.update({n: "*fp32" for n in ("coins_ptr", "final_coins_ptr", "probs_ptr", "q_ptr", "power_ptr",
                                          "remaining_ptr",
                                          "floor_ptr", "spent_ptr", "relaxed_q_ptr", "relaxed_a_ptr",
                                          "relaxed_charge_ptr")})
    walk_sig.update({n: "*fp64" for n in ("q64_ptr", "a64_ptr", "charge64_ptr")})
    walk_sig.update({n: "*i1" for n in ("relaxed_ptr", "relaxed_accepted_ptr")})
    walk_sig.update({n: "i32" for n in ("stride_b", "stride_n", "T", "siblings", "W", "K", "V")})
    walk_sig.update({"threshold_single": "fp32", "threshold_acc": "fp32"})
    walk_sig = {n: walk_sig[n] for n in k.sampled_walk_kernel.arg_names if n in walk_sig}
    for W in WIDTHS:
        W_PAD = triton.next_power_of_2(W)
        regs = build(k.sampled_node_q_kernel, q_sig, {"W_PAD": W_PAD}, select_warps(W_PAD))
        print(f"ok node q W_PAD={W_PAD} registers, spills {regs}")
        block_v = int(os.environ.get("SWEEP_BLOCK_V", 0)) or block_v_for(W_PAD)
        warps = int(os.environ.get("SWEEP_WARPS", 0)) or select_warps(W_PAD)
        for in_kernel in (False, True) if W == 64 else (False,):  # the charges in the kernel (libdevice)
            regs = build(k.sampled_walk_kernel, walk_sig,
                         {"W_PAD": W_PAD, "BLOCK_V": block_v, "CHARGES_IN_KERNEL": in_kernel}, warps,
                         enable_fp_fusion=False)
            print(f"ok walk W_PAD={W_PAD} BLOCK_V={block_v} warps {warps} charges_in_kernel={in_kernel} "
                  f"registers, spills {regs}")


if __name__ == "__main__":
    _compile_all()
