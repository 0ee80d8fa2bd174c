"""Where relaxed acceptance pays most: the depth sweep's accepts under a cheaper draft step.

``python docs/measurements/issue35/draft_cost.py OUT`` reads the depth sweep's speed runs (the runs
``depth.py`` reads) and answers one question the sweep cannot measure on a CPU: how cheap must a draft
step be, against the rest of a verify round, for ASD's best shape to run 1.20x strict's best?

This is a model, not a measurement. Its inputs are measured: per prompt, each shape's and arm's tokens
per verify round (output tokens over verify rounds, median over repeats). Its one assumption is the
cost of a round: ``1 + rho * steps`` in units of the round's fixed part (the target's verify, the
draft's extend of the accepted tokens, the scheduler), where ``steps`` is the number of draft forwards
(the tree's 4, not its 8 tokens) and ``rho`` is one draft step's cost against that fixed part. That is
how a GPU at low batch behaves, where a forward's cost barely depends on whether it scores 5 tokens or
9 per request, or 1 candidate or 2 per step; on a CPU the verify grows with the tokens it scores, so
the fit below is rough there. Under the model a shape's speed is proportional to its tokens per round
over ``1 + rho * steps``; for each ``rho`` the script picks strict's best shape and ASD's best
(shape, arm) by the geometric mean over prompts, and gives ASD's best against strict's best per prompt
with a 95% bootstrap interval over prompts. Picking the best on the same prompts favours the winner
(both sides are picked, so the bias partly cancels); the interval does not hold that.

It also fits ``rho`` on the host that ran the sweep: strict's time per round (latency over verify
rounds, median over prompts) against the chain's draft steps, a least-squares line ``V + D * steps``,
``rho = D / V``; and it sets the model's tok/s against strict at K = 4 at that ``rho`` beside the
measured ones (``depth.py``'s per-prompt ratios), which says how far to trust it on that host.
``--plot PNG`` draws ASD's best against strict's best over ``rho``.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from depth import CONFIGS, cli, collect, fmt, per_prompt, ratio
from sglang_asd.bench import speed_summary

STEPS = {"qwen_k2": 2, "qwen_k4": 4, "qwen_k6": 6, "qwen_k8": 8, "qwen_tree": 4}
CHAINS = ("qwen_k2", "qwen_k4", "qwen_k6", "qwen_k8")
TARGET = 1.20
RHOS = [round(0.01 * i, 2) for i in range(0, 81)]


def accepts(out: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(run, arm) -> prompt -> tokens per verify round, median over repeats."""
    return {(name, arm): by_prompt
            for name in STEPS if (out / name).is_dir() and any((out / name).glob("speed_passes.jsonl*"))
            for arm, by_prompt in per_prompt(out / name, speed_summary.request_accept_lengths).items()}


def host_rho(out: Path, rates: dict, work: dict) -> tuple[float, float, float]:
    """(V, D, rho): the least-squares line through strict's time per round (seconds, median over
    prompts of tokens per round over tok/s) against the chain's draft steps."""
    pts = []
    for name in CHAINS:
        if (name, "strict") in work and name in rates:
            w, r = work[(name, "strict")], rates[name]["strict"]
            pts.append((STEPS[name], statistics.median(w[p] / r[p] for p in w if p in r)))
    if len(pts) < 2:
        raise SystemExit(f"{out}: fewer than two chain depths with a strict run; no line to fit")
    mx, my = statistics.fmean(x for x, _ in pts), statistics.fmean(y for _, y in pts)
    d = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    v = my - d * mx
    return v, d, d / v


def modelled(work: dict, rho: float) -> dict[tuple[str, str], dict[str, float]]:
    """(run, arm) -> prompt -> modelled speed, tokens per round over the round's cost."""
    return {key: {p: w / (1.0 + rho * STEPS[key[0]]) for p, w in by_prompt.items()} for key, by_prompt in work.items()}


def gmean(by_prompt: dict[str, float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in by_prompt.values()))


def best_pair(work: dict, rho: float) -> tuple[tuple, tuple, tuple[float, tuple[float, float]]]:
    """(strict's best (run, arm), ASD's best (run, arm), ASD's best against strict's best per prompt)."""
    speed = modelled(work, rho)
    strict = max((k for k in speed if k[1] == "strict"), key=lambda k: gmean(speed[k]))
    asd = max((k for k in speed if k[1] != "strict"), key=lambda k: gmean(speed[k]))
    return strict, asd, ratio(speed[asd], speed[strict])


def sweep(work: dict) -> list[tuple[float, tuple, tuple, tuple]]:
    return [(rho, *best_pair(work, rho)) for rho in RHOS]


def reach(rows: list, target: float = TARGET) -> tuple[float | None, float | None]:
    """The largest rho at which ASD's best runs ``target`` x strict's best: by the point estimate,
    and by the interval's lower end (None where no rho of the sweep does)."""
    point = [rho for rho, _, _, r in rows if r[0] >= target]
    lower = [rho for rho, _, _, r in rows if r[1][0] >= target]
    return (max(point) if point else None), (max(lower) if lower else None)


def name(key: tuple) -> str:
    return f"{CONFIGS[key[0]]}, {key[1]}"


def main(out: Path) -> str:
    runs, _, cells = collect(out)
    work = accepts(out)
    v, d, rho_host = host_rho(out, runs, work)
    ref = modelled(work, rho_host)[("qwen_k4", "strict")]
    lines = [f"Host fit: a verify round's fixed part {v:.3f} s, a draft step {d:.3f} s, rho = {rho_host:.2f}.", "",
             "| drafts | arm | tokens / round | model at host rho, vs strict at K=4 | measured, vs strict at K=4 |",
             "| --- | --- | ---: | --- | --- |"]
    host = modelled(work, rho_host)
    for key in sorted(work, key=lambda k: (list(STEPS).index(k[0]), k[1])):
        if key not in cells:
            continue
        lines.append(f"| {CONFIGS[key[0]]} | {key[1]} | {statistics.median(work[key].values()):.2f} "
                     f"| {fmt(ratio(host[key], ref))} | {fmt(cells[key])} |")
    rows = sweep(work)
    lines += ["", "| rho | strict's best | ASD's best | ASD's best vs strict's best, per prompt [95% CI] |",
              "| ---: | --- | --- | --- |"]
    shown = sorted({0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, round(rho_host, 2)})
    for rho, strict, asd, r in rows:
        if rho in shown:
            lines.append(f"| {rho:.2f} | {name(strict)} | {name(asd)} | {fmt(r)} |")
    point, lower = reach(rows)
    at_host = best_pair(work, rho_host)
    lines += ["", f"- at the host's rho {rho_host:.2f}: {name(at_host[1])} against {name(at_host[0])}, "
                  f"{fmt(at_host[2])} (the model)",
              f"- ASD's best reaches {TARGET:.2f}x strict's best up to rho = "
              f"{'none of the sweep' if point is None else f'{point:.2f}'} (point estimate), "
              f"{'none of the sweep' if lower is None else f'{lower:.2f}'} (lower end of the interval)"]
    return "\n".join(lines)


def figure(out: Path):
    """ASD's best against strict's best over rho, with its interval, the 1.20 line and the host's rho."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, _, _ = collect(out)
    work = accepts(out)
    _, _, rho_host = host_rho(out, runs, work)
    rows = sweep(work)
    xs = [rho for rho, *_ in rows]
    fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=120)
    ax.fill_between(xs, [r[1][0] for *_, r in rows], [r[1][1] for *_, r in rows], color="tab:blue", alpha=0.2,
                    label="95% CI over prompts")
    ax.plot(xs, [r[0] for *_, r in rows], color="tab:blue", lw=1.5, label="ASD's best / strict's best (model)")
    ax.axhline(TARGET, color="tab:red", lw=0.8, ls="--", label=f"{TARGET:.2f}x")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axvline(rho_host, color="black", lw=0.8, ls=":", label=f"this CPU host, rho {rho_host:.2f}")
    last = None
    for rho, strict, asd, r in rows:  # name the pair wherever the winners change
        if (strict, asd) != last:
            ax.annotate(f"{strict[0][5:]} / {asd[0][5:]} {asd[1]}", (rho, r[0]), fontsize=7, rotation=30,
                        xytext=(2, 4), textcoords="offset points")
            last = (strict, asd)
    ax.set_xlabel("rho: one draft step's cost against a verify round's fixed part")
    ax.set_ylabel("speed, ASD's best over strict's best")
    ax.set_title("Qwen pair depth sweep, modelled (labels: strict's best / ASD's best and its arm)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    cli(__doc__, main, figure)
