"""The audit's report files: ``audit.json``, ``audit.csv``, ``audit.md`` and ``frontier.png``.

Table cells carry their interval and n: accuracy as ``0.620 (62/100)``, the accuracy change
against strict in percentage points with its paired 95% interval, the discordant pairs as
``lost/gained`` and the exact McNemar p-value, the length change in tokens with its interval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from sglang_asd.bench import report
from sglang_asd.bench.arms import STRICT
from sglang_asd.bench.audit_summary import p_value_text
from sglang_asd.bench.sampling import Sampling

TASK_COLUMNS = (
    ("task", "task"), ("arm", "arm"), ("n_cell", "n"), ("accuracy_cell", "accuracy"),
    ("acc_delta_cell", "Δ accuracy vs strict, pp [95% CI]"), ("discordant_cell", "lost/gained"),
    ("mcnemar_cell", "McNemar p"), ("completion_tokens_mean", "mean length"),
    ("len_delta_cell", "Δ length, tokens [95% CI]"), ("divergence_share", "differs from strict"),
    ("similarity_mean", "similarity to strict"), ("accept_length", "accept len"),
    ("spent_mean", "spent/req (nats)"), ("exceptions_mean", "exceptions/req"), ("errors", "errors"),
)
BY_ARM_COLUMNS = (
    ("arm", "arm"), ("fields", "request fields"), ("n_cell", "n"), ("accuracy_cell", "accuracy (scored tasks)"),
    ("acc_delta_cell", "Δ accuracy vs strict, pp [95% CI]"), ("discordant_cell", "lost/gained"),
    ("mcnemar_cell", "McNemar p"), ("len_delta_cell", "Δ length, tokens [95% CI]"),
    ("divergence_share", "differs from strict"), ("accept_length", "accept len"),
    ("spent_mean", "spent/req (nats)"), ("speedup", "tok/s vs strict (speed run)"),
)
CSV_COLUMNS = ("task", "arm", "budget", "fields", "n", "planned", "scored", "correct", "accuracy", "scored_pairs",
               "acc_delta", "acc_delta_ci", "lost", "gained", "mcnemar_p", "completion_tokens_mean", "len_delta",
               "len_delta_ci", "pairs", "divergence_share", "similarity_mean", "accept_length", "verify_ct_mean",
               "spent_mean", "exceptions_mean", "applied_share", "errors")


def _pp(ci: Optional[list]) -> Optional[list]:
    return None if ci is None else [100.0 * ci[0], 100.0 * ci[1]]


def add_cells(row: dict) -> dict:
    """Display strings of a per-task or per-arm row (in place)."""
    row["n_cell"] = f"{row['n']}/{row['planned']}" if row["n"] < row["planned"] else str(row["n"])
    row["accuracy_cell"] = (None if row["accuracy"] is None
                            else f"{row['accuracy']:.3f} ({row['correct']}/{row['scored']})")
    acc = row.get("acc_delta")
    row["acc_delta_cell"] = report.fmt_ci(None if acc is None else 100.0 * acc, _pp(row.get("acc_delta_ci")),
                                          digits=1, signed=True)
    if row.get("scored_pairs") and acc is not None:
        row["acc_delta_cell"] += f" (n={row['scored_pairs']})"
    row["discordant_cell"] = None if row.get("lost") is None else f"{row['lost']}/{row['gained']}"
    row["mcnemar_cell"] = p_value_text(row.get("mcnemar_p"))
    row["len_delta_cell"] = report.fmt_ci(row.get("len_delta"), row.get("len_delta_ci"), digits=1, signed=True)
    if row["arm"] == STRICT:
        for key in ("acc_delta_cell", "discordant_cell", "mcnemar_cell", "len_delta_cell"):
            row[key] = "reference"
    return row


def _concurrency(value) -> str:
    """``logged_concurrency``'s value in words: a run that predates the field is "not logged"; a
    resume is said to have changed the concurrency only when two logged values differ."""
    if value is None:
        return "not logged"
    if not isinstance(value, list):
        return str(value)
    known = [str(v) for v in value if v is not None]
    text = ", ".join(known) + (" (a resume changed it)" if len(known) > 1 else "")
    return text + ("; earlier runs did not log it" if None in value else "")


def write(audit: dict, out: Path, speed: Optional[dict]) -> None:
    for row in audit["results"]:
        add_cells(row)
    for row in audit["by_arm"]:
        add_cells(row)
    report.write_json(out / "audit.json", audit)
    report.write_csv(out / "audit.csv", audit["results"], CSV_COLUMNS)
    report.plot_frontier(audit, out / "frontier.png", speed)
    cfg = audit["config"]
    how = Sampling(**cfg["sampling"]) if cfg.get("sampling") else Sampling()
    pairing = ("Every arm is paired with strict on the same items: Δ = arm - strict, 95% paired-bootstrap "
               "interval; lost/gained = items right under strict and wrong under the arm / the reverse; McNemar = "
               "exact two-sided test on those discordant pairs.")
    if how.samples > 1:
        pairing = (f"Every arm is paired with strict on the same (item, seed), {how.samples} seeds per item (n counts "
                   "pairs): Δ = arm - strict, 95% paired-bootstrap interval resampling items with all their seeds; "
                   "lost/gained = pairs right under strict and wrong under the arm / the reverse; McNemar = exact "
                   "two-sided test on those discordant pairs, taking them as independent (two samples of one item "
                   "are not: read the interval).")
    md = [f"# ASD quality audit at natural stop ({audit['created']})", "",
          f"{audit['complete']['line']}. Route {cfg['api']}, first {cfg['limit'] or 'all'} items per task, "
          f"{how.describe('item')}, natural stop (max_new_tokens {cfg['max_new_tokens'] or 'per task'}), "
          f"concurrency {_concurrency(cfg.get('concurrency'))}.", "", pairing, "",
          "## Per arm (pooled over tasks)", "", report.markdown_table(audit["by_arm"], BY_ARM_COLUMNS),
          "## Per task", "", report.markdown_table(audit["results"], TASK_COLUMNS)]
    if audit["noise_floor"]:
        md += ["`strict-rerun` is strict run a second time: the noise floor of divergence.", ""]
    if cfg.get("launch") is not None:
        md += [f"launch: `{cfg['launch']}`", ""]
    if audit.get("server"):
        md += ["server: " + ", ".join(f"{k}={v}" for k, v in audit["server"].items()), ""]
    if audit["warnings"]:
        md += ["Warnings:", *[f"- {w}" for w in audit["warnings"]], ""]
    md += ["MT-Bench has no judge offline: its accuracy is n/a; read divergence, similarity and length.",
           "", "![frontier](frontier.png)", ""]
    (out / "audit.md").write_text("\n".join(md) + "\n")
