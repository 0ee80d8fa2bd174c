"""One paged attention call's time, the stand-in's two kernels, at the Qwen pair's shapes on this CPU.

``python scripts/lab/attention_kernels.py [--threads 2] [--calls 100]``

Calls the registered ops' implementations (``cpu_backend/attention_ops.py``) on a bf16 pool with
``attention_core.FUSED`` set each way: ``reference`` (every step in float32) and ``fused`` (torch's
``scaled_dot_product_attention`` over the pool's dtype; ``SGLANG_ASD_CPU_ATTENTION``). Shapes: the
target (Qwen2.5-Coder-1.5B: 12 query heads, 2 KV heads, 128 dims) in a decode step and in a 5-token
verify, the draft (0.5B: 14 heads, 2 KV heads, 64 dims) in a decode step, at one request and at 24
(the audits' concurrency), each request holding ``--context`` tokens. Median milliseconds per call
after 5 warm-up calls, and the largest difference between the two kernels' outputs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # gemm_rows.py beside it; the package of this checkout

from gemm_rows import median_ms  # noqa: E402

from sglang_asd.cpu_backend import attention_core  # noqa: E402
from sglang_asd.cpu_backend import attention_ops as ops  # noqa: E402

SHAPES = {  # name -> (query heads, KV heads, head dim, new tokens per request)
    "target decode": (12, 2, 128, 1),
    "target verify (5 tokens)": (12, 2, 128, 5),
    "draft decode": (14, 2, 64, 1),
}


def one_call(h: int, hkv: int, d: int, m: int, bs: int, context: int):
    """A closure running one decode (m = 1) or extend call over ``bs`` requests of ``context`` cached tokens."""
    gen = torch.Generator().manual_seed(0)
    width = context + m
    k_buf = torch.randn(bs * width + 1, hkv, d, generator=gen).to(torch.bfloat16)
    v_buf = torch.randn(bs * width + 1, hkv, d, generator=gen).to(torch.bfloat16)
    table = (torch.randperm(bs * width, generator=gen) + 1).view(bs, width).to(torch.int32)
    rows, seq = torch.arange(bs), torch.full((bs,), width)
    q = torch.randn(bs * m, h, d, generator=gen).to(torch.bfloat16)
    out = torch.empty_like(q)
    if m == 1:
        def call():
            ops.decode_attention_cpu(q, k_buf, v_buf, 1.0, 1.0, out, None, None, None, torch.empty(0), table, rows,
                                     seq, d**-0.5, 0.0, False, 0, None, None)  # fmt: skip
            return out
    else:
        ext = torch.full((bs,), m)

        def call():
            ops.extend_attention_cpu(q, None, None, out, k_buf, v_buf, 1.0, 1.0, table, rows, seq, ext,
                                     torch.arange(bs) * m, m, d**-0.5, 0.0, False, 0, None, None, None, True)  # fmt: skip
            return out
    return call


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--context", type=int, default=400, help="cached tokens per request")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"| call | requests | reference ms | fused ms | reference / fused | max abs difference |\n"
          f"| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, (h, hkv, d, m) in SHAPES.items():
        for bs in (1, 24):
            call = one_call(h, hkv, d, m, bs, args.context)
            ms, outs = {}, {}
            for kernel in ("reference", "fused"):
                attention_core.FUSED = kernel == "fused"
                outs[kernel] = call().float().clone()
                ms[kernel] = median_ms(call, args.calls)
            diff = (outs["reference"] - outs["fused"]).abs().max().item()
            print(f"| {name} | {bs} | {ms['reference']:.3f} | {ms['fused']:.3f} | "
                  f"{ms['reference'] / ms['fused']:.2f} | {diff:.1e} |")
    print(f"\n({args.context} cached tokens per request, {args.threads} threads, median of {args.calls} calls)")


if __name__ == "__main__":
    main()
