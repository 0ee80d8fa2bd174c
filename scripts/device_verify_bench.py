#!/usr/bin/env python3
"""Device check of the fused ASD verify: parity, CUDA-graph and no-sync safety, timing.

For a GPU machine with torch + triton and NO sglang (and no install of this repo): run from the
checkout, it imports ``sglang_asd.verify`` and ``sglang_asd.testing`` by path.

    python scripts/device_verify_bench.py --out $OUT/verify_h200.json         # H200, < 8 minutes
    python scripts/device_verify_bench.py --dry-run --out /tmp/verify_dry.json  # CPU, tiny, interpreter

1. parity: ``asd_verify_triton`` vs the torch reference, ``torch.equal`` on every output, at the
   timing sizes (bf16, V 128k-152k, with and without ``target_predict``) and on corner-case rounds
   (ties, -inf, NaN rows, stop tokens, budget 0, depth 0; bf16/fp16/fp32; forced vocabulary splits).
2. safety: no host sync (``torch.cuda.set_sync_debug_mode("error")``); captured in a CUDA graph
   and replayed on new inputs it equals eager, and it never writes its inputs.
3. timing: per (bs, W, V) the arms below, interleaved, medians of CUDA-event times, eager and
   CUDA-graph replay (what SGLang's decode runs):
     strict        ``strict_verify``: argmax + tree walk in torch (SGLang's greedy verify)
     asd_triton    ``asd_verify_triton``: the fused kernel, its own vocabulary pass
     asd_select    ``asd_verify_triton`` given ``target_predict`` (the seam's case: SGLang already
                   has the argmax, so ASD adds only the selection kernel)
     asd_torch     the torch reference verifier
   ratio = asd_triton / strict; ms per output token = ms / (bs * mean accepted length + bs).
4. tuning: the vocabulary pass's tile and warps on the largest size.
5. sampled: the fused sampled verify (``asd_sampled_verify_triton``) against SGLang's target-only
   sampling kernel (``sgl_kernel.tree_speculative_sampling_target_only``; its torch stand-in port
   where ``sgl_kernel`` does not import, said in the report) and the torch sampled verifier, chains
   and EAGLE trees at bs 1/16/64, V 152k: parity with the torch verifier (``torch.equal``, every
   output), then eager and CUDA-graph times; goal ``asd_fused / sglang <= 1.10``. With
   ``sgl_kernel`` also the greedy pair, SGLang's ``verify_tree_greedy`` against ``asd_select``
   (both given the argmax), goal <= 1.05. The ratio is the kernel's, not the seam's: the seam
   today runs SGLang's kernel and then ASD's on the same step (docs/VERIFY_KERNEL.md). On CUDA
   also the arm ``asd_fused_k`` (the node charges in the kernel, ``charges_in_kernel=True``) and
   its parity, recorded apart (``sampled_charges_in_kernel_parity``): the evidence to turn
   ``triton_sampled_verify.CHARGES_IN_KERNEL`` on.
6. pytest on the device: tests/verify parity (greedy and sampled), dispatch and warmup.
Writes JSON to ``--out`` (also on failure), prints progress and a table; exit 1 on a parity or
safety failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = [  # (name, tree, W, K): chains, EAGLE topk-2 trees
    ("chain1", False, 1, 0),  # SGLang's adaptive zero-step verify
    ("chain4", False, 4, 3),
    ("chain8", False, 8, 7),
    ("tree8", True, 8, 4),
    ("tree16", True, 16, 5),
]
BATCHES = [1, 8, 32, 128, 256]
VOCABS = [151936, 128256]  # Qwen2/3, Llama 3


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON report path")
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes; CPU + Triton interpreter without CUDA")
    ap.add_argument("--budget-s", type=float, default=300.0, help="start no timing case after this many seconds")
    ap.add_argument("--deadline-s", type=float, default=450.0, help="the whole run ends by about this")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-pytest", action="store_true", help="skip the CUDA run of tests/verify parity tests")
    return ap.parse_args(argv)


ARGS = parse_args()
import torch  # noqa: E402

CUDA = torch.cuda.is_available()
if not CUDA:
    if not ARGS.dry_run:
        sys.exit("no CUDA device: run with --dry-run for the CPU path")
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import warnings

    warnings.filterwarnings("ignore", "invalid value encountered", RuntimeWarning)  # numpy's -inf - -inf
import triton  # noqa: E402

from sglang_asd.testing import make_round, strict_verify  # noqa: E402
from sglang_asd.verify import triton_verify as tv  # noqa: E402
from sglang_asd.verify.torch_verify import asd_verify_torch  # noqa: E402
from sglang_asd.testing.sampled import sampled_round  # noqa: E402
from sglang_asd.verify import triton_sampled_verify as tsv  # noqa: E402
from sglang_asd.verify.sampled_verify import asd_sampled_verify  # noqa: E402

DEVICE = "cuda" if CUDA else "cpu"
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:7.1f}s] {msg}", flush=True)


def mismatches(ref, out) -> list:
    bad = []
    for f in dataclasses.fields(ref):
        a, b = getattr(ref, f.name), getattr(out, f.name)
        if a is None or b is None:  # scope_skipped: None without a scope
            if a is not b:
                bad.append(f.name)
            continue
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            bad.append(f.name)
    return bad


def sync():
    if CUDA:
        torch.cuda.synchronize()


# ---------------------------------------------------------------- 1. parity
def parity_corner_cases(report):
    n_seeds = 2 if ARGS.dry_run else 12
    V = 64 if ARGS.dry_run else 1000
    bs = 3 if ARGS.dry_run else 64
    dtypes = [torch.float32] if ARGS.dry_run else [torch.float32, torch.bfloat16, torch.float16]
    for seed in range(n_seeds):
        name, tree, W, K = SHAPES[seed % len(SHAPES)]
        dtype = dtypes[seed % len(dtypes)]
        rnd = make_round(seed=1000 + seed, bs=bs, W=W, K=K, V=V, shape="random" if tree else "chain", logits="hard",
                         masked=0.1, orphans=0.05 * tree, too_deep=0.1, dtype=dtype, device=DEVICE)
        if seed % 6 == 5:
            rnd.remaining.zero_()  # budget 0 everywhere: strict
        for tp in (False, True):
            args, kwargs = rnd.args(target_predict=tp)
            ref = asd_verify_torch(*args, **kwargs)
            for split in ((None,) if tp else (None, 3, 8)):
                out = tv.asd_verify_triton(*args, **kwargs, split=split, block_v=256 if not ARGS.dry_run else 16)
                bad = mismatches(ref, out)
                report["parity"].append(dict(kind="corner", seed=seed, shape=name, bs=bs, V=V, dtype=str(dtype),
                                             target_predict=tp, split=split, ok=not bad, mismatched=bad))
                if bad:
                    log(f"PARITY FAIL corner seed={seed} {name} {dtype} tp={tp} split={split}: {bad}")
    ok = sum(p["ok"] for p in report["parity"])
    log(f"parity corner cases: {ok}/{len(report['parity'])} ok")


def parity_at_size(report, rnd, case):
    for tp in (False, True):
        args, kwargs = rnd.args(target_predict=tp)
        bad = mismatches(asd_verify_torch(*args, **kwargs), tv.asd_verify_triton(*args, **kwargs))
        report["parity"].append(dict(kind="size", **case, target_predict=tp, ok=not bad, mismatched=bad))
        if bad:
            log(f"PARITY FAIL {case} tp={tp}: {bad}")


# ---------------------------------------------------------------- 2. safety
def safety(report):
    name, tree, W, K = SHAPES[-1]
    bs, V = (2, 64) if ARGS.dry_run else (32, 151936)
    dtype = torch.float32 if ARGS.dry_run else torch.bfloat16
    first, second = (timing_round(seed, bs, W, K, V, tree, dtype) for seed in (1, 2))
    args, kwargs = first.args()
    res = {}
    if not CUDA:
        report["safety"] = {"skipped": "no CUDA"}
        return
    tv.asd_verify_triton(*args, **kwargs)  # compile outside the checks
    sync()
    try:
        torch.cuda.set_sync_debug_mode("error")
        tv.asd_verify_triton(*args, **kwargs)
        tv.asd_verify_triton(*args, **first.args(target_predict=True)[1])
        res["no_host_sync"] = True
    except RuntimeError as e:
        res["no_host_sync"] = False
        res["sync_error"] = str(e)[:500]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    # CUDA graph: capture on the first round's buffers, refill them with the second round, replay.
    static_in = [a for a in args if isinstance(a, torch.Tensor)] + [kwargs["stop_tokens"]]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        tv.asd_verify_triton(*args, **kwargs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = tv.asd_verify_triton(*args, **kwargs)
    args2, kwargs2 = second.args()
    for dst, src in zip(static_in, [a for a in args2 if isinstance(a, torch.Tensor)] + [kwargs2["stop_tokens"]]):
        dst.copy_(src)
    before = [t.clone() for t in static_in]
    graph.replay()
    sync()
    res["graph_replay_matches_reference"] = not mismatches(asd_verify_torch(*args2, **kwargs2), captured)
    res["inputs_untouched"] = all(torch.equal(a, b) for a, b in zip(before, static_in))  # no NaN in these rounds
    out_ptrs = {getattr(captured, f.name).data_ptr() for f in dataclasses.fields(captured)
                if getattr(captured, f.name) is not None}
    res["outputs_alias_no_input"] = not (out_ptrs & {t.data_ptr() for t in static_in})
    report["safety"] = res
    log(f"safety: {res}")
    del graph


# ---------------------------------------------------------------- 3. timing
def time_eager(arms, reps):
    for fn in arms.values():
        fn()
    sync()
    names, samples = list(arms), {n: [] for n in arms}
    if not CUDA:
        for i in range(reps):
            for n in (names if i % 2 == 0 else names[::-1]):
                t = time.perf_counter()
                arms[n]()
                samples[n].append((time.perf_counter() - t) * 1e3)
        return {n: statistics.median(v) for n, v in samples.items()}
    events = []
    for i in range(reps):
        for n in (names if i % 2 == 0 else names[::-1]):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            arms[n]()
            e.record()
            events.append((n, s, e))
    sync()
    for n, s, e in events:
        samples[n].append(s.elapsed_time(e))
    return {n: statistics.median(v) for n, v in samples.items()}


def time_graphs(arms, reps, inner=5):
    graphs = {}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in arms.values():
            fn()
    torch.cuda.current_stream().wait_stream(side)
    for n, fn in arms.items():
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        graphs[n] = g
    sync()
    names, samples, events = list(arms), {n: [] for n in arms}, []
    for i in range(reps):
        for n in (names if i % 2 == 0 else names[::-1]):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(inner):
                graphs[n].replay()
            e.record()
            events.append((n, s, e))
    sync()
    for n, s, e in events:
        samples[n].append(s.elapsed_time(e) / inner)
    del graphs
    return {n: statistics.median(v) for n, v in samples.items()}


def timing_round(seed, bs, W, K, V, tree, dtype):
    """A timing-size round: N(0, 9) logits drawn on the device, budget 8 / gate 0.25 / cap 2 rows."""
    return make_round(seed=seed, bs=bs, W=W, K=K, V=V, shape="eagle" if tree else "chain", topk=2, logits="normal",
                      rows="asd", dtype=dtype, device=DEVICE)


def timing_cases():
    if ARGS.dry_run:
        return [SHAPES[1] + (1, 64), SHAPES[-1] + (2, 64)]
    cases = []
    for V in VOCABS:  # the most telling sizes first, in case the budget runs out
        for bs in (BATCHES if V == VOCABS[0] else [1, 32, 256]):
            for name, tree, W, K in SHAPES:
                cases.append((name, tree, W, K, bs, V))
    return cases


def timing(report):
    for name, tree, W, K, bs, V in timing_cases():
        if time.perf_counter() - T0 > ARGS.budget_s:
            report["skipped"].append(dict(shape=name, bs=bs, V=V, reason="time budget"))
            continue
        try:
            timing_case(report, name, tree, W, K, bs, V)
        except Exception as e:  # one broken case must not cost the rest of the lease
            report["errors"].append(dict(shape=name, bs=bs, V=V, error=f"{type(e).__name__}: {e}"[:1000]))
            log(f"ERROR {name} bs={bs} V={V}: {type(e).__name__}: {e}")
        if CUDA:
            torch.cuda.empty_cache()


def timing_case(report, name, tree, W, K, bs, V):
    dtype = torch.float32 if ARGS.dry_run else torch.bfloat16
    reps = 2 if ARGS.dry_run else ARGS.reps
    case = dict(shape=name, tree=tree, bs=bs, W=W, K=K, V=V, dtype=str(dtype))
    rnd = timing_round(bs * 1000 + W, bs, W, K, V, tree, dtype)
    parity_at_size(report, rnd, case)
    args, kwargs = rnd.args()
    tp = rnd.logits.argmax(dim=-1).view(bs, W)
    links = rnd.strict_links()
    arms = {
        "strict": lambda: strict_verify(*links),
        "asd_triton": lambda: tv.asd_verify_triton(*args, **kwargs),
        "asd_select": lambda: tv.asd_verify_triton(*args, stop_tokens=rnd.stop_tokens, target_predict=tp),
        "asd_torch": lambda: asd_verify_torch(*args, **kwargs),
    }
    asd_out = tv.asd_verify_triton(*args, **kwargs)
    strict_out = strict_verify(*links)
    tok_asd = float((asd_out.num_correct_drafts.float() + 1).sum())
    tok_strict = float((strict_out[2].float() + 1).sum())
    rec = dict(case, split=tv.choose_split(bs * W, V, rnd.logits.device),
               tokens_per_round=dict(asd=tok_asd, strict=tok_strict),
               exceptions_per_round=float(asd_out.num_exceptions.sum()))
    rec["eager_ms"] = time_eager(arms, reps)
    if CUDA:
        try:
            rec["graph_ms"] = time_graphs(arms, reps)
        except Exception as e:  # report it and keep the eager numbers
            rec["graph_error"] = f"{type(e).__name__}: {e}"[:1000]
            log(f"graph capture failed: {rec['graph_error']}")
    key = "graph_ms" if "graph_ms" in rec else "eager_ms"
    ms = rec[key]
    rec["ratio_asd_triton_vs_strict"] = ms["asd_triton"] / ms["strict"]
    rec["ratio_asd_torch_vs_strict"] = ms["asd_torch"] / ms["strict"]
    rec["ms_per_output_token"] = {n: ms[n] / (tok_strict if n == "strict" else tok_asd) for n in ms}
    rec["vocab_pass_GBps"] = bs * W * V * rnd.logits.element_size() / (ms["asd_triton"] * 1e-3) / 1e9
    report["timing"].append(rec)
    log(f"{name:7s} bs={bs:3d} V={V:6d} {key} strict={ms['strict']:.4f} asd_triton={ms['asd_triton']:.4f} "
        f"asd_select={ms['asd_select']:.4f} asd_torch={ms['asd_torch']:.4f} ratio={rec['ratio_asd_triton_vs_strict']:.2f}")


# ---------------------------------------------------------------- 4. tuning
def tuning(report):
    if ARGS.dry_run:
        return
    if time.perf_counter() - T0 > ARGS.deadline_s - 110:
        report["skipped"].append(dict(section="tuning", reason="time budget"))
        return
    name, tree, W, K = SHAPES[-1]
    bs, V = 256, VOCABS[0]
    rnd = timing_round(7, bs, W, K, V, tree, torch.bfloat16)
    args, kwargs = rnd.args()
    ref = tv.asd_verify_triton(*args, **kwargs)
    arms = {}
    for block_v in (1024, 2048, 4096, 8192):
        for warps in (4, 8, 16):
            if block_v // (32 * warps) < 4:
                continue
            fn = (lambda b=block_v, w=warps: tv.asd_verify_triton(*args, **kwargs, block_v=b, vocab_warps=w))
            if mismatches(ref, fn()):
                report["parity"].append(dict(kind="tuning", block_v=block_v, warps=warps, ok=False))
            arms[f"block{block_v}_warps{warps}"] = fn
    report["tuning"] = dict(shape=name, bs=bs, V=V, graph_ms=time_graphs(arms, ARGS.reps))
    best = min(report["tuning"]["graph_ms"].items(), key=lambda kv: kv[1])
    log(f"tuning bs={bs} {name} V={V}: best {best[0]} {best[1]:.4f} ms (default block{tv.BLOCK_V}_warps{tv.VOCAB_WARPS})")


# ---------------------------------------------------------------- 5. sampled
SAMPLED_SHAPES = [("chain4", False, 4, 3), ("chain8", False, 8, 7), ("tree8", True, 8, 4), ("tree16", True, 16, 5)]
SAMPLED_BATCHES = [1, 16, 64]
SAMPLED_GOAL, GREEDY_GOAL = 1.10, 1.05
SAMPLED_FIELDS = ("spent", "num_relaxed", "relaxed", "relaxed_token", "relaxed_q", "relaxed_accept_prob",
                  "relaxed_charge", "relaxed_accepted")


def sglang_kernels():
    """(source, sampling, greedy): SGLang's sampling and greedy verify kernels from ``sgl_kernel``;
    without it the torch stand-in port of the sampling kernel and no greedy kernel."""
    try:
        import sgl_kernel

        return "sgl_kernel", sgl_kernel.tree_speculative_sampling_target_only, sgl_kernel.verify_tree_greedy
    except (ImportError, AttributeError):
        import importlib.util

        spec = importlib.util.spec_from_file_location("cuda_standin_ops", ROOT / "scripts/device/cuda_standin/ops.py")
        ops = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ops)
        return "standin (torch port; sgl_kernel not importable)", ops.tree_speculative_sampling_target_only, None


def sampled_cases():
    if ARGS.dry_run:
        return [("chain4", False, 4, 3, 1, 64), ("tree8", True, 8, 4, 2, 64)]
    return [(name, tree, W, K, bs, VOCABS[0]) for bs in SAMPLED_BATCHES for name, tree, W, K in SAMPLED_SHAPES]


def sampled(report):
    source, sglang_sampling, sglang_greedy = sglang_kernels()
    report["sampled_sglang_kernel"] = source
    log(f"sampled: SGLang's kernel from {source}")
    for name, tree, W, K, bs, V in sampled_cases():
        if time.perf_counter() - T0 > ARGS.budget_s + 90:
            report["skipped"].append(dict(section="sampled", shape=name, bs=bs, reason="time budget"))
            continue
        try:
            sampled_case(report, name, tree, W, K, bs, V, sglang_sampling, sglang_greedy)
        except Exception as e:  # one broken case must not cost the rest of the lease
            report["errors"].append(dict(section="sampled", shape=name, bs=bs, error=f"{type(e).__name__}: {e}"[:1000]))
            log(f"ERROR sampled {name} bs={bs}: {type(e).__name__}: {e}")
        if CUDA:
            torch.cuda.empty_cache()


def sampled_case(report, name, tree, W, K, bs, V, sglang_sampling, sglang_greedy):
    rnd = sampled_round(bs, W, K, V, tree, device=DEVICE, seed=bs * 100 + W)
    case = dict(shape=name, tree=tree, bs=bs, W=rnd.candidates.shape[1], K=K, V=V)
    ref_bufs, out_bufs = rnd.buffers(), rnd.buffers()
    ref = asd_sampled_verify(*ref_bufs, *rnd.inputs())
    out = tsv.asd_sampled_verify_triton(*out_bufs, *rnd.inputs(), **({"block_v": 16} if ARGS.dry_run else {}))
    bad = [n for n, a, b in zip(("predicts", "accept_index", "accept_token_num"), ref_bufs, out_bufs)
           if not torch.equal(a, b)]
    bad += [f for f in SAMPLED_FIELDS if not torch.equal(getattr(ref, f), getattr(out, f))]
    report["parity"].append(dict(kind="sampled", **case, ok=not bad, mismatched=bad))
    if bad:
        log(f"PARITY FAIL sampled {case}: {bad}")
    if CUDA:  # the charges in the kernel (libdevice; off by default until this shows parity): recorded apart
        k_bufs = rnd.buffers()
        k_out = tsv.asd_sampled_verify_triton(*k_bufs, *rnd.inputs(), charges_in_kernel=True)
        k_bad = [n for n, a, b in zip(("predicts", "accept_index", "accept_token_num"), ref_bufs, k_bufs)
                 if not torch.equal(a, b)]
        k_bad += [f for f in SAMPLED_FIELDS if not torch.equal(getattr(ref, f), getattr(k_out, f))]
        report["sampled_charges_in_kernel_parity"].append(dict(**case, ok=not k_bad, mismatched=k_bad))
        log(f"sampled charges_in_kernel parity {name} bs={bs}: {'ok' if not k_bad else k_bad}")
    if CUDA:  # no host sync in the fused call
        try:
            torch.cuda.set_sync_debug_mode("error")
            tsv.asd_sampled_verify_triton(*rnd.buffers(), *rnd.inputs())
            case["no_host_sync"] = True
        except RuntimeError as e:
            case["no_host_sync"], case["sync_error"] = False, str(e)[:500]
            report["errors"].append(dict(section="sampled", shape=name, bs=bs, error=case["sync_error"]))
        finally:
            torch.cuda.set_sync_debug_mode(0)
    bufs = [rnd.buffers() for _ in range(3)]
    draft_probs = torch.zeros_like(rnd.probs)  # SGLang's target-only call takes zeros (rejected siblings' q land here)
    sg = rnd.sglang_inputs()
    arms = {
        "sglang": lambda: sglang_sampling(*bufs[0], *sg[:7], draft_probs, *sg[8:]),
        "asd_fused": lambda: tsv.asd_sampled_verify_triton(*bufs[1], *rnd.inputs()),
        "asd_torch": lambda: asd_sampled_verify(*bufs[2], *rnd.inputs()),
    }
    if CUDA:
        k_bufs = rnd.buffers()
        arms["asd_fused_k"] = lambda: tsv.asd_sampled_verify_triton(*k_bufs, *rnd.inputs(), charges_in_kernel=True)
    reps = 2 if ARGS.dry_run else ARGS.reps
    rec = dict(case, eager_ms=time_eager(arms, reps))
    if CUDA:
        try:
            rec["graph_ms"] = time_graphs(arms, reps)
        except Exception as e:
            rec["graph_error"] = f"{type(e).__name__}: {e}"[:1000]
            log(f"sampled graph capture failed: {rec['graph_error']}")
    if sglang_greedy is not None:  # the greedy pair on the same tree, both given the argmax
        try:
            rec.update(greedy_pair(rnd, K, sglang_greedy, reps))
        except Exception as e:  # an sgl_kernel signature change must not cost the sampled numbers
            rec["greedy_error"] = f"{type(e).__name__}: {e}"[:1000]
            log(f"greedy pair failed: {rec['greedy_error']}")
    ms = rec.get("graph_ms", rec["eager_ms"])
    rec["ratio_asd_fused_vs_sglang"] = ms["asd_fused"] / ms["sglang"]
    rec["ratio_asd_torch_vs_sglang"] = ms["asd_torch"] / ms["sglang"]
    if "asd_fused_k" in ms:
        rec["ratio_asd_fused_k_vs_sglang"] = ms["asd_fused_k"] / ms["sglang"]
    rec["goal_met"] = rec["ratio_asd_fused_vs_sglang"] <= SAMPLED_GOAL
    report["sampled"].append(rec)
    log(f"sampled {name:6s} bs={bs:3d} sglang={ms['sglang']:.4f} asd_fused={ms['asd_fused']:.4f} "
        f"asd_torch={ms['asd_torch']:.4f} ratio={rec['ratio_asd_fused_vs_sglang']:.2f} (goal {SAMPLED_GOAL})")


def greedy_pair(rnd, K, sglang_greedy, reps) -> dict:
    """SGLang's ``verify_tree_greedy`` against ``asd_select`` (the fused greedy kernel given the
    argmax, the seam's case) on the round's tree, the probabilities standing in for logits."""
    bs, W = rnd.candidates.shape
    tp = rnd.probs.argmax(dim=-1)  # [bs, W]
    logits = rnd.probs.view(bs * W, -1)
    zeros = torch.zeros(bs, device=DEVICE)
    bufs = rnd.buffers()
    arms = {
        "sglang_greedy": lambda: sglang_greedy(*bufs, rnd.candidates, rnd.retrieve_index, rnd.next_token,
                                               rnd.next_sibling, tp),
        "asd_select": lambda: tv.asd_verify_triton(rnd.candidates, logits, rnd.next_token, rnd.next_sibling, zeros,
                                                   zeros, zeros.int(), K, target_predict=tp),
    }
    ms = time_graphs(arms, reps) if CUDA else time_eager(arms, reps)
    ratio = ms["asd_select"] / ms["sglang_greedy"]
    return dict(greedy_ms=ms, ratio_asd_select_vs_sglang_greedy=ratio, greedy_goal_met=ratio <= GREEDY_GOAL)


def run_pytest(report):
    if ARGS.dry_run or ARGS.no_pytest:
        return
    left = ARGS.deadline_s - (time.perf_counter() - T0)
    if left < 60:
        report["skipped"].append(dict(section="pytest", reason="time budget"))
        return
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/verify/test_triton_parity.py",
           "tests/verify/test_sampled_triton_parity.py", "tests/verify/test_dispatch.py", "tests/verify/test_warmup.py"]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=left - 10)
        report["pytest"] = dict(rc=p.returncode, tail=(p.stdout + p.stderr)[-2000:])
    except subprocess.TimeoutExpired:
        report["pytest"] = dict(rc=None, tail=f"timed out after {left - 10:.0f} s")
    log(f"pytest: rc={report['pytest']['rc']} {report['pytest']['tail'].strip().splitlines()[-1:]}")


def main():
    report = dict(dry_run=ARGS.dry_run, device=torch.cuda.get_device_name() if CUDA else "cpu (Triton interpreter)",
                  torch=torch.__version__, triton=triton.__version__, python=sys.version.split()[0],
                  arms=["strict", "asd_triton", "asd_select", "asd_torch"], parity=[], safety={}, timing=[], sampled=[], sampled_charges_in_kernel_parity=[],
                  skipped=[], errors=[])
    out = pathlib.Path(ARGS.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    failed = True
    try:
        log(f"device: {report['device']}, torch {torch.__version__}, triton {triton.__version__}")
        for section in (parity_corner_cases, safety, timing, sampled, tuning, run_pytest):
            try:
                section(report)
            except Exception as e:  # record it, go on with the next section
                report["errors"].append(dict(section=section.__name__, error=f"{type(e).__name__}: {e}"[:1000]))
                log(f"ERROR in {section.__name__}: {type(e).__name__}: {e}")
        failed = (not all(p["ok"] for p in report["parity"]) or report.get("pytest", {}).get("rc") not in (0, None)
                  or bool(report["errors"]) or not all(v for v in report["safety"].values() if isinstance(v, bool)))
    finally:  # the report is written whatever happened
        report["elapsed_s"] = time.perf_counter() - T0
        report["ok"] = not failed
        out.write_text(json.dumps(report, indent=1))
        summary(report)
    return 1 if failed else 0


def summary(report):
    print(f"\n{'shape':7s} {'bs':>4s} {'V':>7s} {'strict':>8s} {'asd_tri':>8s} {'select':>8s} {'asd_tor':>8s} "
          f"{'ratio':>6s} {'ms/tok':>8s} {'GB/s':>6s}")
    for r in report["timing"]:
        ms = r.get("graph_ms", r["eager_ms"])
        print(f"{r['shape']:7s} {r['bs']:4d} {r['V']:7d} {ms['strict']:8.4f} {ms['asd_triton']:8.4f} "
              f"{ms['asd_select']:8.4f} {ms['asd_torch']:8.4f} {r['ratio_asd_triton_vs_strict']:6.2f} "
              f"{r['ms_per_output_token']['asd_triton']:8.5f} {r['vocab_pass_GBps']:6.0f}")
    if report["sampled"]:
        print(f"\nsampled (SGLang's kernel: {report.get('sampled_sglang_kernel')})")
        print(f"{'shape':7s} {'bs':>4s} {'sglang':>8s} {'asd_fus':>8s} {'asd_tor':>8s} {'ratio':>6s} {'goal':>5s}")
        for r in report["sampled"]:
            ms = r.get("graph_ms", r["eager_ms"])
            print(f"{r['shape']:7s} {r['bs']:4d} {ms['sglang']:8.4f} {ms['asd_fused']:8.4f} {ms['asd_torch']:8.4f} "
                  f"{r['ratio_asd_fused_vs_sglang']:6.2f} {str(r['goal_met']):>5s}")
    n_ok = sum(p["ok"] for p in report["parity"])
    print(f"parity {n_ok}/{len(report['parity'])}  safety {report['safety']}  skipped {len(report['skipped'])}  "
          f"ok={report['ok']}  {report['elapsed_s']:.0f}s  -> {ARGS.out}")


if __name__ == "__main__":
    sys.exit(main())
