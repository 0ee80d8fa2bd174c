"""The speed benchmark's arithmetic: from logged passes to one row per arm, with intervals.

Two schedules (``schedule``), both over the same prompts at the same concurrency:

- **rounds** (the default): the prompts are cut into groups of ``concurrency`` (a *round*), and
  every arm runs each round once, one pass per arm, the arm order rotated by one per round (round
  k starts with arm k), so no arm always runs first or last. An arm's passes are paired with
  strict's pass over the same prompts of the same round, minutes apart: the machine's drift over a
  repeat (docs/MEASURING.md#host-effects-behind-the-method) falls between rounds, not inside a
  pair, and strict runs once per round instead of twice per candidate (a repeat of plain, strict
  and four budget arms is 6 prompt sweeps, where trios need 11).
  Repeat ratio = ``sum(wall strict) / sum(wall A)`` over the repeat's rounds (fixed work: both arms
  produce the same tokens), counted once every round of the repeat is paired;
- **trios**: one repeat runs the arms in the order ``strict, A1, strict, A2, ..., strict`` over all
  prompts, so every candidate pass sits between two strict passes of the same repeat (a *trio*);
  pass ratio = ``tok/s(A) / mean(tok/s(strict before), tok/s(strict after))``; drift =
  ``|before - after| / mean(before, after)``: how much the machine moved during a trio. The logs
  made before rounds existed are trio logs (their fingerprint names no schedule).

From the paired units either way:

- the arm's ``speedup`` is the median over repeats, ``speedup_ci`` its percentile-bootstrap
  interval over repeats (with 3 repeats that is about [min, max]);
- per-prompt ratio = the same quotient for one prompt's request (its tokens / its latency),
  geometric mean over repeats; ``prompt_speedup`` is the geometric mean over prompts and
  ``prompt_speedup_ci`` its bootstrap interval over prompts: the interval to read when repeats
  are few (with rounds, every paired round counts, a repeat still in progress too). A sampled run
  (``sampling``) pairs each (prompt, seed) request with strict's of the same prompt and seed, and a
  prompt's ratio is the geometric mean over its seeds and units: the interval still resamples
  prompts, since two samples of one prompt are not independent. Requests logged without a seed
  (greedy, older logs) are seed 0. ``prompt_accept_ratio`` pairs and averages each request's accept
  length (tokens / verify rounds) the same way;
- CPU ratio = the same quotient in tokens per CPU-second of the serving processes (launched
  servers only: ``cpu_s_per_token`` of each pass). Other work on a shared machine stretches wall
  time far more than it changes the CPU time a server needs per token, so this ratio is the
  steadier one there; tok/s is what a user waits for.

``complete`` says how many passes of the planned run are logged.

A pair is measured on one machine. A resumed run may run on another machine
(``host.machine``: every boot is a new one), whose speed can differ by far more than any arm's
effect, so a pass is logged with its machine, a trio or a round pairs only passes of one machine,
and a resumed run re-measures on the machine at hand whatever an unfinished trio or round still
lacks, the passes already logged elsewhere included (``passes_to_run``). A position may then hold
passes of two machines; the one that completes the trio or round counts. Passes logged before
machines were recorded share the machine ``None``.

A pass a monitor judged ``disturbed`` (``monitor.py``) counts in no ratio; the warnings say why from
what it logged: other work's share of the machine's CPU (``foreign_share``) or the machine standing
still (``stall_s`` above the ``max_stall_s`` logged with it).
"""

from __future__ import annotations

from typing import Callable, Optional

from sglang_asd.bench import stats
from sglang_asd.bench.arms import PLAIN, STRICT, Arm, describe
from sglang_asd.bench.sampling import seed_of

DRIFT_WARN = 0.05
ROUNDS, TRIOS = "rounds", "trios"
SCHEDULES = (ROUNDS, TRIOS)
# The stall limit of passes logged before a pass carried its own (``max_stall_s``).
LOGGED_MAX_STALL_S = 30.0


def schedule(arms: list[Arm], rounds: Optional[int] = None) -> list[str]:
    """One repeat's pass order, by label. ``rounds=None``: trios (strict around every candidate);
    ``rounds=R``: every arm once per round, R rounds, round k's order rotated to start at arm k."""
    labels = [a.label for a in arms]
    if rounds is not None:
        return [labels[(k + slot) % len(labels)] for k in range(rounds) for slot in range(len(labels))]
    order = [STRICT]
    for label in labels:
        if label != STRICT:
            order += [label, STRICT]
    return order


def round_of(index: int, arms_n: int) -> int:
    """The round of the pass at ``index`` of a rounds schedule of ``arms_n`` arms."""
    return index // arms_n


def _per_request(p: dict, over: str) -> dict[tuple[str, int], float]:
    out = {}
    for r in p.get("requests", []):
        if r.get("ok") and r.get("completion_tokens") and r.get(over):
            out[(r["tag"], seed_of(r))] = r["completion_tokens"] / r[over]
    return out


def request_rates(p: dict) -> dict[tuple[str, int], float]:
    """Per (prompt tag, seed): that request's output tokens / its latency (successful requests)."""
    return _per_request(p, "latency_s")


def request_accept_lengths(p: dict) -> dict[tuple[str, int], float]:
    """Per (prompt tag, seed): that request's output tokens / its verify rounds (``spec_verify_ct``),
    its accept length; none for a request without verify rounds (plain decoding)."""
    return _per_request(p, "spec_verify_ct")


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


def _by_round(passes: list[dict]) -> dict[tuple[int, int], dict]:
    """``{(repeat, round): {machine: {label: pass}}}`` of the passes of a rounds schedule."""
    out: dict = {}
    for p in passes:
        if p.get("round") is not None:
            out.setdefault((p["repeat"], p["round"]), {}).setdefault(p.get("machine"), {})[p["arm"]] = p
    return out


def round_pairs(passes: list[dict], label: str, reference: str = STRICT) -> list[tuple[dict, dict]]:
    """``(reference, candidate)`` for every round in which ``label`` and ``reference`` (strict unless
    named: two rules can be set against each other the same way) are logged on one machine (where two
    machines hold both, the one whose candidate finished last), by repeat and round."""
    out = []
    for _, on in sorted(_by_round(passes).items()):
        both = [arms for arms in on.values() if label in arms and reference in arms]
        if both:
            arms = max(both, key=lambda a: a[label].get("finished") or "")
            out.append((arms[reference], arms[label]))
    return out


def prompt_ratio_between(passes: list[dict], reference: str, label: str) -> Optional[tuple[float, tuple]]:
    """``label``'s tok/s over ``reference``'s, paired by round and prompt (``prompt_ratios``): the
    geometric mean over prompts and its bootstrap interval over prompts; None where no round holds both."""
    rates = list(prompt_ratios([((r,), c) for r, c in round_pairs(passes, label, reference)]).values())
    return (stats.geometric_mean(rates), stats.bootstrap_ci(rates, "gmean")) if rates else None


def passes_to_run(passes: list[dict], order: list[str], repeats: int, machine: Optional[str],
                  rounds: Optional[int] = None) -> list[tuple[int, int]]:
    """``(repeat, index)`` of every pass still to run on ``machine``, in schedule order.
    ``passes``: the usable ones (no failed request, not disturbed). Trios: each candidate without a
    complete trio, with those of its strict neighbours not yet logged there. Rounds: in each round,
    every candidate not yet paired with strict on one machine, with strict if it is not logged
    there. Without candidates (strict alone), every strict pass not logged on ``machine``."""
    here = {(p["repeat"], p["index"]) for p in passes if p.get("machine") == machine}
    todo: list[tuple[int, int]] = []
    if len(set(order)) == 1:
        return [(r, i) for r in range(repeats) for i in range(len(order)) if (r, i) not in here]
    if rounds is not None:
        arms_n = len(order) // rounds
        paired = {(s["repeat"], s["round"], c["arm"]) for label in set(order) - {STRICT}
                  for s, c in round_pairs(passes, label)}
        for repeat in range(repeats):
            for k in range(rounds):
                slots = range(k * arms_n, (k + 1) * arms_n)
                open_ = {order[i] for i in slots if order[i] != STRICT and (repeat, k, order[i]) not in paired}
                todo += [(repeat, i) for i in slots if (repeat, i) not in here
                         and (order[i] in open_ or (order[i] == STRICT and open_))]
        return todo
    settled = {(c["repeat"], c["index"]) for label in set(order) - {STRICT} for _, c, _ in trios(passes, label)}
    for repeat in range(repeats):
        for index, label in enumerate(order):
            if label == STRICT or (repeat, index) in settled:
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


def combined(ps: list[dict]) -> dict:
    """Passes over disjoint prompt groups (the rounds of one repeat) as one pass over all of them:
    tok/s = their tokens over their summed wall time, CPU-s per token likewise (None unless every
    pass measured it), their requests together."""
    tokens, wall = sum(p["output_tokens"] for p in ps), sum(p["wall_s"] for p in ps)
    cpu = [p.get("server_cpu_s") for p in ps]
    return {"repeat": ps[0]["repeat"], "arm": ps[0]["arm"], "tok_s": tokens / wall if wall else None,
            "cpu_s_per_token": sum(cpu) / tokens if tokens and None not in cpu else None,
            "requests": [r for p in ps for r in p.get("requests", [])]}


Unit = tuple[tuple[dict, ...], dict]   # (strict baselines, candidate)


def pairings(passes: list[dict], label: str, rounds: Optional[int] = None) -> tuple[list[Unit], list[Unit]]:
    """``(pairs, repeats)``: ``label``'s units against strict, as ``(baselines, candidate)``.
    ``pairs``: every trio, or every paired round (the per-prompt ratios); ``repeats``: one unit
    per repeat (the repeat ratios): every trio, or a repeat's paired rounds combined once all its
    ``rounds`` are paired."""
    if rounds is None:
        units = [((b, a), c) for b, c, a in trios(passes, label)]
        return units, units
    pairs = round_pairs(passes, label)
    per_repeat: dict[int, list[tuple[dict, dict]]] = {}
    for s, c in pairs:
        per_repeat.setdefault(s["repeat"], []).append((s, c))
    repeats = [((combined([s for s, _ in ps]),), combined([c for _, c in ps]))
               for _, ps in sorted(per_repeat.items()) if len(ps) == rounds]
    return [((s,), c) for s, c in pairs], repeats


PerRequest = Callable[[dict], dict[tuple[str, int], float]]


def prompt_ratios(units: list[Unit], per_request: PerRequest = request_rates) -> dict[str, float]:
    """Per prompt: geometric mean over its units and seeds of its (prompt, seed) request's tok/s (or
    another ``per_request`` value) over the mean of the same (prompt, seed) request's in the unit's
    strict passes."""
    per_prompt: dict[str, list[float]] = {}
    for bases, cand in units:
        base_values = [per_request(b) for b in bases]
        for key, value in per_request(cand).items():
            if all(key in b for b in base_values):
                per_prompt.setdefault(key[0], []).append(value / stats.mean(b[key] for b in base_values))
    return {tag: stats.geometric_mean(rs) for tag, rs in per_prompt.items()}


def _rate(p: dict) -> Optional[float]:
    """Output tokens per CPU-second of the serving processes in one pass (None if not measured)."""
    cpt = p.get("cpu_s_per_token")
    return 1.0 / cpt if cpt else None


def _pooled(ps: list[dict], key: str) -> Optional[float]:
    return stats.mean(p.get(key) for p in ps)


def _against(units: list[Unit], value) -> tuple[list[Optional[float]], list[Optional[float]]]:
    """Per unit: the candidate's ``value`` over the mean of its baselines', and the baselines'
    drift (trios only; a unit with one baseline has none)."""
    ratios, drifts = [], []
    for bases, cand in units:
        vs = [value(b) for b in bases]
        if value(cand) is None or None in vs:
            continue
        ratios.append(stats.ratio(value(cand), stats.mean(vs)))
        if len(vs) == 2:
            drifts.append(stats.drift(*vs))
    return ratios, drifts


def arm_row(arm: Arm, passes: list[dict], seed: int = 0, rounds: Optional[int] = None) -> dict:
    """One candidate arm against strict."""
    pairs, repeats = pairings(passes, arm.label, rounds)
    ratios, drifts = _against(repeats, lambda p: p["tok_s"])
    cpu_ratios, cpu_drifts = _against(repeats, _rate)
    per_prompt = prompt_ratios(pairs)
    per_prompt_accept = prompt_ratios(pairs, request_accept_lengths)
    cands = [c for _, c in pairs]
    bases = [b for bs, _ in pairs for b in bs]
    return {
        "arm": arm.label, "budget": arm.budget, "fields": describe(arm), "repeats_n": len(repeats),
        "rounds_n": len(pairs) if rounds is not None else None,
        "speedup_median": stats.median(ratios), "speedup_ci": stats.bootstrap_ci(ratios, "median", seed=seed),
        "prompts_n": len(per_prompt),
        "prompt_speedup": stats.geometric_mean(per_prompt.values()),
        "prompt_speedup_ci": stats.bootstrap_ci(list(per_prompt.values()), "gmean", seed=seed),
        "drift_median": stats.median(drifts),
        "drift_max": max((d for d in drifts if d is not None), default=None),
        "cpu_speedup_median": stats.median(cpu_ratios),
        "cpu_speedup_ci": stats.bootstrap_ci(cpu_ratios, "median", seed=seed), "cpu_repeats_n": len(cpu_ratios),
        "cpu_drift_median": stats.median(cpu_drifts),
        "cpu_s_per_token_median": stats.median(c.get("cpu_s_per_token") for _, c in repeats),
        "tok_s_median": stats.median(c["tok_s"] for _, c in repeats),
        "strict_tok_s_median": stats.median(stats.mean(b["tok_s"] for b in bs) for bs, _ in repeats),
        "accept_length": _pooled(cands, "accept_length"),
        "strict_accept_length": _pooled(bases, "accept_length"),
        "prompt_accept_ratio": stats.geometric_mean(per_prompt_accept.values()),
        "prompt_accept_ratio_ci": stats.bootstrap_ci(list(per_prompt_accept.values()), "gmean", seed=seed),
        "verify_ct_mean": _pooled(cands, "verify_ct_mean"),
        "strict_verify_ct_mean": _pooled(bases, "verify_ct_mean"),
        "spent_mean": _pooled(cands, "spent_mean"),
        "exceptions_mean": _pooled(cands, "exceptions_mean"),
        "applied_share": _pooled(cands, "applied_share"),
        "errors": sum(c["errors"] for c in cands),
        "fixed_work_ok": all(p["fixed_work_ok"] for p in cands + bases),
        "ratios": ratios, "drifts": drifts, "prompt_ratios": per_prompt,
    }


def strict_repeats(passes: list[dict], rounds: Optional[int] = None) -> list[dict]:
    """Strict's passes, one per repeat: every strict pass (trios), or a repeat's strict passes
    combined once every round has one (rounds; of two machines' passes of a round, the later)."""
    ps = [p for p in passes if p["arm"] == STRICT]
    if rounds is None:
        return ps
    per_repeat: dict[int, dict[int, dict]] = {}
    for p in sorted(ps, key=lambda p: p.get("finished") or ""):
        per_repeat.setdefault(p["repeat"], {})[p["round"]] = p
    return [combined(list(on.values())) for _, on in sorted(per_repeat.items()) if len(on) == rounds]


def strict_row(passes: list[dict], rounds: Optional[int] = None) -> dict:
    """The reference itself: every logged strict pass (ratio 1 by definition)."""
    ps = [p for p in passes if p["arm"] == STRICT]
    reps = strict_repeats(passes, rounds)
    return {"arm": STRICT, "budget": 0.0, "fields": "asd_budget=0", "repeats_n": len({p["repeat"] for p in reps}),
            "rounds_n": len(ps) if rounds is not None else None,
            "speedup_median": 1.0 if ps else None, "tok_s_median": stats.median(p["tok_s"] for p in reps),
            "cpu_speedup_median": 1.0 if any(p.get("cpu_s_per_token") for p in ps) else None,
            "cpu_s_per_token_median": stats.median(p.get("cpu_s_per_token") for p in reps),
            "accept_length": _pooled(ps, "accept_length"), "verify_ct_mean": _pooled(ps, "verify_ct_mean"),
            "spent_mean": _pooled(ps, "spent_mean"), "errors": sum(p["errors"] for p in ps),
            "fixed_work_ok": all(p["fixed_work_ok"] for p in ps)}


def summarize(passes: list[dict], arms: list[Arm], seed: int = 0, rounds: Optional[int] = None) -> list[dict]:
    """Rows: plain (if measured), strict, then every other arm in order; each candidate row also
    gets ``vs_plain`` (its median tok/s / plain's median tok/s, no interval) when plain is measured.
    ``rounds``: the rounds per repeat of a rounds schedule (None: trios)."""
    rows = [arm_row(a, passes, seed, rounds) for a in arms if a.label != STRICT]
    plain = next((r for r in rows if r["arm"] == PLAIN), None)
    rows = ([plain] if plain else []) + [strict_row(passes, rounds)] + [r for r in rows if r["arm"] != PLAIN]
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
    stalled = [p for p in disturbed if (p.get("stall_s") or 0.0) > p.get("max_stall_s", LOGGED_MAX_STALL_S)]
    loaded = [p for p in disturbed if p not in stalled]
    if loaded:
        worst = max(p.get("foreign_share") or 0.0 for p in loaded)
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
