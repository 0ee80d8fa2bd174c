#!/usr/bin/env python3
"""Real SGLang on a GPU, SGLang's defaults on (overlap scheduler, CUDA graphs): does it serve ASD?

Run by ``scripts/device_e2e.sh`` on the device machine (which unpacks the carried wheels, sets the
kit's environment and builds the tiny fixtures first); docs/GPU.md has the run tool call.

    python scripts/device_e2e.py --out $OUT                  # every step, under 8 minutes
    python scripts/device_e2e.py --out $OUT --steps 1a,2_ngram,6
    python scripts/device_e2e.py --dry-run --out /tmp/plan   # CPU: plan + argument check, no server, no GPU

Steps (each recorded separately in ``$OUT/e2e.json`` as ``{name, ok, seconds, details, error}``
the moment it ends; one failing does not stop the rest; a step that no longer fits the time budget
is recorded as ``skipped: time``):
  0        SGLang's CUDA serving path imports with the kit's sgl_kernel stand-in
  1a / 1b  EAGLE chain / EAGLE3 tree (topk 2): budget 0 == stock SGLang token for token,
           --enable-deterministic-inference, 32 concurrent requests
  1c / 1d  the same for DSPARK (gamma 3) / DFLASH (block 4), noisy tiny drafts on tiny-llama-bigram
  1e       exact DSPARK and DFLASH drafts: ASD rows (budget 8) accept whole blocks
  2_eagle / 2_ngram / 2_dspark / 2_dflash  slot churn: 400 short requests ending on stop tokens,
           budgets 64 / 0.5 / 8: every receipt spent <= budget, its events' regrets sum to spent,
           every event at an output position
  2_scope  request scopes (strict prefix, strict spans picked before the model's own exceptions),
           128 concurrent requests: no receipt event at a position the request's scope forbids
  3        one batch of greedy ASD rows, sampled rows with a budget (the sampled rule) and without
  4        --speculative-adaptive, batch 16, ASD rows: no crash
  5        SGLANG_CRASH_ON_TRITON_LOAD_AFTER_READY=1: no Triton kernel loaded after ready
  standin  no sgl_kernel name without a stand-in was called
  6        verify-step overhead at Llama-3.1-8B's shape (synthetic weights), strict vs budget 8, bs 1/8/32
  7        scripts/device_verify_bench.py, if time is left
Servers of steps 0-5 start in parallel at the beginning; each is stopped after its last step.
Steps run at once in two groups (``TOGETHER``): the identity steps 1a-1e, and the churn steps
2_eagle-2_dflash; each step is still recorded on its own as it ends.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts" / "device"), str(ROOT)]

import e2e_lib as lib  # noqa: E402
import e2e_steps as steps  # noqa: E402

# name -> (servers it uses, seconds it needs at least, what it checks)
PLAN = {
    "0": ((), 30, "CUDA import path with the stand-in"),
    "1a": (("stock_eagle_chain", "asd_eagle_chain"), 45, "EAGLE chain: budget 0 == stock"),
    "1b": (("stock_eagle3_tree", "asd_eagle3_tree"), 45, "EAGLE3 tree: budget 0 == stock"),
    "1c": (("stock_dspark", "asd_dspark"), 45, "DSPARK: budget 0 == stock"),
    "1d": (("stock_dflash", "asd_dflash"), 45, "DFLASH: budget 0 == stock"),
    "1e": (("asd_dspark_exact", "asd_dflash_exact"), 30, "DSPARK, DFLASH exact drafts: whole blocks accepted"),
    "2_eagle": (("asd_eagle_chain",), 40, "slot churn, EAGLE: receipts"),
    "2_ngram": (("asd_ngram",), 40, "slot churn, NGRAM: receipts"),
    "2_dspark": (("asd_dspark",), 40, "slot churn, DSPARK: receipts"),
    "2_dflash": (("asd_dflash",), 40, "slot churn, DFLASH: receipts"),
    "2_scope": (("asd_eagle_chain",), 40, "request scopes: no event outside the scope"),
    "3": (("asd_eagle_chain",), 30, "mixed sampled + ASD rows"),
    "4": (("asd_adaptive",), 40, "--speculative-adaptive, bs 16"),
    "5": (("asd_triton_watch",), 40, "no Triton load after ready"),
    "standin": ((), 1, "no stand-in-less sgl_kernel call"),
    "6": (("asd_llama31_8b_shape",), 170, "verify overhead at Llama-3.1-8B shape"),
    "7": ((), 90, "verify-kernel bench"),
}
# Steps that run at once when selected together, each on its own servers (a step reads only its own
# servers' answers and logs). Tiny models leave the GPU mostly idle and the servers all start at the
# beginning, so a group costs the run about its longest member: with DSPARK and DFLASH added, run one
# after the other, the identity and churn steps would push step 6 past the time budget.
TOGETHER = (("1a", "1b", "1c", "1d", "1e"), ("2_eagle", "2_ngram", "2_dspark", "2_dflash"))


def groups(selected) -> list[list[str]]:
    """``selected`` (in PLAN order) cut into what runs at once: a TOGETHER group's selected members,
    or a step alone."""
    out = []
    for s in selected:
        group = next((g for g in TOGETHER if s in g), None)
        if out and group is not None and out[-1][0] in group:
            out[-1].append(s)
        else:
            out.append([s])
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/asd-e2e-out"), help="report folder ($OUT)")
    ap.add_argument("--dry-run", action="store_true", help="print and check the plan; start nothing")
    ap.add_argument("--steps", default=",".join(PLAN), help=f"comma list out of {','.join(PLAN)}")
    ap.add_argument("--budget-s", type=float, default=400.0, help="start no step that would end after this (s)")
    ap.add_argument("--start-timeout-s", type=float, default=240.0, help="per server start")
    ap.add_argument("--logs", default="/tmp/asd-e2e-logs", help="server logs (packed into $OUT)")
    ap.add_argument("--agreement", type=float, default=0.7, help="step 6: draft-head agreement to calibrate")
    ap.add_argument("--cpu", action="store_true",
                    help="pre-validation on a CPU machine: CPU servers, smaller workloads, steps 1-5 only")
    args = ap.parse_args(argv)
    unknown = [s for s in args.steps.split(",") if s not in PLAN]
    if unknown:
        ap.error(f"unknown steps {unknown}; choose from {','.join(PLAN)}")
    args.steps = [s for s in PLAN if s in args.steps.split(",")]
    return args


def server_specs(selected) -> dict:
    """Every server the selected steps use (the step-6 server's paths are made on the device)."""
    from e2e_speed import server_args

    specs = dict(steps.SERVERS)
    specs["asd_llama31_8b_shape"] = lib.ServerSpec(
        "asd_llama31_8b_shape", tuple(server_args(pathlib.Path("/dev/shm/asd-synth/target"),
                                                  pathlib.Path("/dev/shm/asd-synth/eagle-head"))))
    return {n: specs[n] for s in selected for n in PLAN[s][0]}


def check_server_args(specs: dict) -> dict:
    """Parse every server's argv with SGLang's and sglang-asd's parsers (typos fail here, not on the GPU)."""
    try:
        from sglang.srt.server_args import ServerArgs

        from sglang_asd import server_settings
    except Exception as e:  # no sglang where the dry run runs: say so
        return {"checked": False, "why": f"{type(e).__name__}: {e}"[:200]}
    parser = argparse.ArgumentParser(add_help=False)
    ServerArgs.add_cli_args(parser)
    server_settings.add_cli_args(parser)
    bad = {}
    for name, spec in specs.items():
        _, unknown = parser.parse_known_args(spec.argv())
        if unknown:
            bad[name] = unknown
    return {"checked": True, "unknown_flags": bad}


def dry_run(args, out: pathlib.Path) -> int:
    specs = server_specs(args.steps)
    rec = lib.Recorder(out, {"dry_run": True, "plan": plan_json(args.steps, specs),
                             "argument_check": check_server_args(specs), **platform_info(probe_gpu=False)})
    for s in args.steps:
        rec.add(s, None, 0.0, {"checks": PLAN[s][2], "servers": list(PLAN[s][0])}, skipped="dry-run")
    bad = rec.report["argument_check"].get("unknown_flags")
    print(f"[dry-run] {len(args.steps)} steps, {len(specs)} servers, report {rec.path}"
          f"{'; UNKNOWN FLAGS: ' + str(bad) if bad else ''}")
    return 1 if bad else 0


def plan_json(selected, specs) -> list:
    runs_with = {s: [t for t in g if t != s] for g in groups(selected) for s in g}
    return [{"step": s, "checks": PLAN[s][2], "min_left_s": PLAN[s][1], "runs_with": runs_with[s],
             "servers": [{"name": n, "module": specs[n].module, "argv": specs[n].argv(), "env": dict(specs[n].env)}
                         for n in PLAN[s][0]]} for s in selected]


def platform_info(probe_gpu: bool = True) -> dict:
    info = {"python": platform.python_version(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "env": lib.env_summary()}
    try:
        import torch
        import triton

        info.update(torch=torch.__version__, triton=triton.__version__)
        if probe_gpu and torch.cuda.is_available():
            info["device"] = torch.cuda.get_device_name()
    except Exception as e:
        info["torch_error"] = str(e)[:200]
    return info


def verify_bench(out: pathlib.Path, budget: lib.Budget) -> dict:
    """Step 7: the kernel bench, bounded by what is left of the budget."""
    left = max(60.0, budget.left() + 30)
    cmd = [sys.executable, str(ROOT / "scripts/device_verify_bench.py"), "--out", str(out / "verify_h200.json"),
           "--budget-s", str(left * 0.6), "--deadline-s", str(left * 0.85), "--no-pytest"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=left)
    return {"ok": p.returncode == 0, "error": None if p.returncode == 0 else p.stderr[-1500:] or p.stdout[-1500:],
            "tail": p.stdout[-2500:], "report": "verify_h200.json"}


def main(argv=None) -> int:
    args = parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        return dry_run(args, out)
    if args.cpu:
        steps.SERVERS = steps.make_servers(lib.CPU_COMMON, deterministic=False)
        args.steps = [s for s in args.steps if s not in ("0", "7")]
    log_dir = pathlib.Path(args.logs)
    log_dir.mkdir(parents=True, exist_ok=True)
    budget = lib.Budget(args.budget_s)
    specs = server_specs(args.steps)
    rec = lib.Recorder(out, {"dry_run": False, "budget_s": args.budget_s, "plan": plan_json(args.steps, specs),
                             **platform_info()})
    try:  # the stand-in, in this process too (step 6 times SGLang's verify path)
        from sglang_asd import cpu_backend

        cpu_backend.install()
    except Exception as e:
        rec.add("setup", False, 0.0, {}, f"{type(e).__name__}: {e}")
        return summary(rec.report)
    pool = lib.ServerPool(log_dir, args.start_timeout_s, dict(os.environ), parallel=2 if args.cpu else 16)
    last_use = {n: s for s in args.steps for n in PLAN[s][0]}
    draft_backend = "intel_amx" if args.cpu else "triton"  # what the block drafters' draft runner uses
    for name in specs:  # steps 0-5's servers start together; step 6's waits for the GPU to be free
        if name != "asd_llama31_8b_shape":
            pool.start(specs[name])
    runners = {
        "0": lambda: steps.import_check(out),
        "1a": lambda: steps.identity(pool, "stock_eagle_chain", "asd_eagle_chain"),
        "1b": lambda: steps.identity(pool, "stock_eagle3_tree", "asd_eagle3_tree"),
        "1c": lambda: steps.block_identity(pool, "stock_dspark", "asd_dspark", draft_backend),
        "1d": lambda: steps.block_identity(pool, "stock_dflash", "asd_dflash", draft_backend),
        "1e": lambda: steps.exact_drafts(pool, n=4 if args.cpu else 16),
        "2_eagle": lambda: steps.churn(pool, "asd_eagle_chain", n=60 if args.cpu else 400),
        "2_ngram": lambda: steps.churn(pool, "asd_ngram", n=60 if args.cpu else 400),
        "2_dspark": lambda: steps.churn(pool, "asd_dspark", n=60 if args.cpu else 400),
        "2_dflash": lambda: steps.churn(pool, "asd_dflash", n=60 if args.cpu else 400),
        "2_scope": lambda: steps.scope(pool, n=32 if args.cpu else 128, concurrency=16 if args.cpu else 64),
        "3": lambda: steps.mixed_sampling(pool, sampling_verify=not args.cpu),
        "4": lambda: steps.adaptive(pool),
        "5": lambda: steps.triton_watch(pool),
        "standin": lambda: steps.standin_missing(out),
        "6": lambda: _speed(pool, out, args),
        "7": lambda: verify_bench(out, budget),
    }
    try:
        for group in groups(args.steps):
            lib.run_steps_together(rec, [(s, runners[s], PLAN[s][1]) for s in group], budget)
            for name, last in list(last_use.items()):
                if last in group:
                    pool.stop(name)
            lib.pack_logs(log_dir, out)
    finally:
        pool.stop_all()
        rec.report["elapsed_s"] = round(budget.elapsed(), 1)
        order = list(PLAN)  # steps run at once were recorded as they ended: back to plan order
        rec.report["steps"].sort(key=lambda st: order.index(st["name"]) if st["name"] in order else -1)
        rec.flush()
        lib.pack_logs(log_dir, out)
    return summary(rec.report)


def _speed(pool, out, args) -> dict:
    import e2e_speed

    for name in list(steps.SERVERS):  # the 8B-shaped target needs the GPU to itself
        pool.stop(name)
    if args.cpu:
        return e2e_speed.run(pool, out, agreement=args.agreement, batches=(1, 4), reps=1, max_new=32, cpu=True)
    return e2e_speed.run(pool, out, agreement=args.agreement)


def summary(report: dict) -> int:
    print(f"\n{'step':10s} {'result':7s} {'s':>6s}  error / skipped")
    failed = 0
    for st in report["steps"]:
        res = "SKIP" if st.get("skipped") else ("PASS" if st["ok"] else "FAIL")
        failed += res == "FAIL"
        print(f"{st['name']:10s} {res:7s} {st['seconds']:6.1f}  {(st.get('error') or st.get('skipped') or '')[:110]}")
    print(f"elapsed {report.get('elapsed_s')} s; {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
