"""Issues 13 and 36: the acceptance rules side by side, from one audit run and the speed runs of the same arms.

    python docs/measurements/issue13/ablation.py --audit OUT/audit/audit.json [--speed OUT/speed/speed.json] \
        [--speed-long OUT/speed_long/speed.json] --out docs/measurements/issue36/results/report

Per rule and setting (an arm sends ``asd_rule`` and the rule's knob, ``sglang_asd.bench.arms.rule_arms``):
accept length, tokens/s against strict with its interval, the CPU-normalised ratio and strict's verify
rounds over the rule's (speed run, fixed work), spent regret per request, divergence from strict and the
GSM8K accuracy change with its paired 95% interval and McNemar's exact p (audit run, natural stop), and
the spend of the worst requests (90th percentile and maximum over the audit's requests).

The long fixed-work run (``--speed-long``: longer outputs, where a request's budget binds) gets its own
table: spent regret per request there beside the short run's, and tok/s against strict per prompt.

**At equal spend**: every ``asd`` setting set against each ledger-free rule's setting whose spent regret
per request at natural stop is nearest, arm against arm: asd's accuracy minus the other's, paired by item (95%
bootstrap interval, McNemar), and the tok/s ratio paired by round and prompt in each speed run
(``speed_summary.prompt_ratio_between``; geometric mean over prompts, bootstrap interval over prompts).

Writes ``ablation.md``, ``ablation.json`` and ``frontier_rules.png``: x = tok/s against strict (per
prompt, 95% interval; strict's verify rounds over the rule's without a speed run's tok/s), y = accuracy
change; x = spent regret per request, y = accuracy change; x = spent regret per request, y = accept
length relative to strict's (what a nat of regret buys under each rule: item means, far less noisy than
accuracy at small n); and per speed run (fixed work, long), x = its spent regret per request, y = its tok/s
against strict per prompt.
Without a speed run the first panel's x is the accept length relative to strict's, and says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from sglang_asd.bench import audit_summary, speed_summary, stats
from sglang_asd.bench.audit import LOG_KIND, LOG_NAME, items_of
from sglang_asd.bench.runlog import exists, read_log, read_text
from sglang_asd.bench.sampling import seed_of
from sglang_asd.bench.speed import repeats_cell

RULES = ("asd", "local", "margin", "threshold")
KNOB = {"asd": "asd_budget", "local": "asd_budget", "margin": "asd_margin", "threshold": "asd_threshold"}
COLORS = {"asd": "tab:blue", "local": "tab:orange", "margin": "tab:green", "threshold": "tab:red"}


def _rule_of(fields: dict) -> Optional[str]:
    rule = fields.get("asd_rule")
    if rule is None and set(fields) <= {"asd_budget", "asd_gate", "asd_max_exceptions_per_block"}:
        return "asd" if fields.get("asd_budget", 0) > 0 else None
    return rule


def _fmt_ci(value, ci, digits=3, scale=1.0, signed=False) -> str:
    if value is None:
        return "n/a"
    spec = f"{'+' if signed else ''}.{digits}f"
    text = format(scale * value, spec)
    if ci and None not in ci:
        text += f" [{format(scale * ci[0], spec)}, {format(scale * ci[1], spec)}]"
    return text


def spend_tail(records: list[dict]) -> tuple[Optional[float], Optional[float]]:
    """(90th percentile, maximum) of the spent regret per request over an arm's answered items: the
    worst requests, where a request ledger and a per-block rule part ways at equal mean spend."""
    spent = [r["receipt"]["spent"] for r in records if r.get("ok") and (r.get("receipt") or {}).get("spent") is not None]
    return (stats.percentile(spent, 90), max(spent)) if spent else (None, None)


def _rounds_ratio(speed_row: dict) -> Optional[float]:
    """Strict's verify rounds per request over the arm's in one speed run (fixed work)."""
    return stats.ratio(speed_row.get("strict_verify_ct_mean"), speed_row.get("verify_ct_mean"))


def rows_of(audit: dict, speed: Optional[dict], long: Optional[dict] = None,
            records: Optional[dict[str, list[dict]]] = None) -> list[dict]:
    fields = {a["label"]: a["fields"] for a in audit["config"]["arms"]}
    speed_rows = {r["arm"]: r for r in (speed or {}).get("arms", [])}
    long_rows = {r["arm"]: r for r in (long or {}).get("arms", [])}
    strict_accept = next((r["accept_length"] for r in audit["by_arm"] if r["arm"] == "strict"), None)
    out = []
    for r in audit["by_arm"]:
        rule = _rule_of(fields.get(r["arm"], {}))
        if rule is None and r["arm"] not in ("strict", "strict-rerun"):
            continue
        s, lg = speed_rows.get(r["arm"], {}), long_rows.get(r["arm"], {})
        knob = None if rule is None else fields[r["arm"]].get(KNOB[rule])
        out.append({
            "arm": r["arm"], "rule": rule or "strict", "knob": KNOB.get(rule), "value": knob,
            "n": r["n"], "pairs": r.get("scored_pairs"), "accuracy": r.get("accuracy"),
            "acc_delta": r.get("acc_delta"), "acc_delta_ci": r.get("acc_delta_ci"),
            "lost": r.get("lost"), "gained": r.get("gained"), "mcnemar_p": r.get("mcnemar_p"),
            "divergence": r.get("divergence_share"), "spent": r.get("spent_mean"),
            **dict(zip(("spent_p90", "spent_max"), spend_tail((records or {}).get(r["arm"], [])))),
            "accept_length": r.get("accept_length"),
            "accept_ratio": (r["accept_length"] / strict_accept) if r.get("accept_length") and strict_accept else None,
            "speedup": s.get("speedup_median"), "speedup_ci": s.get("speedup_ci"),
            "prompt_speedup": s.get("prompt_speedup"), "prompt_speedup_ci": s.get("prompt_speedup_ci"),
            "cpu_speedup": s.get("cpu_speedup_median"), "speed_spent": s.get("spent_mean"),
            # Fixed work: strict's verify rounds over the arm's. A round costs about the same whatever it
            # keeps, so this is the speed-up the accepted tokens allow, free of the machine's timing noise.
            "rounds_ratio": _rounds_ratio(s),
            "speed_accept_length": s.get("accept_length"), "speed_repeats": s.get("repeats_n"),
            "long_spent": lg.get("spent_mean"), "long_accept_length": lg.get("accept_length"),
            "long_prompt_speedup": lg.get("prompt_speedup"), "long_prompt_speedup_ci": lg.get("prompt_speedup_ci"),
            "long_rounds_ratio": _rounds_ratio(lg),
        })
    order = {r: i for i, r in enumerate(("strict", "strict-rerun") + RULES)}
    return sorted(out, key=lambda x: (order.get(x["rule"] if x["arm"] != "strict-rerun" else "strict-rerun", 9),
                                      x["value"] or 0))


def audit_records(audit_json: Path) -> dict[str, list[dict]]:
    """arm -> its item records (the last try of each item), from the run log beside ``audit.json``."""
    _, records = read_log(audit_json.parent / LOG_NAME, LOG_KIND)
    out: dict[str, list[dict]] = {}
    for (arm, *_), rec in audit_summary.latest(items_of(records)).items():
        out.setdefault(arm, []).append(rec)
    return out


def equal_spend(rows: list[dict], records: dict[str, list[dict]], speeds: dict[str, Optional[dict]]) -> list[dict]:
    """Every asd setting against each ledger-free rule's setting of nearest spent regret per request
    (natural stop): the accuracy difference (asd minus the other, paired by item) and, per speed run
    in ``speeds`` (name -> speed.json), asd's tok/s over the other's, paired by round and prompt."""
    spent = [r for r in rows if r["spent"] is not None]
    out = []
    for a in sorted((r for r in spent if r["rule"] == "asd"), key=lambda r: r["spent"]):
        for rule in RULES[1:]:
            others = [r for r in spent if r["rule"] == rule]
            if not others:
                continue
            o = min(others, key=lambda r: abs(r["spent"] - a["spent"]))
            ref = {(x["tag"], seed_of(x)): x for x in records.get(o["arm"], [])}
            acc = audit_summary.paired_stats(audit_summary.pairs(ref, records.get(a["arm"], [])))
            row = {"asd": a["arm"], "asd_value": a["value"], "asd_spent": a["spent"], "other": o["arm"], "rule": rule,
                   "other_knob": o["knob"], "other_value": o["value"], "other_spent": o["spent"],
                   **{k: acc[k] for k in ("scored_pairs", "acc_delta", "acc_delta_ci", "lost", "gained", "mcnemar_p")}}
            for name, speed in speeds.items():
                between = speed_summary.prompt_ratio_between(speed["passes"], o["arm"], a["arm"]) if speed else None
                row[f"{name}_ratio"], row[f"{name}_ratio_ci"] = between or (None, None)
            out.append(row)
    return out


def _speedup_cell(r: dict) -> str:
    """The pass ratio with its interval over repeats, as bench.speed writes it (one repeat says so)."""
    return repeats_cell(r["speedup"], r["speedup_ci"], r["speed_repeats"])


def _setting(r: dict) -> str:
    return "reference" if r["arm"] == "strict" else ("strict again" if r["arm"] == "strict-rerun"
                                                    else f"{r['knob']}={r['value']:g}")


def _p(p: Optional[float]) -> str:
    return "" if p is None else f"{p:.3f}"


def _table(head: list[str], body: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |",
            *("| " + " | ".join(cells) + " |" for cells in body)]


def long_table(rows: list[dict], long: dict) -> list[str]:
    cfg = long["config"]
    body = [[r["rule"], _setting(r), "n/a" if r["speed_spent"] is None else f"{r['speed_spent']:.2f}",
             "n/a" if r["long_spent"] is None else f"{r['long_spent']:.2f}",
             "n/a" if r["long_accept_length"] is None else f"{r['long_accept_length']:.2f}",
             "reference" if r["arm"] == "strict" else _fmt_ci(r["long_prompt_speedup"], r["long_prompt_speedup_ci"]),
             _fmt_ci(r["long_rounds_ratio"], None)] for r in rows if r["arm"] != "strict-rerun"]
    return [f"Long fixed work: {cfg['num_prompts']} prompts x {cfg['max_new_tokens']} tokens at concurrency "
            f"{cfg.get('concurrency')}, {long['complete']['passes']} of {long['complete']['planned']} passes.", "",
            *_table(["rule", "setting", "spent/req, short run (nats)", "spent/req, long run (nats)", "accept len",
                     "per-prompt tok/s vs strict [95% CI]", "verify rounds, strict / rule"], body)]


def equal_spend_table(pairs: list[dict], speeds: dict[str, Optional[dict]]) -> list[str]:
    names = [n for n, sp in speeds.items() if sp]
    body = []
    for e in pairs:
        body.append([f"asd_budget={e['asd_value']:g} ({e['asd_spent']:.2f})",
                     f"{e['rule']} {e['other_knob']}={e['other_value']:g} ({e['other_spent']:.2f})",
                     str(e["scored_pairs"]), _fmt_ci(e["acc_delta"], e["acc_delta_ci"], 1, 100.0, True),
                     "" if e["lost"] is None else f"{e['lost']}/{e['gained']}", _p(e["mcnemar_p"]),
                     *(_fmt_ci(e[f"{n}_ratio"], e[f"{n}_ratio_ci"]) for n in names)])
    return ["At equal spend: each asd setting against the nearest-spending setting of each ledger-free rule "
            "(spent nats per request at natural stop in brackets); Δ accuracy is asd's minus the other rule's, "
            "paired by item; lost/gained counts items the other got right and asd wrong, and the reverse; "
            "tok/s is asd's over the other's, paired by round and prompt.", "",
            *_table(["asd (spent)", "ledger-free rule (spent)", "pairs", "Δ accuracy, asd - other, pp [95% CI]",
                     "lost/gained", "McNemar p", *(f"tok/s asd / other, {n} [95% CI]" for n in names)], body)]


def markdown(rows: list[dict], audit: dict, speed: Optional[dict], long: Optional[dict] = None,
             pairs: Optional[list[dict]] = None, speeds: Optional[dict] = None) -> str:
    head = ("| rule | setting | n (GSM8K) | accuracy | Δ accuracy vs strict, pp [95% CI] | lost/gained | McNemar p | "
            "differs from strict | spent/req, natural stop (nats) | spent p90 / max | accept len | tok/s vs strict [95% CI] | "
            "per-prompt tok/s vs strict [95% CI] | tokens per CPU-s vs strict | verify rounds, strict / rule |")
    lines = [head, "| " + " | ".join("---" for _ in head.split("|")[1:-1]) + " |"]
    for r in rows:
        acc = "n/a" if r["accuracy"] is None else f"{r['accuracy']:.3f}"
        delta = "reference" if r["arm"] == "strict" else _fmt_ci(r["acc_delta"], r["acc_delta_ci"], 1, 100.0, True)
        lg = "" if r["lost"] is None else f"{r['lost']}/{r['gained']}"
        lines.append(" | ".join(["", r["rule"], _setting(r), str(r["n"]), acc, delta, lg,
                                 "" if r["arm"] == "strict" else _p(r["mcnemar_p"]),
                                 "n/a" if r["divergence"] is None else f"{r['divergence']:.2f}",
                                 "n/a" if r["spent"] is None else f"{r['spent']:.2f}",
                                 "n/a" if r["spent_max"] is None else f"{r['spent_p90']:.2f} / {r['spent_max']:.2f}",
                                 "n/a" if r["accept_length"] is None else f"{r['accept_length']:.2f}",
                                 _speedup_cell(r),
                                 _fmt_ci(r["prompt_speedup"], r["prompt_speedup_ci"]),
                                 _fmt_ci(r["cpu_speedup"], None), _fmt_ci(r["rounds_ratio"], None), ""]).strip())
    done = audit["complete"]
    md = [f"Audit: {done['line']}." if "line" in done else f"Audit: {done}.",
          f"Speed: {speed['complete']['passes']} of {speed['complete']['planned']} passes."
          if speed else "Speed: not run yet (tok/s columns n/a; the plot's x is the accept length ratio).", "",
          "\n".join(lines), ""]
    if long:
        md += [*long_table(rows, long), ""]
    if pairs:
        md += [*equal_spend_table(pairs, speeds or {}), ""]
    return "\n".join(md)


def _errs(ys: list[float], cis: list, scale: float = 1.0) -> list[list[float]]:
    """Matplotlib's asymmetric error bars from (value, interval) pairs; no interval, no bar."""
    lo = [max(0.0, y - scale * ci[0]) if ci and None not in ci else 0.0 for y, ci in zip(ys, cis)]
    hi = [max(0.0, scale * ci[1] - y) if ci and None not in ci else 0.0 for y, ci in zip(ys, cis)]
    return [lo, hi]


def _curve(ax, line: list[dict], x: str, y: str, rule: str, yscale: float = 1.0, xci: Optional[str] = None,
           yci: Optional[str] = None) -> None:
    """One rule's settings, in spend order, as a line with the intervals it has; each point named by its knob."""
    xs, ys = [r[x] for r in line], [yscale * r[y] for r in line]
    ax.errorbar(xs, ys, xerr=_errs(xs, [r[xci] for r in line]) if xci else None,
                yerr=_errs(ys, [r[yci] for r in line], yscale) if yci else None,
                fmt="-o", color=COLORS[rule], ms=5, capsize=3, lw=1.2, label=rule)
    for px, py, r in zip(xs, ys, line):
        ax.annotate(f"{r['value']:g}", (px, py), textcoords="offset points", xytext=(4, 4), fontsize=7,
                    color=COLORS[rule])


def plot(rows: list[dict], out_png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    have_speed = any(r["prompt_speedup"] and r["speed_spent"] is not None for r in rows)
    have_long = any(r["long_prompt_speedup"] for r in rows)
    extra = [k for k, on in (("speed", have_speed), ("long", have_long)) if on]
    fig, axes = plt.subplots(1, 3 + len(extra), figsize=(17.0 + 5.2 * len(extra), 4.8), dpi=120)
    speedup, spend, bought = axes[:3]
    panel = {k: axes[3 + i] for i, k in enumerate(extra)}
    # x: tok/s against strict per prompt, with its interval, once a speed run has it; before that the
    # noise-free stand-in (strict's verify rounds over the rule's at fixed work), or the accept length.
    if any(r["prompt_speedup"] for r in rows):
        xkey, xci, xlabel = "prompt_speedup", "prompt_speedup_ci", "tok/s vs strict (fixed work, per prompt, 95% CI)"
    elif any(r["rounds_ratio"] for r in rows):
        xkey, xci, xlabel = "rounds_ratio", None, "speed-up allowed: strict's verify rounds / rule's (fixed work)"
    else:
        xkey, xci, xlabel = "accept_ratio", None, "accept length vs strict (no speed run yet)"
    for rule in RULES:
        mine = sorted((r for r in rows if r["rule"] == rule and r["spent"] is not None), key=lambda r: r["spent"])
        # strict spends nothing and is the accept-length reference: every curve starts at (0, 1)
        line = [{"spent": 0.0, "accept_ratio": 1.0, "value": 0}] + [r for r in mine if r["accept_ratio"]]
        if len(line) > 1:
            _curve(bought, line, "spent", "accept_ratio", rule)
        scored = [r for r in mine if r["acc_delta"] is not None]
        if [r for r in scored if r[xkey] is not None]:
            _curve(speedup, [r for r in scored if r[xkey] is not None], xkey, "acc_delta", rule, 100.0, xci,
                   "acc_delta_ci")
        if scored:
            _curve(spend, scored, "spent", "acc_delta", rule, 100.0, None, "acc_delta_ci")
        for key, x, y in (("speed", "speed_spent", "prompt_speedup"), ("long", "long_spent", "long_prompt_speedup")):
            line = sorted((r for r in mine if r[x] is not None and r[y]), key=lambda r: r[x])
            if key in panel and line:
                _curve(panel[key], line, x, y, rule, yci=f"{y}_ci")
    for ax in (speedup, spend):
        ax.axhline(0.0, color="grey", lw=0.8, ls="--")
        ax.set_ylabel("GSM8K accuracy vs strict (pp, paired 95% CI)")
    speedup.axvline(1.0, color="grey", lw=0.8, ls="--")
    speedup.set_xlabel(xlabel)
    spend.set_xlabel("regret spent per request at natural stop (nats)")
    bought.set_xlabel("regret spent per request at natural stop (nats)")
    bought.set_ylabel("accept length vs strict (natural stop)")
    bought.axhline(1.0, color="grey", lw=0.8, ls="--")
    for key, what in (("speed", "fixed work"), ("long", "long fixed work")):
        if key in panel:
            panel[key].axhline(1.0, color="grey", lw=0.8, ls="--")
            panel[key].set_xlabel(f"regret spent per request, {what} (nats)")
            panel[key].set_ylabel(f"tok/s vs strict, {what} (per prompt, 95% CI)")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    n = max((r["pairs"] or 0 for r in rows), default=0)
    fig.suptitle(f"Acceptance rules on Qwen2.5-Coder 1.5B + 0.5B (STANDALONE, CPU), GSM8K n={n} per setting")
    fig.tight_layout()
    fig.savefig(out_png)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--audit", type=Path, required=True)
    p.add_argument("--speed", type=Path, help="the fixed-work speed run's speed.json")
    p.add_argument("--speed-long", type=Path, help="the long fixed-work speed run's speed.json")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    audit = json.loads(read_text(args.audit))
    load = lambda path: json.loads(read_text(path)) if path and exists(path) else None  # noqa: E731
    speed, long = load(args.speed), load(args.speed_long)
    records = audit_records(args.audit)
    rows = rows_of(audit, speed, long, records)
    speeds = {"short": speed, "long": long}
    pairs = equal_spend(rows, records, speeds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ablation.json").write_text(json.dumps(
        {"rows": rows, "equal_spend": pairs, "audit_complete": audit["complete"],
         "speed_complete": (speed or {}).get("complete"), "long_complete": (long or {}).get("complete")}, indent=1))
    (args.out / "ablation.md").write_text(markdown(rows, audit, speed, long, pairs, speeds))
    plot(rows, args.out / "frontier_rules.png")
    print((args.out / "ablation.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
