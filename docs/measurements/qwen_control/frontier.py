"""FLy against asd, setting by setting: speed at fixed work against the accuracy change, per rule.

``python docs/measurements/qwen_control/frontier.py K=4:DIR [K=8:DIR ...] [--plot PNG]``: each DIR is one
calibrate run (one drafter shape, its own strict), named by the text before the colon. Per setting, against
that run's strict: its rule (``asd_rule``, ``asd`` when unset), tok/s at fixed work with the run's interval,
tokens per verify round at fixed work, spend per request at natural stop (mean and worst), the pooled
accuracy change with its interval (the run's own figures, ``calibrate.json``) and the change per task (paired
by item, Tango's interval: ``task_table.py``'s). Settings of different runs pair only through their own
strict: two shapes ran on two servers at two times.

``--pair A/B`` (repeatable): two settings of each run against each other, prompt by prompt at fixed work
(a DIR of the speed benchmark, ``scripts/lab/speed.py``, serves here too):
the geometric mean over prompts of A's tokens per verify round over B's, with its bootstrap interval (the
same prompts, passes of one run; the work per round does not move with the machine as tok/s does).

``--plot``: tok/s (``--x work``: tokens per verify round) against accuracy change, both intervals, one colour per rule and one marker per shape, each
rule's settings of a shape joined in order of speed: the frontier a user picks from.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from task_table import by_task, paired_change  # noqa: E402  (shared with the per-task table)

from sglang_asd.bench import runlog, speed  # noqa: E402
from sglang_asd.bench.calibrate import LOG_KIND, LOG_NAME  # noqa: E402
from sglang_asd.bench.stats import bootstrap_ci, geometric_mean  # noqa: E402

RULE_COLOURS = {"strict": "black", "asd": "tab:blue", "fly": "tab:orange", "fly-bounded": "tab:green"}
MARKERS = "osD^v<>"


def rule_of(row: dict) -> str:
    if row["arm"] == "strict":
        return "strict"
    return str(row.get("field_values", {}).get("asd_rule", "asd"))


def task_delta(items: dict, arm: str) -> str:
    """Accuracy change of ``arm`` against strict on one task, over the items both answered."""
    if arm not in items or "strict" not in items:
        return "n/a"
    tags = sorted(set(items[arm]) & set(items["strict"]))
    return paired_change([bool(items["strict"][t].get("correct")) for t in tags],
                         [bool(items[arm][t].get("correct")) for t in tags])[0]


def load(spec: str) -> tuple[str, list[dict], dict]:
    name, sep, folder = spec.partition(":")
    if not sep:
        raise SystemExit(f"{spec!r}: expected NAME:DIR (for example K=4:results/fly_k4)")
    path = Path(folder)
    report = json.loads((path / "calibrate.json").read_text())
    return name, report["rows"], by_task(path)


def table(runs: list[tuple[str, list[dict], dict]]) -> list[str]:
    tasks = sorted({t for _, _, items in runs for t in items})
    head = ["drafts", "setting", "rule", "tok/s vs strict, fixed work [95% CI]", "tokens / verify round (vs strict)",
            "spent/req mean, worst", "Δ accuracy, pp [95% CI]"] + [f"Δ {t}, pp [95% CI]" for t in tasks]
    out = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for name, rows, items in runs:
        for r in rows:
            strict = r["arm"] == "strict"
            # speed and work cells are n/a in a run whose fixed-work passes have not run yet
            work = (f"{r['accept_length']:.2f}" if r.get("accept_length") is not None else None) if strict \
                else r["accept_cell"]
            cells = [name, r["arm"], rule_of(r),
                     "1.000" if strict else (r["speed_cell"] or "n/a").replace(" (prompts)", "").replace(" (repeats)", ""),
                     work or "n/a",
                     f"{r['spent_mean']:.2f}, {r['spent_max']:.2f}",
                     "reference" if strict else r["acc_cell"].split(" (n=")[0]]
            cells += ["reference" if strict else task_delta(items[t], r["arm"]) for t in tasks]
            out.append("| " + " | ".join(cells) + " |")
    return out


def work_per_round(folder: Path) -> dict[str, dict[str, list[float]]]:
    """setting -> prompt -> tokens per verify round at fixed work, one value per pass of the run log: a
    calibrate run's, or a speed benchmark's (``speed_passes.jsonl``, whose arms pair the same way)."""
    _, records = runlog.read_log(folder / LOG_NAME, LOG_KIND) if runlog.exists(folder / LOG_NAME) else \
        runlog.read_log(folder / speed.LOG_NAME, speed.LOG_KIND)
    out: dict = {}
    for r in records:
        if r.get("kind") == "pass":
            for q in r["requests"]:
                if q.get("ok") and q.get("spec_verify_ct"):
                    out.setdefault(r["arm"], {}).setdefault(q["tag"], []).append(
                        q["completion_tokens"] / q["spec_verify_ct"])
    return out


def pair_lines(runs: list[str], pairs: list[str]) -> list[str]:
    out = ["| drafts | A / B | prompts | tokens per round, A over B, per prompt [95% CI] |", "| --- | --- | ---: | --- |"]
    for spec in runs:
        name, _, folder = spec.partition(":")
        work = work_per_round(Path(folder))
        for pair in pairs:
            a, _, b = pair.partition("/")
            if a not in work or b not in work:  # a shape may lack a setting another has, or a run its passes yet
                out.append(f"| {name} | {a} / {b} | 0 | n/a (no fixed-work passes of {a if a not in work else b}) |")
                continue
            tags = sorted(set(work[a]) & set(work[b]))
            ratios = [geometric_mean(work[a][t]) / geometric_mean(work[b][t]) for t in tags]
            lo, hi = bootstrap_ci(ratios, "gmean")
            out.append(f"| {name} | {a} / {b} | {len(tags)} | {geometric_mean(ratios):.3f} [{lo:.3f}, {hi:.3f}] |")
    return out


AXES = {"speed": ("speed", "speed_ci", "tok/s vs strict of the same drafts, fixed work (95% CI)"),
        "work": ("accept_ratio", "accept_ratio_ci", "tokens per verify round vs strict's, fixed work (95% CI)")}


def plot(runs: list[tuple[str, list[dict], dict]], path: Path, x_axis: str = "speed") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_key, x_ci, x_label = AXES[x_axis]
    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    labels = 0
    for (name, rows, _), marker in zip(runs, MARKERS):
        by_rule: dict[str, list[dict]] = {}
        for r in rows:
            if r["arm"] != "strict" and r.get(x_key) is not None and r.get("acc_delta") is not None:
                by_rule.setdefault(rule_of(r), []).append(r)
        for rule, pts in by_rule.items():
            pts.sort(key=lambda r: r[x_key])
            colour = RULE_COLOURS.get(rule, "tab:gray")
            xs = [r[x_key] for r in pts]
            ys = [100 * r["acc_delta"] for r in pts]
            xerr = [[x - r[x_ci][0] for x, r in zip(xs, pts)], [r[x_ci][1] - x for x, r in zip(xs, pts)]]
            yerr = [[y - 100 * r["acc_delta_ci"][0] for y, r in zip(ys, pts)],
                    [100 * r["acc_delta_ci"][1] - y for y, r in zip(ys, pts)]]
            ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt=marker + "-", color=colour, alpha=0.85, capsize=2,
                        lw=1, label=f"{rule}, {name}")
            for x, y, r in zip(xs, ys, pts):
                label = r["arm"] if len(runs) == 1 else f"{r['arm']} {name}"
                # alternate above and below, so two settings at one point (FLy with and without the ledger) both read
                ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4 if labels % 2 == 0 else -11),
                            fontsize=7)
                labels += 1
        ax.plot([1.0], [0.0], marker, color="black")
    ax.axhline(0, color="gray", lw=0.6, ls=":")
    ax.axvline(1, color="gray", lw=0.6, ls=":")
    ax.set_xlabel(x_label)
    ax.set_ylabel("accuracy - strict's, points, GSM8K + HumanEval (95% CI)")
    ax.set_title("FLy against asd, per setting")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="NAME:DIR, one calibrate run per drafter shape")
    p.add_argument("--pair", action="append", default=[], metavar="A/B",
                   help="two settings' tokens per verify round, prompt by prompt (repeatable)")
    p.add_argument("--pair-only", action="store_true", help="print the --pair table alone (any run with passes)")
    p.add_argument("--plot", type=Path, help="write the frontier figure here")
    p.add_argument("--x", choices=sorted(AXES), default="speed", help="the figure's x axis (default speed)")
    args = p.parse_args()
    if not args.pair_only:
        runs = [load(s) for s in args.runs]
        print("\n".join(table(runs)))
    if args.pair:
        print(("" if args.pair_only else "\n") + "\n".join(pair_lines(args.runs, args.pair)))
    if args.plot and not args.pair_only:
        plot(runs, args.plot, args.x)
        print(f"\nwrote {args.plot}")


if __name__ == "__main__":
    main()
