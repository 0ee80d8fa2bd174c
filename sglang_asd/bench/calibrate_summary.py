"""The calibration's arithmetic: from logged answers and passes to one row per setting, a verdict
on each quality target, the recommended setting, and the article's quick recipe.

Per setting (an arm, ``arms``), against strict (budget 0) on the same prompts and seeds:

- speed at fixed work (``speed_summary.arm_row`` over the rounds schedule's passes): tok/s against
  strict with its interval (over repeats from 5 repeats, else over prompts: ``report.speedups_by_arm``)
  and tokens per verify round;
- spend per request at natural stop: the receipts' ``spent``, mean and worst;
- quality at natural stop, each paired (prompt, seed) by (prompt, seed):
  - ``acc_delta``: accuracy minus strict's where references exist. Its interval is the wider of
    the paired bootstrap over prompts (as the audit's) and Tango's score interval
    (``stats.paired_proportion_diff_ci``). A bootstrap over pairs that all agree has no width and
    would call four identical answers proof of a one-point bound; the score interval then is
    +-z^2/(n+z^2);
  - ``agreement``: the share of pairs whose final answer (``scoring.final``; the code block for
    code tasks, the whole text where there is no rule) equals strict's, with its Wilson interval
    (widened to the bootstrap's over prompts when there are several seeds per prompt);
  - ``length_change``: total completion tokens over strict's, minus 1, with a bootstrap interval
    over prompts; when no pair's length differs, the bootstrap sees no spread, and the interval is
    +-(the Wilson upper bound of the share of pairs whose length changes), as if a changed
    output could double or vanish;
  - ``divergence_share`` (text differs from strict's) and ``first_divergence`` (median output
    position, in tokens, of the first exception among diverged pairs: before its first exception
    a greedy answer is strict's token for token).

A target (``Targets``) is met by a setting when the interval lies inside it, missed when it lies
outside, and otherwise the prompts are too few to tell: the interval still holds both. The
recommendation is the fastest setting (point tok/s against strict) that meets every target
given; strict when none that is faster does, with each setting's reason.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Optional

from sglang_asd.bench import report, speed_summary, stats
from sglang_asd.bench.arms import STRICT, Arm, describe
from sglang_asd.bench.metrics import first_errors, result_metrics
from sglang_asd.bench.sampling import seed_of

MEETS, MISSES, UNSURE, UNMEASURED = "meets", "misses", "too few prompts to tell", "not measured"
N_BOOT = 10000


@dataclasses.dataclass(frozen=True)
class Targets:
    """What a setting must keep, each at ``confidence`` (two-sided intervals at that level):
    ``max_accuracy_drop`` in accuracy points (1 = one point), ``min_agreement`` a share of prompts
    with strict's final answer, ``max_length_change`` a share of strict's total length (either way)."""

    max_accuracy_drop: Optional[float] = None
    min_agreement: Optional[float] = None
    max_length_change: Optional[float] = None
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not 0 < self.confidence < 1:
            raise ValueError(f"--confidence must be in (0, 1), got {self.confidence}")
        if self.max_accuracy_drop is not None and not 0 < self.max_accuracy_drop < 100:
            raise ValueError(f"--max-accuracy-drop must be in (0, 100) points, got {self.max_accuracy_drop}")
        if self.min_agreement is not None and not 0 < self.min_agreement < 1:
            raise ValueError(f"--min-agreement must be in (0, 1), got {self.min_agreement}")
        if self.max_length_change is not None and not 0 < self.max_length_change < 1:
            raise ValueError(f"--max-length-change must be in (0, 1), got {self.max_length_change}")

    @property
    def given(self) -> bool:
        return any(v is not None for v in (self.max_accuracy_drop, self.min_agreement, self.max_length_change))

    def describe(self) -> str:
        parts = []
        if self.max_accuracy_drop is not None:
            parts.append(f"accuracy at most {self.max_accuracy_drop:g} point(s) below strict")
        if self.min_agreement is not None:
            parts.append(f"strict's final answer on at least {self.min_agreement:.0%} of prompts")
        if self.max_length_change is not None:
            parts.append(f"total length within {self.max_length_change:.0%} of strict's")
        return "; ".join(parts) + f", at {self.confidence:.0%} confidence"


# ---------------------------------------------------------------- quality at natural stop


def latest(records: list[dict], kind: str = "item") -> dict[tuple, dict]:
    """The last logged record of ``kind`` per (arm, task, prompt, seed): a retry replaces a failed try."""
    out: dict[tuple, dict] = {}
    for r in records:
        if r.get("kind") == kind:
            out[(r["arm"], r["task"], r["tag"], seed_of(r))] = r
    return out


def _ratio_of_sums_ci(pairs: list[tuple[float, float, tuple]], level: float, seed: int = 0,
                      n_boot: int = N_BOOT) -> Optional[tuple[float, float]]:
    """Bootstrap interval (resampling prompts with all their seeds) of sum(arm) / sum(strict) - 1."""
    groups: dict = {}
    for s, a, k in pairs:
        g = groups.setdefault(k, [0.0, 0.0])
        g[0] += s
        g[1] += a
    sums = list(groups.values())
    if not sums or sum(s for s, _ in sums) <= 0:
        return None
    rng = random.Random(seed)
    draws = []
    for _ in range(n_boot):
        picked = rng.choices(sums, k=len(sums))
        base = sum(s for s, _ in picked)
        if base > 0:
            draws.append(sum(a for _, a in picked) / base - 1.0)
    tail = (1.0 - level) / 2.0 * 100.0
    return (stats.percentile(draws, tail), stats.percentile(draws, 100.0 - tail))


def _wider(a: Optional[tuple], b: Optional[tuple]) -> Optional[tuple]:
    if a is None or b is None:
        return a or b
    return (min(a[0], b[0]), max(a[1], b[1]))


def _accuracy(scored: list[tuple], level: float, seed: int) -> dict:
    """Accuracy change against strict over scored pairs ``(strict correct, correct, prompt)``: the
    wider of the bootstrap over prompts and the score interval, and the discordant pairs."""
    ref, cand = [float(a) for a, _, _ in scored], [float(b) for _, b, _ in scored]
    lost, gained = stats.discordant([a for a, _, _ in scored], [b for _, b, _ in scored])
    boot = stats.clustered_diff_ci(ref, cand, [k for *_, k in scored], level=level, seed=seed)
    score_ci = stats.paired_proportion_diff_ci(lost, gained, len(scored), level)
    return dict(accuracy=stats.mean(cand), strict_accuracy=stats.mean(ref), acc_delta=stats.mean_diff(ref, cand),
                acc_delta_ci_bootstrap=boot, acc_delta_ci_score=score_ci, acc_delta_ci=_wider(boot, score_ci),
                lost=lost, gained=gained, mcnemar_p=stats.mcnemar_exact(lost, gained))


def quality_row(arm: Arm, strict: dict[tuple, dict], records: list[dict], level: float, seed: int = 0) -> dict:
    """One setting's answers against strict's (``strict`` by (task, prompt, seed))."""
    ps = []
    for r in records:
        s = strict.get((r["task"], r["tag"], seed_of(r)))
        if r["ok"] and s is not None and s["ok"]:
            ps.append((s, r))
    cluster = lambda s: (s["task"], s["tag"])  # noqa: E731 (a prompt with all its seeds)
    several_seeds = len({cluster(s) for s, _ in ps}) < len(ps)
    ok = [r for r in records if r["ok"]]
    spent = [r["receipt"].get("spent") for r in ok if isinstance(r.get("receipt"), dict)]
    spent = [x for x in spent if x is not None]
    m = result_metrics(records)
    row = {"arm": arm.label, "budget": arm.budget, "fields": describe(arm), "field_values": dict(arm.fields),
           "n": len(ok), "pairs": len(ps), "errors": m["errors"], "first_errors": first_errors(records),
           "accept_length_natural": m["accept_length"], "completion_tokens_mean": m["completion_tokens_mean"],
           "spent_mean": stats.mean(spent), "spent_max": max(spent) if spent else None,
           "applied_share": m["applied_share"], "not_applied_reasons": m["not_applied_reasons"]}
    # accuracy against strict, where both are scored; per task as well when the run holds several
    scored = [(s["correct"], r["correct"], cluster(s)) for s, r in ps
              if s.get("correct") is not None and r.get("correct") is not None]
    row["scored_pairs"] = len(scored)
    if scored:
        row.update(_accuracy(scored, level, seed))
        tasks = sorted({k[0] for *_, k in scored})
        if len(tasks) > 1:
            row["acc_by_task"] = {t: {"pairs": len(sub), **_accuracy(sub, level, seed)}
                                  for t in tasks for sub in [[x for x in scored if x[2][0] == t]]}
    else:
        row.update(accuracy=None, strict_accuracy=None, acc_delta=None, acc_delta_ci=None, lost=None, gained=None)
    # agreement: the same final answer as strict
    if ps:
        same = [1.0 if s.get("answer") == r.get("answer") else 0.0 for s, r in ps]
        ci = stats.wilson_ci(int(sum(same)), len(same), level)
        if several_seeds:
            boot = stats.clustered_diff_ci([0.0] * len(same), same, [cluster(s) for s, _ in ps], level=level, seed=seed)
            ci = _wider(ci, boot)
        row.update(agreement=sum(same) / len(same), agreement_ci=ci, agreement_n=len(same))
    else:
        row.update(agreement=None, agreement_ci=None, agreement_n=0)
    # length: total tokens against strict's
    lens = [(float(s["completion_tokens"]), float(r["completion_tokens"]), cluster(s)) for s, r in ps
            if s.get("completion_tokens") is not None and r.get("completion_tokens") is not None]
    base = sum(s for s, _, _ in lens)
    if lens and base > 0:
        changed = sum(1 for s, a, _ in lens if s != a)
        if changed:
            ci = _ratio_of_sums_ci(lens, level, seed)
        else:
            upper = stats.wilson_ci(0, len(lens), level)[1]
            ci = (-upper, upper)
        row.update(length_change=sum(a for _, a, _ in lens) / base - 1.0, length_change_ci=ci,
                   length_changed=changed, length_n=len(lens))
    else:
        row.update(length_change=None, length_change_ci=None, length_changed=0, length_n=0)
    diverged = [(s, r) for s, r in ps if s.get("hash") != r.get("hash")]
    firsts = [r.get("first_event_pos") for _, r in diverged if r.get("first_event_pos") is not None]
    row.update(divergence_share=len(diverged) / len(ps) if ps else None, first_divergence=stats.median(firsts))
    return row


def quality_rows(records: list[dict], arms: list[Arm], level: float, seed: int = 0) -> list[dict]:
    """One row per arm that has answers (strict's included: its comparisons are with itself)."""
    last = latest(records)
    strict = {(t, tag, s): r for (a, t, tag, s), r in last.items() if a == STRICT}
    rows = []
    for arm in arms:
        recs = [r for (a, *_), r in last.items() if a == arm.label]
        if recs:
            rows.append(quality_row(arm, strict, recs, level, seed))
    return rows


# ---------------------------------------------------------------- targets and the recommendation


def needed_prompts(kind: str, target: float, level: float) -> int:
    """How many prompts an interval needs to meet ``target`` even if every pair agreed with strict:
    accuracy (a drop of ``target`` as a share) and length (a change of ``target``): the score
    interval's half-width z^2/(n+z^2) <= target; agreement: the Wilson lower bound n/(n+z^2) >= target."""
    z2 = stats.z_of(level) ** 2
    if kind == "agreement":
        return math.ceil(target * z2 / (1.0 - target))
    return math.ceil(z2 * (1.0 - target) / target)


def _verdict(ci: Optional[tuple], inside, outside) -> str:
    if ci is None:
        return UNMEASURED
    if inside(ci):
        return MEETS
    if outside(ci):
        return MISSES
    return UNSURE


def criteria(row: dict, targets: Targets) -> list[dict]:
    """Each target's verdict on one setting: name, target, value, interval, verdict and why."""
    level = targets.confidence
    out = []
    if targets.max_accuracy_drop is not None:
        d = targets.max_accuracy_drop / 100.0

        def accuracy(part: dict, n: int) -> dict:
            ci = part.get("acc_delta_ci")
            v = _verdict(ci, lambda c: c[0] >= -d, lambda c: c[1] < -d)
            value = None if part.get("acc_delta") is None else 100.0 * part["acc_delta"]
            text = ("no scored pairs (the prompts have no references)" if ci is None else
                    f"accuracy change {value:+.1f} [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}] pp (n={n})")
            return {"value": value, "ci": None if ci is None else [100 * ci[0], 100 * ci[1]], "verdict": v,
                    "why": _why(v, text, "accuracy", d, n, level)}

        c = {"name": "accuracy", "target": f">= -{targets.max_accuracy_drop:g} pp",
             **accuracy(row, row.get("scored_pairs", 0))}
        if row.get("acc_by_task"):  # said beside the pooled verdict, which alone decides
            c["by_task"] = {t: accuracy(part, part["pairs"]) for t, part in row["acc_by_task"].items()}
        out.append(c)
    if targets.min_agreement is not None:
        ci = row.get("agreement_ci")
        a = targets.min_agreement
        v = _verdict(ci, lambda c: c[0] >= a, lambda c: c[1] < a)
        text = ("no paired answers" if ci is None else
                f"agreement {row['agreement']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] (n={row['agreement_n']})")
        out.append({"name": "agreement", "target": f">= {a:g}", "value": row.get("agreement"), "ci": ci,
                    "verdict": v, "why": _why(v, text, "agreement", a, row.get("agreement_n", 0), level)})
    if targets.max_length_change is not None:
        ci = row.get("length_change_ci")
        lim = targets.max_length_change
        v = _verdict(ci, lambda c: -lim <= c[0] and c[1] <= lim, lambda c: c[0] > lim or c[1] < -lim)
        text = ("no paired lengths" if ci is None else
                f"length change {row['length_change']:+.1%} [{ci[0]:+.1%}, {ci[1]:+.1%}] (n={row['length_n']}, "
                f"{row['length_changed']} changed)")
        out.append({"name": "length", "target": f"within +-{lim:g}", "value": row.get("length_change"), "ci": ci,
                    "verdict": v, "why": _why(v, text, "length", lim, row.get("length_n", 0), level)})
    return out


def _why(verdict: str, text: str, kind: str, target: float, n: int, level: float) -> str:
    if verdict == MEETS:
        return f"{text}: inside the target"
    if verdict == MISSES:
        return f"{text}: outside the target"
    if verdict == UNMEASURED:
        return text
    need = needed_prompts(kind, target, level)
    more = f"; even with every answer as strict's this needs at least {need} prompts" if need > n else ""
    return f"{text}: the interval holds both sides of the target, too few prompts to tell{more}"


def _overlap(a: Optional[tuple], b: Optional[tuple]) -> bool:
    return a is not None and b is not None and a[0] <= b[1] and b[0] <= a[1]


def recommend(rows: list[dict], targets: Targets) -> dict:
    """The fastest setting whose intervals meet every target (``rows``: the combined rows, strict
    included, each with ``speed``); strict when no faster one does. Every setting's verdicts and,
    for those that do not qualify, why."""
    verdicts = []
    for r in rows:
        if r["arm"] == STRICT:
            continue
        cs = criteria(r, targets)
        ok = bool(cs) and all(c["verdict"] == MEETS for c in cs)
        verdicts.append({"arm": r["arm"], "meets": ok, "criteria": cs, "speed": r.get("speed"),
                         "speed_ci": r.get("speed_ci")})
    qualified = [v for v in verdicts if v["meets"] and v["speed"] is not None]
    best = max(qualified, key=lambda v: v["speed"], default=None)
    if best is not None and best["speed"] > 1.0:
        why = (f"{best['arm']} is the fastest setting whose intervals meet the target "
               f"({best['speed']:.3f}x strict's tok/s at fixed work)")
        if best.get("speed_ci") and best["speed_ci"][0] <= 1.0:
            why += f"; its speed interval [{best['speed_ci'][0]:.3f}, {best['speed_ci'][1]:.3f}] still holds 1"
        close = [v["arm"] for v in qualified if v is not best and _overlap(v.get("speed_ci"), best.get("speed_ci"))]
        if close:
            why += (f"; its speed interval overlaps {', '.join(close)}'s, which also meet it: more repeats or "
                    "prompts would settle which is faster")
        short = {t: c["why"] for crit in best["criteria"] for t, c in crit.get("by_task", {}).items()
                 if c["verdict"] != MEETS}
        if short:
            why += ("; the accuracy target holds over the tasks pooled, not on "
                    + "; ".join(f"{t} alone ({text})" for t, text in short.items())
                    + ": one task's gain can carry another's loss, so calibrate on prompts like the traffic the "
                      "budget is for")
        return {"arm": best["arm"], "found": True, "why": why, "settings": verdicts}
    unmeasured = [v["arm"] for v in verdicts if v["meets"] and v["speed"] is None]
    if unmeasured:
        return {"arm": STRICT, "found": False, "settings": verdicts,
                "why": f"{', '.join(unmeasured)} meet(s) the target but the speed phase has not measured them yet "
                       "(--resume completes it): no recommendation before that"}
    if best is not None:
        why = (f"the settings that meet the target are no faster than strict (best: {best['arm']}, "
               f"{best['speed']:.3f}x): keep budget 0")
    elif not verdicts:
        why = "no setting besides strict was measured"
    else:
        reasons = "; ".join(f"{v['arm']}: " + ", ".join(c["why"] for c in v["criteria"] if c["verdict"] != MEETS)
                            for v in verdicts if not v["meets"])
        unsure = any(c["verdict"] == UNSURE for v in verdicts for c in v["criteria"])
        why = ("no setting meets the target" + (" (too few prompts to tell for some)" if unsure else "")
               + f": {reasons}; keep budget 0")
    return {"arm": STRICT, "found": False, "why": why, "settings": verdicts}


# ---------------------------------------------------------------- combined rows


def speed_rows(passes: list[dict], arms: list[Arm], rounds: int) -> list[dict]:
    return speed_summary.summarize(passes, arms, rounds=rounds) if passes else []


def combine(quality: list[dict], speed: list[dict], arms: list[Arm]) -> list[dict]:
    """One row per arm: its quality row, its speed row's figures, and ``speed`` (tok/s against
    strict at fixed work: the value used to rank) with ``speed_ci`` and ``speed_basis``."""
    speedups = report.speedups_by_arm({"arms": speed}) if speed else {}
    by_q = {r["arm"]: r for r in quality}
    by_s = {r["arm"]: r for r in speed}
    out = []
    for arm in arms:
        q, s = by_q.get(arm.label, {}), by_s.get(arm.label, {})
        if not q and not s:
            continue
        sp = speedups.get(arm.label, {})
        row = {"arm": arm.label, "budget": arm.budget, "fields": describe(arm), "field_values": dict(arm.fields), **q,
               "speed": sp.get("value"), "speed_ci": sp.get("ci"), "speed_basis": sp.get("basis"),
               "speed_n": sp.get("n"), "accept_length": s.get("accept_length"),
               "strict_accept_length": s.get("strict_accept_length"),
               "accept_ratio": s.get("prompt_accept_ratio"), "accept_ratio_ci": s.get("prompt_accept_ratio_ci"),
               "tok_s": s.get("tok_s_median"), "fixed_work_ok": s.get("fixed_work_ok")}
        if arm.label == STRICT:
            row.update(speed=1.0 if s else None, accept_ratio=1.0 if s else None)
        out.append(row)
    return out


# ---------------------------------------------------------------- the quick recipe


QUICK_PERCENTILE = 25.0


def probe_state(first: dict, searches: list[dict], k_max: int) -> dict:
    """Where the suffix-value search of one probed prompt stands: the suffix value q of its first
    event is in [lo, hi]; ``next`` is the q' to test (None when settled or inconclusive).

    A probe with ``asd_max_exceptions_per_block=1`` decodes strict's tokens up to its first
    exception (at output position ``pos``, regret ``r``), admitted by the server's gate G, so
    ``r / q <= G``: q >= r / G. Sending the same request, cut at ``pos + 1`` tokens, with the gate
    r / q' (a hair above) admits that exception again iff q >= q' (the rule: r / q <= gate); the
    largest admitted q' is q. The search runs up to ``k_max + 1``: an exception still admitted there
    says the server's depth is not the K it reports, and ``beyond_k`` leaves the prompt out. A
    retest whose first event lands elsewhere (another trajectory) makes the prompt inconclusive."""
    r, gate = first["regret"], first["gate"]
    lo = max(1, math.ceil(r / gate * (1 - 1e-4))) if gate else 1
    hi = k_max + 1
    for s in searches:
        if s.get("admitted") is None:
            return {"lo": lo, "hi": hi, "next": None, "inconclusive": True}
        if s["admitted"]:
            lo = max(lo, s["q"])
        else:
            hi = min(hi, s["q"] - 1)
    if lo > hi:
        return {"lo": lo, "hi": hi, "next": None, "inconclusive": True}
    settled = lo == hi
    return {"lo": lo, "hi": hi, "next": None if settled else (lo + hi + 1) // 2,
            "inconclusive": settled and lo > k_max, "beyond_k": settled and lo > k_max}


def search_gate(regret: float, q: int, server_gate: float) -> float:
    """The gate that admits an exception of regret ``regret`` at suffix value >= ``q`` and none
    below (a relative hair of 1e-4 above r / q covers the receipt's rounding to 6 decimals and
    float32 on the device), never above the server's."""
    return min(server_gate, regret / q * (1 + 1e-4) + 1e-6 / q)


def quick_recipe(probes: list[dict], searches: list[dict], k: int) -> dict:
    """The article's starting point, from the probes: per prompt, regret / suffix value of the
    first strict rejection its probe's receipt shows; the 25th percentile (linear interpolation,
    as ``stats.percentile``) over the prompts with a positive one; as sglang-asd's settings:
    ``--asd-gate`` = that percentile (the gate here divides by K - i, the article's by (K - i) / K),
    ``--asd-default-budget`` = K times it (the article sets the budget to its gate's number) and
    ``--asd-max-exceptions-per-block 1``."""
    by_prompt: dict = {}
    for s in searches:
        by_prompt.setdefault((s["task"], s["tag"], seed_of(s)), []).append(s)
    values, inconclusive, no_event, zero, beyond = [], 0, 0, 0, 0
    gates = set()
    for p in probes:
        if not p.get("ok"):
            continue
        if p.get("regret") is None:
            no_event += 1
            continue
        gates.add(p["gate"])
        if p["regret"] <= 0:
            zero += 1
            continue
        st = probe_state(p, by_prompt.get((p["task"], p["tag"], seed_of(p)), []), k)
        if st.get("beyond_k"):
            beyond += 1
            continue
        if st["inconclusive"] or st["next"] is not None:
            inconclusive += 1
            continue
        values.append({"tag": p["tag"], "seed": seed_of(p), "pos": p["pos"], "regret": p["regret"], "q": st["lo"],
                       "ratio": p["regret"] / st["lo"]})
    q25 = stats.percentile([v["ratio"] for v in values], QUICK_PERCENTILE)
    return {"prompts": len(probes), "with_first_rejection": len(values), "without_exception": no_event,
            "zero_regret": zero, "inconclusive": inconclusive, "beyond_k": beyond, "k": k, "server_gate": sorted(gates),
            "percentile": QUICK_PERCENTILE, "ratio_q25": q25, "values": values,
            "gate": q25, "budget": None if q25 is None else k * q25,
            "fields": None if q25 is None else {"asd_budget": round(k * q25, 4), "asd_gate": round(q25, 4),
                                                "asd_max_exceptions_per_block": 1}}
