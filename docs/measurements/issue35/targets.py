"""Issue 35's targets from a speed run with a plain arm: each arm's speed against plain decoding.

``python docs/measurements/issue35/targets.py DIR [DIR ...]`` reads each DIR/speed.json (written by
``scripts/lab/speed.py --plain-launch ...``) and prints one markdown table per run: median tok/s, the
speed tool's ratio of medians against plain, and the per-prompt ratio against plain with its 95%
bootstrap interval over prompts. Per prompt, arm/plain = (arm/strict) / (plain/strict): under the
rounds schedule both ratios come from the same rounds, whose strict pass they share, so this is the
arm's speed over plain decoding's on the same prompt, repeats folded in by the tool (geometric mean).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from sglang_asd.bench import runlog, stats


def table(run: Path) -> str:
    data = json.loads(runlog.read_text(run / "speed.json"))
    arms = {a["arm"]: a for a in data["arms"]}
    if "plain" not in arms:
        raise SystemExit(f"{run}: no plain arm (run the speed tool with --plain-launch)")
    plain = arms["plain"]["prompt_ratios"]
    cfg = data["config"]
    lines = [f"{run}: {cfg.get('num_prompts')} prompts x {cfg.get('max_new_tokens')} tokens, "
             f"concurrency {cfg.get('concurrency')}, {arms['plain']['repeats_n']} repeat(s), complete: {data['complete']}", "",
             "| arm | tok/s (median) | vs plain (medians) | vs plain, per prompt [95% CI] | vs strict, per prompt [95% CI] "
             "| accept len | verify rounds/req | spent/req (nats) |",
             "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: |"]
    for name, arm in arms.items():
        if name == "plain":
            per_prompt = "1.000"
        else:
            ratios = arm.get("prompt_ratios") or {p: 1.0 for p in plain}  # strict: 1 against itself
            vs_plain = [ratios[p] / plain[p] for p in plain if p in ratios]
            ci = stats.bootstrap_ci(vs_plain, "gmean")
            gm = math.exp(sum(map(math.log, vs_plain)) / len(vs_plain))
            per_prompt = f"{gm:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
        vs_strict = "reference" if name == "strict" else arm.get("prompt_speedup_cell") or "n/a"
        cells = [f"{v:.3f}" if v is not None else "n/a" for v in (arm.get("accept_length"),)]
        rounds = arm.get("verify_ct_mean")
        cells.append("n/a" if rounds is None else f"{rounds:.1f}")
        lines.append(f"| {name} | {arm['tok_s_median']:.2f} | {arm['vs_plain']:.3f} | {per_prompt} | {vs_strict} "
                     f"| {' | '.join(cells)} | {arm.get('spent_mean') or 0:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print("\n\n".join(table(Path(d)) for d in sys.argv[1:]))
