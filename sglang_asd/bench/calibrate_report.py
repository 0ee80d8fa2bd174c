"""The calibration's report files: ``calibrate.json``, ``calibrate.md``, ``calibrate.csv``,
``calibrate.png`` (speed against quality, with intervals and the target) and the server settings of
the recommendation (``--asd-*`` flags, the same keys as YAML lines for ``--config``, and the
per-request fields), docs/CONTRACTS.md "Server flags".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from sglang_asd.bench import report
from sglang_asd.bench.arms import STRICT
from sglang_asd.bench.server import identity
from sglang_asd.server_settings import DEFAULT_MAX_BUDGET_PER_TOKEN

COLUMNS = (
    ("arm", "setting"), ("fields", "request fields"), ("speed_cell", "tok/s vs strict, fixed work [CI]"),
    ("accept_cell", "tokens / verify round (vs strict)"), ("spent_cell", "spent/req mean, worst (nats)"),
    ("acc_cell", "Δ accuracy vs strict, pp [CI]"), ("agree_cell", "same answer as strict [CI]"),
    ("length_cell", "length change [CI]"), ("divergence_share", "text differs"),
    ("first_divergence", "first divergence (token, median)"), ("verdict_cell", "target"),
)
CSV_COLUMNS = ("arm", "budget", "fields", "n", "pairs", "speed", "speed_ci", "speed_basis", "accept_length",
               "accept_ratio", "spent_mean", "spent_max", "accuracy", "acc_delta", "acc_delta_ci",
               "acc_delta_ci_bootstrap", "acc_delta_ci_score", "lost", "gained", "agreement", "agreement_ci",
               "length_change", "length_change_ci", "divergence_share", "first_divergence", "errors", "verdict")

# request field -> server flag (the server's default for requests that send none, and their ceiling)
FLAG_OF = {"asd_budget": "--asd-default-budget"}


def server_settings(fields: dict) -> dict:
    """``{"flags": "--asd-default-budget 8 --asd-gate 0.25", "yaml": [...], "request": {...}}`` of a
    setting's request fields: each ``asd_X`` is the server's ``--asd-X`` (``asd_budget``: the
    default budget; ``asd_budget_per_token``: the default rate, under which a request that sends no
    budget has ``--asd-max-budget`` as its total); a gate, cap, margin or threshold set this way is also
    every request's ceiling."""
    flags, yaml = [], []
    for name, value in fields.items():
        flag = FLAG_OF.get(name, "--" + name.replace("_", "-"))
        text = f"{value:g}" if isinstance(value, float) else str(value)
        flags.append(f"{flag} {text}")
        yaml.append(f"{flag[2:]}: {text}")
    budget = fields.get("asd_budget")
    if isinstance(budget, (int, float)) and budget > 64:
        flags.append(f"--asd-max-budget {budget:g}")
        yaml.append(f"asd-max-budget: {budget:g}")
    rate = fields.get("asd_budget_per_token")
    if isinstance(rate, (int, float)) and rate > DEFAULT_MAX_BUDGET_PER_TOKEN:
        flags.append(f"--asd-max-budget-per-token {rate:g}")
        yaml.append(f"asd-max-budget-per-token: {rate:g}")
    return {"flags": " ".join(flags), "yaml": yaml, "request": dict(fields)}


def _pct(ci) -> str:
    return "" if ci is None else f" [{ci[0]:+.1%}, {ci[1]:+.1%}]"


def add_cells(row: dict, verdict: Optional[dict]) -> dict:
    strict = row["arm"] == STRICT
    row["speed_cell"] = report.fmt_ci(row.get("speed"), None if strict else row.get("speed_ci"))
    if row.get("speed_basis") and not strict:
        row["speed_cell"] += f" ({row['speed_basis']})"
    acc = row.get("accept_length")
    row["accept_cell"] = None if acc is None else (
        f"{acc:.2f}" + ("" if strict or row.get("accept_ratio") is None else f" ({row['accept_ratio']:.3f}x)"))
    sm, sx = row.get("spent_mean"), row.get("spent_max")
    row["spent_cell"] = None if sm is None else f"{sm:.3f}, {sx:.3f}"
    if strict:
        row.update(acc_cell="reference", agree_cell="reference", length_cell="reference")
    else:
        d, ci = row.get("acc_delta"), row.get("acc_delta_ci")
        row["acc_cell"] = None if d is None else (report.fmt_ci(100 * d, [100 * ci[0], 100 * ci[1]], digits=1,
                                                                signed=True) + f" (n={row['scored_pairs']})")
        a, ci = row.get("agreement"), row.get("agreement_ci")
        row["agree_cell"] = None if a is None else report.fmt_ci(a, ci) + f" (n={row['agreement_n']})"
        c = row.get("length_change")
        row["length_cell"] = None if c is None else f"{c:+.1%}{_pct(row.get('length_change_ci'))}"
    if verdict is None:
        row["verdict_cell"] = "reference" if strict else None
        row["verdict"] = None
    else:
        row["verdict"] = "meets" if verdict["meets"] else "; ".join(
            f"{c['name']}: {c['verdict']}" for c in verdict["criteria"] if c["verdict"] != "meets")
        row["verdict_cell"] = row["verdict"]
    return row


def markdown(result: dict) -> str:
    cfg = result["config"]
    lines = [f"# Choosing a budget: calibration ({result['complete']['line']})", ""]
    lines.append(f"- server: {json.dumps(identity(result.get('server') or {}), sort_keys=True)}")
    speed = ("" if result.get("quick") else
             f"; speed at fixed work: {cfg.get('speed_prompts', cfg['num_prompts'])} prompts x "
             f"{cfg['speed_max_new_tokens']} tokens x {cfg['repeats']} repeat(s), concurrency {cfg['concurrency']}")
    lines.append(f"- prompts: {cfg['source']} ({cfg['num_prompts']} prompts, {cfg['sampling_text']}); route "
                 f"{cfg['api']}; natural stop at most {cfg['max_new_tokens_text']} tokens{speed}")
    for src in cfg.get("reused", []):
        lines.append(f"- answers reused from the run of {src['created']} (same server, launch, caps and prompts; "
                     f"`--reuse-answers`): " + ", ".join(f"{k} {v}" for k, v in src["answers"].items()))
    if result.get("quick"):
        lines += ["", quick_markdown(result["quick"])]
    else:
        lines.append(f"- target: {result['targets_text']}")
        lines += ["", report.markdown_table(result["rows"], COLUMNS), "## Recommendation", "",
                  result["recommendation"]["why"] + ".", ""]
        rec = result.get("settings")
        if rec:
            lines += ["Server flags (`python -m sglang_asd.launch_server ...`):", "", "```", rec["flags"], "```", "",
                      "or these lines in the server's `--config` YAML:", "", "```yaml", *rec["yaml"], "```", "",
                      f"or per request: `{json.dumps(rec['request'])}`.", ""]
        lines += ["## Verdicts", ""]
        for v in result["recommendation"]["settings"]:
            lines.append(f"- {v['arm']}: " + ("meets every target" if v["meets"] else "does not qualify")
                         + "".join(f"\n  - {c['name']} ({c['target']}): {c['why']}"
                                   + "".join(f"\n    - {t} alone: {tc['why']}" for t, tc in c.get("by_task", {}).items())
                                   for c in v["criteria"]))
        lines += ["", "How each interval is made and read: docs/MEASURING.md, \"Choosing a budget: calibrate\"."]
    for w in result.get("warnings", []):
        lines.append(f"\n**warning**: {w}")
    return "\n".join(lines) + "\n"


def quick_markdown(q: dict) -> str:
    out = [f"## Quick recipe (no labels): the {q['percentile']:g}th percentile of regret / suffix value at the first "
           "strict rejection", ""]
    out.append(f"- prompts probed: {q['prompts']}; with a measured first rejection: {q['with_first_rejection']}; "
               f"no exception within the cap: {q['without_exception']}; regret 0 (a tie): {q['zero_regret']}; "
               f"inconclusive: {q['inconclusive']}; K = {q['k']}"
               + (f" (exceeded by {q['beyond_k']}: the server's depth is not the K it reports)" if q.get("beyond_k")
                  else "") + "; server gate: "
               f"{', '.join(f'{g:g}' for g in q['server_gate']) or 'n/a'}")
    if q["ratio_q25"] is None:
        out.append("- no first rejection was measured: nothing to take a percentile of")
    else:
        out.append(f"- 25th percentile of regret / (K - i): {q['ratio_q25']:.4f} nats; "
                   f"as the article's settings: gate {q['gate']:.4f}, budget K x {q['ratio_q25']:.4f} = "
                   f"{q['budget']:.4f} nats, at most 1 exception per block")
        s = q["settings"]
        out += ["", "```", s["flags"], "```", "", "```yaml", *s["yaml"], "```"]
    out += ["", "What this does not measure: it reads the regret of one decision per prompt and says nothing about "
            "answers, accuracy, length or speed; it is a starting point for the full calibration (the same command "
            "without --quick), not a guarantee. A first rejection whose regret / (K - i) exceeds the server's gate "
            "never shows in a receipt (the probe cannot accept it), so with a narrow gate the percentile is over "
            "the rejections the gate admits: launch the calibration server with a wide `--asd-gate` (and "
            "`--asd-max-budget`) to see them all."]
    return "\n".join(out)


def plot(result: dict, out_png: Path) -> Path:
    """Speed against the quality the target names, one point per setting with both intervals, the
    target dashed, the recommendation in red: y = accuracy change (points), agreement with strict or
    length change, the first target given (accuracy where references exist, else agreement)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    t = result["targets"]
    scored = any(r.get("acc_delta") is not None for r in rows if r["arm"] != STRICT)
    if t.get("max_accuracy_drop") is not None or (scored and t.get("min_agreement") is None
                                                  and t.get("max_length_change") is None):
        metric, scale, line, label = "acc_delta", 100.0, t.get("max_accuracy_drop"), "accuracy - strict's, points"
        line = None if line is None else [-line]
    elif t.get("min_agreement") is not None or t.get("max_length_change") is None:
        metric, scale, line, label = "agreement", 1.0, t.get("min_agreement"), "share with strict's final answer"
        line = None if line is None else [line]
    else:
        metric, scale, label = "length_change", 1.0, "total length / strict's - 1"
        line = [-t["max_length_change"], t["max_length_change"]]
    reference = {"acc_delta": 0.0, "agreement": 1.0, "length_change": 0.0}[metric]
    fig, ax = plt.subplots(figsize=(7.0, 4.8), dpi=120)
    drawn = 0
    for r in rows:
        x = r.get("speed") if r.get("speed") is not None else r.get("accept_ratio")
        if r["arm"] == STRICT:
            y, yci = reference, None
        else:
            y = None if r.get(metric) is None else scale * r[metric]
            yci = None if r.get(metric + "_ci") is None else [scale * c for c in r[metric + "_ci"]]
        if x is None or y is None:
            continue
        xci = r.get("speed_ci") if r["arm"] != STRICT else None
        xerr = None if not xci else [[max(0.0, x - xci[0])], [max(0.0, xci[1] - x)]]
        yerr = None if not yci else [[max(0.0, y - yci[0])], [max(0.0, yci[1] - y)]]
        best = r["arm"] == result["recommendation"]["arm"]
        ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="o", color="tab:red" if best else "black", ms=7 if best else 5,
                    capsize=3, lw=1.2)
        ax.annotate(r["arm"] + (" (recommended)" if best else ""), (x, y), textcoords="offset points", xytext=(5, 5),
                    fontsize=8)
        drawn += 1
    for i, value in enumerate(line or []):
        ax.axhline(value, color="tab:red", lw=0.8, ls="--",
                   label="target" if i == 0 else None)
    if not drawn:
        ax.text(0.5, 0.5, "no measured points", ha="center", va="center", transform=ax.transAxes)
    ax.axvline(1.0, color="grey", lw=0.8, ls=":")
    level = f"{t['confidence']:.0%}"
    ax.set_xlabel(f"tokens/s vs strict at fixed work ({level} CI)")
    ax.set_ylabel(f"{label} ({level} CI)")
    ax.set_title("Choosing a budget: speed against quality, per setting")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    out_png = Path(out_png)
    fig.savefig(out_png)
    plt.close(fig)
    return out_png


def write(result: dict, out: Path) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report.write_json(out / "calibrate.json", result)
    (out / "calibrate.md").write_text(markdown(result))
    if not result.get("quick"):
        report.write_csv(out / "calibrate.csv", result["rows"], CSV_COLUMNS)
        plot(result, out / "calibrate.png")
