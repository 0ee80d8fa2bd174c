"""Speed at fixed work: tokens/s of each arm against strict greedy, and of plain decoding.

``python -m sglang_asd.bench.speed (--url URL | --launch='SERVER ARGS') [--budgets 0,2,8,32]
    [--arms 'b8g05:asd_budget=8,asd_gate=0.5'] [--plain-url URL | --plain-launch[='ARGS']]
    --dataset gsm8k,mtbench --num-prompts 64 --max-new-tokens 256 --concurrency 8 --repeats 3
    --out DIR [--resume]``

Every request is greedy with ``ignore_eos`` and the same ``max_new_tokens``, so every pass does
the same work. An arm (see ``arms``) is a label and the ASD fields its requests send; ``strict``
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
``speed.csv`` and ``speed.md``, after every pass. With ``--launch`` / ``--plain-launch`` it
starts ``python -m sglang_asd.launch_server ARGS`` itself (logs ``DIR/server.log``,
``DIR/plain_server.log``) and stops it at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional

import requests

from sglang_asd.bench import datasets, quiet, report, speed_summary
from sglang_asd.bench.arms import PLAIN, PLAIN_ARM, STRICT, Arm, resolve_arms
from sglang_asd.bench.client import GenRequest, served_model
from sglang_asd.bench.metrics import first_errors, result_metrics
from sglang_asd.bench.runlog import RunLog, RunLogError, logged_servers, read_log
from sglang_asd.bench.runner import PassFailed, PassResult, preflight, run_pass
from sglang_asd.bench.server import (add_plain_args, add_server_args, identity, plain_launch, server_info,
                                     target_servers, with_launch_facts)

LOG_NAME = "speed_passes.jsonl"
LOG_KIND = "asd-speed-log"
DEFAULT_BUDGETS = "0,2,8,32"
REQUEST_KEYS = ("tag", "ok", "completion_tokens", "latency_s", "spec_verify_ct", "error")
COLUMNS = (
    ("arm", "arm"), ("fields", "request fields"), ("repeats_n", "repeats"),
    ("speedup_cell", "tok/s vs strict [95% CI, repeats]"),
    ("prompt_speedup_cell", "per-prompt tok/s vs strict [95% CI, prompts]"), ("prompts_n", "prompts"),
    ("vs_plain", "tok/s vs plain"), ("drift_median", "baseline drift (median)"), ("tok_s_median", "tok/s"),
    ("cpu_speedup_cell", "tokens per server CPU-s vs strict [95% CI, repeats]"),
    ("accept_length", "accept len"), ("verify_ct_mean", "verify rounds/req"), ("spent_mean", "spent/req (nats)"),
    ("applied_share", "ASD applied"), ("errors", "errors"),
)
CSV_COLUMNS = ("arm", "budget", "fields", "repeats_n", "rounds_n", "speedup_median", "speedup_ci", "prompts_n", "prompt_speedup",
               "prompt_speedup_ci", "vs_plain", "drift_median", "drift_max", "tok_s_median", "strict_tok_s_median",
               "cpu_speedup_median", "cpu_speedup_ci", "cpu_drift_median", "cpu_s_per_token_median",
               "accept_length", "strict_accept_length", "verify_ct_mean", "strict_verify_ct_mean", "spent_mean",
               "exceptions_mean", "applied_share", "errors", "fixed_work_ok")


def pass_record(arm: Arm, repeat: int, index: int, p: PassResult, expected_tokens: int,
                server_cpu_s: Optional[float] = None, foreign_share: Optional[float] = None,
                max_foreign_share: float = quiet.DEFAULT_MAX_SHARE, machine: Optional[str] = None,
                stall_s: Optional[float] = None, round_: Optional[int] = None) -> dict:
    """The logged form of one pass; ``server_cpu_s`` = CPU seconds the serving processes used
    during it (launched servers only), ``cpu_s_per_token`` = that over the output tokens,
    ``foreign_share`` = the machine's CPU that went to other work meanwhile (``quiet.py``; launched
    servers only), ``stall_s`` = the longest the machine stood still (``quiet.Heartbeat``),
    ``disturbed`` when the share is above ``max_foreign_share`` or the stall above
    ``quiet.MAX_STALL_S``; ``machine`` = the client's ``quiet.machine()`` id (a trio or a round
    pairs passes of one machine, ``speed_summary``); ``round`` = the pass's round (rounds schedule;
    None for trios)."""
    m = result_metrics(p.results)
    return {"kind": "pass", "repeat": repeat, "index": index, "round": round_, "arm": arm.label, "server": arm.server,
            "machine": machine,
            "fields": dict(arm.fields), "server_cpu_s": server_cpu_s, "foreign_share": foreign_share,
            "stall_s": stall_s,
            "disturbed": (foreign_share is not None and foreign_share > max_foreign_share)
            or (stall_s is not None and stall_s > quiet.MAX_STALL_S),
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
    schedule out: the logs made before rounds existed hold none, and stay resumable."""
    fp = {"arms": [a.to_dict() for a in arms], "prompts": [p.id for p in prompts],
          "max_new_tokens": args.max_new_tokens, "concurrency": args.concurrency, "api": args.api,
          "stream": args.stream, "launch": args.launch, "plain_launch": plain_launch(args)}
    if args.schedule != speed_summary.TRIOS:
        fp["schedule"] = args.schedule
    return fp


def rounds_of(fp: dict) -> Optional[int]:
    """Rounds per repeat of a run's fingerprint (``ceil(prompts / concurrency)``), None for trios."""
    if fp.get("schedule", speed_summary.TRIOS) == speed_summary.TRIOS:
        return None
    return -(-len(fp["prompts"]) // fp["concurrency"])


def run(args: argparse.Namespace, arms: list[Arm]) -> dict:
    """Measure every pass of the schedule not yet in the log (the servers are started here when
    launched); the report is rewritten after each pass. Returns the final report."""
    prompts = datasets.mixed_prompts(datasets.parse_tasks(args.dataset), args.num_prompts)
    fp = fingerprint(args, arms, prompts)
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
                                                        api=args.api, model=model, tag="preflight")) for a in arms],
                  args.timeout)
        log = RunLog.open(log_path, LOG_KIND, fp, args.resume)
        machine = quiet.machine()
        log.append({"kind": "plan", "repeats": args.repeats, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "machine": machine, "servers": info})
        meta = {"urls": urls, **info, "model": model}
        by_label = {a.label: a for a in arms}

        def reqs(arm: Arm, max_new: int, group: Optional[int] = None) -> list[GenRequest]:
            """The arm's requests over every prompt, or over round ``group``'s."""
            some = prompts if group is None else prompts[group * args.concurrency:(group + 1) * args.concurrency]
            return [GenRequest(text=p.text, max_new_tokens=max_new, fields=dict(arm.fields), ignore_eos=True,
                               stream=args.stream, api=args.api, model=meta["model"], tag=p.id) for p in some]

        if args.warmup:
            for server in {a.server for a in arms}:
                run_pass(urls[server], reqs(by_label[PLAIN if server == "plain" else STRICT], 4), args.concurrency,
                         args.timeout, desc=f"warm-up ({server})")
        # NGRAM drafts come from a corpus of every request the server has seen, so a pass would draft
        # from the same prompts' earlier outputs: passes 2 and 3 of a strict arm accepted 4.3 and 6.4
        # tokens per round where the first accepted 1.8 (the demo model, 2026-12-02). Every pass on
        # such a server starts from an empty corpus: SGLang's /flush_cache, which also empties the radix
        # cache, so then every pass flushes its own server first, the plain one too (no arm keeps its
        # prompts' prefixes).
        flush_each_pass = "NGRAM" in (info["server"].get("speculative_algorithm"),
                                      info["plain_server"].get("speculative_algorithm"))
        rounds = rounds_of(fp)
        order = speed_summary.schedule(arms, rounds)
        usable = [r for r in passes_of(log.records) if not r["errors"] and not r.get("disturbed")]
        todo = speed_summary.passes_to_run(usable, order, args.repeats, machine["id"], rounds)
        from tqdm import tqdm

        total = args.repeats * len(order)
        load, beat = quiet.ForeignLoad(lambda: own_cpu_s(targets)), quiet.Heartbeat()
        with tqdm(total=total, initial=max(0, total - len(todo)), desc="speed passes", unit="pass", dynamic_ncols=True) as bar:
            for repeat, index in todo:
                arm = by_label[order[index]]
                group = None if rounds is None else speed_summary.round_of(index, len(arms))
                work = reqs(arm, args.max_new_tokens, group)
                where = f"repeat {repeat + 1}" + ("" if group is None else f" round {group + 1}/{rounds}")
                for attempt in range(args.redo_disturbed + 1):
                    if attempt:
                        load.wait_quiet(args.max_foreign_share, max_wait_s=args.quiet_wait)
                    if flush_each_pass:
                        flush_cache(urls[arm.server])
                    cpu_before = targets.cpu_seconds(arm.server)
                    load.start()
                    beat.start()
                    p = run_pass(urls[arm.server], work, args.concurrency, args.timeout,
                                 desc=f"{where} {arm.label}", progress=group is None)
                    stall, share = beat.stop(), load.share()
                    cpu_after = targets.cpu_seconds(arm.server)
                    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
                    record = pass_record(arm, repeat, index, p, len(work) * args.max_new_tokens, cpu, share,
                                         args.max_foreign_share, machine["id"], stall, group)
                    log.append(record)
                    write(build_result(log.header, log.records, args.repeats, meta), args.out)
                    if record["errors"]:
                        # A server that dropped requests (crashed, timed out) would fail every later pass
                        # too: stop here; --resume redoes this pass and the rest.
                        raise PassFailed(f"{where} {arm.label}: {record['errors']} of {len(work)} "
                                         f"requests failed ({'; '.join(record['first_errors'][:2])}); "
                                         f"rerun with --resume to redo this pass and the rest")
                    if not record["disturbed"]:
                        break
                    why = (f"the machine stood still for {stall:.0f} s during the pass" if stall > quiet.MAX_STALL_S
                           else f"{share:.0%} of the machine's CPU went to other work during the pass "
                                f"(> {args.max_foreign_share:.0%})")
                    tqdm.write(f"{where} {arm.label}: {why}"
                               + (": redoing it" if attempt < args.redo_disturbed else ": kept, marked disturbed"))
                bar.set_postfix_str(f"{arm.label} {fmt_rate(p.tokens_per_s)}")
                bar.update(1)
        result = build_result(log.header, log.records, args.repeats, meta)
    return result


def flush_cache(url: str, timeout: float = 120.0) -> None:
    """SGLang's ``/flush_cache``: empties the radix cache and an NGRAM server's corpus (its scheduler
    calls the draft worker's ``clear_cache_pool``). Called between passes, with nothing in flight."""
    r = requests.post(url.rstrip("/") + "/flush_cache", timeout=timeout)
    if r.status_code != 200:
        raise RuntimeError(f"{url}/flush_cache: HTTP {r.status_code}: {r.text[:200]}")


def own_cpu_s(targets) -> Optional[float]:
    """CPU seconds of the benchmark's client and every server it launched; None when a server was
    given by URL (its CPU cannot be told from other work on the machine)."""
    if any(url and role not in targets.launched for role, url in targets.urls.items()):
        return None
    servers = [targets.cpu_seconds(role) for role in targets.launched]
    return None if None in servers else quiet.own_process_s() + sum(servers)


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
        r["cpu_speedup_cell"] = repeats_cell(r.get("cpu_speedup_median"), r.get("cpu_speedup_ci"), r.get("repeats_n"))
    meta = {**logged_servers(records), **(meta or {})}
    return {
        "kind": "asd-speed", "version": 2, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": {**{k: v for k, v in fp.items() if k not in ("prompts",)}, "num_prompts": len(fp["prompts"]),
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


def few_repeats_note(arms: list[dict]) -> Optional[str]:
    """What the interval over repeats is when there are too few of them to resample.

    The percentile bootstrap of a median over a handful of repeats can only return their lowest and
    highest ratio (with 5 repeats a resample's median is the lowest one more than 2.5% of the time):
    the interval is then the repeats' range and covers far less than 95%. Said where the log shows it.
    """
    ranged = [a for a in arms if len(a.get("ratios") or ()) > 1 and a.get("speedup_ci") is not None
              and list(a["speedup_ci"]) == [min(a["ratios"]), max(a["ratios"])]]
    if not ranged:
        return None
    n = sorted({len(a["ratios"]) for a in ranged})
    return (f"With {' or '.join(map(str, n))} repeats the interval over repeats of "
            f"{', '.join(a['arm'] for a in ranged)} is the repeats' range (lowest, highest ratio), "
            "not a 95% interval; the per-prompt interval rests on every prompt.")


def fmt_rate(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.1f} tok/s"


def columns(rounds: Optional[int]) -> tuple:
    """The report's columns: rounds show how many rounds are paired and have no baseline drift."""
    if rounds is None:
        return COLUMNS
    cols = [c for c in COLUMNS if c[0] != "drift_median"]
    at = [c[0] for c in cols].index("repeats_n") + 1
    return tuple(cols[:at] + [("rounds_n", "paired rounds")] + cols[at:])


def write(result: dict, out: Path) -> None:
    report.write_json(out / "speed.json", result)
    report.write_csv(out / "speed.csv", result["arms"], CSV_COLUMNS)
    cfg, done = result["config"], result["complete"]
    status = "complete" if done["passes"] >= done["planned"] else "PARTIAL"
    rounds = cfg.get("rounds")
    shape = ("strict-candidate-strict" if rounds is None else
             f"{rounds} rounds of {cfg['concurrency']} prompt(s), every arm once per round")
    md = [f"# ASD speed at fixed work ({result['created']})", "",
          f"{status}: {done['passes']} of {done['planned']} passes. {cfg['num_prompts']} prompts, ignore_eos, "
          f"max_new_tokens {cfg['max_new_tokens']}, concurrency {cfg['concurrency']}, route {cfg['api']}"
          f"{' (stream)' if cfg['stream'] else ''}, {cfg['repeats']} repeat(s) of {shape}.", "",
          report.markdown_table(result["arms"], columns(rounds)),
          "Intervals: 95% percentile bootstrap (median over repeats; geometric mean over prompts).", ""]
    if note := few_repeats_note(result["arms"]):
        md += [note, ""]
    if cfg["concurrency"] > 1:
        md += [f"At concurrency {cfg['concurrency']} the two ratios differ in kind. Over repeats: throughput, "
               "summed tokens over summed wall time, and a pass ends with its slowest request. Over prompts: "
               "each request's own rate, its tokens over its own latency. Plain decoding ends a batch's "
               "requests together; speculative requests end as their accept lengths allow, so the batch's "
               "tail weighs on the first ratio only.", ""]
    for key in ("server", "plain_server"):
        if result.get(key):
            md += [f"{key}: " + ", ".join(f"{k}={v}" for k, v in result[key].items()), ""]
    if result.get("machines"):
        md += ["machines: " + "; ".join(f"{m['id']} ({m['cpu']}, {m['cpus']} CPUs): {m['passes']} passes"
                                         for m in result["machines"]), ""]
    if cfg.get("launch") is not None:
        md += [f"launch: `{cfg['launch']}`", ""]
    if result["warnings"]:
        md += ["Warnings:", *[f"- {w}" for w in result["warnings"]], ""]
    (out / "speed.md").write_text("\n".join(md) + "\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sglang_asd.bench.speed", description=__doc__.split("\n\n")[0])
    add_server_args(p)
    add_plain_args(p)
    p.add_argument("--budgets", help=f"comma-separated asd_budget values, shorthand for arms (default "
                                     f"{DEFAULT_BUDGETS} when --arms is not given either)")
    p.add_argument("--arms", help="'LABEL:FIELD=VALUE,...;LABEL:...', e.g. 'b8g05:asd_budget=8,asd_gate=0.5'")
    p.add_argument("--rules", help="acceptance rules, each over its knob: 'asd=2|8,local=1,margin=0.5|2,threshold=0.5' "
                                   "(asd, local: asd_budget; margin: asd_margin; threshold: asd_threshold)")
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
    p.add_argument("--stream", action="store_true", help="stream responses (measures the streaming path)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false")
    p.add_argument("--timeout", type=float, default=600.0, help="per-request timeout, seconds")
    p.add_argument("--max-foreign-share", type=float, default=quiet.DEFAULT_MAX_SHARE,
                   help="launched servers: a pass during which more than this share of the machine's CPU went "
                        "to other processes is disturbed, and redone (default %(default)s)")
    p.add_argument("--redo-disturbed", type=int, default=2,
                   help="redo a disturbed pass up to this many times, each once the machine is quiet; the last "
                        "try is kept, marked (default %(default)s)")
    p.add_argument("--quiet-wait", type=float, default=1800.0,
                   help="seconds to wait at most for other load to end before a redo (default %(default)s)")
    p.add_argument("--out", type=Path, required=True, help="output folder (holds the run log)")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ("num_prompts", "max_new_tokens", "concurrency", "repeats"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not 0 <= args.max_foreign_share <= 1:
        raise SystemExit(f"--max-foreign-share must be in [0, 1], got {args.max_foreign_share}")
    if args.redo_disturbed < 0:
        raise SystemExit(f"--redo-disturbed must be >= 0, got {args.redo_disturbed}")
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
            result = run(args, arms)
    except (ValueError, RunLogError) as e:
        raise SystemExit(f"error: {e}")
    except PassFailed as e:
        print(f"error: {e}; wrote what is complete to {args.out / 'speed.json'}", file=sys.stderr)
        return 1
    write(result, args.out)
    print(report.markdown_table(result["arms"], columns(result["config"]["rounds"])))
    for w in result["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    print(f"{result['complete']['passes']} of {result['complete']['planned']} passes complete; "
          f"wrote {args.out / 'speed.json'}, speed.csv, speed.md (log {args.out / LOG_NAME})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
