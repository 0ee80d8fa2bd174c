"""Summary of a load test from its per-request records (``GenResult.to_dict()`` lines, plus
``user`` = "fixed" | "natural"), for ``load_tests/run_headless.py``.

The measurement window is from the first request sent to the last one finished, so locust's
start-up and shut-down do not count. Rates: completed requests / window, output tokens of
successful requests / window. Latencies at p50/p90/p99 (seconds): ``e2e`` (all successful
requests), ``ttft`` and ``itl`` (streamed requests only; itl = per-request mean time per output
token after the first). One summary for everything and one per budget and per user kind.
"""

from __future__ import annotations

from typing import Iterable, Optional

from sglang_asd.bench import stats
from sglang_asd.bench.metrics import first_errors, result_metrics

LATENCIES = (("e2e", "latency_s"), ("ttft", "ttft_s"), ("itl", "tpot_s"))
CSV_COLUMNS = (
    "group", "requests", "errors", "duration_s", "req_per_s", "output_tok_per_s",
    *(f"{name}_{q}_s" for name, _ in LATENCIES for q in ("p50", "p90", "p99")),
    "accept_length", "accept_length_mean", "verify_ct_mean", "spent_mean", "spent_total", "applied_share",
)


def window(records: list[dict]) -> Optional[float]:
    starts = [r["start_time"] for r in records if r.get("start_time") is not None]
    ends = [r["start_time"] + r["latency_s"] for r in records
            if r.get("start_time") is not None and r.get("latency_s") is not None]
    if not starts or not ends:
        return None
    return max(ends) - min(starts)


def group_summary(records: list[dict], duration: Optional[float]) -> dict:
    ok = [r for r in records if r.get("ok")]
    m = result_metrics(records)
    out = {
        "requests": len(records), "errors": m["errors"], "duration_s": duration,
        "req_per_s": stats.ratio(len(ok), duration), "output_tok_per_s": stats.ratio(m["output_tokens"], duration),
        "output_tokens": m["output_tokens"],
    }
    for name, key in LATENCIES:
        out[f"{name}_s"] = stats.summarize(r.get(key) for r in ok)
    for key in ("accept_length", "accept_length_mean", "verify_ct_mean", "spent_mean", "spent_total",
                "exceptions_mean", "applied_share", "not_applied_reasons"):
        out[key] = m[key]
    return out


def summarize_load(records: Iterable[dict], config: Optional[dict] = None) -> dict:
    records = list(records)
    duration = window(records)
    summary = {"kind": "asd-load", "version": 1, "config": config or {}, **group_summary(records, duration)}
    budgets = sorted({r.get("budget") for r in records if r.get("budget") is not None})
    summary["by_budget"] = [{"budget": b, **group_summary([r for r in records if r.get("budget") == b], duration)}
                            for b in budgets]
    users = sorted({r.get("user") for r in records if r.get("user")})
    summary["by_user"] = [{"user": u, **group_summary([r for r in records if r.get("user") == u], duration)}
                          for u in users]
    summary["first_errors"] = first_errors(records)
    return summary


def csv_rows(summary: dict) -> list[dict]:
    """Flat rows (``all``, ``budget=B``, ``user=U``) for the CSV file."""

    def flat(group: str, s: dict) -> dict:
        row = {"group": group, **{k: s.get(k) for k in CSV_COLUMNS if k in s}}
        for name, _ in LATENCIES:
            for q in ("p50", "p90", "p99"):
                row[f"{name}_{q}_s"] = s[f"{name}_s"][q]
        return row

    rows = [flat("all", summary)]
    rows += [flat(f"budget={g['budget']:g}", g) for g in summary["by_budget"]]
    rows += [flat(f"user={g['user']}", g) for g in summary["by_user"]]
    return rows
