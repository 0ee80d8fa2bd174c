"""Speed benchmark: pass order, ratio/drift arithmetic, and a short run against the fake server."""

import json

import pytest

from sglang_asd.bench import speed


def test_schedule_brackets_every_candidate_with_strict():
    assert speed.schedule([0.0, 2.0, 8.0]) == [0.0, 2.0, 0.0, 8.0, 0.0]
    assert speed.schedule([8.0]) == [0.0, 8.0, 0.0]
    assert speed.schedule([0.0]) == [0.0]


def _pass(budget, repeat, tok_s, accept=None):
    return {"budget": budget, "repeat": repeat, "tok_s": tok_s, "accept_length": accept, "verify_ct_mean": None,
            "spent_mean": None, "exceptions_mean": None, "applied_share": 1.0 if budget else None, "errors": 0,
            "fixed_work_ok": True, "not_applied_reasons": {}, "first_errors": []}


def test_summarize_ratio_uses_mean_of_both_baselines_and_median_over_repeats():
    passes = []
    # repeat 0: strict 100, B=8 110, strict 100, B=32 130, strict 90
    for b, t in [(0, 100), (8, 110), (0, 100), (32, 130), (0, 90)]:
        passes.append(_pass(float(b), 0, t, accept=3.0 if b == 0 else 3.5))
    # repeat 1: strict 100, B=8 120, strict 100, B=32 100, strict 110
    for b, t in [(0, 100), (8, 120), (0, 100), (32, 100), (0, 110)]:
        passes.append(_pass(float(b), 1, t, accept=3.0 if b == 0 else 3.5))
    rows = {r["budget"]: r for r in speed.summarize(passes, [0.0, 8.0, 32.0])}
    assert rows[8.0]["speedup_median"] == pytest.approx((1.1 + 1.2) / 2)
    assert rows[8.0]["drift_median"] == pytest.approx(0.0)
    r32 = [t["ratio"] for t in rows[32.0]["repeats"]]
    assert r32 == [pytest.approx(130 / 95), pytest.approx(100 / 105)]
    assert rows[32.0]["drift_median"] == pytest.approx((10 / 95 + 10 / 105) / 2)
    assert rows[8.0]["accept_length"] == 3.5 and rows[8.0]["baseline_accept_length"] == 3.0


def test_speed_run_against_fake_server(fake_server_url, tmp_path):
    rc = speed.main(["--url", fake_server_url, "--budgets", "0,8", "--dataset", "gsm8k,mtbench",
                     "--num-prompts", "4", "--max-new-tokens", "24", "--concurrency", "2", "--repeats", "1",
                     "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "speed.json").read_text())
    assert [p["budget"] for p in result["passes"]] == [0.0, 8.0, 0.0]
    assert all(p["fixed_work_ok"] and p["output_tokens"] == 4 * 24 for p in result["passes"])
    (row,) = result["budgets"]
    assert row["budget"] == 8.0
    assert row["speedup_median"] > 1.0          # the fake server's budget accepts 3 per round, strict 2
    assert row["accept_length"] == pytest.approx(3.0) and row["baseline_accept_length"] == pytest.approx(2.0)
    assert row["verify_ct_mean"] == 8 and row["baseline_verify_ct_mean"] == 12
    assert row["applied_share"] == 1.0 and row["spent_mean"] > 0
    assert result["server"]["speculative_algorithm"] == "FAKE"
    assert (tmp_path / "speed.md").read_text().startswith("# ASD speed at fixed work")
    assert (tmp_path / "speed.csv").read_text().splitlines()[0].startswith("budget,speedup_median")


def test_speed_rejects_bad_arguments(tmp_path):
    with pytest.raises(SystemExit, match="budgets"):
        speed.main(["--url", "http://127.0.0.1:9", "--budgets", "0,-1", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="tasks must be"):
        speed.main(["--url", "http://127.0.0.1:9", "--dataset", "imagenet", "--out", str(tmp_path)])


def test_speed_warnings():
    passes = [dict(_pass(0.0, 0, 100), verify_ct_mean=None, fixed_work_ok=False),
              dict(_pass(8.0, 0, 100), verify_ct_mean=None, applied_share=0.5,
                   not_applied_reasons={"sampling": 2}),
              dict(_pass(0.0, 0, 80), verify_ct_mean=None)]
    rows = speed.summarize(passes, [0.0, 8.0])
    w = " | ".join(speed.warnings_for(passes, rows))
    assert "did not produce exactly" in w
    assert "not running speculative decoding" in w
    assert "applied to 50% of requests (reasons: sampling)" in w
    assert "drift 22.2% > 5%" in w
