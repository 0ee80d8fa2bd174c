"""Choosing a budget: from a quality target to a setting, measured on your prompts and server.

``python -m sglang_asd.calibrate (--url URL | --launch='SERVER ARGS') (--prompts FILE.jsonl
    [--scorer number|boxed|choice|exact] | --tasks gsm8k --limit 32) [--budgets 0,1,2,4,8,16]
    [--gates 0.1,0.25] [--arms 'LABEL:asd_budget=8,asd_max_exceptions_per_block=1']
    [--max-accuracy-drop 1] [--min-agreement 0.95] [--max-length-change 0.03] [--confidence 0.95]
    --out DIR [--resume | --report-only] [--quick]``

Runs strict (budget 0) and a ladder of settings (every budget of ``--budgets`` at every gate of
``--gates``, plus ``--arms``) over the same prompts, in two phases logged to one run log:

1. quality at natural stop (EOS or the cap), every setting of a prompt sent together, strict
   first (as ``bench.audit``): each answer is scored where the prompt has a reference, and its
   final answer, length and first exception are kept;
2. speed at fixed work (``ignore_eos``, ``--speed-max-new-tokens``; as ``bench.speed``'s rounds
   schedule): every setting runs each round of ``--concurrency`` prompts, paired with strict's
   pass over the same round, after a warm-up that puts every prompt's prefix in the cache.

Then, per setting (``calibrate_summary``): tok/s and tokens per verify round against strict, spend
per request (mean, worst), and quality against strict with intervals: accuracy change where
references exist, the share of prompts with strict's final answer, the change in length. Given a
target (``--max-accuracy-drop`` points, ``--min-agreement``, ``--max-length-change``; by default
1 point of accuracy where references exist, else 95% agreement), it recommends the fastest setting
whose intervals meet it, or says that none does and why: too few prompts to tell is one answer.
Writes ``calibrate.md``, ``calibrate.json``, ``calibrate.csv``, ``calibrate.png`` and the
recommended server flags and YAML lines (``calibrate_report``).

``--quick`` measures no answers: it probes each prompt once with
``asd_max_exceptions_per_block=1`` and reads, from the receipt's first exception, the regret and
(by re-sending the prompt cut after that token at gates just above regret / q) the suffix value
q = K - i of the first strict rejection, then gives the article's starting point: the 25th
percentile of regret / suffix value (``calibrate_summary.quick_recipe``), saying what it does not
measure.

Every answer, pass and probe is appended to ``DIR/calibrate_log.jsonl`` as it completes;
``--resume`` continues a stopped run (same configuration, checked), ``--report-only`` rewrites the
report from the log, with other targets if given. ``--reuse-answers LOG`` takes the phase-1 answers
of another run's settings that this run also has (the same fields) instead of asking for them again:
only from a run of the same server (its identity and launch arguments, and the settings its receipts
report for each setting), caps, route, concurrency and sampling, whose prompts are all among this
run's with the same texts (``reuse_answers``); speed is always measured in this run, all arms together. Imports neither SGLang nor torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Optional

import requests

from sglang_asd.bench import calibrate_report, calibrate_summary, datasets, host, sampling, scoring, speed
from sglang_asd.bench import speed_summary
from sglang_asd.bench.arms import STRICT, STRICT_ARM, Arm, budget_label, check_unique, parse_arms
from sglang_asd.bench.calibrate_summary import Targets
from sglang_asd.bench.client import GenRequest, GenResult, parse_budgets, served_model
from sglang_asd.bench.metrics import first_errors
from sglang_asd.bench.runlog import RunLog, RunLogError, fingerprint_diff, logged_servers, read_log
from sglang_asd.bench.runner import PassFailed, preflight, run_pass
from sglang_asd.bench.sampling import seed_of
from sglang_asd.bench.scoring import answers, final
from sglang_asd.bench.scoring.code import extract_code
from sglang_asd.bench.server import add_server_args, identity, server_info, target_servers, with_launch_facts

LOG_NAME = "calibrate_log.jsonl"
LOG_KIND = "asd-calibrate-log"
DEFAULT_BUDGETS = "0,1,2,4,8,16"
DEFAULT_TASKS = "gsm8k"
DEFAULT_LIMIT = 32
DEFAULT_FILE_CAP = 512
PROBE_LABEL = "probe"
ITEM_KEYS = ("tag", "seed", "ok", "error", "status", "text", "completion_tokens", "finish_reason", "spec_verify_ct",
             "spec_accept_length", "latency_s")


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# ---------------------------------------------------------------- what is measured


def ladder(args: argparse.Namespace) -> list[Arm]:
    """strict, then every budget of ``--budgets`` at every gate of ``--gates`` (``b8``, or ``b8g0.25``
    with gates), then ``--arms``."""
    gates: list[Optional[float]] = [None]
    if args.gates:
        gates = parse_budgets(args.gates)
        if 0.0 in gates:
            raise ValueError("--gates must be > 0 (gate 0 is strict, which is always measured)")
    out = [STRICT_ARM]
    for b in parse_budgets(args.budgets or DEFAULT_BUDGETS):
        if b == 0:
            continue
        for g in gates:
            fields = {"asd_budget": b, **({} if g is None else {"asd_gate": g})}
            out.append(Arm(budget_label(b) + ("" if g is None else f"g{g:g}"), fields))
    if args.arms:
        out += [a for a in parse_arms(args.arms) if not (a.is_strict and a.label == STRICT)]
    if any(a.label == PROBE_LABEL for a in out):
        raise ValueError(f"arm label {PROBE_LABEL!r} is reserved for --quick's probe")
    check_unique(out)
    return out


def load_prompts(args: argparse.Namespace) -> tuple[list[datasets.Prompt], str]:
    """The prompts and where they come from: ``--prompts FILE`` or the shipped ``--tasks``."""
    if args.prompts:
        prompts = datasets.load_prompt_file(args.prompts, args.max_new_tokens or DEFAULT_FILE_CAP)
        refs = sum(1 for p in prompts if "answer" in p.item)
        if refs and not args.scorer:
            raise ValueError(f"{args.prompts}: {refs} prompt(s) have a reference: name the rule that reads a reply's "
                             f"final answer, --scorer {'|'.join(final.SCORERS)}")
        return prompts, str(args.prompts)
    if args.scorer:
        raise ValueError("--scorer applies to --prompts; the shipped tasks are scored by their own rules")
    tasks = datasets.parse_tasks(args.tasks or DEFAULT_TASKS)
    limit = args.limit if args.limit is not None else DEFAULT_LIMIT
    prompts = [p for t in tasks for p in datasets.load_prompts(t, limit)]
    return prompts, f"{','.join(tasks)} (first {limit} per task)"


def has_references(prompts: list[datasets.Prompt]) -> bool:
    return any(p.task in scoring.SCORED_TASKS or "answer" in p.item and p.task == datasets.USER_TASK
               for p in prompts)


def targets_of(args: argparse.Namespace, scored: bool) -> tuple[Targets, bool]:
    """The targets asked for, or the default (1 point of accuracy with references, else 95%
    agreement); the flag says whether it is the default."""
    t = Targets(args.max_accuracy_drop, args.min_agreement, args.max_length_change, args.confidence)
    if t.max_accuracy_drop is not None and not scored:
        raise ValueError("--max-accuracy-drop needs prompts with references (a \"reference\" per line of --prompts "
                         "and a --scorer, or a scored task: " + ",".join(scoring.SCORED_TASKS) + ")")
    if t.given:
        return t, False
    if scored:
        return dataclasses.replace(t, max_accuracy_drop=1.0), True
    return dataclasses.replace(t, min_agreement=0.95), True


def score_item(prompt: datasets.Prompt, record: dict, scorer: Optional[str], exec_timeout: float) -> dict:
    """``correct`` (None without a reference) and ``answer`` (what agreement compares) of an answer."""
    record.update(correct=None, answer=None, hash=None)
    if not record["ok"]:
        return record
    text = record["text"]
    record["hash"] = text_hash(text)
    task = prompt.task
    if task == datasets.USER_TASK:
        if scorer is None:
            record["answer"] = record["hash"]
        elif "answer" in prompt.item:
            record["correct"], record["answer"] = final.score(scorer, text, prompt.item["answer"])
        else:
            record["answer"] = final.final_answer(scorer, text)
    elif task in scoring.CODE_TASKS:
        (s,) = scoring.score_many(task, [prompt.item], [text], timeout=exec_timeout, workers=1)
        record["correct"] = s.correct
        record["answer"] = text_hash(extract_code(text, prompt.item.get("entry_point")).strip())
    elif task in final.TASK_SCORER:
        s = scoring.score_text(task, prompt.item, text)
        record["correct"] = s.correct
        record["answer"] = (final.final_answer("number", s.extracted or "") if task == "gsm8k"
                            else answers.normalize_math(s.extracted) if task == "math500" else s.extracted)
    else:
        record["answer"] = record["hash"]
    return record


def item_record(arm: Arm, prompt: datasets.Prompt, res: GenResult) -> dict:
    receipt = res.receipt if isinstance(res.receipt, dict) else None
    events = (receipt or {}).get("events") or []
    return {"kind": "item", "arm": arm.label, "fields": dict(arm.fields), "task": prompt.task,
            **{k: getattr(res, k) for k in ITEM_KEYS},
            "receipt": None if receipt is None else {k: v for k, v in receipt.items() if k != "events"},
            "first_event_pos": events[0].get("pos") if events else None}


def fingerprint(args: argparse.Namespace, arms: list[Arm], prompts: list[datasets.Prompt], source: str) -> dict:
    fp = {"mode": "quick" if args.quick else "ladder", "arms": [a.to_dict() for a in arms],
          "prompts": [f"{p.task}/{p.id}" if p.task == datasets.USER_TASK else p.id for p in prompts],
          "prompt_hashes": text_hash("\n".join(p.text for p in prompts)), "source": source,
          "max_new_tokens": args.max_new_tokens, "speed_max_new_tokens": args.speed_max_new_tokens,
          "concurrency": args.concurrency, "api": args.api, "scorer": args.scorer, "launch": args.launch}
    if args.quick:
        fp["probe_budget"] = args.probe_budget
    if args.speed_prompts:
        fp["speed_prompts"] = args.speed_prompts
    fp.update(args.sampling.fingerprint())
    return fp


def probe_arm(budget: float) -> Arm:
    """The quick recipe's probe: the asd rule, one exception per block, a budget far above one regret."""
    return Arm(PROBE_LABEL, {"asd_budget": budget, "asd_rule": "asd", "asd_max_exceptions_per_block": 1})


def suffix_depth(info: dict) -> Optional[int]:
    """K: the draft positions per verify round the server's gate divides by (``speculative_num_steps``;
    NGRAM: its largest tree depth, ``speculative_num_draft_tokens - 1``)."""
    steps = info.get("speculative_num_steps")
    if info.get("speculative_algorithm") == "NGRAM" and info.get("speculative_num_draft_tokens"):
        return int(info["speculative_num_draft_tokens"]) - 1
    return int(steps) if steps else None


def check_reachable(url: str) -> None:
    try:
        requests.get(url.rstrip("/") + "/v1/models", timeout=30)
    except requests.RequestException as e:
        raise ValueError(f"cannot reach the server at {url}: {type(e).__name__}: {e}") from None


# ---------------------------------------------------------------- the run


def run(args: argparse.Namespace, arms: list[Arm], prompts: list[datasets.Prompt], source: str,
        targets: Targets, default_target: bool) -> dict:
    fp = fingerprint(args, arms, prompts, source)
    log_path = args.out / LOG_NAME
    RunLog.precheck(log_path, LOG_KIND, fp, args.resume)
    how = args.sampling
    with target_servers(args) as targets_:
        url = targets_.urls["speculative"]
        check_reachable(url)
        info = with_launch_facts(server_info(url), "speculative" in targets_.launched)
        fp["server"] = identity(info)
        model = served_model(requests.Session(), url)
        checked = [probe_arm(args.probe_budget)] if args.quick else arms
        probes = preflight([(a.label, url, GenRequest(text=prompts[0].text, max_new_tokens=1, fields=dict(a.fields),
                                             api=args.api, model=model, tag="preflight", temperature=how.temperature,
                                             top_p=how.top_p, seed=how.seeds[0])) for a in checked], args.timeout)
        log = RunLog.open(log_path, LOG_KIND, fp, args.resume)
        machine = host.machine()
        log.append({"kind": "plan", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine,
                    "repeats": args.repeats, "servers": {"server": info}})

        def request(p: datasets.Prompt, seed, fields: dict, max_new: int, ignore_eos: bool = False) -> GenRequest:
            return GenRequest(text=p.text, max_new_tokens=max_new, fields=dict(fields), ignore_eos=ignore_eos,
                              api=args.api, model=model, tag=p.id, temperature=how.temperature, top_p=how.top_p,
                              seed=seed)

        if args.quick:
            k = suffix_depth(info)
            if k is None:
                raise ValueError(f"--quick needs the server's speculative_num_steps (K of the gate) from "
                                 f"{url}/server_info, which does not give it")
            run_quick(args, log, prompts, url, request, k)
        else:
            if args.reuse_answers:
                reused = reuse_answers(args.reuse_answers, log, arms, prompts,
                                       {label: res.receipt for label, res in probes.items()})
                print(f"reused {sum(reused['answers'].values())} answers of {args.reuse_answers} "
                      f"({', '.join(f'{k}: {v}' for k, v in reused['answers'].items()) or 'none new'})")
            run_quality(args, log, arms, prompts, url, request)
            run_speed(args, log, arms, prompts, url, request, machine["id"], info)
        return build_result(log.header, log.records, arms, targets, default_target, args, info)


# Fingerprint keys a reused answer need not share: the settings and prompts are matched one by one,
# and the speed phase is never reused.
NOT_ANSWER_KEYS = frozenset({"arms", "prompts", "prompt_hashes", "source", "speed_max_new_tokens", "speed_prompts"})


# Receipt fields that say what a request got rather than which settings it ran under.
RECEIPT_OUTCOMES = frozenset({"applied", "reason", "spent", "remaining", "exceptions", "relaxed", "suffix_tokens",
                              "events", "events_truncated", "accrual_held", "accrual_min_headroom"})


def receipt_setting(receipt) -> Optional[dict]:
    """The settings a receipt says its request ran under (rule, budget, the rule's parameters, the
    accrual, the scope), without what it spent; None without a receipt."""
    if not isinstance(receipt, dict):
        return None
    out = {k: v for k, v in receipt.items() if k not in RECEIPT_OUTCOMES}
    if isinstance(out.get("scope"), dict):
        out["scope"] = {k: v for k, v in out["scope"].items() if k != "skipped"}
    return out


def reuse_answers(path: Path, log: RunLog, arms: list[Arm], prompts: list[datasets.Prompt],
                  receipts: dict[str, Optional[dict]]) -> dict:
    """Append to ``log`` the answers of ``path``'s run (``--reuse-answers``) to the (setting, prompt,
    seed) pairs ``log`` still lacks, each under this run's label of the setting with the same fields.

    An answer depends on the server, its ``--asd-*`` defaults (which fill what a request leaves out),
    the cap, route and sampling, and on the prompt's text; every one of those must equal this run's or
    nothing is taken and the error names the differences: ``log.header``'s fingerprint (server
    identity and launch arguments included), and, since a server given by ``--url`` shows no launch
    arguments, the settings each setting's receipt reports (``receipt_setting``) against ``receipts``,
    this server's answer to the same setting (the preflight's). The source's prompts must all be
    among this run's, with the same texts (its prompt hash recomputed from this run's texts). Failed
    answers are not taken. Returns the ``reuse`` record it logs (source, its creation time, answers
    per setting)."""
    header, records = read_log(path, LOG_KIND)
    src, fp = header["fingerprint"], log.header["fingerprint"]
    if src.get("mode") != "ladder":
        raise ValueError(f"--reuse-answers: {path} is a --quick run; it holds no answers")
    keys = (set(src) | set(fp)) - NOT_ANSWER_KEYS
    diff = fingerprint_diff({k: src.get(k) for k in keys}, {k: fp.get(k) for k in keys})
    if diff:
        raise ValueError(f"--reuse-answers: {path} answered under another configuration; differences: "
                         + "; ".join(diff))
    by_id = {(f"{p.task}/{p.id}" if p.task == datasets.USER_TASK else p.id): p for p in prompts}
    missing = [i for i in src["prompts"] if i not in by_id]
    if missing:
        raise ValueError(f"--reuse-answers: {len(missing)} of {path}'s prompts are not in this run "
                         f"(first: {missing[0]})")
    if text_hash("\n".join(by_id[i].text for i in src["prompts"])) != src["prompt_hashes"]:
        raise ValueError(f"--reuse-answers: {path}'s prompts have other texts than this run's under the same ids")
    arm_of = {_fields_key(a.fields): a for a in arms}
    done = set(calibrate_summary.latest(log.records))
    chosen = []
    for (_, task, tag, seed), r in calibrate_summary.latest(records).items():
        arm = arm_of.get(_fields_key(r["fields"]))
        if arm is not None and r["ok"] and (arm.label, task, tag, seed) not in done:
            chosen.append((arm, r))
    for label, r in {arm.label: r for arm, r in chosen}.items():  # every setting checked before any is taken
        theirs, ours = receipt_setting(r.get("receipt")), receipt_setting(receipts.get(label))
        if theirs != ours:
            raise ValueError(f"--reuse-answers: setting {label} ran under other settings in {path} "
                             f"(its receipt: {theirs}; this server's: {ours})")
    taken: dict[str, int] = {}
    for arm, r in chosen:
        log.append({**r, "arm": arm.label, "fields": dict(arm.fields), "reused_from": header["created"]})
        taken[arm.label] = taken.get(arm.label, 0) + 1
    record = {"kind": "reuse", "from": str(path), "created": header["created"], "answers": taken}
    log.append(record)
    return record


def _fields_key(fields: dict) -> str:
    """A setting's fields as one comparable string: ``asd_budget=8`` and ``8.0`` are one setting."""
    def norm(v):
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v
    return json.dumps({k: norm(v) for k, v in fields.items()}, sort_keys=True)


def cap_of(args: argparse.Namespace, p: datasets.Prompt) -> int:
    return p.max_new_tokens if p.task == datasets.USER_TASK or not args.max_new_tokens else args.max_new_tokens


def run_quality(args, log: RunLog, arms: list[Arm], prompts, url: str, request) -> None:
    """Phase 1: every (prompt, seed) under every setting, strict first, to its natural end."""
    done = {key for key, r in calibrate_summary.latest(log.records).items() if r["ok"]}
    todo = [(a, p, seed) for p in prompts for seed in args.sampling.seeds for a in arms
            if (a.label, p.task, p.id, seed or 0) not in done]
    if not todo:
        return
    reqs = [request(p, seed, a.fields, cap_of(args, p)) for a, p, seed in todo]

    def on_result(i: int, res: GenResult) -> None:
        arm, prompt, _ = todo[i]
        rec = score_item(prompt, item_record(arm, prompt, res), args.scorer, args.exec_timeout)
        log.append(rec)

    p = run_pass(url, reqs, args.concurrency, args.timeout,
                 desc=f"quality at natural stop ({len(arms)} settings)", on_result=on_result)
    if failed := [r for r in p.results if not r.ok]:
        raise PassFailed(f"{len(failed)} of {len(p.results)} requests failed ({'; '.join(first_errors(failed, 2))}); "
                         "rerun with --resume to redo them")


def rounds_of(n_prompts: int, samples: int, concurrency: int) -> int:
    return -(-n_prompts * samples // concurrency)


def speed_set(prompts: list, n: Optional[int]) -> list:
    """The prompts of the speed phase: all, or ``n`` (``--speed-prompts``) spread evenly over the run's
    list (every task in its share, the same ones on every resume)."""
    if not n or n >= len(prompts):
        return list(prompts)
    return [prompts[i * len(prompts) // n] for i in range(n)]


def run_speed(args, log: RunLog, arms: list[Arm], prompts, url: str, request, machine: str, info: dict) -> None:
    """Phase 2: bench.speed's rounds schedule at fixed work, every pass logged as it completes."""
    how = args.sampling
    prompts = speed_set(prompts, args.speed_prompts)
    rounds = rounds_of(len(prompts), how.samples, args.concurrency)
    order = speed_summary.schedule(arms, rounds)
    usable = [r for r in speed.passes_of(log.records) if not r["errors"]]
    todo = speed_summary.passes_to_run(usable, order, args.repeats, machine, rounds)
    units = [(p, seed) for seed in how.seeds for p in prompts]
    by_label = {a.label: a for a in arms}
    flush = info.get("speculative_algorithm") == "NGRAM"   # as bench.speed: NGRAM's corpus keeps every request
    total = args.repeats * len(order)
    if todo and not flush:  # as bench.speed: every prompt's prefix in the cache before the first pass
        run_pass(url, [request(p, how.seeds[0], STRICT_ARM.fields, 4, ignore_eos=True) for p in prompts],
                 args.concurrency, args.timeout, desc="warm-up")
    from tqdm import tqdm

    with tqdm(total=total, initial=total - len(todo), desc="speed at fixed work", unit="pass",
              dynamic_ncols=True) as bar:
        for repeat, index in todo:
            arm = by_label[order[index]]
            group = speed_summary.round_of(index, len(arms))
            work = [request(p, seed, arm.fields, args.speed_max_new_tokens, ignore_eos=True)
                    for p, seed in units[group * args.concurrency:(group + 1) * args.concurrency]]
            if flush:
                speed.flush_cache(url)
            p = run_pass(url, work, args.concurrency, args.timeout, progress=False)
            record = speed.pass_record(arm, repeat, index, p, len(work) * args.speed_max_new_tokens,
                                       machine=machine, round_=group)
            log.append(record)
            if record["errors"]:
                raise PassFailed(f"repeat {repeat + 1} round {group + 1} {arm.label}: {record['errors']} of "
                                 f"{len(work)} requests failed ({'; '.join(record['first_errors'][:2])}); rerun "
                                 "with --resume to redo this pass and the rest")
            bar.set_postfix_str(f"{arm.label} round {group + 1}/{rounds}")
            bar.update(1)


def run_quick(args, log: RunLog, prompts, url: str, request, k: int) -> None:
    """``--quick``: one probe per (prompt, seed), then the suffix-value search of each first exception
    (``calibrate_summary.probe_state``), step by step over every prompt at once."""
    arm = probe_arm(args.probe_budget)
    done = {(r["task"], r["tag"], seed_of(r)) for r in log.records if r.get("kind") == "probe" and r["ok"]}
    todo = [(p, seed) for p in prompts for seed in args.sampling.seeds if (p.task, p.id, seed or 0) not in done]

    def on_probe(i: int, res: GenResult) -> None:
        prompt, _ = todo[i]
        events = (res.receipt or {}).get("events") or []
        first = events[0] if events else {}
        log.append({"kind": "probe", "task": prompt.task, "tag": res.tag, "seed": res.seed, "ok": res.ok,
                    "error": res.error, "completion_tokens": res.completion_tokens, "pos": first.get("pos"),
                    "regret": first.get("regret"), "draft": first.get("draft"),
                    "gate": (res.receipt or {}).get("gate")})

    if todo:
        p = run_pass(url, [request(pr, seed, arm.fields, cap_of(args, pr)) for pr, seed in todo], args.concurrency,
                     args.timeout, desc="quick: probes", on_result=on_probe)
        if failed := [r for r in p.results if not r.ok]:
            raise PassFailed(f"{len(failed)} of {len(p.results)} probes failed ({'; '.join(first_errors(failed, 2))}); "
                             "rerun with --resume to redo them")
    by_id = {(p.task, p.id): p for p in prompts}
    step = 0
    while True:
        probes = {(r["task"], r["tag"], seed_of(r)): r for r in log.records if r.get("kind") == "probe" and r["ok"]}
        searches: dict = {}
        for r in log.records:
            if r.get("kind") == "search":
                searches.setdefault((r["task"], r["tag"], seed_of(r)), []).append(r)
        pending = []
        for key, pr in probes.items():
            if pr.get("regret") is None or pr["regret"] <= 0:
                continue
            st = calibrate_summary.probe_state(pr, searches.get(key, []), k)
            if st["next"] is not None:
                pending.append((pr, st["next"]))
        if not pending:
            return
        step += 1
        reqs = [request(by_id[(pr["task"], pr["tag"])], pr["seed"],
                        {**arm.fields, "asd_gate": calibrate_summary.search_gate(pr["regret"], q, pr["gate"])},
                        pr["pos"] + 1) for pr, q in pending]

        def on_search(i: int, res: GenResult) -> None:
            pr, q = pending[i]
            events = (res.receipt or {}).get("events") or []
            if not res.ok:
                admitted = None
            elif not events:
                admitted = False
            elif events[0].get("pos") == pr["pos"] and events[0].get("draft") == pr["draft"]:
                admitted = True
            else:
                admitted = None   # another trajectory: batch nondeterminism; the prompt is left out
            log.append({"kind": "search", "task": pr["task"], "tag": pr["tag"], "seed": pr["seed"], "q": q,
                        "ok": res.ok, "error": res.error, "admitted": admitted})

        run_pass(url, reqs, args.concurrency, args.timeout, desc=f"quick: suffix values, step {step}",
                 on_result=on_search)


# ---------------------------------------------------------------- the report


def reused_of(records: list[dict]) -> list[dict]:
    """Per source run (``--reuse-answers``): its creation time, log path and the answers taken per setting."""
    out: dict[str, dict] = {}
    for r in records:
        if r.get("kind") == "reuse":
            src = out.setdefault(r["created"], {"created": r["created"], "from": r["from"], "answers": {}})
            for label, n in r["answers"].items():
                src["answers"][label] = src["answers"].get(label, 0) + n
    return [s for s in out.values() if s["answers"]]


def build_result(header: dict, records: list[dict], arms: list[Arm], targets: Targets, default_target: bool,
                 args: argparse.Namespace, info: Optional[dict] = None) -> dict:
    """The report of a run log, complete or not (``calibrate_summary`` for the figures)."""
    fp = header["fingerprint"]
    how = sampling.Sampling.of_fingerprint(fp)
    info = info if info is not None else logged_servers(records).get("server", fp.get("server"))
    repeats = args.repeats
    config = {"source": fp["source"], "num_prompts": len(fp["prompts"]), "api": fp["api"],
              "sampling": dataclasses.asdict(how), "sampling_text": how.describe(),
              "max_new_tokens_text": fp["max_new_tokens"] or "each task's (or the file's)",
              "speed_max_new_tokens": fp["speed_max_new_tokens"], "repeats": repeats,
              "speed_prompts": len(speed_set(fp["prompts"], fp.get("speed_prompts"))),
              "concurrency": fp["concurrency"], "scorer": fp["scorer"], "launch": fp["launch"],
              "arms": fp["arms"], "log_created": header["created"], "reused": reused_of(records)}
    result = {"kind": "asd-calibrate", "version": 1, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "config": config, "server": info}
    if fp["mode"] == "quick":
        probes = [r for r in records if r.get("kind") == "probe"]
        latest = {(r["task"], r["tag"], seed_of(r)): r for r in probes}
        k = suffix_depth(info or {}) or 0
        quick = calibrate_summary.quick_recipe(list(latest.values()), [r for r in records if r.get("kind") == "search"],
                                               k)
        if quick["fields"]:
            quick["settings"] = calibrate_report.server_settings(quick["fields"])
        planned = len(fp["prompts"]) * how.samples
        done = sum(1 for r in latest.values() if r["ok"])
        result.update(quick=quick, complete={"line": f"{'complete' if done >= planned else 'PARTIAL'}: {done} of "
                                                     f"{planned} prompts probed"}, warnings=[])
        return result
    items = [r for r in records if r.get("kind") == "item"]
    quality = calibrate_summary.quality_rows(items, arms, targets.confidence)
    rounds = rounds_of(len(speed_set(fp["prompts"], fp.get("speed_prompts"))), how.samples, fp["concurrency"])
    passes = sorted(speed.passes_of(records), key=lambda p: (p["repeat"], p["index"]))
    speed_rows = calibrate_summary.speed_rows(passes, arms, rounds)
    rows = calibrate_summary.combine(quality, speed_rows, arms)
    rec = calibrate_summary.recommend(rows, targets)
    verdicts = {v["arm"]: v for v in rec["settings"]}
    for r in rows:
        calibrate_report.add_cells(r, verdicts.get(r["arm"]))
    best = next((r for r in rows if r["arm"] == rec["arm"]), None)
    settings = calibrate_report.server_settings(best["field_values"]) if best else None
    planned_items = len(arms) * len(fp["prompts"]) * how.samples
    done_items = len({k for k, r in calibrate_summary.latest(items).items() if r["ok"]})
    planned_passes = repeats * len(speed_summary.schedule(arms, rounds))
    done_passes = len({(p["repeat"], p["index"]) for p in passes if not p["errors"]})
    complete = done_items >= planned_items and done_passes >= planned_passes
    warnings = speed_summary.warnings_for(passes, speed_rows) if passes else []
    for r in quality:
        if r["arm"] != STRICT and r["applied_share"] is not None and r["applied_share"] < 1.0:
            warnings.append(f"{r['arm']}: ASD applied to {r['applied_share']:.0%} of answers (reasons: "
                            f"{', '.join(sorted(r['not_applied_reasons']))})")
        if r["errors"]:
            warnings.append(f"{r['arm']}: {r['errors']} answer(s) failed, e.g. {r['first_errors'][0]}")
    result.update(
        targets=dataclasses.asdict(targets), targets_text=targets.describe() + (" (default)" if default_target else ""),
        complete={"items": done_items, "planned_items": planned_items, "passes": done_passes,
                  "planned_passes": planned_passes,
                  "line": f"{'complete' if complete else 'PARTIAL'}: {done_items} of {planned_items} answers, "
                          f"{done_passes} of {planned_passes} speed passes"},
        rows=rows, recommendation=rec, settings=settings if rec["found"] else None, warnings=warnings)
    return result


# ---------------------------------------------------------------- the command


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sglang_asd.calibrate", description=__doc__.split("\n\n")[0])
    add_server_args(p)
    src = p.add_argument_group("prompts")
    src.add_argument("--prompts", type=Path, help="your prompts: JSONL, one {\"prompt\": ..., \"id\"?, \"reference\"?, "
                                                  "\"max_new_tokens\"?} per line")
    src.add_argument("--scorer", choices=final.SCORERS,
                     help="how a reply's final answer is read from --prompts replies (number: GSM8K's rule, boxed: "
                          "MATH's, choice: a letter A-D, exact: the whole reply); with references it scores them")
    src.add_argument("--tasks", help=f"shipped tasks instead of --prompts (default {DEFAULT_TASKS}), subset of "
                                     f"{','.join(datasets.TASKS)}")
    src.add_argument("--limit", type=int, help=f"first N items per task (default {DEFAULT_LIMIT})")
    arms = p.add_argument_group("settings")
    arms.add_argument("--budgets", help=f"asd_budget ladder (default {DEFAULT_BUDGETS}; strict is always run)")
    arms.add_argument("--gates", help="asd_gate values: every budget at every gate (each <= the server's --asd-gate)")
    arms.add_argument("--arms", help="more settings: 'LABEL:FIELD=VALUE,...;LABEL:...'")
    tgt = p.add_argument_group("target (default: --max-accuracy-drop 1 with references, else --min-agreement 0.95)")
    tgt.add_argument("--max-accuracy-drop", type=float, help="accuracy points a setting may lose against strict")
    tgt.add_argument("--min-agreement", type=float, help="share of prompts that must keep strict's final answer")
    tgt.add_argument("--max-length-change", type=float,
                     help="largest change of total length against strict (0.03 = 3%%)")
    tgt.add_argument("--confidence", type=float, default=0.95, help="level of every interval (default 0.95)")
    run_ = p.add_argument_group("run")
    run_.add_argument("--max-new-tokens", type=int, help="natural-stop cap (default: each task's; --prompts: "
                                                         f"{DEFAULT_FILE_CAP} or the line's)")
    run_.add_argument("--speed-max-new-tokens", type=int, default=128, help="tokens per request at fixed work")
    run_.add_argument("--speed-prompts", type=int, help="prompts at fixed work, spread evenly over the run's "
                                                        "(default: all of them)")
    run_.add_argument("--repeats", type=int, help="repeats of the speed schedule (default 1)")
    run_.add_argument("--concurrency", type=int, default=8)
    run_.add_argument("--api", choices=("chat", "completions", "generate"), default="chat",
                      help="route; chat applies the model's chat template (default)")
    sampling.add_args(p)
    run_.add_argument("--timeout", type=float, default=1200.0, help="per-request timeout, seconds")
    run_.add_argument("--exec-timeout", type=float, default=10.0, help="seconds per code test program")
    run_.add_argument("--reuse-answers", type=Path, metavar="LOG",
                      help="take the answers of another calibrate run log's settings with the same fields (same "
                           "server, launch, caps, route, concurrency, sampling; checked) instead of asking again")
    run_.add_argument("--quick", action="store_true",
                      help="no labels, no answers: the article's percentile recipe as a starting point")
    run_.add_argument("--probe-budget", type=float, default=64.0, help="--quick: the probe's asd_budget (<= the "
                                                                       "server's --asd-max-budget)")
    p.add_argument("--out", type=Path, required=True, help="output folder (holds the run log)")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.sampling = sampling.from_args(parser, args)
    try:
        for name in ("limit", "max_new_tokens", "speed_max_new_tokens", "speed_prompts", "concurrency", "repeats"):
            value = getattr(args, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
        if args.quick and not args.sampling.greedy:
            raise ValueError("--quick reads greedy regrets from receipts; a sampled request's receipt carries KL "
                             "charges instead: drop --temperature")
        if args.reuse_answers and (args.quick or args.report_only):
            raise ValueError("--reuse-answers takes another run's answers into a ladder run; it does not go with "
                             + ("--quick" if args.quick else "--report-only"))
        if args.probe_budget <= 0 or not math.isfinite(args.probe_budget):
            raise ValueError(f"--probe-budget must be a finite number > 0, got {args.probe_budget}")
        if args.report_only:
            header, records = read_log(args.out / LOG_NAME, LOG_KIND)
            fp = header["fingerprint"]
            args.quick = fp["mode"] == "quick"
            arms = [Arm.from_dict(a) for a in fp["arms"]]
            plans = [r for r in records if r.get("kind") == "plan"]
            args.repeats = args.repeats or (plans[-1]["repeats"] if plans else 1)
            scored = any(r.get("correct") is not None for r in records if r.get("kind") == "item")
            targets, default = targets_of(args, scored)
            result = build_result(header, records, arms, targets, default, args)
        else:
            args.repeats = args.repeats or 1
            arms = ladder(args)
            prompts, source = load_prompts(args)
            targets, default = targets_of(args, has_references(prompts))
            args.out.mkdir(parents=True, exist_ok=True)
            result = run(args, arms, prompts, source, targets, default)
    except (ValueError, RunLogError, OSError) as e:
        raise SystemExit(f"error: {e}")
    except PassFailed as e:
        print(f"error: {e}; rerun with --resume (log {args.out / LOG_NAME})", file=sys.stderr)
        return 1
    calibrate_report.write(result, args.out)
    print(calibrate_report.markdown(result))
    for w in result.get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    print(f"{result['complete']['line']}; wrote {args.out / 'calibrate.md'}, calibrate.json"
          + ("" if result.get("quick") else ", calibrate.csv, calibrate.png") + f" (log {args.out / LOG_NAME})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
