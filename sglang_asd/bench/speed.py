"""Speed at fixed work: what a budget buys in tokens/s over strict greedy on the same server.

``python -m sglang_asd.bench.speed (--url URL | --launch='SERVER ARGS') --budgets 0,2,8,32
    --dataset gsm8k,mtbench --num-prompts 64 --max-new-tokens 256 --concurrency 8 --repeats 3 --out DIR``

Every request is greedy with ``ignore_eos`` and the same ``max_new_tokens``, so every pass does
the same work. One repeat is the sequence ``strict, B1, strict, B2, strict, ...`` over the same
prompts at the same concurrency: each candidate budget is bracketed by two strict passes, its
ratio is ``tok/s(B) / mean(tok/s(strict before), tok/s(strict after))`` and the baseline drift is
``|before - after| / mean`` (how much the machine moved during the measurement; a ratio is
only as good as its drift). Medians over repeats are reported. A warm-up pass over all prompts
(``max_new_tokens`` 4) runs first so every measured pass sees the same prefix cache.

Writes ``speed.json`` (config, per-pass metrics, per-budget medians), ``speed.csv``, ``speed.md``.
With ``--launch`` it starts ``python -m sglang_asd.launch_server SERVER ARGS`` itself (log in
``DIR/server.log``), waits for ``/health_generate``, and stops it at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional

import requests

from sglang_asd.bench import datasets, report, stats
from sglang_asd.bench.client import GenRequest, parse_budgets, served_model
from sglang_asd.bench.metrics import first_errors, result_metrics
from sglang_asd.bench.runner import PassResult, run_pass
from sglang_asd.bench.server import add_server_args, target_server

COLUMNS = (
    ("budget", "budget"), ("speedup_median", "tok/s ASD/strict (median)"),
    ("drift_median", "baseline drift (median)"), ("candidate_tok_s_median", "ASD tok/s"),
    ("baseline_tok_s_median", "strict tok/s"), ("accept_length", "accept len ASD"),
    ("baseline_accept_length", "accept len strict"), ("verify_ct_mean", "verify rounds/req ASD"),
    ("baseline_verify_ct_mean", "verify rounds/req strict"), ("spent_mean", "spent/req (nats)"),
    ("applied_share", "ASD applied"), ("errors", "errors"),
)


def pass_record(label: str, budget: float, repeat: int, p: PassResult, expected_tokens: int) -> dict:
    m = result_metrics(p.results)
    return {"label": label, "budget": budget, "repeat": repeat, "wall_s": p.wall_s,
            "tok_s": p.tokens_per_s, "fixed_work_ok": m["output_tokens"] == expected_tokens and not m["errors"],
            **m, "first_errors": first_errors(p.results)}


def schedule(budgets: list[float]) -> list[float]:
    """One repeat's pass order: strict around every candidate (``[0, b1, 0, b2, 0]``)."""
    candidates = [b for b in budgets if b != 0]
    order: list[float] = [0.0]
    for b in candidates:
        order += [b, 0.0]
    return order


def summarize(passes: list[dict], budgets: list[float]) -> list[dict]:
    """Per candidate budget: medians over repeats of ratio, drift and tok/s, pooled acceptance."""
    rows = []
    by_repeat: dict[int, list[dict]] = {}
    for p in passes:
        by_repeat.setdefault(p["repeat"], []).append(p)
    for b in [b for b in budgets if b != 0]:
        trios, cand_passes, base_passes = [], [], []
        for seq in by_repeat.values():
            for i, p in enumerate(seq):
                if p["budget"] == b and 0 < i < len(seq) - 1:
                    before, after = seq[i - 1], seq[i + 1]
                    base = stats.mean([before["tok_s"], after["tok_s"]])
                    trios.append({"repeat": p["repeat"], "before": before["tok_s"], "candidate": p["tok_s"],
                                  "after": after["tok_s"], "ratio": stats.ratio(p["tok_s"], base),
                                  "drift": stats.drift(before["tok_s"], after["tok_s"])})
                    cand_passes.append(p)
                    base_passes += [before, after]

        def pooled(ps: list[dict], key: str) -> Optional[float]:
            return stats.mean(p[key] for p in ps)

        rows.append({
            "budget": b,
            "speedup_median": stats.median(t["ratio"] for t in trios),
            "drift_median": stats.median(t["drift"] for t in trios),
            "drift_max": max((t["drift"] for t in trios if t["drift"] is not None), default=None),
            "candidate_tok_s_median": stats.median(t["candidate"] for t in trios),
            "baseline_tok_s_median": stats.median(stats.mean([t["before"], t["after"]]) for t in trios),
            "accept_length": pooled(cand_passes, "accept_length"),
            "baseline_accept_length": pooled(base_passes, "accept_length"),
            "verify_ct_mean": pooled(cand_passes, "verify_ct_mean"),
            "baseline_verify_ct_mean": pooled(base_passes, "verify_ct_mean"),
            "spent_mean": pooled(cand_passes, "spent_mean"),
            "exceptions_mean": pooled(cand_passes, "exceptions_mean"),
            "applied_share": pooled(cand_passes, "applied_share"),
            "errors": sum(p["errors"] for p in cand_passes),
            "fixed_work_ok": all(p["fixed_work_ok"] for p in cand_passes + base_passes),
            "repeats": trios,
        })
    return rows


def warnings_for(passes: list[dict], rows: list[dict]) -> list[str]:
    out = []
    if any(p["errors"] for p in passes):
        out.append(f"{sum(p['errors'] for p in passes)} request(s) failed, e.g. "
                   f"{next(e for p in passes for e in p['first_errors'])}")
    if not all(p["fixed_work_ok"] for p in passes):
        out.append("some passes did not produce exactly num_prompts x max_new_tokens tokens: "
                   "the server may not honour ignore_eos, or requests failed")
    if passes and all(p["verify_ct_mean"] is None for p in passes):
        out.append("no spec_verify_ct in responses: the server is not running speculative decoding")
    for r in rows:
        if r["applied_share"] is not None and r["applied_share"] < 1.0:
            reasons = {k for p in passes if p["budget"] == r["budget"] for k in p["not_applied_reasons"]}
            out.append(f"budget {r['budget']:g}: ASD applied to {r['applied_share']:.0%} of requests "
                       f"(reasons: {', '.join(sorted(reasons))})")
        if r["applied_share"] is None:
            out.append(f"budget {r['budget']:g}: no ASD receipts in responses (is this an sglang-asd server?)")
        if r["drift_median"] is not None and r["drift_median"] > 0.05:
            out.append(f"budget {r['budget']:g}: median baseline drift {r['drift_median']:.1%} > 5%: "
                       "the ratio is noise-dominated; use more repeats or a quieter machine")
    return out


def server_info(url: str) -> dict:
    """What the server says about itself (model, speculative settings), best effort:
    ``/server_info`` (SGLang >= 0.5.23), else ``/get_server_info``; nested groups are searched."""
    keys = ("model_path", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
            "speculative_num_draft_tokens", "speculative_draft_model_path", "dtype", "device",
            "attention_backend", "disable_radix_cache", "disable_cuda_graph", "tp_size", "version",
            "launch_command")
    info = None
    for path in ("/server_info", "/get_server_info"):
        try:
            r = requests.get(url + path, timeout=10)
            if r.status_code == 200:
                info = r.json()
                break
        except (requests.RequestException, ValueError):
            continue
    if not isinstance(info, dict):
        return {}
    found: dict = {}

    def visit(d: dict, depth: int) -> None:
        for k, v in d.items():
            if k in keys and k not in found and not isinstance(v, dict):
                found[k] = v
            elif isinstance(v, dict) and depth < 2:
                visit(v, depth + 1)

    visit(info, 0)
    return {k: found[k] for k in keys if k in found}


def run(args: argparse.Namespace, url: str) -> dict:
    budgets = parse_budgets(args.budgets)
    tasks = datasets.parse_tasks(args.dataset)
    prompts = datasets.mixed_prompts(tasks, args.num_prompts)
    model = served_model(requests.Session(), url)

    def reqs(budget: float, max_new: int) -> list[GenRequest]:
        return [GenRequest(text=p.text, max_new_tokens=max_new, budget=budget, ignore_eos=True,
                           stream=args.stream, api=args.api, model=model, tag=p.id) for p in prompts]

    if args.warmup:
        run_pass(url, reqs(0.0, 4), args.concurrency, args.timeout, desc="warm-up")
    order = schedule(budgets)
    expected = len(prompts) * args.max_new_tokens
    passes: list[dict] = []
    from tqdm import tqdm

    with tqdm(total=args.repeats * len(order), desc="speed passes", unit="pass", dynamic_ncols=True) as bar:
        for repeat in range(args.repeats):
            for budget in order:
                label = "strict" if budget == 0 else f"B={budget:g}"
                p = run_pass(url, reqs(budget, args.max_new_tokens), args.concurrency, args.timeout,
                             desc=f"repeat {repeat + 1} {label}")
                passes.append(pass_record(label, budget, repeat, p, expected))
                bar.set_postfix_str(f"{label} {fmt_rate(passes[-1]['tok_s'])}")
                bar.update(1)
    rows = summarize(passes, budgets)
    return {
        "kind": "asd-speed", "version": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {"url": url, "launched": args.launch, "budgets": budgets, "datasets": tasks,
                   "num_prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
                   "concurrency": args.concurrency, "repeats": args.repeats, "api": args.api,
                   "stream": args.stream, "warmup": args.warmup, "model": model},
        "server": server_info(url),
        "budgets": rows, "passes": passes, "warnings": warnings_for(passes, rows),
    }


def fmt_rate(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.1f} tok/s"


def write(result: dict, out: Path) -> None:
    report.write_json(out / "speed.json", result)
    report.write_csv(out / "speed.csv", result["budgets"], [k for k, _ in COLUMNS] + ["drift_max", "fixed_work_ok"])
    cfg = result["config"]
    md = [f"# ASD speed at fixed work ({result['created']})", "",
          f"Server `{cfg['url']}` model `{cfg['model']}`; {cfg['num_prompts']} prompts from "
          f"{', '.join(cfg['datasets'])}, ignore_eos, max_new_tokens {cfg['max_new_tokens']}, "
          f"concurrency {cfg['concurrency']}, route {cfg['api']}{' (stream)' if cfg['stream'] else ''}, "
          f"{cfg['repeats']} repeat(s) of strict-candidate-strict.", "",
          report.markdown_table(result["budgets"], COLUMNS)]
    if result["server"]:
        md += ["Server: " + ", ".join(f"{k}={v}" for k, v in result["server"].items()), ""]
    if result["warnings"]:
        md += ["Warnings:", *[f"- {w}" for w in result["warnings"]], ""]
    (out / "speed.md").write_text("\n".join(md) + "\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sglang_asd.bench.speed", description=__doc__.split("\n\n")[0])
    add_server_args(p)
    p.add_argument("--budgets", default="0,2,8,32", help="comma-separated asd_budget values (default 0,2,8,32)")
    p.add_argument("--dataset", default="gsm8k,mtbench", help=f"prompt sources, subset of {','.join(datasets.TASKS)}")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--api", choices=("generate", "completions", "chat"), default="generate")
    p.add_argument("--stream", action="store_true", help="stream responses (measures the streaming path)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false")
    p.add_argument("--timeout", type=float, default=600.0, help="per-request timeout, seconds")
    p.add_argument("--launch-timeout", type=float, default=900.0, help="seconds to wait for a launched server")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("num_prompts", "max_new_tokens", "concurrency", "repeats"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    try:
        parse_budgets(args.budgets)
        datasets.parse_tasks(args.dataset)
    except ValueError as e:
        raise SystemExit(f"error: {e}")
    args.out.mkdir(parents=True, exist_ok=True)
    with target_server(args) as url:
        result = run(args, url)
    write(result, args.out)
    print(report.markdown_table(result["budgets"], COLUMNS))
    for w in result["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(f"wrote {args.out / 'speed.json'}, speed.csv, speed.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
