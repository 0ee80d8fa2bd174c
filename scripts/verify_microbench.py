"""Microbenchmark: ASD verify vs strict greedy verify on identical inputs.

Both arms take the same final logits and draft tree and do one argmax pass over the
vocabulary; the rest is O(bs * W) work. The strict arm is ``sglang_asd.testing.strict_verify``,
a torch re-implementation of SGLang's greedy verify (argmax + tree walk): SGLang's own
``verify_tree_greedy_func`` needs ``sgl_kernel``, which is not installed in this venv.

    .venv/bin/python scripts/verify_microbench.py --out out/verify_bench.json          # reduced grid
    .venv/bin/python scripts/verify_microbench.py --grid full --out out/verify_full.json
    .venv/bin/python scripts/verify_microbench.py --rules --out out/verify_rules.json      # + the rules' torch path

Writes ``--out`` (JSON: environment + one record per case) and the same stem with ``.md``
(a markdown table). Runs on CPU, and on CUDA too when available (``--devices``).
Time per case: median over ``--repeats`` calls per arm, the arms interleaved.

``--sampled`` adds the sampled verifier (``asd-sampled``): the launch budget of one call, the
greedy and sampled paths, torch and fused (aten ops and Triton launches, counted on the CPU by
``sglang_asd.testing.launches``; the fused kernels run under Triton's interpreter here, which gives
their counts, never a speed), and the CPU time of the torch sampled verifier at bs 1/16/64,
chains and EAGLE trees. ``make bench-verify`` passes it.

``--rules`` adds the torch verifier with a per-row rule (issue 13), in the seam's case (SGLang's
argmax given): every row ``threshold`` (rule gathers, no extra pass), every row ``margin`` (plus
one top-2 pass over the vocabulary) and a mix of all four rules, against the asd-only call. On
CUDA these rows take the torch verifier instead of the fused kernel (``verify/dispatch.py``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import platform
import statistics
import time

import sys

import torch

if "--sampled" in sys.argv and not torch.cuda.is_available() and "triton" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the fused kernels' launch counts on a CPU host

from sglang_asd.testing import make_round, strict_verify
from sglang_asd.verify import asd_verify

GRIDS = {
    # (bs, W) pairs x V x shape; "reduced": a small grid for CPU hosts; "full": every (bs, W) pair.
    "reduced": dict(bs_w=[(1, 4), (1, 6), (8, 6), (64, 6), (64, 16)], V=[32000, 152064]),
    "full": dict(bs_w=list(itertools.product([1, 8, 32, 64], [4, 6, 8, 16])), V=[32000, 152064]),
}


def tree_shape(W: int):
    """(K, topk) of the EAGLE topk tree used for W nodes (chains use K = W - 1, topk = 1)."""
    return max(2, min(5, W // 2)), (2 if W <= 8 else 4)


def make_inputs(bs: int, W: int, V: int, shape: str, device: str, seed: int = 0):
    """One round from ``sglang_asd.testing.make_round``: N(0, 9) logits, planted drafts, every row
    budget 8, gate 0.25, cap 2, three stop-token slots."""
    K, topk = (W - 1, 1) if shape == "chain" else tree_shape(W)
    rnd = make_round(seed=seed, bs=bs, W=W, K=K, V=V, shape="chain" if shape == "chain" else "eagle", topk=topk,
                     logits="normal", rows="asd", device=device)
    args, kwargs = rnd.args()
    names = ("candidates", "logits", "retrieve_next_token", "retrieve_next_sibling", "remaining", "gate", "cap", "depth")
    return dict(zip(names, args), **kwargs)


def run_asd(x):
    return asd_verify(**x)


def run_strict(x):
    return strict_verify(x["candidates"], x["logits"], x["retrieve_next_token"], x["retrieve_next_sibling"], x["depth"],
                         target_predict=x.get("target_predict"))


RULE_ARMS = {"threshold_post": ["threshold"], "margin_post": ["margin"],
             "mixed_post": ["asd", "local", "margin", "threshold"]}


def rule_inputs(given: dict, rules: list) -> dict:
    """``given`` with each row under one of ``rules`` (cycled; rule ids as ``verify.rules.RULE_ID``)."""
    from sglang_asd.verify.rules import RULE_ID

    bs = given["candidates"].shape[0]
    rule = torch.tensor([RULE_ID[rules[b % len(rules)]] for b in range(bs)], dtype=torch.int32,
                        device=given["candidates"].device)
    return dict(given, rule=rule, rules_present=frozenset(rules))


def time_arms(x, repeats: int, device: str, rules: bool = False):
    """Median and min seconds per call of each arm: full verify, and the part after the argmax
    (both arms given ``target_predict``: the O(bs * W) decision work alone); with ``rules``, the
    rule arms (``RULE_ARMS``, after the argmax too)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    given = dict(x, target_predict=x["logits"].argmax(-1).view(x["candidates"].shape))
    arms = {"asd": run_asd, "strict": run_strict,
            "asd_post": lambda _: run_asd(given), "strict_post": lambda _: run_strict(given)}
    if rules:
        from sglang_asd.verify.torch_verify import asd_verify_torch as torch_verify

        for name, names in RULE_ARMS.items():
            arms[name] = lambda _, y=rule_inputs(given, names): torch_verify(**y)
    times = {name: [] for name in arms}
    for _ in range(3):  # warm-up
        for fn in arms.values():
            fn(x)
    for _ in range(repeats):
        for name, fn in arms.items():
            sync()
            t0 = time.perf_counter()
            fn(x)
            sync()
            times[name].append(time.perf_counter() - t0)
    return ({name: statistics.median(v) for name, v in times.items()},
            {name: min(v) for name, v in times.items()})


# (name, tree, W, K, topk): the launch-count and sampled timing shapes
SAMPLED_SHAPES = [("chain4", False, 5, 4, 1), ("chain8", False, 9, 8, 1), ("chain16", False, 17, 16, 1),
                  ("tree8", True, 8, 4, 2), ("tree16", True, 16, 5, 4)]


def launch_counts(device: str) -> list:
    """One record per (path, shape, bs): aten ops by kind, Triton launches, GPU launches."""
    from sglang_asd.testing.launches import count_call
    from sglang_asd.testing.sampled import sampled_round
    from sglang_asd.verify import sampled_verify, triton_sampled_verify as tsv, triton_verify as tv
    from sglang_asd.verify.torch_verify import asd_verify_torch

    sampled_kernels = [(tsv, "sampled_node_q_kernel"), (tsv, "sampled_walk_kernel")]
    greedy_kernels = [(tv, "row_argmax_partials_kernel"), (tv, "asd_select_kernel")]
    records = []
    for (name, tree, W, K, topk), bs in itertools.product(SAMPLED_SHAPES, (1, 16)):
        rnd = sampled_round(bs, W, K, 64, tree, device=device, topk=topk)
        greedy = make_round(seed=K, bs=bs, W=W, K=K, V=64, shape="eagle" if tree else "chain", topk=topk,
                            logits="normal", rows="asd", device=device)
        args, kwargs = greedy.args(target_predict=True)
        arms = {
            "sampled_torch": (lambda b=rnd.buffers(): sampled_verify.asd_sampled_verify(*b, *rnd.inputs()), []),
            "sampled_fused": (lambda b=rnd.buffers(): tsv.asd_sampled_verify_triton(*b, *rnd.inputs()),
                              sampled_kernels),
            "greedy_torch": (lambda: asd_verify_torch(*args, **kwargs), []),
            "greedy_fused": (lambda: tv.asd_verify_triton(*args, **kwargs), greedy_kernels),
        }
        for path, (fn, kernels) in arms.items():
            c = count_call(fn, kernels)
            records.append(dict(path=path, shape=name, W=W, K=K, bs=bs, aten_compute=c.compute, aten_views=c.views,
                                aten_allocations=c.allocations, triton=c.triton, gpu_launches=c.gpu_launches))
            print(f"launches {path:13} {name:7} bs={bs:<3} gpu launches {c.gpu_launches:5} "
                  f"(aten compute {c.compute}, triton {c.triton}; views {c.views}, allocations {c.allocations})",
                  flush=True)
    return records


def sampled_timings(V_list, repeats: int, device: str) -> list:
    """CPU (or CUDA) time of the torch sampled verifier, median of ``repeats`` calls."""
    from sglang_asd.testing.sampled import sampled_round
    from sglang_asd.verify.sampled_verify import asd_sampled_verify

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    records = []
    for V, (name, tree, W, K, topk), bs in itertools.product(V_list, SAMPLED_SHAPES, (1, 16, 64)):
        rnd = sampled_round(bs, W, K, V, tree, device=device, topk=topk)
        buffers = [rnd.buffers() for _ in range(repeats + 2)]
        times = []
        for i, b in enumerate(buffers):
            sync()
            t0 = time.perf_counter()
            asd_sampled_verify(*b, *rnd.inputs())
            sync()
            if i >= 2:  # two warm-up calls
                times.append(time.perf_counter() - t0)
        rec = dict(device=device, shape=name, W=W, K=K, bs=bs, V=V, sampled_torch_us=statistics.median(times) * 1e6)
        records.append(rec)
        print(f"{device:4} sampled torch {name:7} bs={bs:<3} V={V:<6} {rec['sampled_torch_us']:9.0f} us", flush=True)
        del rnd, buffers
    return records


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON path; the markdown table goes next to it (.md)")
    parser.add_argument("--grid", choices=sorted(GRIDS), default="reduced")
    parser.add_argument("--shapes", default="chain,tree")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--devices", default="auto", help="comma list of cpu,cuda; auto = cpu (+ cuda if present)")
    parser.add_argument("--rules", action="store_true", help="also time the torch verifier with per-row rules")
    parser.add_argument("--sampled", action="store_true",
                        help="also count every path's launches and time the torch sampled verifier")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else []) if args.devices == "auto" else args.devices.split(",")
    grid = GRIDS[args.grid]
    records = []
    for device, V, (bs, W), shape in itertools.product(devices, grid["V"], grid["bs_w"], args.shapes.split(",")):
        x = make_inputs(bs, W, V, shape, device)
        med, best = time_arms(x, args.repeats, device, rules=args.rules)
        asd_tokens = int((run_asd(x).num_correct_drafts + 1).sum())
        strict_tokens = int((run_strict(x)[2] + 1).sum())
        rec = dict(device=device, shape=shape, bs=bs, W=W, K=x["depth"], V=V,
                   strict_us=med["strict"] * 1e6, asd_us=med["asd"] * 1e6, ratio=med["asd"] / med["strict"],
                   strict_min_us=best["strict"] * 1e6, asd_min_us=best["asd"] * 1e6,
                   ratio_min=best["asd"] / best["strict"],
                   strict_post_argmax_us=med["strict_post"] * 1e6, asd_post_argmax_us=med["asd_post"] * 1e6,
                   strict_tokens=strict_tokens, asd_tokens=asd_tokens,
                   strict_us_per_token=med["strict"] * 1e6 / strict_tokens,
                   asd_us_per_token=med["asd"] * 1e6 / asd_tokens)
        for name in RULE_ARMS if args.rules else ():
            rec[f"{name}_us"] = med[name] * 1e6
            rec[f"{name}_vs_asd_post"] = med[name] / med["asd_post"]
        records.append(rec)
        print(f"{device:4} {shape:5} bs={bs:<3} W={W:<3} V={V:<6} strict {rec['strict_us']:9.0f} us  "
              f"asd {rec['asd_us']:9.0f} us  ratio {rec['ratio']:.3f} (min: {rec['ratio_min']:.3f})", flush=True)
        del x

    launches, sampled = [], []
    if args.sampled:
        launches = launch_counts("cuda" if "cuda" in devices else "cpu")
        for device in devices:
            sampled += sampled_timings(grid["V"], max(3, args.repeats // 3), device)
    env = dict(torch=torch.__version__, python=platform.python_version(), machine=platform.machine(),
               cpus=os.cpu_count(), load_average=[round(x, 2) for x in os.getloadavg()],
               threads=args.threads, repeats=args.repeats, grid=args.grid,
               cuda=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
               strict_impl="sglang_asd.testing.strict_verify (torch; sgl_kernel not installed)")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(env=env, records=records, launches=launches, sampled=sampled), indent=2))
    out.with_suffix(".md").write_text(markdown(env, records) + sampled_markdown(launches, sampled))
    print(f"wrote {out} and {out.with_suffix('.md')}")


def markdown(env, records) -> str:
    lines = [
        f"torch {env['torch']}, {env['machine']}, {env['cpus']} CPUs (load average at the end "
        f"{env['load_average']}), {env['threads']} threads, median (and min) of "
        f"{env['repeats']} interleaved calls per arm; strict arm: {env['strict_impl']}",
        "",
        "Post-argmax: both arms given target_predict, i.e. the decision work alone.",
        "",
        "| device | shape | bs | W | K | V | strict us | ASD us | ASD/strict | ASD/strict (min) "
        "| strict us/tok | ASD us/tok | strict post-argmax us | ASD post-argmax us |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rule_lines = []
    if "margin_post_us" in records[0]:
        rule_lines = ["", "Rules (issue 13; argmax given, the seam's case): the torch verifier with a per-row rule, "
                      "us and ratio to the asd-only post-argmax call.", "",
                      "| device | shape | bs | W | V | asd post us | threshold us | margin us | mixed us | "
                      "threshold/asd | margin/asd | mixed/asd |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        rule_lines += [f"| {r['device']} | {r['shape']} | {r['bs']} | {r['W']} | {r['V']} | {r['asd_post_argmax_us']:.0f} | "
                       f"{r['threshold_post_us']:.0f} | {r['margin_post_us']:.0f} | {r['mixed_post_us']:.0f} | "
                       f"{r['threshold_post_vs_asd_post']:.2f} | {r['margin_post_vs_asd_post']:.2f} | "
                       f"{r['mixed_post_vs_asd_post']:.2f} |" for r in records]
    for r in records:
        lines.append(
            f"| {r['device']} | {r['shape']} | {r['bs']} | {r['W']} | {r['K']} | {r['V']} | {r['strict_us']:.0f} | "
            f"{r['asd_us']:.0f} | {r['ratio']:.3f} | {r['ratio_min']:.3f} | {r['strict_us_per_token']:.1f} | "
            f"{r['asd_us_per_token']:.1f} | {r['strict_post_argmax_us']:.0f} | {r['asd_post_argmax_us']:.0f} |"
        )
    return "\n".join(lines + rule_lines) + "\n"


def sampled_markdown(launches, sampled) -> str:
    if not launches and not sampled:
        return ""
    lines = ["", "Launch budget of one verify call (GPU launches = aten ops that compute + Triton launches; "
             "counted on the CPU, the fused kernels under Triton's interpreter):", "",
             "| shape | W | K | bs | sampled torch | sampled fused | greedy torch | greedy fused |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    by_case = {}
    for r in launches:
        by_case.setdefault((r["shape"], r["W"], r["K"], r["bs"]), {})[r["path"]] = r["gpu_launches"]
    for (shape, W, K, bs), c in by_case.items():
        lines.append(f"| {shape} | {W} | {K} | {bs} | {c['sampled_torch']} | {c['sampled_fused']} | "
                     f"{c['greedy_torch']} | {c['greedy_fused']} |")
    if sampled:
        lines += ["", "Torch sampled verifier, median time per call:", "", "| device | shape | W | K | bs | V | us |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['device']} | {r['shape']} | {r['W']} | {r['K']} | {r['bs']} | {r['V']} | "
                  f"{r['sampled_torch_us']:.0f} |" for r in sampled]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
