"""Issue 13's ablation table and frontier plot, from one audit run and one speed run of the same arms.

    python docs/measurements/issue13/ablation.py --audit OUT/audit/audit.json [--speed OUT/speed/speed.json] \
        --out docs/measurements/issue13/results

Per rule and setting (an arm sends ``asd_rule`` and the rule's knob, ``sglang_asd.bench.arms.rule_arms``):
accept length, tokens/s against strict with its interval, the CPU-normalised ratio and strict's verify
rounds over the rule's (speed run, fixed work), spent regret per request, divergence from strict and the
GSM8K accuracy change with its paired 95% interval (audit run, natural stop). Writes ``ablation.md``,
``ablation.json`` and ``frontier_rules.png``, one curve per rule in three panels: x = speed-up (strict's
verify rounds over the rule's at fixed work), y = accuracy change; x = spent regret per request, y =
accuracy change; x = spent regret per request, y = accept length relative to strict's (what a nat of
regret buys under each rule: item means, far less noisy than accuracy at small n). Without a speed run
the first panel's x is the accept length relative to strict's, and says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

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


def rows_of(audit: dict, speed: Optional[dict]) -> list[dict]:
    fields = {a["label"]: a["fields"] for a in audit["config"]["arms"]}
    speed_rows = {r["arm"]: r for r in (speed or {}).get("arms", [])}
    strict_accept = next((r["accept_length"] for r in audit["by_arm"] if r["arm"] == "strict"), None)
    out = []
    for r in audit["by_arm"]:
        rule = _rule_of(fields.get(r["arm"], {}))
        if rule is None and r["arm"] not in ("strict", "strict-rerun"):
            continue
        s = speed_rows.get(r["arm"], {})
        knob = None if rule is None else fields[r["arm"]].get(KNOB[rule])
        out.append({
            "arm": r["arm"], "rule": rule or "strict", "knob": KNOB.get(rule), "value": knob,
            "n": r["n"], "pairs": r.get("scored_pairs"), "accuracy": r.get("accuracy"),
            "acc_delta": r.get("acc_delta"), "acc_delta_ci": r.get("acc_delta_ci"),
            "lost": r.get("lost"), "gained": r.get("gained"), "mcnemar_p": r.get("mcnemar_p"),
            "divergence": r.get("divergence_share"), "spent": r.get("spent_mean"),
            "accept_length": r.get("accept_length"),
            "accept_ratio": (r["accept_length"] / strict_accept) if r.get("accept_length") and strict_accept else None,
            "speedup": s.get("speedup_median"), "speedup_ci": s.get("speedup_ci"),
            "prompt_speedup": s.get("prompt_speedup"), "prompt_speedup_ci": s.get("prompt_speedup_ci"),
            "cpu_speedup": s.get("cpu_speedup_median"), "speed_spent": s.get("spent_mean"),
            # Fixed work: strict's verify rounds over the arm's. A round costs about the same whatever it
            # keeps, so this is the speed-up the accepted tokens allow, free of the machine's timing noise.
            "rounds_ratio": (s["strict_verify_ct_mean"] / s["verify_ct_mean"])
            if s.get("verify_ct_mean") and s.get("strict_verify_ct_mean") else None,
            "speed_accept_length": s.get("accept_length"), "speed_repeats": s.get("repeats_n"),
        })
    order = {r: i for i, r in enumerate(("strict", "strict-rerun") + RULES)}
    return sorted(out, key=lambda x: (order.get(x["rule"] if x["arm"] != "strict-rerun" else "strict-rerun", 9),
                                      x["value"] or 0))


def _speedup_cell(r: dict) -> str:
    """The pass ratio with its interval over repeats, as bench.speed writes it (one repeat says so)."""
    return repeats_cell(r["speedup"], r["speedup_ci"], r["speed_repeats"])


def markdown(rows: list[dict], audit: dict, speed: Optional[dict]) -> str:
    head = ("| rule | setting | n (GSM8K) | accuracy | Δ accuracy vs strict, pp [95% CI] | lost/gained | "
            "differs from strict | spent/req, natural stop (nats) | accept len | tok/s vs strict [95% CI] | "
            "per-prompt tok/s vs strict [95% CI] | tokens per CPU-s vs strict | verify rounds, strict / rule |")
    lines = [head, "| " + " | ".join("---" for _ in head.split("|")[1:-1]) + " |"]
    for r in rows:
        setting = "reference" if r["arm"] == "strict" else ("strict again" if r["arm"] == "strict-rerun"
                                                             else f"{r['knob']}={r['value']:g}")
        acc = "n/a" if r["accuracy"] is None else f"{r['accuracy']:.3f}"
        delta = "reference" if r["arm"] == "strict" else _fmt_ci(r["acc_delta"], r["acc_delta_ci"], 1, 100.0, True)
        lg = "" if r["lost"] is None else f"{r['lost']}/{r['gained']}"
        lines.append(" | ".join(["", r["rule"], setting, str(r["n"]), acc, delta, lg,
                                 "n/a" if r["divergence"] is None else f"{r['divergence']:.2f}",
                                 "n/a" if r["spent"] is None else f"{r['spent']:.2f}",
                                 "n/a" if r["accept_length"] is None else f"{r['accept_length']:.2f}",
                                 _speedup_cell(r),
                                 _fmt_ci(r["prompt_speedup"], r["prompt_speedup_ci"]),
                                 _fmt_ci(r["cpu_speedup"], None), _fmt_ci(r["rounds_ratio"], None), ""]).strip())
    done = audit["complete"]
    md = [f"Audit: {done['line']}." if "line" in done else f"Audit: {done}.",
          f"Speed: {speed['complete']['passes']} of {speed['complete']['planned']} passes."
          if speed else "Speed: not run yet (tok/s columns n/a; the plot's x is the accept length ratio).", "",
          "\n".join(lines), ""]
    return "\n".join(md)


def plot(rows: list[dict], out_png: Path, have_speed: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right, bought) = plt.subplots(1, 3, figsize=(17.0, 4.8), dpi=120)
    # With a speed run, x is strict's verify rounds over the rule's at fixed work: the speed-up its
    # accepted tokens allow. The measured tok/s ratio (in the table) carries the machine's timing noise,
    # several per cent per pass on a shared 2-core host, more than the differences between rules.
    xkey = "rounds_ratio" if have_speed else "accept_ratio"
    for rule in RULES:
        line = sorted((r for r in rows if r["rule"] == rule and r["spent"] is not None and r["accept_ratio"]),
                      key=lambda r: r["spent"])
        if line:  # strict spends nothing and is the accept-length reference: every curve starts at (0, 1)
            bought.plot([0.0] + [r["spent"] for r in line], [1.0] + [r["accept_ratio"] for r in line], "-o",
                        color=COLORS[rule], ms=5, lw=1.2, label=rule)
            for r in line:
                bought.annotate(f"{r['value']:g}", (r["spent"], r["accept_ratio"]), textcoords="offset points",
                                xytext=(4, 4), fontsize=7, color=COLORS[rule])
        pts = [r for r in rows if r["rule"] == rule and r["acc_delta"] is not None]
        for ax, key in ((left, xkey), (right, "spent")):
            line = sorted((r for r in pts if r[key] is not None), key=lambda r: r[key])
            if not line:
                continue
            xs = [r[key] for r in line]
            ys = [100.0 * r["acc_delta"] for r in line]
            yerr = [[max(0.0, y - 100.0 * r["acc_delta_ci"][0]) for y, r in zip(ys, line)],
                    [max(0.0, 100.0 * r["acc_delta_ci"][1] - y) for y, r in zip(ys, line)]]
            ax.errorbar(xs, ys, yerr=yerr, fmt="-o", color=COLORS[rule], ms=5, capsize=3, lw=1.2, label=rule)
            for x, y, r in zip(xs, ys, line):
                ax.annotate(f"{r['value']:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                            color=COLORS[rule])
    for ax in (left, right):
        ax.axhline(0.0, color="grey", lw=0.8, ls="--")
        ax.set_ylabel("GSM8K accuracy vs strict (pp, paired 95% CI)")
        ax.legend(fontsize=8)
    left.axvline(1.0, color="grey", lw=0.8, ls="--")
    left.set_xlabel("speed-up allowed: strict's verify rounds / rule's (fixed work)" if have_speed
                    else "accept length vs strict (no speed run yet)")
    right.set_xlabel("regret spent per request at natural stop (nats)")
    bought.set_xlabel("regret spent per request at natural stop (nats)")
    bought.set_ylabel("accept length vs strict (natural stop)")
    bought.axhline(1.0, color="grey", lw=0.8, ls="--")
    bought.legend(fontsize=8)
    n = max((r["pairs"] or 0 for r in rows), default=0)
    fig.suptitle(f"Acceptance rules on Qwen2.5-Coder 1.5B + 0.5B (STANDALONE, CPU), GSM8K n={n} per setting")
    fig.tight_layout()
    fig.savefig(out_png)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--audit", type=Path, required=True)
    p.add_argument("--speed", type=Path)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    audit = json.loads(args.audit.read_text())
    speed = json.loads(args.speed.read_text()) if args.speed and args.speed.exists() else None
    rows = rows_of(audit, speed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ablation.json").write_text(json.dumps({"rows": rows, "audit_complete": audit["complete"],
                                                        "speed_complete": (speed or {}).get("complete")}, indent=1))
    (args.out / "ablation.md").write_text(markdown(rows, audit, speed))
    plot(rows, args.out / "frontier_rules.png", have_speed=bool(speed) and any(r["rounds_ratio"] for r in rows))
    print((args.out / "ablation.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
