"""One linear layer's time by row count, float32 against torch's bf16 kernel, on this CPU.

``python scripts/lab/gemm_rows.py [--out 8960] [--in 1536] [--rows 1,2,5,8,40] [--threads 2]``

Median of 200 calls of ``torch.nn.functional.linear`` on random weights, after 5 warm-up calls:
``float32`` (what the float32-accumulate CPU path runs: ``cpu_backend/seams/cpu_paths.py``) and
``bf16`` (torch's own kernel, ``SGLANG_ASD_CPU_GEMM=native``), in milliseconds.
"""

from __future__ import annotations

import argparse
import time

import torch


def median_ms(fn, calls: int = 200) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[calls // 2] * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=int, default=8960)
    p.add_argument("--in", dest="inp", type=int, default=1536)
    p.add_argument("--rows", default="1,2,5,8,40")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    w = torch.randn(args.out, args.inp)
    wb = w.bfloat16()
    print(f"| rows | float32 ms | bf16 ms | ({args.out} x {args.inp}, {args.threads} threads) |\n| ---: | ---: | ---: | |")
    for m in (int(r) for r in args.rows.split(",")):
        x = torch.randn(m, args.inp)
        xb = x.bfloat16()
        f32 = median_ms(lambda: torch.nn.functional.linear(x, w))
        bf16 = median_ms(lambda: torch.nn.functional.linear(xb, wb))
        print(f"| {m} | {f32:.2f} | {bf16:.2f} | |")


if __name__ == "__main__":
    main()
