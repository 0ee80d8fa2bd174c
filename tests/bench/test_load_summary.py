"""Load-test summary from synthetic per-request records."""

import pytest

from sglang_asd.bench.load_summary import CSV_COLUMNS, csv_rows, summarize_load


def _rec(start, latency, tokens, budget, user="fixed", ttft=None, ok=True, verify=None, spent=None):
    return {"ok": ok, "start_time": start, "latency_s": latency, "completion_tokens": tokens if ok else None,
            "budget": budget, "user": user, "ttft_s": ttft,
            "tpot_s": (latency - ttft) / (tokens - 1) if ttft is not None and ok else None,
            "spec_verify_ct": verify, "spec_accept_length": tokens / verify if verify else None,
            "receipt": None if spent is None else {"applied": budget > 0, "spent": spent, "exceptions": 1,
                                                    "reason": None if budget > 0 else "budget_zero"},
            "error": None if ok else "HTTP 500: boom"}


RECORDS = [
    _rec(100.0, 2.0, 11, 0.0, ttft=0.5, verify=5, spent=0.0),
    _rec(100.5, 1.5, 11, 8.0, ttft=0.5, verify=3, spent=1.0),
    _rec(101.0, 3.0, 21, 8.0, user="natural", verify=6, spent=2.0),
    _rec(102.0, 0.1, 0, 0.0, ok=False),
]


def test_rates_use_the_measurement_window():
    s = summarize_load(RECORDS)
    assert s["duration_s"] == pytest.approx(4.0)          # 100.0 -> 104.0
    assert s["requests"] == 4 and s["errors"] == 1
    assert s["req_per_s"] == pytest.approx(3 / 4.0)
    assert s["output_tok_per_s"] == pytest.approx(43 / 4.0)
    assert s["first_errors"] == ["HTTP 500: boom"]


def test_latency_percentiles():
    s = summarize_load(RECORDS)
    assert s["e2e_s"]["n"] == 3 and s["e2e_s"]["p50"] == pytest.approx(2.0)
    assert s["e2e_s"]["p90"] == pytest.approx(2.8)
    assert s["ttft_s"]["n"] == 2 and s["ttft_s"]["p99"] == pytest.approx(0.5)
    assert s["itl_s"]["p50"] == pytest.approx((0.15 + 0.1) / 2)


def test_acceptance_and_budget_groups():
    s = summarize_load(RECORDS)
    assert s["accept_length"] == pytest.approx(43 / 14)
    assert s["spent_total"] == pytest.approx(3.0) and s["spent_mean"] == pytest.approx(1.0)
    by_budget = {g["budget"]: g for g in s["by_budget"]}
    assert by_budget[8.0]["accept_length"] == pytest.approx(32 / 9)
    assert by_budget[0.0]["errors"] == 1 and by_budget[8.0]["applied_share"] == 1.0
    assert [g["user"] for g in s["by_user"]] == ["fixed", "natural"]


def test_csv_rows():
    rows = csv_rows(summarize_load(RECORDS))
    assert [r["group"] for r in rows] == ["all", "budget=0", "budget=8", "user=fixed", "user=natural"]
    assert set(rows[0]) <= set(CSV_COLUMNS) and rows[0]["e2e_p50_s"] == pytest.approx(2.0)


def test_empty_run():
    s = summarize_load([])
    assert s["requests"] == 0 and s["req_per_s"] is None and s["e2e_s"]["p50"] is None
