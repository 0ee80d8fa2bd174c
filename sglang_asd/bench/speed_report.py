"""The files a speed run writes: ``speed.json`` (the result), ``speed.csv`` (one row per arm) and
``speed.md`` (the table, with what its intervals are and the run's warnings); ``speed.build_result``
makes the result from the run log, ``speed_summary`` does its arithmetic."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from sglang_asd.bench import report
from sglang_asd.bench.sampling import Sampling

COLUMNS = (
    ("arm", "arm"), ("fields", "request fields"), ("repeats_n", "repeats"),
    ("speedup_cell", "tok/s vs strict [95% CI, repeats]"),
    ("prompt_speedup_cell", "per-prompt tok/s vs strict [95% CI, prompts]"), ("prompts_n", "prompts"),
    ("vs_plain", "tok/s vs plain"), ("drift_median", "baseline drift (median)"), ("tok_s_median", "tok/s"),
    ("cpu_speedup_cell", "tokens per server CPU-s vs strict [95% CI, repeats]"),
    ("accept_length", "accept len"), ("prompt_accept_cell", "per-prompt accept len vs strict [95% CI, prompts]"),
    ("verify_ct_mean", "verify rounds/req"), ("spent_mean", "spent/req (nats)"),
    ("applied_share", "ASD applied"), ("errors", "errors"),
)
CSV_COLUMNS = ("arm", "budget", "fields", "repeats_n", "rounds_n", "speedup_median", "speedup_ci", "prompts_n", "prompt_speedup",
               "prompt_speedup_ci", "vs_plain", "drift_median", "drift_max", "tok_s_median", "strict_tok_s_median",
               "cpu_speedup_median", "cpu_speedup_ci", "cpu_drift_median", "cpu_s_per_token_median",
               "accept_length", "strict_accept_length", "prompt_accept_ratio", "prompt_accept_ratio_ci",
               "verify_ct_mean", "strict_verify_ct_mean", "spent_mean",
               "exceptions_mean", "applied_share", "errors", "fixed_work_ok")


def few_repeats_note(arms: list[dict]) -> Optional[str]:
    """What the interval over repeats is when there are too few of them to resample.

    The percentile bootstrap of a median over a handful of repeats can only return their lowest and
    highest ratio (with 5 repeats a resample's median is the lowest one more than 2.5% of the time):
    the interval is then the repeats' range and covers far less than 95%. Said where the log shows it.
    """
    ranged = [a for a in arms if len(a.get("ratios") or ()) > 1 and a.get("speedup_ci") is not None
              and list(a["speedup_ci"]) == [min(a["ratios"]), max(a["ratios"])]]
    if not ranged:
        return None
    n = sorted({len(a["ratios"]) for a in ranged})
    return (f"With {' or '.join(map(str, n))} repeats the interval over repeats of "
            f"{', '.join(a['arm'] for a in ranged)} is the repeats' range (lowest, highest ratio), "
            "not a 95% interval; the per-prompt interval rests on every prompt.")



def columns(rounds: Optional[int]) -> tuple:
    """The report's columns: rounds show how many rounds are paired and have no baseline drift."""
    if rounds is None:
        return COLUMNS
    cols = [c for c in COLUMNS if c[0] != "drift_median"]
    at = [c[0] for c in cols].index("repeats_n") + 1
    return tuple(cols[:at] + [("rounds_n", "paired rounds")] + cols[at:])


def write(result: dict, out: Path) -> None:
    report.write_json(out / "speed.json", result)
    report.write_csv(out / "speed.csv", result["arms"], CSV_COLUMNS)
    cfg, done = result["config"], result["complete"]
    status = "complete" if done["passes"] >= done["planned"] else "PARTIAL"
    rounds = cfg.get("rounds")
    shape = ("strict-candidate-strict" if rounds is None else
             f"{rounds} rounds of {cfg['concurrency']} prompt(s), every arm once per round")
    how = Sampling(**cfg["sampling"]) if cfg.get("sampling") else Sampling()
    md = [f"# ASD speed at fixed work ({result['created']})", "",
          f"{status}: {done['passes']} of {done['planned']} passes. {cfg['num_prompts']} prompts, ignore_eos, "
          f"max_new_tokens {cfg['max_new_tokens']}, concurrency {cfg['concurrency']}, route {cfg['api']}"
          f"{' (stream)' if cfg['stream'] else ''}, {cfg['repeats']} repeat(s) of {shape}; requests "
          f"{how.describe('prompt')}.", "",
          report.markdown_table(result["arms"], columns(rounds)),
          "Intervals: 95% percentile bootstrap (median over repeats; geometric mean over prompts"
          + ("" if how.samples == 1 else ", each prompt's ratio over its seeds, resampled with all of them") + ").", ""]
    if note := few_repeats_note(result["arms"]):
        md += [note, ""]
    if cfg["concurrency"] > 1:
        md += [f"At concurrency {cfg['concurrency']} the two ratios differ in kind. Over repeats: throughput, "
               "summed tokens over summed wall time, and a pass ends with its slowest request. Over prompts: "
               "each request's own rate, its tokens over its own latency. Plain decoding ends a batch's "
               "requests together; speculative requests end as their accept lengths allow, so the batch's "
               "tail weighs on the first ratio only.", ""]
    for key in ("server", "plain_server"):
        if result.get(key):
            md += [f"{key}: " + ", ".join(f"{k}={v}" for k, v in result[key].items()), ""]
    if result.get("machines"):
        md += ["machines: " + "; ".join(f"{m['id']} ({m['cpu']}, {m['cpus']} CPUs): {m['passes']} passes"
                                         for m in result["machines"]), ""]
    if cfg.get("launch") is not None:
        md += [f"launch: `{cfg['launch']}`", ""]
    if result["warnings"]:
        md += ["Warnings:", *[f"- {w}" for w in result["warnings"]], ""]
    (out / "speed.md").write_text("\n".join(md) + "\n")
