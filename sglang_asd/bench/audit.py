"""Quality audit at natural stop: what an arm does to answers, paired with strict item by item.

``python -m sglang_asd.bench.audit (--url URL | --launch='SERVER ARGS') [--budgets 0,8,32]
    [--arms 'b8g05:asd_budget=8,asd_gate=0.5'] --tasks gsm8k,math500,humaneval,mbpp,mmlu,mtbench
    --limit 50 [--temperature 0.7 --top-p 0.95 --samples 2] --out DIR [--noise-floor]
    [--speed-json speed.json] [--resume]``

For each task and arm (``strict`` = budget 0 always, first; see ``arms``), the first ``--limit``
items of the shipped subset are generated to their natural end (EOS or the cap), greedily or, with
``--temperature``, sampled ``--samples`` times per item with seeds 0..N-1, the same seeds under
every arm (``sampling``), then scored (see ``scoring``). Every arm is paired with strict on the same
(item, seed) (``audit_summary``):
accuracy delta with a paired-bootstrap 95% interval and the exact McNemar p-value, length delta
with its interval, divergence from the strict text, acceptance and regret spent.
``--noise-floor`` adds the arm ``strict-rerun`` (strict run again): the floor of divergence.

Every scored item is appended to ``DIR/audit_items.jsonl`` as it arrives; ``--resume``
continues a stopped run (same server, route and cap, checked; arms and items may be added) and
``--report-only`` rewrites the report from the log. Writes ``audit.json``, ``audit.csv``,
``audit.md`` and ``frontier.png`` (x = speed-up of the arm from ``--speed-json`` when given,
else mean accept length; y = accuracy change against strict, with intervals) as each task
completes and at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

import requests

from sglang_asd.bench import audit_summary, datasets, report, sampling, scoring
from sglang_asd.bench.arms import Arm, resolve_arms
from sglang_asd.bench.audit_report import BY_ARM_COLUMNS, write
from sglang_asd.bench.client import GenRequest, served_model
from sglang_asd.bench.runlog import RunLog, RunLogError, logged_servers, read_log
from sglang_asd.bench.metrics import first_errors
from sglang_asd.bench.runner import PassFailed, preflight, run_pass
from sglang_asd.bench.server import add_server_args, identity, server_info, target_server, with_launch_facts

LOG_NAME = "audit_items.jsonl"
LOG_KIND = "asd-audit-log"
DEFAULT_BUDGETS = "0,8,32"
NOISE_ARM = Arm("strict-rerun", {"asd_budget": 0.0})


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def measured_arms(args: argparse.Namespace) -> list[Arm]:
    arms = resolve_arms(args.budgets, args.arms, DEFAULT_BUDGETS, rules=args.rules)
    if any(a.label == NOISE_ARM.label for a in arms):
        raise ValueError(f"arm label {NOISE_ARM.label!r} is reserved for --noise-floor")
    return arms + ([NOISE_ARM] if args.noise_floor else [])


def items_of(records: list[dict]) -> list[dict]:
    """The item records of a log (the others are the plan of each invocation)."""
    return [r for r in records if r.get("kind") == "item"]


def last_plan(records: list[dict]) -> dict:
    """What the latest invocation asked for (arms, tasks, limit): ``--report-only``'s defaults."""
    plans = [r for r in records if r.get("kind") == "plan"]
    if not plans:
        raise RunLogError("the audit log holds no plan record")
    return plans[-1]


def check_arms(records: list[dict], arms: list[Arm], path: Path) -> None:
    """A resumed log may gain arms, never change what a stored label sends."""
    stored: dict[str, dict] = {}
    for r in records:
        stored.setdefault(r["arm"], r["fields"])
    for arm in arms:
        if arm.label in stored and stored[arm.label] != dict(arm.fields):
            raise RunLogError(f"--resume: arm {arm.label!r} sends {dict(arm.fields)} but {path} has it sending "
                              f"{stored[arm.label]}; use another label")


def score_record(task: str, prompt: datasets.Prompt, record: dict, args: argparse.Namespace) -> dict:
    """The logged form of one answer: the client's result plus its score and text hash."""
    record.update(task=task, correct=None, extracted=None, score_detail="", hash=None)
    if record["ok"]:
        (s,) = scoring.score_many(task, [prompt.item], [record["text"]], timeout=args.exec_timeout, workers=1)
        record.update(correct=s.correct, extracted=s.extracted, score_detail=s.detail, hash=text_hash(record["text"]))
    return record


def plan(arms: list[Arm], prompts: dict[str, list[datasets.Prompt]], done: set,
         seeds: Sequence[Optional[int]] = (None,)) -> list[tuple[str, Arm, datasets.Prompt, Optional[int]]]:
    """Every (task, arm, item, seed) request not yet done, for one pass: task by task, item by item,
    seed by seed, with every arm of an (item, seed) together (strict first). ``done`` holds
    ``(arm, task, item, seed)``, seed 0 for None (``sampling.seed_of``). A stopped run leaves items
    paired across arms, and one pass keeps the server's batch full instead of draining it at the
    end of each arm or task (where throughput grows with the batch, as on CPU, a pass per task
    loses throughput at every task boundary: docs/MEASURING.md#host-effects-behind-the-method)."""
    return [(t, a, p, seed) for t, items in prompts.items() for p in items for seed in seeds for a in arms
            if (a.label, t, p.id, seed or 0) not in done]


def run(args: argparse.Namespace, arms: list[Arm], tasks: list[str], speed: Optional[dict]) -> dict:
    """Generate and score every (task, arm, item, seed) not yet in the log in one pass (``plan``); the
    report is rewritten as each task completes. Returns the final report."""
    prompts = {t: datasets.load_prompts(t, args.limit) for t in tasks}
    how = args.sampling
    fp = {"api": args.api, "max_new_tokens": args.max_new_tokens, "launch": args.launch, **how.fingerprint()}
    log_path = args.out / LOG_NAME
    RunLog.precheck(log_path, LOG_KIND, fp, args.resume)
    with target_server(args) as url:
        info = with_launch_facts(server_info(url), launched=args.launch is not None)
        fp["server"] = identity(info)
        model = served_model(requests.Session(), url)
        first = prompts[tasks[0]][0]
        preflight([(a.label, url, GenRequest(text=first.text, max_new_tokens=1, fields=dict(a.fields), api=args.api,
                                             model=model, tag="preflight", temperature=how.temperature,
                                             top_p=how.top_p, seed=how.seeds[0])) for a in arms], args.timeout)
        log = RunLog.open(log_path, LOG_KIND, fp, args.resume)
        check_arms(items_of(log.records), arms, log_path)
        log.append({"kind": "plan", "arms": [a.to_dict() for a in arms], "tasks": tasks, "limit": args.limit,
                    "concurrency": args.concurrency, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "servers": {"server": info}})
        done = {key for key, r in audit_summary.latest(items_of(log.records)).items() if r["ok"]}
        todo = plan(arms, prompts, done, how.seeds)
        left = Counter(task for task, _, _, _ in todo)
        reqs = [GenRequest(text=p.text, max_new_tokens=args.max_new_tokens or p.max_new_tokens,
                           fields=dict(arm.fields), api=args.api, model=model, tag=p.id, temperature=how.temperature,
                           top_p=how.top_p, seed=seed) for _, arm, p, seed in todo]

        def current() -> dict:
            return build_result(log.header, log.records, arms, tasks, args.limit, args, speed, info)

        def on_result(i: int, result) -> None:
            task, arm, prompt, _ = todo[i]
            rec = score_record(task, prompt, result.to_dict(), args)
            log.append({"kind": "item", "arm": arm.label, "fields": dict(arm.fields), **rec})
            left[task] -= 1
            if not left[task] and sum(left.values()):   # a task is complete, others run: show it
                write(current(), args.out, speed)

        if todo:
            p = run_pass(url, reqs, args.concurrency, args.timeout, desc="audit", on_result=on_result)
            if failed := [r for r in p.results if not r.ok]:
                write(current(), args.out, speed)
                # A server that dropped requests would fail the rest too: stop; --resume redoes the items.
                raise PassFailed(f"{len(failed)} of {len(p.results)} requests failed "
                                 f"({'; '.join(first_errors(failed, 2))}); rerun with --resume to redo them")
        return current()


def build_result(header: dict, records: list[dict], arms: list[Arm], tasks: list[str], limit: Optional[int],
                 args: argparse.Namespace, speed: Optional[dict], info: Optional[dict] = None) -> dict:
    """The report of a log (complete or not): per task and arm, and per arm pooled."""
    prompts = {t: datasets.load_prompts(t, limit) for t in tasks}
    fp = header["fingerprint"]
    how = sampling.Sampling.of_fingerprint(fp)
    planned = {t: len(ps) * how.samples for t, ps in prompts.items()}
    # Only the planned items: a log that a larger --limit has grown is reported at a smaller one.
    ids = {(t, p.id) for t, ps in prompts.items() for p in ps}
    rows, by_arm = audit_summary.summarize([r for r in items_of(records) if (r["task"], r["tag"]) in ids],
                                           arms, tasks, planned)
    speedups = report.speedups_by_arm(speed)
    for r in by_arm:
        r["speedup"] = speedups.get(r["arm"], {}).get("value")
    planned_total = len(arms) * sum(planned.values())
    return {
        "kind": "asd-audit", "version": 2, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "title": "ASD speed / quality frontier" + ("" if how.greedy else
                                                   f" (sampled: T {how.temperature:g}, top-p {how.top_p:g}, "
                                                   f"{how.samples} seed(s) per item)"),
        "config": {**fp, "sampling": dataclasses.asdict(how), "arms": [a.to_dict() for a in arms], "tasks": tasks,
                   "limit": limit,
                   "concurrency": logged_concurrency(records), "log_created": header["created"],
                   "speed_json": str(args.speed_json) if args.speed_json else None},
        "complete": {"items": sum(r["n"] for r in rows), "planned": planned_total,
                     "line": audit_summary.complete_line(rows, planned_total)},
        "server": info if info is not None else logged_servers(records).get("server", fp.get("server")),
        "results": rows, "by_arm": by_arm,
        "noise_floor": [r for r in rows if r["arm"] == NOISE_ARM.label],
        "warnings": audit_summary.warnings_for(rows),
    }


def logged_concurrency(records: list[dict]):
    """The concurrency the log's items ran at: one value, or the list of them when a resume changed
    it (concurrency is not part of the fingerprint: outputs do not depend on timing, though a batch's
    shape may move a near-tie), with None for runs that predate the field; None if all do."""
    values = {r.get("concurrency") for r in records if r.get("kind") == "plan"}
    if len(values) <= 1:
        return next(iter(values), None)
    return sorted(values, key=lambda v: (v is None, v or 0))


def report_only(args: argparse.Namespace, speed: Optional[dict]) -> dict:
    """The report of the log in ``--out``: the latest plan's arms, tasks and limit, unless
    ``--tasks`` / ``--limit`` are given; arms the log holds beyond the plan are reported too."""
    header, records = read_log(args.out / LOG_NAME, LOG_KIND)
    plan_ = last_plan(records)
    arms = [Arm.from_dict(a) for a in plan_["arms"]]
    for r in items_of(records):
        if all(a.label != r["arm"] for a in arms):
            arms.append(Arm(r["arm"], r["fields"]))
    tasks = datasets.parse_tasks(args.tasks) if args.tasks else plan_["tasks"]
    limit = args.limit if args.limit is not None else plan_["limit"]
    return build_result(header, records, arms, tasks, limit, args, speed)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sglang_asd.bench.audit", description=__doc__.split("\n\n")[0])
    add_server_args(p)
    p.add_argument("--budgets", help=f"comma-separated asd_budget values, shorthand for arms (default "
                                     f"{DEFAULT_BUDGETS} when --arms is not given either); strict is always run")
    p.add_argument("--arms", help="'LABEL:FIELD=VALUE,...;LABEL:...', e.g. 'b8g05:asd_budget=8,asd_gate=0.5'")
    p.add_argument("--rules", help="acceptance rules, each over its knob: 'asd=2|8,local=1,margin=0.5|2,threshold=0.5' "
                                   "(asd, local, fly-bounded: asd_budget; margin: asd_margin; threshold: asd_threshold; "
                                   "fly: asd_fly_entropy_threshold)")
    p.add_argument("--tasks", help=f"comma-separated tasks (default {','.join(datasets.TASKS)}; --report-only: "
                                   "the run's)")
    p.add_argument("--limit", type=int, default=None, help="first N items per task (default: all shipped)")
    p.add_argument("--api", choices=("chat", "completions", "generate"), default="chat",
                   help="route; chat applies the model's chat template (default)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="override every task's cap")
    sampling.add_args(p)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--timeout", type=float, default=1200.0, help="per-request timeout, seconds")
    p.add_argument("--exec-timeout", type=float, default=10.0, help="seconds per code test program")
    p.add_argument("--noise-floor", action="store_true", help="run strict twice and report their divergence")
    p.add_argument("--speed-json", type=Path, help="speed.json of a speed run on the same server (x axis)")
    p.add_argument("--out", type=Path, required=True, help="output folder (holds the run log)")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.sampling = sampling.from_args(parser, args)
    try:
        arms = measured_arms(args)
        tasks = datasets.parse_tasks(args.tasks or ",".join(datasets.TASKS))
        for name in ("limit", "max_new_tokens", "concurrency"):
            value = getattr(args, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        speed = report.load_json(args.speed_json) if args.speed_json else None
        if args.report_only:
            audit = report_only(args, speed)
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            audit = run(args, arms, tasks, speed)
    except (ValueError, OSError) as e:
        raise SystemExit(f"error: {e}")
    except PassFailed as e:
        print(f"error: {e}; wrote what is complete to {args.out / 'audit.json'}", file=sys.stderr)
        return 1
    write(audit, args.out, speed)
    print(report.markdown_table(audit["by_arm"], BY_ARM_COLUMNS))
    for w in audit["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(f"{audit['complete']['line']}; wrote {args.out / 'audit.json'}, audit.md, audit.csv, frontier.png "
          f"(log {args.out / LOG_NAME})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
