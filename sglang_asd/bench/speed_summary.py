"""The speed benchmark's arithmetic: from logged passes to one row per arm, with intervals.

One repeat runs the arms in the order ``strict, A1, strict, A2, ..., strict`` (``schedule``), so
every candidate pass sits between two strict passes of the same repeat (a *trio*):

- pass ratio = ``tok/s(A) / mean(tok/s(strict before), tok/s(strict after))``; the arm's
  ``speedup`` is the median over repeats, ``speedup_ci`` its percentile-bootstrap interval over
  repeats (with 3 repeats that is about [min, max]);
- per-prompt ratio = the same quotient for one prompt's request (its tokens / its latency),
  geometric mean over repeats; ``prompt_speedup`` is the geometric mean over prompts and
  ``prompt_speedup_ci`` its bootstrap interval over prompts: the interval to read when repeats
  are few;
- drift = ``|before - after| / mean(before, after)``: how much the machine moved during a trio;
- CPU ratio = the same quotient in tokens per CPU-second of the serving processes (launched
  servers only: ``cpu_s_per_token`` of each pass). Other work on a shared machine stretches wall
  time far more than it changes the CPU time a server needs per token, so this ratio is the
  steadier one there; tok/s is what a user waits for.

Only complete trios count; ``complete`` says how many passes of the planned run are logged.

A trio is measured on one machine. A run resumed in another session may run on another machine
(``quiet.machine``: every boot is a new one), whose speed can differ by far more than any arm's
effect, so a pass is logged with its machine, a trio pairs only passes of one machine, and a resumed
run re-measures on the machine at hand whatever an incomplete trio still lacks, its strict neighbours
included (``passes_to_run``). A position may then hold passes of two machines; the one of the trio
counts. Passes logged before machines were recorded share the machine ``None``.
"""

from __future__ import annotations

from typing import Optional

from sglang_asd.bench import quiet, stats
from sglang_asd.bench.arms import PLAIN, STRICT, Arm, describe

DRIFT_WARN = 0.05


def schedule(arms: list[Arm]) -> list[str]:
    """One repeat's pass order, by label: strict around every candidate."""
    order = [STRICT]
    for arm in arms:
        if arm.label != STRICT:
            order += [arm.label, STRICT]
    return order


def request_rates(p: dict) -> dict[str, float]:
    """Per prompt tag: that request's output tokens / its latency (successful requests)."""
    out = {}
    for r in p.get("requests", []):
        if r.get("ok") and r.get("completion_tokens") and r.get("latency_s"):
            out[r["tag"]] = r["completion_tokens"] / r["latency_s"]
    return out


def position(p: dict) -> tuple:
    """Where a logged pass sits: ``(repeat, index in the schedule, machine)``."""
    return p["repeat"], p["index"], p.get("machine")


def trios(passes: list[dict], label: str) -> list[tuple[dict, dict, dict]]:
    """``(before, candidate, after)`` for every logged pass of ``label`` whose two strict
    neighbours in the same repeat are logged too, on the same machine."""
    at = {position(p): p for p in passes}
    out = []
    for (repeat, index, machine), p in sorted(at.items(), key=lambda kv: (kv[0][:2], str(kv[0][2]))):
        if p["arm"] != label:
            continue
        before, after = at.get((repeat, index - 1, machine)), at.get((repeat, index + 1, machine))
        if before and after and before["arm"] == STRICT and after["arm"] == STRICT:
            out.append((before, p, after))
    return out


def passes_to_run(passes: list[dict], order: list[str], repeats: int, machine: Optional[str]) -> list[tuple[int, int]]:
    """``(repeat, index)`` of every pass still to run on ``machine``, in schedule order: each
    candidate without a complete trio, with those of its strict neighbours not yet logged there.
    ``passes``: the usable ones (no failed request, not disturbed). Without candidates (strict
    alone), every strict pass not logged on ``machine``."""
    here = {(p["repeat"], p["index"]) for p in passes if p.get("machine") == machine}
    settled = {(c["repeat"], c["index"]) for label in set(order) - {STRICT} for _, c, _ in trios(passes, label)}
    todo: list[tuple[int, int]] = []
    for repeat in range(repeats):
        for index, label in enumerate(order):
            if label == STRICT:
                if len(order) == 1 and (repeat, index) not in here:
                    todo.append((repeat, index))
                continue
            if (repeat, index) in settled:
                continue
            for pos in ((repeat, index - 1), (repeat, index), (repeat, index + 1)):
                if pos not in here and pos not in todo:
                    todo.append(pos)
    return todo


def machines(passes: list[dict]) -> dict:
    """Passes per machine id (``None``: logged before machines were recorded)."""
    out: dict = {}
    for p in passes:
        out[p.get("machine")] = out.get(p.get("machine"), 0) + 1
    return out


def prompt_ratios(trio_list: list[tuple[dict, dict, dict]]) -> dict[str, float]:
    """Per prompt: geometric mean over repeats of its request's tok/s ratio to strict."""
    per_prompt: dict[str, list[float]] = {}
    for before, cand, after in trio_list:
        b, c, a = request_rates(before), request_rates(cand), request_rates(after)
        for tag, rate in c.items():
            if tag in b and tag in a:
                per_prompt.setdefault(tag, []).append(rate / ((b[tag] + a[tag]) / 2.0))
    return {tag: stats.geometric_mean(rs) for tag, rs in per_prompt.items()}


def _rate(p: dict) -> Optional[float]:
    """Output tokens per CPU-second of the serving processes in one pass (None if not measured)."""
    cpt = p.get("cpu_s_per_token")
    return 1.0 / cpt if cpt else None


def _pooled(ps: list[dict], key: str) -> Optional[float]:
    return stats.mean(p.get(key) for p in ps)


def arm_row(arm: Arm, passes: list[dict], seed: int = 0) -> dict:
    """One candidate arm against strict."""
    ts = trios(passes, arm.label)
    ratios = [stats.ratio(c["tok_s"], stats.mean([b["tok_s"], a["tok_s"]])) for b, c, a in ts]
    drifts = [stats.drift(b["tok_s"], a["tok_s"]) for b, _, a in ts]
    per_cpu_s = [(_rate(b), _rate(c), _rate(a)) for b, c, a in ts]
    cpu_ratios = [stats.ratio(c, stats.mean([b, a])) for b, c, a in per_cpu_s if None not in (b, c, a)]
    cpu_drifts = [stats.drift(b, a) for b, c, a in per_cpu_s if None not in (b, c, a)]
    per_prompt = prompt_ratios(ts)
    cands = [c for _, c, _ in ts]
    bases = [x for b, _, a in ts for x in (b, a)]
    return {
        "arm": arm.label, "budget": arm.budget, "fields": describe(arm), "repeats_n": len(ts),
        "speedup_median": stats.median(ratios), "speedup_ci": stats.bootstrap_ci(ratios, "median", seed=seed),
        "prompts_n": len(per_prompt),
        "prompt_speedup": stats.geometric_mean(per_prompt.values()),
        "prompt_speedup_ci": stats.bootstrap_ci(list(per_prompt.values()), "gmean", seed=seed),
        "drift_median": stats.median(drifts),
        "drift_max": max((d for d in drifts if d is not None), default=None),
        "cpu_speedup_median": stats.median(cpu_ratios),
        "cpu_speedup_ci": stats.bootstrap_ci(cpu_ratios, "median", seed=seed), "cpu_repeats_n": len(cpu_ratios),
        "cpu_drift_median": stats.median(cpu_drifts),
        "cpu_s_per_token_median": stats.median(c.get("cpu_s_per_token") for c in cands),
        "tok_s_median": stats.median(c["tok_s"] for c in cands),
        "strict_tok_s_median": stats.median(stats.mean([b["tok_s"], a["tok_s"]]) for b, _, a in ts),
        "accept_length": _pooled(cands, "accept_length"),
        "strict_accept_length": _pooled(bases, "accept_length"),
        "verify_ct_mean": _pooled(cands, "verify_ct_mean"),
        "strict_verify_ct_mean": _pooled(bases, "verify_ct_mean"),
        "spent_mean": _pooled(cands, "spent_mean"),
        "exceptions_mean": _pooled(cands, "exceptions_mean"),
        "applied_share": _pooled(cands, "applied_share"),
        "errors": sum(c["errors"] for c in cands),
        "fixed_work_ok": all(p["fixed_work_ok"] for p in cands + bases),
        "ratios": ratios, "drifts": drifts, "prompt_ratios": per_prompt,
    }


def strict_row(passes: list[dict]) -> dict:
    """The reference itself: every logged strict pass (ratio 1 by definition)."""
    ps = [p for p in passes if p["arm"] == STRICT]
    return {"arm": STRICT, "budget": 0.0, "fields": "asd_budget=0", "repeats_n": len({p["repeat"] for p in ps}),
            "speedup_median": 1.0 if ps else None, "tok_s_median": stats.median(p["tok_s"] for p in ps),
            "cpu_speedup_median": 1.0 if any(p.get("cpu_s_per_token") for p in ps) else None,
            "cpu_s_per_token_median": stats.median(p.get("cpu_s_per_token") for p in ps),
            "accept_length": _pooled(ps, "accept_length"), "verify_ct_mean": _pooled(ps, "verify_ct_mean"),
            "spent_mean": _pooled(ps, "spent_mean"), "errors": sum(p["errors"] for p in ps),
            "fixed_work_ok": all(p["fixed_work_ok"] for p in ps)}


def summarize(passes: list[dict], arms: list[Arm], seed: int = 0) -> list[dict]:
    """Rows: plain (if measured), strict, then every other arm in order; each candidate row also
    gets ``vs_plain`` (its median tok/s / plain's median tok/s, no interval) when plain is measured."""
    rows = [arm_row(a, passes, seed) for a in arms if a.label != STRICT]
    plain = next((r for r in rows if r["arm"] == PLAIN), None)
    rows = ([plain] if plain else []) + [strict_row(passes)] + [r for r in rows if r["arm"] != PLAIN]
    for r in rows:
        r["vs_plain"] = stats.ratio(r["tok_s_median"], plain["tok_s_median"]) if plain else None
    return rows


def warnings_for(passes: list[dict], rows: list[dict]) -> list[str]:
    out = []
    if any(p["errors"] for p in passes):
        out.append(f"{sum(p['errors'] for p in passes)} request(s) failed, e.g. "
                   f"{next(e for p in passes for e in p['first_errors'])}")
    if not all(p["fixed_work_ok"] for p in passes):
        out.append("some passes did not produce exactly num_prompts x max_new_tokens tokens: "
                   "the server may not honour ignore_eos, or requests failed")
    disturbed = [p for p in passes if p.get("disturbed")]
    stalled = [p for p in disturbed if (p.get("stall_s") or 0.0) > quiet.MAX_STALL_S]
    loaded = [p for p in disturbed if p not in stalled]
    if loaded:
        worst = max(p["foreign_share"] for p in loaded)
        out.append(f"{len(loaded)} pass(es) ran while other work took up to {worst:.0%} of the machine's CPU "
                   f"({', '.join(sorted({p['arm'] for p in loaded}))}); --resume redoes them")
    if stalled:
        worst = max(p["stall_s"] for p in stalled)
        out.append(f"{len(stalled)} pass(es) ran while the machine stood still for up to {worst:.0f} s (paused?) "
                   f"({', '.join(sorted({p['arm'] for p in stalled}))}); --resume redoes them")
    spec = [p for p in passes if p.get("server") != "plain"]
    if spec and all(p["verify_ct_mean"] is None for p in spec):
        out.append("no spec_verify_ct in responses: the server is not running speculative decoding")
    for p in passes:
        if p.get("server") == "plain" and p["verify_ct_mean"] is not None:
            out.append("the plain server reports spec_verify_ct: it is running speculative decoding")
            break
    for r in rows:
        if r["arm"] in (STRICT, PLAIN):
            continue
        if r.get("applied_share") is not None and r["applied_share"] < 1.0:
            reasons = {k for p in passes if p["arm"] == r["arm"] for k in p["not_applied_reasons"]}
            out.append(f"{r['arm']}: ASD applied to {r['applied_share']:.0%} of requests "
                       f"(reasons: {', '.join(sorted(reasons))})")
        if r.get("applied_share") is None and r["repeats_n"]:
            out.append(f"{r['arm']}: no ASD receipts in responses (is this an sglang-asd server?)")
    per_machine = machines(passes)
    if len(per_machine) > 1:
        out.append(f"passes from {len(per_machine)} machines ("
                   + ", ".join(f"{m or 'not recorded'}: {n}" for m, n in per_machine.items())
                   + "): every ratio pairs passes of one machine; the tok/s columns pool them")
    for r in rows:
        if r.get("drift_median") is not None and r["drift_median"] > DRIFT_WARN:
            out.append(f"{r['arm']}: median baseline drift {r['drift_median']:.1%} > {DRIFT_WARN:.0%}: "
                       "the ratio is noise-dominated; read its interval, use more repeats or a quieter machine")
    return out
