"""Issue 35's depth table: strict and ASD at every draft depth of the sweep, in one table.

``python docs/measurements/issue35/depth.py OUT`` reads the speed runs ``OUT/qwen_k2``, ``qwen_k4``,
``qwen_k6``, ``qwen_k8`` and ``qwen_tree`` (``docs/measurements/issue35/run.sh``; a missing run is
skipped) and prints a markdown table and three lines: the best depth for strict, the best for ASD
(by the per-prompt ratio against strict at K = 4), and ASD's best against strict's best.

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
import sys
from pathlib import Path

from sglang_asd.bench import speed_summary, stats

CONFIGS = {"qwen_k2": "chain K=2", "qwen_k4": "chain K=4", "qwen_k6": "chain K=6", "qwen_k8": "chain K=8",
           "qwen_tree": "tree, topk 2, 4 steps, 8 tokens"}
ARMS = ("strict", "b8", "b8g0.5")


def per_prompt_tok_s(run: Path) -> dict[str, dict[str, float]]:
    """arm -> prompt -> median over repeats of the request's tok/s (the speed tool's per-prompt rate:
    output tokens / latency, ``speed_summary.request_rates``); a redone pass replaces its try."""
    log = [json.loads(line) for line in (run / "speed_passes.jsonl").read_text().splitlines() if line.strip()]
    last: dict[tuple, dict] = {}
    for rec in log:
        if rec.get("kind") == "pass" and rec.get("fixed_work_ok"):
            last[(rec["arm"], rec["repeat"], rec["index"])] = rec
    out: dict[str, dict[str, list]] = {}
    for (arm, _, _), rec in last.items():
        for (prompt, _seed), rate in speed_summary.request_rates(rec).items():
            out.setdefault(arm, {}).setdefault(prompt, []).append(rate)
    return {arm: {p: statistics.median(v) for p, v in by_prompt.items()} for arm, by_prompt in out.items()}


def ratio(a: dict[str, float], b: dict[str, float]) -> tuple[float, tuple[float, float]]:
    """Geometric mean over the shared prompts of a/b, and its 95% bootstrap interval."""
    rs = [a[p] / b[p] for p in a if p in b]
    ci = stats.bootstrap_ci(rs, "gmean")
    return math.exp(sum(map(math.log, rs)) / len(rs)), ci


def fmt(r: tuple[float, tuple[float, float]]) -> str:
    return f"{r[0]:.3f} [{r[1][0]:.3f}, {r[1][1]:.3f}]"


def main(out: Path) -> str:
    runs, summaries = {}, {}
    for name in CONFIGS:
        if (out / name / "speed.json").exists():
            runs[name] = per_prompt_tok_s(out / name)
            summaries[name] = {a["arm"]: a for a in json.loads((out / name / "speed.json").read_text())["arms"]}
    if "qwen_k4" not in runs:
        raise SystemExit(f"{out}/qwen_k4: no speed run (the reference depth)")
    ref = runs["qwen_k4"]["strict"]
    lines = ["| drafts | arm | repeats | tok/s (median over prompts) | accept len | verify rounds/req | spent/req (nats) "
             "| vs strict, same depth, per prompt [95% CI] | vs strict at K=4, per prompt [95% CI] |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    cells = {}
    for name, arms in runs.items():
        for arm in ARMS:
            if arm not in arms:
                continue
            s = summaries[name].get(arm, {})
            same = "reference" if arm == "strict" else s.get("prompt_speedup_cell", "n/a")
            acc, rounds = s.get("accept_length"), s.get("verify_ct_mean")
            cells[(name, arm)] = ratio(arms[arm], ref)
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


if __name__ == "__main__":
    print(main(Path(sys.argv[1])))
