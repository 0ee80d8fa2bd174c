"""Issue 35's depth table: strict and ASD at every draft depth of the sweep, in one table.

``python docs/measurements/issue35/depth.py OUT`` reads the speed runs ``OUT/qwen_k2``, ``qwen_k4``,
``qwen_k6``, ``qwen_k8`` and ``qwen_tree`` (``docs/measurements/issue35/run.sh``; a missing run is
skipped) and prints a markdown table and three lines: the best depth for strict, the best for ASD
(by the per-prompt ratio against strict at K = 4), and ASD's best against strict's best.
``--plot PNG`` also draws the table: tok/s against strict at K = 4 and accept length per depth.

Each depth is its own server, run at its own time, so two depths pair by prompt, not by time: a
prompt's tok/s in one run is the median of its requests over that run's repeats (the last try of a
redone pass), and a ratio between two runs is the geometric mean over prompts of their per-prompt
ratios, with a 95% bootstrap interval over prompts. A prompt's rate is its request's output tokens
over its latency, the speed tool's own per-prompt measure. That interval holds the prompts' spread, not
the machine's drift between the runs; within one depth, ASD against strict comes from the speed
tool's own pairing (the same rounds), the column "vs strict, same depth".
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from sglang_asd.bench import runlog, speed_summary, stats

CONFIGS = {"qwen_k2": "chain K=2", "qwen_k4": "chain K=4", "qwen_k6": "chain K=6", "qwen_k8": "chain K=8",
           "qwen_tree": "tree, topk 2, 4 steps, 8 tokens"}
ARMS = ("strict", "b8", "b8g0.5")
# Draft forwards per round: the tree runs 4 steps of 2 candidates each.
STEPS = {"qwen_k2": 2, "qwen_k4": 4, "qwen_k6": 6, "qwen_k8": 8, "qwen_tree": 4}
CHAINS = ("qwen_k2", "qwen_k4", "qwen_k6", "qwen_k8")


def per_prompt(run: Path, measure=speed_summary.request_rates) -> dict[str, dict[str, float]]:
    """arm -> prompt -> median over repeats of a request's ``measure`` (by default its tok/s, the speed
    tool's per-prompt rate: output tokens / latency, ``speed_summary.request_rates``); a redone pass
    replaces its try."""
    log = [json.loads(line) for line in runlog.read_text(run / "speed_passes.jsonl").splitlines() if line.strip()]
    last: dict[tuple, dict] = {}
    for rec in log:
        if rec.get("kind") == "pass" and rec.get("fixed_work_ok"):
            last[(rec["arm"], rec["repeat"], rec["index"])] = rec
    out: dict[str, dict[str, list]] = {}
    for (arm, _, _), rec in last.items():
        for (prompt, _seed), value in measure(rec).items():
            out.setdefault(arm, {}).setdefault(prompt, []).append(value)
    return {arm: {p: statistics.median(v) for p, v in by_prompt.items()} for arm, by_prompt in out.items()}


def ratio(a: dict[str, float], b: dict[str, float]) -> tuple[float, tuple[float, float]]:
    """Geometric mean over the shared prompts of a/b, and its 95% bootstrap interval."""
    rs = [a[p] / b[p] for p in a if p in b]
    ci = stats.bootstrap_ci(rs, "gmean")
    return math.exp(sum(map(math.log, rs)) / len(rs)), ci


def fmt(r: tuple[float, tuple[float, float]]) -> str:
    return f"{r[0]:.3f} [{r[1][0]:.3f}, {r[1][1]:.3f}]"


def collect(out: Path) -> tuple[dict, dict, dict]:
    """(runs, summaries, cells): arm -> prompt -> tok/s per run, the speed tool's summary per arm,
    and (run, arm) -> its per-prompt ratio against strict at K = 4 with the interval."""
    runs, summaries = {}, {}
    for name in CONFIGS:
        if runlog.exists(out / name / "speed.json"):
            runs[name] = per_prompt(out / name)
            summaries[name] = {a["arm"]: a for a in json.loads(runlog.read_text(out / name / "speed.json"))["arms"]}
    if "qwen_k4" not in runs:
        raise SystemExit(f"{out}/qwen_k4: no speed run (the reference depth)")
    ref = runs["qwen_k4"]["strict"]
    cells = {(name, arm): ratio(arms[arm], ref) for name, arms in runs.items() for arm in ARMS if arm in arms}
    return runs, summaries, cells


def main(out: Path) -> str:
    runs, summaries, cells = collect(out)
    lines = ["| drafts | arm | repeats | tok/s (median over prompts) | accept len | verify rounds/req | spent/req (nats) "
             "| vs strict, same depth, per prompt [95% CI] | vs strict at K=4, per prompt [95% CI] |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for name, arms in runs.items():
        for arm in ARMS:
            if arm not in arms:
                continue
            s = summaries[name].get(arm, {})
            same = "reference" if arm == "strict" else s.get("prompt_speedup_cell", "n/a")
            acc, rounds = s.get("accept_length"), s.get("verify_ct_mean")
            lines.append(f"| {CONFIGS[name]} | {arm} | {s.get('repeats_n', 'n/a')} "
                         f"| {statistics.median(arms[arm].values()):.2f} | {'n/a' if acc is None else f'{acc:.3f}'} "
                         f"| {'n/a' if rounds is None else f'{rounds:.1f}'} | {s.get('spent_mean') or 0:.2f} | {same} "
                         f"| {fmt(cells[(name, arm)])} |")
    def best(keys):  # by the per-prompt ratio against strict at K=4, the one scale every run shares
        return max(keys, key=lambda k: cells[k][0])

    best_strict = best(k for k in cells if k[1] == "strict")
    best_asd = best(k for k in cells if k[1] != "strict")
    lines += ["", f"- best for strict: {CONFIGS[best_strict[0]]} ({fmt(cells[best_strict])} x strict at K=4)",
              f"- best for ASD: {CONFIGS[best_asd[0]]}, {best_asd[1]} ({fmt(cells[best_asd])} x strict at K=4)",
              f"- ASD's best against strict's best, per prompt: "
              f"{fmt(ratio(runs[best_asd[0]][best_asd[1]], runs[best_strict[0]]['strict']))}"]
    return "\n".join(lines)


def _yerr(cells: list) -> list:
    """matplotlib's asymmetric error bars (below, above) for ratios with their intervals."""
    return [[c[0] - c[1][0] for c in cells], [c[1][1] - c[0] for c in cells]]


def figure(out: Path):
    """Left: tok/s per prompt against strict at K = 4 (geometric mean, 95% interval over prompts)
    against the number of draft steps, one line per arm, the tree beside the chains at its own
    depth (4 steps, hollow markers). Right: accept length, the tokens a verify round commits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, summaries, cells = collect(out)
    steps = {n: STEPS[n] for n in CHAINS}
    style = {"strict": ("black", "strict (budget 0)"), "b8": ("tab:blue", "budget 8, gate 0.25"),
             "b8g0.5": ("tab:orange", "budget 8, gate 0.5")}
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 4.2), dpi=120)
    for i, (arm, (color, label)) in enumerate(style.items()):
        chain = [(steps[n], cells[(n, arm)], summaries[n][arm]) for n in steps if (n, arm) in cells]
        if not chain:  # an arm no run measured gets no legend entry
            continue
        dx = (i - 1) * 0.08  # keeps the error bars of one depth apart
        xs = [k + dx for k, _, _ in chain]
        left.errorbar(xs, [c[0] for _, c, _ in chain], yerr=_yerr([c for _, c, _ in chain]),
                      color=color, marker="o", capsize=3, lw=1.2, label=label)
        right.plot(xs, [s.get("accept_length") or float("nan") for _, _, s in chain], color=color, marker="o",
                   label=label)
        if ("qwen_tree", arm) in cells:
            c, s = cells[("qwen_tree", arm)], summaries["qwen_tree"][arm]
            left.errorbar([4.4 + dx], [c[0]], yerr=_yerr([c]), color=color, marker="s", mfc="white", capsize=3,
                          lw=1.2)
            right.plot([4.4 + dx], [s.get("accept_length") or float("nan")], color=color, marker="s", mfc="white")
    left.axhline(1.0, color="grey", lw=0.8, ls="--")
    left.set_ylabel("tok/s vs strict at K=4, per prompt (95% CI)")
    right.set_ylabel("accept length (tokens per verify round)")
    for ax in (left, right):
        ax.set_xlabel("draft steps K (squares: tree, topk 2, 4 steps, 8 tokens)")
        ax.set_xticks([2, 4, 6, 8])
        ax.grid(alpha=0.3)
    left.legend(fontsize=8, loc="best")
    fig.suptitle("Qwen2.5-Coder 1.5B + 0.5B draft, CPU, 16 prompts x 128 tokens, concurrency 1", fontsize=10)
    fig.tight_layout()
    return fig


def plot(out: Path, png: Path, make_figure=figure) -> Path:
    """Write ``make_figure(out)`` (by default this table's figure) to ``png``."""
    import matplotlib.pyplot as plt

    fig = make_figure(out)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)
    return png


def cli(doc: str, main, make_figure) -> None:
    """The command line of a script over the sweep's folder: print ``main(OUT)``, and with ``--plot
    PNG`` write ``make_figure(OUT)`` there."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the sweep's output folder (qwen_k2 ... qwen_tree under it)")
    ap.add_argument("--plot", type=Path, help="also write the figure to this PNG")
    args = ap.parse_args()
    print(main(args.out))
    if args.plot:
        print(f"\nfigure: {plot(args.out, args.plot, make_figure)}")


if __name__ == "__main__":
    cli(__doc__, main, figure)
