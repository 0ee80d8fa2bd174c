"""Quality audit end to end against the fake server: scoring, divergence, report files, plot."""

import json

import pytest

from sglang_asd.bench import audit


def test_audit_against_fake_server(fake_server_url, tmp_path):
    rc = audit.main(["--url", fake_server_url, "--budgets", "8", "--tasks", "gsm8k,math500,mmlu,mtbench",
                     "--limit", "8", "--concurrency", "4", "--noise-floor", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "audit.json").read_text())
    rows = {(r["task"], r["budget"]): r for r in result["results"]}
    # strict is always run (0 was not asked for) and is the reference
    for task in ("gsm8k", "math500", "mmlu"):
        assert rows[(task, 0.0)]["accuracy"] == 1.0            # the fake server answers right at B=0
        assert rows[(task, 0.0)]["divergence_share"] == 0.0
        assert rows[(task, 8.0)]["accuracy"] < 1.0             # and wrong on some items at B=8
        assert rows[(task, 8.0)]["divergence_share"] == pytest.approx(1.0 - rows[(task, 8.0)]["accuracy"])
    mt = rows[("mtbench", 8.0)]
    assert mt["accuracy"] is None and mt["divergence_share"] == 1.0 and 0 < mt["similarity_mean"] < 1
    assert all(r["divergence_share"] == 0.0 for r in result["noise_floor"])
    by_budget = {r["budget"]: r for r in result["by_budget"]}
    assert by_budget[0.0]["accuracy_mean"] == 1.0 and by_budget[8.0]["accuracy_mean"] < 1.0
    items = [json.loads(line) for line in (tmp_path / "audit_items.jsonl").read_text().splitlines()]
    assert len(items) == 4 * 8 * 3 and all(i["hash"] for i in items)
    png = (tmp_path / "frontier.png").read_bytes()
    assert png[:4] == b"\x89PNG" and len(png) > 1000
    md = (tmp_path / "audit.md").read_text()
    assert "| gsm8k | 8 |" in md and "frontier.png" in md


def test_audit_code_task_uses_sandbox(fake_server_url, tmp_path):
    rc = audit.main(["--url", fake_server_url, "--budgets", "0", "--tasks", "humaneval", "--limit", "2",
                     "--out", str(tmp_path), "--exec-timeout", "5"])
    assert rc == 0
    items = [json.loads(line) for line in (tmp_path / "audit_items.jsonl").read_text().splitlines()]
    assert [i["correct"] for i in items] == [False, False]  # the fake server writes no code
    assert all(i["extracted"] == "failed" for i in items)


def test_audit_with_speed_json(fake_server_url, tmp_path):
    speed = tmp_path / "speed.json"
    speed.write_text(json.dumps({"budgets": [{"budget": 8.0, "speedup_median": 1.05}]}))
    rc = audit.main(["--url", fake_server_url, "--budgets", "0,8", "--tasks", "mmlu", "--limit", "4",
                     "--speed-json", str(speed), "--out", str(tmp_path / "out")])
    assert rc == 0
    result = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert [r["speedup"] for r in result["by_budget"]] == [1.0, 1.05]


def test_audit_warns_when_asd_is_not_applied():
    rows = [{"task": "gsm8k", "budget": 8.0, "errors": 0, "first_errors": [], "verify_ct_mean": None,
             "applied_share": 0.0, "not_applied_reasons": {"no_speculative_decoding": 3}}]
    w = audit.warnings_for(rows)
    assert any("not running speculative decoding" in x for x in w)
    assert any("applied to 0% of requests (reasons: no_speculative_decoding)" in x for x in w)
