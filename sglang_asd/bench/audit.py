"""Quality audit at natural stop: what a budget does to answers.

``python -m sglang_asd.bench.audit (--url URL | --launch='SERVER ARGS') --budgets 0,8,32
    --tasks gsm8k,math500,humaneval,mbpp,mmlu,mtbench --limit 50 --out DIR [--speed-json speed.json]``

For each budget (budget 0 = strict is always run, first) and task, the first ``--limit`` items of
the shipped subset are generated greedily to their natural end (EOS or the task's cap), then
scored (see ``scoring``). Per task and budget: accuracy, mean completion length, the share of
outputs whose text differs from the strict output of the same item (hash divergence), for
MT-Bench also the mean similarity to the strict text (difflib ratio), mean accept length,
verify rounds and regret spent per request. ``--noise-floor`` runs strict twice and reports the
divergence between the two strict runs (batching can change greedy output on some hardware).

Writes ``audit.json`` (+ per-budget means), ``audit_items.jsonl`` (every output, scored),
``audit.csv``, ``audit.md`` and ``frontier.png`` (x = speedup from ``--speed-json`` when given,
else mean accept length; y = accuracy).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import sys
import time
from pathlib import Path
from typing import Optional

import requests

from sglang_asd.bench import datasets, report, scoring, stats
from sglang_asd.bench.client import GenRequest, parse_budgets, served_model
from sglang_asd.bench.metrics import first_errors, result_metrics
from sglang_asd.bench.runner import run_pass
from sglang_asd.bench.server import add_server_args, target_server

COLUMNS = (
    ("task", "task"), ("budget", "budget"), ("n", "n"), ("accuracy", "accuracy"),
    ("completion_tokens_mean", "mean length (tokens)"), ("divergence_share", "differs from strict"),
    ("similarity_mean", "similarity to strict"), ("accept_length", "accept len"),
    ("verify_ct_mean", "verify rounds/req"), ("spent_mean", "spent/req (nats)"),
    ("exceptions_mean", "exceptions/req"), ("errors", "errors"),
)
BUDGET_COLUMNS = (
    ("budget", "budget"), ("accuracy_mean", "accuracy (mean over scored tasks)"),
    ("divergence_share", "differs from strict"), ("completion_tokens_mean", "mean length (tokens)"),
    ("accept_length_mean", "accept len (mean over tasks)"),
    ("speedup", "tok/s ASD/strict (speed run)"), ("spent_mean", "spent/req (nats)"),
)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def generate(url: str, prompts: list[datasets.Prompt], budget: float, args: argparse.Namespace, model: str,
             label: str) -> list[dict]:
    reqs = [GenRequest(text=p.text, max_new_tokens=args.max_new_tokens or p.max_new_tokens, budget=budget,
                       ignore_eos=False, stream=False, api=args.api, model=model, tag=p.id) for p in prompts]
    results = run_pass(url, reqs, args.concurrency, args.timeout, desc=label).results
    return [r.to_dict() for r in results]


def score_records(task: str, prompts: list[datasets.Prompt], records: list[dict], args: argparse.Namespace) -> None:
    """Add ``correct``/``extracted``/``score_detail``/``hash`` to each record, in place."""
    ok = [i for i, r in enumerate(records) if r["ok"]]
    scores = scoring.score_many(task, [prompts[i].item for i in ok], [records[i]["text"] for i in ok],
                                timeout=args.exec_timeout, workers=args.exec_workers)
    for r in records:
        r.update(task=task, correct=None, extracted=None, score_detail="", hash=None)
    for i, s in zip(ok, scores):
        records[i].update(correct=s.correct, extracted=s.extracted, score_detail=s.detail,
                          hash=text_hash(records[i]["text"]))


def compare_to_strict(records: list[dict], strict: dict[str, dict]) -> dict:
    """Divergence share and mean similarity against the strict record of the same item."""
    pairs = [(r, strict.get(r["tag"])) for r in records if r["ok"]]
    pairs = [(r, s) for r, s in pairs if s is not None and s["ok"]]
    if not pairs:
        return {"divergence_share": None, "similarity_mean": None, "compared": 0}
    differs = sum(1 for r, s in pairs if r["hash"] != s["hash"])
    sims = [similarity(r["text"], s["text"]) for r, s in pairs]
    return {"divergence_share": differs / len(pairs), "similarity_mean": stats.mean(sims), "compared": len(pairs)}


def task_row(task: str, budget: float, records: list[dict], strict: dict[str, dict]) -> dict:
    scored = [r["correct"] for r in records if r["ok"] and r["correct"] is not None]
    m = result_metrics(records)
    return {
        "task": task, "budget": budget, "n": len(records),
        "accuracy": (sum(scored) / len(scored)) if scored else None, "scored": len(scored),
        **compare_to_strict(records, strict),
        **{k: m[k] for k in ("completion_tokens_mean", "accept_length", "accept_length_mean", "verify_ct_mean",
                             "spent_mean", "exceptions_mean", "applied_share", "errors", "not_applied_reasons")},
        "first_errors": first_errors(records),
    }


def by_budget(rows: list[dict], speed: Optional[dict]) -> list[dict]:
    speedups = report.speedups_by_budget(speed)
    out = []
    for b in sorted({r["budget"] for r in rows if not r.get("noise_floor")}):
        rs = [r for r in rows if r["budget"] == b and not r.get("noise_floor")]
        compared = sum(r["compared"] for r in rs)
        out.append({
            "budget": b,
            "accuracy_mean": stats.mean(r["accuracy"] for r in rs),
            "divergence_share": (sum((r["divergence_share"] or 0) * r["compared"] for r in rs) / compared)
            if compared else None,
            "accept_length_mean": stats.mean(r["accept_length"] for r in rs),
            "completion_tokens_mean": stats.mean(r["completion_tokens_mean"] for r in rs),
            "spent_mean": stats.mean(r["spent_mean"] for r in rs),
            "speedup": speedups.get(float(b)),
        })
    return out


def run(args: argparse.Namespace, url: str) -> tuple[dict, list[dict]]:
    budgets = parse_budgets(args.budgets)
    budgets = [0.0] + [b for b in budgets if b != 0]  # strict first: the reference for divergence
    tasks = datasets.parse_tasks(args.tasks)
    prompts = {t: datasets.load_prompts(t, args.limit) for t in tasks}
    model = served_model(requests.Session(), url)
    plan = [(b, t, False) for b in budgets for t in tasks]
    if args.noise_floor:
        plan[len(tasks):len(tasks)] = [(0.0, t, True) for t in tasks]
    strict: dict[str, dict[str, dict]] = {}
    rows: list[dict] = []
    items: list[dict] = []
    from tqdm import tqdm

    for budget, task, repeat in tqdm(plan, desc="audit", unit="run", dynamic_ncols=True):
        label = f"{task} B={budget:g}" + (" (strict again)" if repeat else "")
        records = generate(url, prompts[task], budget, args, model, label)
        score_records(task, prompts[task], records, args)
        if budget == 0 and not repeat:
            strict[task] = {r["tag"]: r for r in records}
        row = task_row(task, budget, records, strict.get(task, {}))
        if budget == 0 and not repeat:
            row.update(divergence_share=0.0, similarity_mean=1.0)  # the reference itself
        row["noise_floor"] = repeat
        rows.append(row)
        for r in records:
            r["noise_floor"] = repeat
        items += records
    return rows, items


def warnings_for(rows: list[dict]) -> list[str]:
    out = []
    errors = sum(r["errors"] for r in rows)
    if errors:
        out.append(f"{errors} request(s) failed, e.g. {next(e for r in rows for e in r['first_errors'])}")
    if rows and all(r["verify_ct_mean"] is None for r in rows):
        out.append("no spec_verify_ct in responses: the server is not running speculative decoding")
    for r in rows:
        if r["budget"] > 0 and r["applied_share"] is None:
            out.append(f"{r['task']} budget {r['budget']:g}: no ASD receipts (is this an sglang-asd server?)")
        elif r["budget"] > 0 and r["applied_share"] < 1.0:
            out.append(f"{r['task']} budget {r['budget']:g}: ASD applied to {r['applied_share']:.0%} of requests "
                       f"(reasons: {', '.join(sorted(r['not_applied_reasons']))})")
    return out


def assemble(args: argparse.Namespace, url: str, rows: list[dict], speed: Optional[dict]) -> dict:
    return {
        "kind": "asd-audit", "version": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "title": "ASD speed / quality frontier",
        "config": {"url": url, "launched": args.launch, "budgets": parse_budgets(args.budgets),
                   "tasks": datasets.parse_tasks(args.tasks), "limit": args.limit, "api": args.api,
                   "concurrency": args.concurrency, "max_new_tokens": args.max_new_tokens or "per task",
                   "speed_json": str(args.speed_json) if args.speed_json else None},
        "results": [r for r in rows if not r.get("noise_floor")],
        "noise_floor": [r for r in rows if r.get("noise_floor")],
        "by_budget": by_budget(rows, speed),
        "warnings": warnings_for(rows),
    }


def write(audit: dict, items: list[dict], out: Path, speed: Optional[dict]) -> None:
    report.write_json(out / "audit.json", audit)
    report.write_jsonl(out / "audit_items.jsonl", items)
    report.write_csv(out / "audit.csv", audit["results"], [k for k, _ in COLUMNS] + ["accept_length_mean"])
    report.plot_frontier(audit, out / "frontier.png", speed)
    cfg = audit["config"]
    md = [f"# ASD quality audit at natural stop ({audit['created']})", "",
          f"Server `{cfg['url']}`, route {cfg['api']}, first {cfg['limit'] or 'all'} items per task, "
          f"greedy, natural stop (max_new_tokens {cfg['max_new_tokens']}), concurrency {cfg['concurrency']}.", "",
          "## Per budget", "", report.markdown_table(audit["by_budget"], BUDGET_COLUMNS),
          "## Per task", "", report.markdown_table(audit["results"], COLUMNS)]
    if audit["noise_floor"]:
        md += ["## Strict run twice (noise floor of divergence)", "",
               report.markdown_table(audit["noise_floor"], COLUMNS)]
    if audit["warnings"]:
        md += ["Warnings:", *[f"- {w}" for w in audit["warnings"]], ""]
    md += ["MT-Bench has no judge offline: its accuracy is n/a; read divergence, similarity and length.",
           "", "![frontier](frontier.png)", ""]
    (out / "audit.md").write_text("\n".join(md) + "\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sglang_asd.bench.audit", description=__doc__.split("\n\n")[0])
    add_server_args(p)
    p.add_argument("--budgets", default="0,8,32", help="comma-separated asd_budget values; 0 is always added")
    p.add_argument("--tasks", default=",".join(datasets.TASKS), help="comma-separated tasks")
    p.add_argument("--limit", type=int, default=None, help="first N items per task (default: all shipped)")
    p.add_argument("--api", choices=("chat", "completions", "generate"), default="chat",
                   help="route; chat applies the model's chat template (default)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="override every task's cap")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--timeout", type=float, default=1200.0, help="per-request timeout, seconds")
    p.add_argument("--exec-timeout", type=float, default=10.0, help="seconds per code test program")
    p.add_argument("--exec-workers", type=int, default=2, help="code test programs run at once")
    p.add_argument("--noise-floor", action="store_true", help="run strict twice and report their divergence")
    p.add_argument("--speed-json", type=Path, help="speed.json of a speed run on the same server (x axis)")
    p.add_argument("--launch-timeout", type=float, default=900.0)
    p.add_argument("--out", type=Path, required=True)
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        parse_budgets(args.budgets)
        datasets.parse_tasks(args.tasks)
        if args.limit is not None and args.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {args.limit}")
        if args.concurrency < 1:
            raise ValueError(f"--concurrency must be >= 1, got {args.concurrency}")
        speed = report.load_json(args.speed_json) if args.speed_json else None
    except (ValueError, OSError) as e:
        raise SystemExit(f"error: {e}")
    args.out.mkdir(parents=True, exist_ok=True)
    with target_server(args) as url:
        rows, items = run(args, url)
    audit = assemble(args, url, rows, speed)
    write(audit, items, args.out, speed)
    print(report.markdown_table(audit["by_budget"], BUDGET_COLUMNS))
    for w in audit["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(f"wrote {args.out / 'audit.json'}, audit.md, audit.csv, audit_items.jsonl, frontier.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
