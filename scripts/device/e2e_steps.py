"""Steps 0-5 of the GPU end-to-end run, one function each; each returns its details dict
(``ok`` and ``error`` keys are taken out by ``e2e_lib.run_step``). The block drafters (DSPARK,
DFLASH) have their own identity, exact-draft and churn steps (1c, 1d, 1e, 2_dspark, 2_dflash).

Servers (``SERVERS``) are tiny fixtures (float32, ``e2e_lib.GPU_COMMON``) started in parallel at the
beginning of the run; the steps that share a server say so.
"""

from __future__ import annotations

import collections
import os
import pathlib
import re
import subprocess
import sys

from e2e_lib import (DETERMINISTIC, EAGLE3_TREE, EAGLE_CHAIN, GPU_COMMON, NGRAM, ServerPool, ServerSpec,
                     block_drafter, generate, generate_many, grep_log, healthy, prompts, receipt)

ROOT = pathlib.Path(__file__).resolve().parents[2]


# SGLang warns about a Triton load after ready only below this much free memory: set absurdly high,
# it logs every one (without crashing), so the stock and ASD EAGLE servers list all late loads.
WARN_EVERY_LATE_LOAD = (("SGLANG_TRITON_LOAD_WARNING_THRESHOLD_GB", "1000000"),)


def make_servers(common: list, deterministic: bool = True) -> dict:
    """The servers of steps 1-5 (tiny fixtures) with ``common`` arguments appended (``deterministic``
    False drops ``--enable-deterministic-inference``, which SGLang refuses on CPU attention)."""

    def spec(name, args, stock=False, env=()):
        args = [a for a in args if deterministic or a not in DETERMINISTIC]
        return ServerSpec(name, tuple(args) + tuple(common), stock, tuple(env))

    return {
        "stock_eagle_chain": spec("stock_eagle_chain", EAGLE_CHAIN + DETERMINISTIC, stock=True, env=WARN_EVERY_LATE_LOAD),
        "asd_eagle_chain": spec("asd_eagle_chain", EAGLE_CHAIN + DETERMINISTIC, env=WARN_EVERY_LATE_LOAD),
        "stock_eagle3_tree": spec("stock_eagle3_tree", EAGLE3_TREE + DETERMINISTIC, stock=True),
        "asd_eagle3_tree": spec("asd_eagle3_tree", EAGLE3_TREE + DETERMINISTIC),
        "asd_ngram": spec("asd_ngram", NGRAM),
        "asd_adaptive": spec("asd_adaptive", EAGLE_CHAIN + ["--speculative-adaptive"]),
        "asd_triton_watch": spec("asd_triton_watch", EAGLE_CHAIN,
                                 env=(("SGLANG_CRASH_ON_TRITON_LOAD_AFTER_READY", "1"),)),
        # Block drafters, noisy drafts: identity (stock + ASD, deterministic) and churn (the ASD one).
        "stock_dspark": spec("stock_dspark", block_drafter("dspark") + DETERMINISTIC, stock=True),
        "asd_dspark": spec("asd_dspark", block_drafter("dspark") + DETERMINISTIC),
        "stock_dflash": spec("stock_dflash", block_drafter("dflash") + DETERMINISTIC, stock=True),
        "asd_dflash": spec("asd_dflash", block_drafter("dflash") + DETERMINISTIC),
        # Exact drafts (every draft token is the target's argmax): ASD rows accept whole blocks.
        "asd_dspark_exact": spec("asd_dspark_exact", block_drafter("dspark", "exact")),
        "asd_dflash_exact": spec("asd_dflash_exact", block_drafter("dflash", "exact")),
    }


SERVERS = make_servers(GPU_COMMON)  # device_e2e.py --cpu swaps in CPU arguments (pre-validation only)
TRITON_LATE = ("device-loaded after serving started", "to compile after serving started")
FATAL = ("Traceback (most recent call last)", "RuntimeError", "CUDA error", "NotImplementedError")


def import_check(out_dir: pathlib.Path) -> dict:
    """Step 0: SGLang's CUDA serving path imports with the stand-in; the JIT-op swaps are bound; SGLang
    resolves every tiny-model server's arguments with CUDA graphs, overlap and radix cache on."""
    out = out_dir / "import_check.json"
    p = subprocess.run([sys.executable, str(ROOT / "scripts/device/cuda_import_check.py"), "--resolve",
                        "--json", str(out)], capture_output=True, text=True, timeout=240)
    import json

    report = json.loads(out.read_text()) if out.exists() else {}
    return {"ok": p.returncode == 0, "error": None if p.returncode == 0 else (p.stderr or p.stdout)[-1500:],
            "import_errors": report.get("import_errors"), "unprovided_imported": report.get("unprovided_imported"),
            "server_resolution": report.get("server_resolution"), "import_seconds": report.get("import_seconds")}


def _ids(answers):
    return [a.get("output_ids") for a in answers]


def identity(pool: ServerPool, stock_name: str, asd_name: str, n: int = 32, max_new: int = 48) -> dict:
    """Step 1: budget 0 (and no budget) on the ASD server equals stock SGLang token for token,
    ``n`` concurrent greedy requests, ``--enable-deterministic-inference`` on both."""
    stock_url, stock_s = pool.url(SERVERS[stock_name])
    asd_url, asd_s = pool.url(SERVERS[asd_name])
    jobs = [{"input_ids": p, "sampling": {"temperature": 0, "max_new_tokens": max_new}} for p in prompts(n, seed=11)]
    stock = generate_many(stock_url, jobs, concurrency=n)
    zero = generate_many(asd_url, [dict(j, sampling=dict(j["sampling"], asd_budget=0)) for j in jobs], concurrency=n)
    none = generate_many(asd_url, jobs, concurrency=n)
    errors = [a["error"] for a in stock + zero + none if "error" in a]
    diff = [i for i in range(n) if _ids(stock)[i] != _ids(zero)[i] or _ids(stock)[i] != _ids(none)[i]]
    receipts = [receipt(a) or {} for a in zero]
    spent = sum(float(r.get("spent") or 0) for r in receipts)
    first = next(iter(diff), None)
    return {"ok": not errors and not diff and spent == 0, "error": errors[0] if errors else (
                f"{len(diff)}/{n} requests differ from stock" if diff else (f"budget 0 spent {spent}" if spent else None)),
            "requests": n, "max_new_tokens": max_new, "differing": diff, "start_s": {"stock": stock_s, "asd": asd_s},
            "tokens": sum(len(x or []) for x in _ids(stock)),
            "verify_rounds": {"stock": sum((a.get("meta_info") or {}).get("spec_verify_ct") or 0 for a in stock),
                              "asd": sum((a.get("meta_info") or {}).get("spec_verify_ct") or 0 for a in zero)},
            "first_difference": None if first is None else {"stock": _ids(stock)[first], "asd_budget0": _ids(zero)[first],
                                                            "asd_no_budget": _ids(none)[first]}}


DRAFT_RUNNER = ("draft runner. attention_backend=",)  # SGLang's DSpark / DFLASH start-up line


def block_identity(pool: ServerPool, stock_name: str, asd_name: str, backend: str = "triton") -> dict:
    """Steps 1c / 1d: :func:`identity` for a block drafter (DSPARK, DFLASH), plus what its logs say
    of the path taken: the draft runner's attention backend (``backend``: Triton, the kit's supply;
    ``intel_amx`` on CPU) and the ASD server's lines about CUDA graphs (captures; SGLang folds the
    draft's proposal into the draft graph). SGLang logs nothing about the verify accept: with a dense
    draft and a Llama target, DSPARK's static path accepts eagerly after the verify graph (its
    in-graph accept epilogue is for compact mode or a DeepSeek-V4.1 target with a MoE draft)."""
    res = identity(pool, stock_name, asd_name)
    log_path = pool.log_dir / f"{asd_name}.log"
    runner = grep_log(log_path, DRAFT_RUNNER, limit=2)
    res["draft_runner"] = runner
    res["graph_log"] = grep_log(log_path, ("cuda graph", "Cuda graph", "CUDA graph"), limit=8)
    if res["ok"] and runner and not all(f"attention_backend={backend}" in ln for ln in runner):
        res.update(ok=False, error=f"draft attention backend is not {backend}: {runner[0][-200:]}")
    return res


def _stop_token_per_request(url: str, prompts_: list, concurrency: int) -> list[int]:
    """For each prompt, a token of its own budget-0 greedy continuation, 4-60 tokens in: stopping on
    it ends the request there (SGLang finishes a matched stop token exactly like EOS), so requests
    end at varied rounds, often inside an accepted run."""
    answers = generate_many(url, [{"input_ids": p, "sampling": {"temperature": 0, "max_new_tokens": 64}}
                                  for p in prompts_], concurrency=concurrency)
    stops = []
    for i, a in enumerate(answers):
        out = a.get("output_ids") or [0]
        stops.append(int(out[min(len(out) - 1, 4 + (i * 37) % 57)]))
    return stops


def check_receipts(answers: list[dict], budgets: list[float]) -> dict:
    """Every receipt: spent <= budget, events' regrets sum to spent, counts consistent, every event at
    an output position (increasing, inside the output, the token emitted there is its draft and not
    its target)."""
    bad, stats = [], collections.Counter()
    for i, (a, b) in enumerate(zip(answers, budgets)):
        if "error" in a:
            bad.append({"i": i, "error": a["error"]})
            continue
        r = receipt(a)
        if not r:
            bad.append({"i": i, "error": "no receipt"})
            continue
        stats["receipts"] += 1
        stats["applied"] += bool(r.get("applied"))
        stats["exceptions"] += int(r.get("exceptions") or 0)
        stats[f"finish_{((a.get('meta_info') or {}).get('finish_reason') or {}).get('type')}"] += 1
        spent, events = float(r.get("spent") or 0), r.get("events") or []
        tol = 1e-4 * max(1.0, spent)
        problems = []
        if spent > b + tol:
            problems.append(f"spent {spent} > budget {b}")
        if not r.get("events_truncated"):
            if abs(sum(float(e["regret"]) for e in events) - spent) > tol:
                problems.append(f"events sum {sum(float(e['regret']) for e in events)} != spent {spent}")
            if len(events) != int(r.get("exceptions") or 0):
                problems.append(f"{len(events)} events but {r.get('exceptions')} exceptions")
        else:
            stats["truncated"] += 1
        out = a.get("output_ids") or []
        positions = [int(e["pos"]) for e in events]
        if positions != sorted(set(positions)):
            problems.append(f"event positions not increasing: {positions[:12]}")
        off = [e for e in events if not 0 <= int(e["pos"]) < len(out) or out[int(e["pos"])] != e["draft"]
               or e["draft"] == e["target"]]
        if off:
            problems.append(f"{len(off)} of {len(events)} events not at an output position "
                            f"({len(out)} output tokens), first {off[0]}")
        if problems:
            bad.append({"i": i, "budget": b, "problems": problems})
    return {"violations": bad[:20], "n_violations": len(bad), **stats}


def churn(pool: ServerPool, name: str, n: int = 400, concurrency: int = 64) -> dict:
    """Step 2 (per server): hundreds of short requests ending on stop tokens, budgets alternating
    64 and 0.5 (and 8), ``concurrency`` in flight: slots are freed and reused mid-batch."""
    url, start_s = pool.url(SERVERS[name])
    cycle = [64.0, 0.5, 8.0]
    budgets = [cycle[i % len(cycle)] for i in range(n)]
    prompts_ = prompts(n, 23, 4, 24)
    stops = _stop_token_per_request(url, prompts_, concurrency)
    jobs = [{"input_ids": p, "sampling": {"temperature": 0, "max_new_tokens": 64, "stop_token_ids": [t],
                                          "asd_budget": b}} for p, b, t in zip(prompts_, budgets, stops)]
    answers = generate_many(url, jobs, concurrency=concurrency)
    res = check_receipts(answers, budgets)
    err = None if not res["n_violations"] else f"{res['n_violations']} receipts violate the ledger"
    return {"ok": err is None and healthy(url), "error": err or (None if healthy(url) else "server not healthy"),
            "server": name, "requests": n, "concurrency": concurrency, "start_s": start_s, **res}


def scope(pool: ServerPool, name: str = "asd_eagle_chain", n: int = 128, concurrency: int = 64) -> dict:
    """Step 2_scope: request scopes on the GPU. ``n`` concurrent requests (budget 64) with a strict
    prefix, a strict span whose open marker is a token the model emits right before one of its
    exceptions (so the span matters), a toggling span, or none; every event is replayed on the
    client against the pure rule (``policy.scope``) over the request's prompt and output ids: no
    event at a position its scope forbids, some event allowed, some node kept strict."""
    sys.path.insert(0, str(ROOT))
    from transformers import AutoTokenizer

    from sglang_asd.fixtures import fixture_path
    from sglang_asd.policy.scope import Scope, resolve, single_token_id

    url, start_s = pool.url(SERVERS[name])
    tok = AutoTokenizer.from_pretrained(str(fixture_path("tiny-llama")))
    token_id = single_token_id(tok)
    single = lambda t: tok.decode([t]) if token_id(tok.decode([t])) == t else None  # noqa: E731
    prompts_ = prompts(n, 29, 4, 24)
    sampling = {"temperature": 0, "max_new_tokens": 48, "ignore_eos": True, "asd_budget": 64.0}
    base = generate_many(url, [{"input_ids": p, "sampling": sampling} for p in prompts_], concurrency=concurrency)
    seen = {t for a in base for t in a.get("output_ids") or []}
    open_ = next((single(a["output_ids"][e["pos"] - 1]) for a in base for e in (receipt(a) or {}).get("events", [])
                  if e["pos"] > 0 and single(a["output_ids"][e["pos"] - 1])), None)
    close = next((single(t) for t in range(100, 2048) if t not in seen and single(t)), None)
    if open_ is None or close is None:
        return {"ok": False, "error": "no single-token marker before an exception in the baseline"}
    variants = [{"asd_strict_spans": [[open_, close]]}, {"asd_strict_prefix": 5},
                {"asd_strict_spans": [[open_, close]], "asd_strict_prefix": 3}, {"asd_strict_spans": [[open_, open_]]}]
    params = [variants[i % len(variants)] for i in range(n)]
    answers = generate_many(url, [{"input_ids": p, "sampling": {**sampling, **v}} for p, v in zip(prompts_, params)],
                            concurrency=concurrency)
    bad, events, skipped = [], 0, 0
    for i, (a, p, v) in enumerate(zip(answers, prompts_, params)):
        r = receipt(a) or {}
        if "error" in a or not r.get("applied"):
            bad.append({"i": i, "error": a.get("error") or "not applied"})
            continue
        scope_ = Scope().tightened(strict_prefix=v.get("asd_strict_prefix"), strict_spans=v.get("asd_strict_spans"))
        markers = resolve(scope_, token_id)
        out = a["output_ids"]
        skipped += int(r["scope"]["skipped"])
        for e in r["events"]:
            events += 1
            if not markers.allowed(markers.state_after(p + out[:e["pos"]]), e["pos"], e["draft"], e["target"]):
                bad.append({"i": i, "event": e, "scope": scope_.parameters()})
    err = None
    if bad:
        err = f"{len(bad)} answers with an event outside the scope or no receipt"
    elif not events or not skipped:
        err = f"vacuous: {events} events, {skipped} nodes kept strict"
    return {"ok": err is None and healthy(url), "error": err or (None if healthy(url) else "server not healthy"),
            "server": name, "requests": n, "markers": [open_, close], "events": events, "scope_skipped": skipped,
            "violations": bad[:20], "start_s": start_s}


def exact_drafts(pool: ServerPool, names=("asd_dspark_exact", "asd_dflash_exact"), n: int = 16,
                 max_new: int = 41) -> dict:
    """Step 1e: drafts that reproduce the target (``tiny-dspark-exact``, ``tiny-dflash-exact``): ``n``
    concurrent greedy ASD rows (budget 8) per server accept whole blocks (accept rate >= 0.9 per
    request, >= 0.95 on average: float32 on the GPU may flip a near-tie), receipts hold."""
    per, problems = {}, []
    for name in names:
        url, start_s = pool.url(SERVERS[name])
        jobs = [{"input_ids": p, "sampling": {"temperature": 0, "max_new_tokens": max_new, "ignore_eos": True,
                                              "asd_budget": 8}} for p in prompts(n, seed=53)]
        answers = generate_many(url, jobs, concurrency=n)
        res = check_receipts(answers, [8.0] * n)
        rates = [(a.get("meta_info") or {}).get("spec_accept_rate") for a in answers if "error" not in a]
        rates = [float(r) for r in rates if r is not None]
        mean = sum(rates) / len(rates) if rates else 0.0
        per[name] = {"start_s": start_s, "requests": n, "mean_accept_rate": round(mean, 4),
                     "min_accept_rate": round(min(rates), 4) if rates else None,
                     "accept_lengths": sorted({round((a.get("meta_info") or {}).get("spec_accept_length") or 0, 2)
                                               for a in answers})[:10], **res}
        if res["n_violations"]:
            problems.append(f"{name}: {res['n_violations']} receipts violate the ledger")
        if res.get("applied", 0) != n:
            problems.append(f"{name}: {res.get('applied', 0)}/{n} receipts applied")
        if len(rates) != n or mean < 0.95 or min(rates) < 0.9:
            problems.append(f"{name}: accept rate mean {mean:.3f}, min {min(rates) if rates else None} "
                            f"over {len(rates)}/{n} requests (exact draft: 1.0)")
    return {"ok": not problems, "error": "; ".join(problems) or None, **per}


def mixed_sampling(pool: ServerPool, n: int = 33, sampling_verify: bool = True) -> dict:
    """Step 3: one batch of three kinds of row: greedy with a budget (ASD rows: exceptions), sampled at
    temperature 0.8 with a budget (the sampled rule, ``asd-sampled-1``, through SGLang's sampling verify
    on the GPU: receipts within budget, events at their output positions), sampled without one (SGLang's
    sampling verify untouched: receipt reason 'strict'). ``sampling_verify`` False (the ``--cpu``
    pre-validation: SGLang verifies sampled rows greedily on CPU): every sampled row says 'sampling'."""
    url, start_s = pool.url(SERVERS["asd_eagle_chain"])
    jobs, kinds = [], []
    for i, p in enumerate(prompts(n, seed=31)):
        kind = ("asd", "sampled_asd", "sampled")[i % 3]
        s = {"temperature": 0, "max_new_tokens": 64, "asd_budget": 32} if kind == "asd" else \
            {"temperature": 0.8, "max_new_tokens": 64, "sampling_seed": i,
             **({"asd_budget": 8} if kind == "sampled_asd" else {})}
        jobs.append({"input_ids": p, "sampling": s})
        kinds.append(kind)
    answers = generate_many(url, jobs, concurrency=n)
    errors = [a["error"] for a in answers if "error" in a]
    by = collections.defaultdict(list)
    for k, a in zip(kinds, answers):
        by[k].append(receipt(a) or {})
    asd_exc = sum(int(r.get("exceptions") or 0) for r in by["asd"])
    reasons = collections.Counter(str(r.get("reason")) for r in by["sampled"])
    problems = errors[:3]
    if asd_exc == 0:
        problems.append("no exception in any ASD row")
    if not sampling_verify:
        reasons += collections.Counter(str(r.get("reason")) for r in by["sampled_asd"])
        if reasons != collections.Counter({"sampling": len(by["sampled"]) + len(by["sampled_asd"])}):
            problems.append(f"sampled rows on CPU: receipt reasons {dict(reasons)}")
        by["sampled_asd"] = []
    elif reasons != collections.Counter({"strict": len(by["sampled"])}):
        problems.append(f"sampled rows without a budget: receipt reasons {dict(reasons)}")
    if not all(r.get("applied") for r in by["asd"]):
        problems.append("an ASD row's receipt is not applied")
    relaxed = 0
    for a, r in ((a, r) for k, a, r in zip(kinds, answers, [receipt(a) or {} for a in answers])
                 if k == "sampled_asd" and sampling_verify):
        out, events = a.get("output_ids") or [], r.get("events") or []
        relaxed += len(events)
        if not (r.get("applied") and r.get("rule") == "asd-sampled-1"):
            problems.append(f"a sampled row with a budget is not applied: {r.get('reason')}")
        elif not 0 <= float(r.get("spent") or 0) <= 8 + 1e-6 or \
                abs(sum(float(e["charge"]) for e in events) - float(r["spent"])) > 1e-4:
            problems.append(f"a sampled receipt overspends or does not add up: {r.get('spent')}")
        elif any(not 0 <= e["pos"] < len(out) or (e["accepted"] and out[e["pos"]] != e["token"]) for e in events):
            problems.append("a sampled event is not at its output position")
    return {"ok": not problems, "error": "; ".join(problems[:5]) or None, "start_s": start_s,
            "asd_rows": len(by["asd"]), "asd_exceptions": asd_exc,
            "asd_spent": round(sum(float(r.get("spent") or 0) for r in by["asd"]), 3),
            "sampled_rows": len(by["sampled"]), "sampled_reasons": dict(reasons),
            "sampled_asd_rows": len(by["sampled_asd"]), "sampled_relaxed_nodes": relaxed,
            "sampled_kl_spent": round(sum(float(r.get("spent") or 0) for r in by["sampled_asd"]), 3),
            "sampled_accept_length": [(a.get("meta_info") or {}).get("spec_accept_length")
                                      for k, a in zip(kinds, answers) if k != "asd"][:8]}


def adaptive(pool: ServerPool, bs: int = 16, rounds: int = 3) -> dict:
    """Step 4: ``--speculative-adaptive`` with ASD rows at batch size >= 8: no crash, ledgers hold."""
    spec = SERVERS["asd_adaptive"]
    url, start_s = pool.url(spec)
    answers, budgets = [], []
    for r in range(rounds):  # long enough for the controller to move the draft depth
        bud = [8.0 if i % 4 else 0.0 for i in range(bs)]
        jobs = [{"input_ids": p, "sampling": {"temperature": 0, "max_new_tokens": 128, "ignore_eos": True,
                                              "asd_budget": b}} for p, b in zip(prompts(bs, seed=41 + r), bud)]
        answers += generate_many(url, jobs, concurrency=bs)
        budgets += bud
    res = check_receipts(answers, budgets)
    log_path = pool.log_dir / f"{spec.name}.log"
    alive = healthy(url)
    disabled = grep_log(log_path, ("speculative_adaptive disabled",), limit=1)
    err = None if alive and not res["n_violations"] and not disabled else (
        "server died or unhealthy" if not alive else disabled[0] if disabled else
        f"{res['n_violations']} receipts violate the ledger")
    return {"ok": err is None, "error": err, "start_s": start_s, "batch_size": bs, "rounds": rounds,
            "accept_lengths": sorted({round((a.get("meta_info") or {}).get("spec_accept_length") or 0, 2)
                                      for a in answers})[:20],
            "adaptive_log": grep_log(log_path, ("adaptive", "num_steps"), limit=10),
            "fatal_log": grep_log(log_path, FATAL, limit=10), **res}


LATE_LOAD = re.compile(r"Triton kernel '([^']+)' device-loaded after serving started")
KIT_KERNELS = {"sgl_build_tree_kernel_efficient_triton", "verify_tree_greedy_kernel_triton",
               "_reconstruct_tree_mask_kernel"}  # SGLang's XPU-path kernels the stand-in swaps in


def late_loads(log_path: pathlib.Path) -> dict:
    """Kernels SGLang reported loading after ready, sorted into ASD's, the kit's and SGLang's own."""
    try:
        names = sorted(set(LATE_LOAD.findall(log_path.read_text(errors="replace"))))
    except OSError:
        return {}
    try:
        import triton

        from sglang_asd.verify import triton_kernels

        asd = {n for n, v in vars(triton_kernels).items() if isinstance(v, triton.runtime.JITFunction)}
    except Exception:  # the classification is a convenience; the names are what matters
        asd = set()
    return {"asd": [n for n in names if n in asd], "kit_standin": [n for n in names if n in KIT_KERNELS],
            "sglang": [n for n in names if n not in asd and n not in KIT_KERNELS]}


def triton_watch(pool: ServerPool) -> dict:
    """Step 5: with ``SGLANG_CRASH_ON_TRITON_LOAD_AFTER_READY=1`` a varied workload after ready loads
    no Triton kernel (SGLang raises on the first late load; the log names the kernel). For diagnosis,
    the stock and ASD EAGLE servers of steps 1-3 ran in warn-every-load mode: their lists say whose
    kernels load late (ASD's, the kit's stand-ins', SGLang's own)."""
    spec = SERVERS["asd_triton_watch"]
    log_path = pool.log_dir / f"{spec.name}.log"
    diagnosis = {name: late_loads(pool.log_dir / f"{name}.log") for name in ("stock_eagle_chain", "asd_eagle_chain")}
    try:
        url, start_s = pool.url(spec)
    except Exception as e:
        return {"ok": False, "error": f"server did not start: {type(e).__name__}: {str(e)[:300]}",
                "late_loads": grep_log(log_path, TRITON_LATE), "warn_mode_late_loads": diagnosis}
    answers = []
    for bs, budget, temp in ((1, 0, 0), (3, 8, 0), (17, 8, 0), (32, 0.5, 0), (8, 8, 0.8), (64, 8, 0)):
        s = {"temperature": temp, "max_new_tokens": 24, "asd_budget": budget} if temp == 0 else \
            {"temperature": temp, "max_new_tokens": 24}
        answers += generate_many(url, [{"input_ids": p, "sampling": s} for p in prompts(bs, bs, 4, 200)],
                                 concurrency=bs)
    errors = [a["error"] for a in answers if "error" in a]
    late = grep_log(log_path, TRITON_LATE)
    alive = healthy(url)
    problems = ([f"{len(errors)} requests failed: {errors[0]}"] if errors else []) + \
        ([f"{len(late)} late Triton loads/compiles"] if late else []) + ([] if alive else ["server died"])
    return {"ok": not problems, "error": "; ".join(problems) or None, "start_s": start_s,
            "requests": len(answers), "late_loads": late, "warn_mode_late_loads": diagnosis}


def standin_missing(out_dir: pathlib.Path) -> dict:
    """Which ``sgl_kernel`` names SGLang called that the stand-in lacks (from ``$SGLANG_ASD_STANDIN_LOG``),
    and which of SGLang's JIT modules nvcc / g++ built on the device (``$SGLANG_JIT_CACHE_DIR``)."""
    path = os.environ.get("SGLANG_ASD_STANDIN_LOG")
    names = collections.Counter()
    if path and os.path.exists(path):
        for line in open(path):
            names[line.split()[-1]] += 1
    jit_root = pathlib.Path(os.environ.get("SGLANG_JIT_CACHE_DIR") or "~/.cache/sglang/jit").expanduser()
    built = sorted({p.name for p in jit_root.glob("*/*") if p.is_dir()}) if jit_root.exists() else []
    return {"ok": not names, "error": f"called without a stand-in: {sorted(names)}" if names else None,
            "calls": dict(names), "jit_modules_built": built[:50]}


def first_generate(url: str) -> dict:
    """A one-line smoke answer for logs: text-free, ids only."""
    return generate(url, {"temperature": 0, "max_new_tokens": 8}, input_ids=[5, 6, 7, 8])
