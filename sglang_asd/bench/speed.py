"""Speed at fixed work: tokens/s of each arm against strict greedy, and of plain decoding.

``python -m sglang_asd.bench.speed (--url URL | --launch='SERVER ARGS') [--budgets 0,2,8,32]
    [--arms 'b8g05:asd_budget=8,asd_gate=0.5'] [--plain-url URL | --plain-launch[='ARGS']]
    --dataset gsm8k,mtbench --num-prompts 64 --max-new-tokens 256 --concurrency 8 --repeats 3
    [--temperature 0.7 --top-p 0.95 --samples 2] --out DIR [--resume]``

Every request runs with ``ignore_eos`` and the same ``max_new_tokens``, so every pass does the same
work; greedy by default, or sampled (``--temperature``, ``--top-p``) with ``--samples`` seeded
requests per prompt, the same seeds under every arm (``sampling``): the work is then every
(prompt, seed), seed by seed, and a per-prompt ratio pairs each (prompt, seed) with strict's. An arm (see ``arms``) is a label and the ASD fields its requests send; ``strict``
(budget 0) is the reference; ``plain`` is a second server without speculative decoding, on the
same prompts. With ``--schedule rounds`` (the default) the prompts are cut into rounds of
``concurrency`` prompts and every arm runs each round, the order rotated by one arm per round, so an
arm is paired with strict over the same prompts minutes apart; with ``--schedule trios`` one repeat
is ``strict, A1, strict, A2, ..., strict`` over all prompts, every candidate bracketed by two strict
passes (``speed_summary``: ratio, per-prompt ratio, drift, intervals). A warm-up pass over all
prompts (4 tokens) runs first on each server so every measured pass sees the same prefix cache.

Every completed pass is appended to ``DIR/speed_passes.jsonl`` at once; ``--resume`` continues a
stopped run (same configuration, checked) and ``--report-only`` rewrites the report from the log.
Writes ``speed.json`` (config, server info, per-arm rows with intervals, every pass, warnings),
``speed.csv`` and ``speed.md`` (``speed_report``), after every pass. With ``--launch`` /
``--plain-launch`` it starts ``python -m sglang_asd.launch_server ARGS`` itself (logs
``DIR/server.log``, ``DIR/plain_server.log``) and stops it at the end.

Nothing here judges the machine a pass ran on: a runner may watch every pass through a pass
monitor (``monitor.py``: a disturbed pass is logged as such, left out and redone), as the project's
own ``scripts/lab/speed.py`` does for other load on a shared host.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import requests

from sglang_asd.bench import datasets, host, report, sampling, speed_report, speed_summary
from sglang_asd.bench.arms import PLAIN, PLAIN_ARM, STRICT, Arm, resolve_arms
from sglang_asd.bench.client import GenRequest, served_model
from sglang_asd.bench.metrics import first_errors, result_metrics
from sglang_asd.bench.monitor import NO_MONITOR, PassMonitor, Verdict
from sglang_asd.bench.runlog import RunLog, RunLogError, logged_servers, read_log
from sglang_asd.bench.runner import PassFailed, PassResult, preflight, run_pass
from sglang_asd.bench.server import (Targets, add_plain_args, add_server_args, identity, plain_launch, server_info,
                                     target_servers, with_launch_facts)

LOG_NAME = "speed_passes.jsonl"
LOG_KIND = "asd-speed-log"
DEFAULT_BUDGETS = "0,2,8,32"
REQUEST_KEYS = ("tag", "seed", "ok", "completion_tokens", "latency_s", "spec_verify_ct", "error")


def pass_record(arm: Arm, repeat: int, index: int, p: PassResult, expected_tokens: int,
                server_cpu_s: Optional[float] = None, verdict: Optional[Verdict] = None,
                machine: Optional[str] = None, round_: Optional[int] = None) -> dict:
    """The logged form of one pass; ``server_cpu_s`` = CPU seconds the serving processes used
    during it (launched servers only), ``cpu_s_per_token`` = that over the output tokens; the pass
    monitor's ``verdict`` gives ``disturbed`` and the fields it logs (``monitor``); ``machine`` =
    the client's ``host.machine()`` id (a trio or a round pairs passes of one machine,
    ``speed_summary``); ``round`` = the pass's round (rounds schedule; None for trios)."""
    m = result_metrics(p.results)
    verdict = verdict or Verdict()
    return {"kind": "pass", "repeat": repeat, "index": index, "round": round_, "arm": arm.label, "server": arm.server,
            "machine": machine,
            "fields": dict(arm.fields), "server_cpu_s": server_cpu_s,
            **verdict.fields, "disturbed": verdict.disturbed,
            "cpu_s_per_token": server_cpu_s / m["output_tokens"] if server_cpu_s and m["output_tokens"] else None,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "wall_s": p.wall_s, "tok_s": p.tokens_per_s,
            "fixed_work_ok": m["output_tokens"] == expected_tokens and not m["errors"], **m,
            "first_errors": first_errors(p.results),
            "requests": [{k: getattr(r, k) for k in REQUEST_KEYS} for r in p.results]}


def measured_arms(args: argparse.Namespace) -> list[Arm]:
    """strict, plain (when a plain server is given), then the budget and ``--arms`` arms."""
    arms = resolve_arms(args.budgets, args.arms, DEFAULT_BUDGETS, rules=args.rules)
    if args.plain_url or args.plain_launch:
        arms.insert(1, PLAIN_ARM)
    return arms


def fingerprint(args: argparse.Namespace, arms: list[Arm], prompts: list[datasets.Prompt]) -> dict:
    """What a resumed run must share with the stored one (repeats may grow). Trios leave the
    schedule out, and greedy runs the sampling settings (``Sampling.fingerprint``): the logs made
    before either existed hold none, and stay resumable."""
    fp = {"arms": [a.to_dict() for a in arms], "prompts": [p.id for p in prompts],
          "max_new_tokens": args.max_new_tokens, "concurrency": args.concurrency, "api": args.api,
          "stream": args.stream, "launch": args.launch, "plain_launch": plain_launch(args)}
    if args.schedule != speed_summary.TRIOS:
        fp["schedule"] = args.schedule
    fp.update(args.sampling.fingerprint())
    return fp


def rounds_of(fp: dict) -> Optional[int]:
    """Rounds per repeat of a run's fingerprint (``ceil(prompts x samples / concurrency)``), None for trios."""
    if fp.get("schedule", speed_summary.TRIOS) == speed_summary.TRIOS:
        return None
    return -(-len(fp["prompts"]) * sampling.Sampling.of_fingerprint(fp).samples // fp["concurrency"])


def run(args: argparse.Namespace, arms: list[Arm],
        monitor: Optional[Callable[[Targets], PassMonitor]] = None) -> dict:
    """Measure every pass of the schedule not yet in the log (the servers are started here when
    launched), each watched by ``monitor(targets)`` (``monitor.py``; none by default); the report is
    rewritten after each pass. Returns the final report."""
    prompts = datasets.mixed_prompts(datasets.parse_tasks(args.dataset), args.num_prompts)
    fp = fingerprint(args, arms, prompts)
    how = args.sampling
    # the work of a repeat: every (prompt, seed), seed by seed (a round holds distinct prompts)
    work_units = [(p, seed) for seed in how.seeds for p in prompts]
    log_path = args.out / LOG_NAME
    RunLog.precheck(log_path, LOG_KIND, fp, args.resume)
    with target_servers(args) as targets:
        urls = targets.urls
        url, plain_url = urls["speculative"], urls["plain"]
        info = {"server": with_launch_facts(server_info(url), "speculative" in targets.launched),
                "plain_server": with_launch_facts(server_info(plain_url), "plain" in targets.launched) if plain_url else {}}
        fp.update(server=identity(info["server"]), plain_server=identity(info["plain_server"]))
        model = served_model(requests.Session(), url)
        preflight([(a.label, urls[a.server], GenRequest(text=prompts[0].text, max_new_tokens=1, fields=dict(a.fields),
                                                        api=args.api, model=model, tag="preflight",
                                                        temperature=how.temperature, top_p=how.top_p,
                                                        seed=how.seeds[0])) for a in arms],
                  args.timeout)
        log = RunLog.open(log_path, LOG_KIND, fp, args.resume)
        machine = host.machine()
        log.append({"kind": "plan", "repeats": args.repeats, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "machine": machine, "servers": info})
        meta = {"urls": urls, **info, "model": model}
        by_label = {a.label: a for a in arms}

        def reqs(arm: Arm, max_new: int, group: Optional[int] = None, units=work_units) -> list[GenRequest]:
            """The arm's requests over every (prompt, seed), or over round ``group``'s."""
            some = units if group is None else units[group * args.concurrency:(group + 1) * args.concurrency]
            return [GenRequest(text=p.text, max_new_tokens=max_new, fields=dict(arm.fields), ignore_eos=True,
                               stream=args.stream, api=args.api, model=meta["model"], tag=p.id,
                               temperature=how.temperature, top_p=how.top_p, seed=seed) for p, seed in some]

        if args.warmup:  # every prompt once (its prefix in the cache), first seed
            for server in {a.server for a in arms}:
                run_pass(urls[server], reqs(by_label[PLAIN if server == "plain" else STRICT], 4,
                                            units=[(p, how.seeds[0]) for p in prompts]),
                         args.concurrency, args.timeout, desc=f"warm-up ({server})")
        # NGRAM drafts come from a corpus of every request the server has seen, so a pass would draft
        # from the same prompts' earlier outputs, its accept length growing pass after pass
        # (docs/MEASURING.md#host-effects-behind-the-method). Every pass on such a server starts
        # from an empty corpus: SGLang's /flush_cache, which also empties the radix cache, so then
        # every pass flushes its own server first, the plain one too (no arm keeps its prompts' prefixes).
        flush_each_pass = "NGRAM" in (info["server"].get("speculative_algorithm"),
                                      info["plain_server"].get("speculative_algorithm"))
        rounds = rounds_of(fp)
        order = speed_summary.schedule(arms, rounds)
        usable = [r for r in passes_of(log.records) if not r["errors"] and not r.get("disturbed")]
        todo = speed_summary.passes_to_run(usable, order, args.repeats, machine["id"], rounds)
        from tqdm import tqdm

        total = args.repeats * len(order)
        watch = NO_MONITOR if monitor is None else monitor(targets)
        with tqdm(total=total, initial=max(0, total - len(todo)), desc="speed passes", unit="pass", dynamic_ncols=True) as bar:
            for repeat, index in todo:
                arm = by_label[order[index]]
                group = None if rounds is None else speed_summary.round_of(index, len(arms))
                work = reqs(arm, args.max_new_tokens, group)
                where = f"repeat {repeat + 1}" + ("" if group is None else f" round {group + 1}/{rounds}")
                for attempt in range(watch.redos + 1):
                    if attempt:
                        watch.before_redo()
                    if flush_each_pass:
                        flush_cache(urls[arm.server])
                    cpu_before = targets.cpu_seconds(arm.server)
                    watch.before_pass()
                    p = run_pass(urls[arm.server], work, args.concurrency, args.timeout,
                                 desc=f"{where} {arm.label}", progress=group is None)
                    verdict = watch.after_pass()
                    cpu_after = targets.cpu_seconds(arm.server)
                    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
                    record = pass_record(arm, repeat, index, p, len(work) * args.max_new_tokens, cpu, verdict,
                                         machine["id"], group)
                    log.append(record)
                    speed_report.write(build_result(log.header, log.records, args.repeats, meta), args.out)
                    if record["errors"]:
                        # A server that dropped requests (crashed, timed out) would fail every later pass
                        # too: stop here; --resume redoes this pass and the rest.
                        raise PassFailed(f"{where} {arm.label}: {record['errors']} of {len(work)} "
                                         f"requests failed ({'; '.join(record['first_errors'][:2])}); "
                                         f"rerun with --resume to redo this pass and the rest")
                    if not record["disturbed"]:
                        break
                    tqdm.write(f"{where} {arm.label}: {verdict.why}"
                               + (": redoing it" if attempt < watch.redos else ": kept, marked disturbed"))
                bar.set_postfix_str(f"{arm.label} {fmt_rate(p.tokens_per_s)}")
                bar.update(1)
        result = build_result(log.header, log.records, args.repeats, meta)
    return result


def flush_cache(url: str, timeout: float = 120.0) -> None:
    """SGLang's ``/flush_cache``: empties the radix cache and an NGRAM server's corpus (its scheduler
    calls the draft worker's ``clear_cache_pool``). Called between passes, with nothing in flight.

    SGLang refuses a flush (HTTP 400) while its scheduler still holds a request, which it may for a
    moment after the client has every answer (a finished request it has not yet released, or one a
    client gave up on): the flush is retried until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        r = requests.post(url.rstrip("/") + "/flush_cache", timeout=timeout)
        if r.status_code == 200:
            return
        if r.status_code != 400 or time.monotonic() > deadline:
            raise RuntimeError(f"{url}/flush_cache: HTTP {r.status_code}: {r.text[:200]}")
        time.sleep(1.0)


def passes_of(records: list[dict]) -> list[dict]:
    """The pass records of a log (the others are the plan of each invocation); a pass redone by
    ``--resume`` (it had failed requests) counts once, as its latest record on that machine."""
    latest = {speed_summary.position(r): r for r in records if r.get("kind") == "pass"}
    return list(latest.values())


def planned_repeats(records: list[dict]) -> int:
    """The repeats the latest invocation asked for (``--report-only`` without ``--repeats``)."""
    plans = [r["repeats"] for r in records if r.get("kind") == "plan"]
    if not plans:
        raise RunLogError("the speed log holds no plan record")
    return plans[-1]


def build_result(header: dict, records: list[dict], repeats: int, meta: Optional[dict] = None) -> dict:
    """The report of a run log (complete or not)."""
    fp = header["fingerprint"]
    arms = [Arm.from_dict(a) for a in fp["arms"]]
    rounds = rounds_of(fp)
    planned = repeats * len(speed_summary.schedule(arms, rounds))
    passes = sorted(passes_of(records), key=lambda p: (p["repeat"], p["index"]))
    rows = speed_summary.summarize(passes, arms, rounds=rounds)
    for r in rows:
        r["speedup_cell"] = repeats_cell(r.get("speedup_median"), r.get("speedup_ci"), r.get("repeats_n"))
        r["prompt_speedup_cell"] = report.fmt_ci(r.get("prompt_speedup"), r.get("prompt_speedup_ci"))
        r["prompt_accept_cell"] = report.fmt_ci(r.get("prompt_accept_ratio"), r.get("prompt_accept_ratio_ci"))
        r["cpu_speedup_cell"] = repeats_cell(r.get("cpu_speedup_median"), r.get("cpu_speedup_ci"), r.get("repeats_n"))
    meta = {**logged_servers(records), **(meta or {})}
    return {
        "kind": "asd-speed", "version": 2, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {**{k: v for k, v in fp.items() if k not in ("prompts", "sampling")}, "num_prompts": len(fp["prompts"]),
                   "sampling": dataclasses.asdict(sampling.Sampling.of_fingerprint(fp)),
                   "schedule": fp.get("schedule", speed_summary.TRIOS), "rounds": rounds,
                   "repeats": repeats, "log_created": header["created"]},
        "complete": {"passes": len({(p["repeat"], p["index"]) for p in passes if not p["errors"]}),
                     "planned": planned},
        "machines": [dict(m, passes=speed_summary.machines(passes).get(m["id"], 0)) for m in _unique_machines(records)],
        "server": meta.get("server", fp.get("server")),
        "plain_server": meta.get("plain_server", fp.get("plain_server")),
        "arms": rows, "passes": passes, "warnings": speed_summary.warnings_for(passes, rows),
    }


def _unique_machines(records: list[dict]) -> list[dict]:
    """The machines the invocations of a log ran on (plan records), first appearance order."""
    seen: dict[str, dict] = {}
    for r in records:
        if r.get("kind") == "plan" and r.get("machine"):
            seen.setdefault(r["machine"]["id"], r["machine"])
    return list(seen.values())


def repeats_cell(value: Optional[float], ci, repeats: Optional[int]) -> str:
    """A ratio over repeats with its interval; one repeat has none: ``1.137 (1 repeat)``, not ``[1.137, 1.137]``."""
    if repeats == 1 and ci is not None and value is not None:
        return f"{value:.3f} (1 repeat)"
    return report.fmt_ci(value, ci)


def fmt_rate(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.1f} tok/s"


def build_parser(prog: str = "python -m sglang_asd.bench.speed") -> argparse.ArgumentParser:
    """The tool's flags; a runner with a pass monitor (``monitor.py``) adds its own to them."""
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    add_server_args(p)
    add_plain_args(p)
    p.add_argument("--budgets", help=f"comma-separated asd_budget values, shorthand for arms (default "
                                     f"{DEFAULT_BUDGETS} when --arms is not given either)")
    p.add_argument("--arms", help="'LABEL:FIELD=VALUE,...;LABEL:...', e.g. 'b8g05:asd_budget=8,asd_gate=0.5'")
    p.add_argument("--rules", help="acceptance rules, each over its knob: 'asd=2|8,local=1,margin=0.5|2,threshold=0.5' "
                                   "(asd, local, fly-bounded: asd_budget; margin: asd_margin; threshold: asd_threshold; "
                                   "fly: asd_fly_entropy_threshold)")
    p.add_argument("--dataset", default="gsm8k,mtbench", help=f"prompt sources, subset of {','.join(datasets.TASKS)}")
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--repeats", type=int, help="repeats of the whole schedule (default 3; --report-only: "
                                               "what the run was asked for)")
    p.add_argument("--schedule", choices=speed_summary.SCHEDULES, default=speed_summary.ROUNDS,
                   help="rounds: every arm runs each group of CONCURRENCY prompts in turn, paired with strict on "
                        "the same prompts; trios: strict, A1, strict, A2, ..., strict over all prompts (default "
                        "%(default)s; a log made before schedules existed is a trios log)")
    p.add_argument("--api", choices=("generate", "completions", "chat"), default="generate")
    sampling.add_args(p)
    p.add_argument("--stream", action="store_true", help="stream responses (measures the streaming path)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false")
    p.add_argument("--timeout", type=float, default=600.0, help="per-request timeout, seconds")
    p.add_argument("--out", type=Path, required=True, help="output folder (holds the run log)")
    return p


def parse_args(p: argparse.ArgumentParser, argv: Optional[list[str]] = None) -> argparse.Namespace:
    """``p``'s flags, with ``args.sampling`` (``sampling.from_args``: a bad combination is a usage error)."""
    args = p.parse_args(argv)
    args.sampling = sampling.from_args(p, args)
    return args


def main(argv: Optional[list[str]] = None) -> int:
    return run_cli(parse_args(build_parser(), argv))


def run_cli(args: argparse.Namespace, monitor: Optional[Callable[[Targets], PassMonitor]] = None) -> int:
    """The tool on parsed flags, its passes watched by ``monitor`` (``run``); the exit status."""
    for name in ("num_prompts", "max_new_tokens", "concurrency", "repeats"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    try:
        arms = measured_arms(args)
        datasets.parse_tasks(args.dataset)
        plain_launch(args)
        if args.report_only:
            header, records = read_log(args.out / LOG_NAME, LOG_KIND)
            result = build_result(header, records, args.repeats or planned_repeats(records))
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            args.repeats = args.repeats or 3
            result = run(args, arms, monitor)
    except (ValueError, RunLogError) as e:
        raise SystemExit(f"error: {e}")
    except PassFailed as e:
        print(f"error: {e}; wrote what is complete to {args.out / 'speed.json'}", file=sys.stderr)
        return 1
    speed_report.write(result, args.out)
    print(report.markdown_table(result["arms"], speed_report.columns(result["config"]["rounds"])))
    for w in result["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(f"{result['complete']['passes']} of {result['complete']['planned']} passes complete; "
          f"wrote {args.out / 'speed.json'}, speed.csv, speed.md (log {args.out / LOG_NAME})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
