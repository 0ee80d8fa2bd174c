"""CI smoke test of the load-test tooling against a real sglang-asd server.

Uses the ``asd_server_url`` fixture of tests/conftest.py (a server started with speculative
decoding). There is deliberately no fallback: without that fixture this test errors, it does not
skip. A few seconds: 2 users, at most 8 requests of 8 tokens, /generate and the OpenAI routes,
streaming and not, budgets 0 and 8.
"""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "load_tests"))

import run_headless  # noqa: E402


@pytest.mark.server
@pytest.mark.server_group("eagle")
def test_load_smoke(asd_server_url, tmp_path):
    rc = run_headless.main([
        "--host", asd_server_url, "--allow-remote", "--users", "2", "--spawn-rate", "2", "--run-time", "60s",
        "--max-requests", "8", "--budget-mix", "0:1,8:1", "--api-mix", "generate:1,chat:1,completions:1",
        "--stream-share", "0.5", "--max-new-tokens", "8", "--natural-max-new-tokens", "8",
        "--request-timeout", "120", "--out", str(tmp_path), "--fail-on-error",
    ])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert rc == 0, (summary["first_errors"], (tmp_path / "locust.log").read_text()[-3000:])
    assert summary["requests"] >= 8 and summary["errors"] == 0
    assert summary["req_per_s"] > 0 and summary["output_tok_per_s"] > 0
    assert summary["e2e_s"]["p50"] > 0
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert all(r["receipt"] is not None for r in records), "every response must carry an ASD receipt"
    strict = [r for r in records if r["budget"] == 0]
    assert all(r["receipt"]["applied"] is False for r in strict)
    fixed = [r for r in records if r["user"] == "fixed"]
    assert all(r["completion_tokens"] == 8 for r in fixed)
    assert summary["accept_length"] is not None, "no spec_verify_ct: is speculative decoding on?"
