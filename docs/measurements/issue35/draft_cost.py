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
``rho = D / V``, where ``D`` is what one more step of depth costs there (the draft's forward and the
verify's one more token); and it sets the model's tok/s against strict at K = 4 at that ``rho`` beside the
measured ones (``depth.py``'s per-prompt ratios), which says how far to trust it on that host.
``--plot PNG`` draws ASD's best against strict's best over ``rho``.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import NamedTuple

from depth import ARMS, CHAINS, CONFIGS, STEPS, cli, collect, fmt, per_prompt, ratio
from sglang_asd.bench import runlog, speed_summary

TARGET = 1.20
RHOS = [round(0.01 * i, 2) for i in range(0, 81)]
SHORT = {name: CONFIGS[name].split(",")[0].removeprefix("chain ") for name in CONFIGS}  # "K=2" ... "tree"

Key = tuple[str, str]  # (run, arm)


class HostFit(NamedTuple):
    fixed_s: float  # a round's fixed part, seconds
    per_step_s: float  # one more step of depth, seconds
    rho: float


class BestPair(NamedTuple):
    strict: Key
    asd: Key
    ratio: tuple[float, tuple[float, float]]  # ASD's best over strict's best per prompt, with its interval


def accepts(out: Path) -> dict[Key, dict[str, float]]:
    """(run, arm) -> prompt -> tokens per verify round, median over repeats, for the arms of ``ARMS``
    and only the prompts every (run, arm) holds, so that every ratio pairs the same prompts."""
    work = {(name, arm): by_prompt
            for name in STEPS if runlog.exists(out / name / "speed_passes.jsonl")
            for arm, by_prompt in per_prompt(out / name, speed_summary.request_accept_lengths).items()
            if arm in ARMS}
    shared = set.intersection(*(set(v) for v in work.values())) if work else set()
    return {key: {p: v for p, v in by_prompt.items() if p in shared} for key, by_prompt in work.items()}


def host_fit(rates: dict, work: dict) -> HostFit:
    """The least-squares line through strict's time per round (seconds, median over prompts of tokens
    per round over tok/s) against the chain's draft steps. Its slope is what one more step of depth
    costs: the draft's forward, and the verify's one more token (on the tree's evidence, little)."""
    pts = []
    for name in CHAINS:
        if (name, "strict") in work and name in rates:
            w, r = work[(name, "strict")], rates[name]["strict"]
            pts.append((STEPS[name], statistics.median(w[p] / r[p] for p in w if p in r)))
    if len(pts) < 2:
        raise SystemExit("fewer than two chain depths with a strict run: no line to fit")
    mx, my = statistics.fmean(x for x, _ in pts), statistics.fmean(y for _, y in pts)
    d = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    v = my - d * mx
    return HostFit(v, d, d / v)


def modelled(work: dict, rho: float) -> dict[Key, dict[str, float]]:
    """(run, arm) -> prompt -> modelled speed, tokens per round over the round's cost."""
    return {key: {p: w / (1.0 + rho * STEPS[key[0]]) for p, w in by_prompt.items()} for key, by_prompt in work.items()}


def best_pair(work: dict, rho: float) -> BestPair:
    """Strict's best (run, arm) and ASD's best by the geometric mean over prompts of their modelled
    speed, and ASD's best against strict's best per prompt."""
    speed = modelled(work, rho)

    def best(keys):
        return max(keys, key=lambda k: statistics.geometric_mean(speed[k].values()))

    strict = best(k for k in speed if k[1] == "strict")
    asd = best(k for k in speed if k[1] != "strict")
    return BestPair(strict, asd, ratio(speed[asd], speed[strict]))


def sweep(work: dict) -> list[tuple[float, BestPair]]:
    return [(rho, best_pair(work, rho)) for rho in RHOS]


def reach(rows: list, target: float = TARGET) -> tuple[float | None, float | None]:
    """The rho up to which ASD's best runs at least ``target`` x strict's best without a break from
    rho 0: by the point estimate, and by the interval's lower end (None where rho 0 misses it)."""
    def up_to(ok) -> float | None:
        last = None
        for rho, pair in rows:
            if not ok(pair.ratio):
                break
            last = rho
        return last

    return up_to(lambda r: r[0] >= target), up_to(lambda r: r[1][0] >= target)


def label(key: Key) -> str:
    return f"{CONFIGS[key[0]]}, {key[1]}"


def main(out: Path) -> str:
    runs, _, cells = collect(out)
    work = accepts(out)
    fit = host_fit(runs, work)
    host = modelled(work, fit.rho)
    ref = host[("qwen_k4", "strict")]
    lines = [f"Host fit: a round's fixed part {fit.fixed_s:.3f} s, one more step of depth {fit.per_step_s:.3f} s, "
             f"rho = {fit.rho:.2f}.", "",
             "| drafts | arm | tokens / round | model at host rho, vs strict at K=4 | measured, vs strict at K=4 |",
             "| --- | --- | ---: | --- | --- |"]
    for name in STEPS:
        for arm in ARMS:
            if (name, arm) in work and (name, arm) in cells:
                lines.append(f"| {CONFIGS[name]} | {arm} | {statistics.median(work[(name, arm)].values()):.2f} "
                             f"| {fmt(ratio(host[(name, arm)], ref))} | {fmt(cells[(name, arm)])} |")
    rows = sweep(work)
    lines += ["", "| rho | strict's best | ASD's best | ASD's best vs strict's best, per prompt [95% CI] |",
              "| ---: | --- | --- | --- |"]
    shown = {0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, round(fit.rho, 2)}
    lines += [f"| {rho:.2f} | {label(pair.strict)} | {label(pair.asd)} | {fmt(pair.ratio)} |"
              for rho, pair in rows if rho in shown]
    point, lower = reach(rows)

    def bound(rho):
        if rho is None:
            return "no rho of the sweep"
        return f"{rho:.2f}" + (" (the sweep's end)" if rho == RHOS[-1] else "")

    at_host = best_pair(work, fit.rho)
    lines += ["", f"- at the host's rho {fit.rho:.2f}: {label(at_host.asd)} against {label(at_host.strict)}, "
                  f"{fmt(at_host.ratio)} (the model)",
              f"- ASD's best runs at least {TARGET:.2f}x strict's best from rho 0 up to rho = {bound(point)} "
              f"(point estimate), {bound(lower)} (lower end of the interval)"]
    return "\n".join(lines)


def figure(out: Path):
    """ASD's best against strict's best over rho, with its interval, the 1.20 line and the host's rho."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, _, _ = collect(out)
    work = accepts(out)
    rho_host = host_fit(runs, work).rho
    rows = sweep(work)
    xs = [rho for rho, *_ in rows]
    fig, ax = plt.subplots(figsize=(7.0, 4.2), dpi=120)
    ax.fill_between(xs, [p.ratio[1][0] for _, p in rows], [p.ratio[1][1] for _, p in rows], color="tab:blue",
                    alpha=0.2, label="95% CI over prompts")
    ax.plot(xs, [p.ratio[0] for _, p in rows], color="tab:blue", lw=1.5, label="ASD's best / strict's best (model)")
    ax.axhline(TARGET, color="tab:red", lw=0.8, ls="--", label=f"{TARGET:.2f}x")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axvline(rho_host, color="black", lw=0.8, ls=":", label=f"this CPU host, rho {rho_host:.2f}")
    last = None
    for rho, pair in rows:  # name the pair wherever the winners change
        if (pair.strict, pair.asd) != last:
            ax.annotate(f"{SHORT[pair.strict[0]]} / {SHORT[pair.asd[0]]} {pair.asd[1]}", (rho, pair.ratio[0]),
                        fontsize=7, rotation=30, xytext=(2, 4), textcoords="offset points")
            last = (pair.strict, pair.asd)
    ax.set_xlabel("rho: one draft step's cost against a verify round's fixed part")
    ax.set_ylabel("speed, ASD's best over strict's best")
    ax.set_title("Qwen pair depth sweep, modelled (labels: strict's best / ASD's best and its arm)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    cli(__doc__, main, figure)
