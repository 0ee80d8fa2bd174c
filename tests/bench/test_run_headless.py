"""The headless locust runner: argument checks, and a short bounded run against the fake server."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "load_tests"))

import run_headless  # noqa: E402


def test_durations():
    assert run_headless.parse_duration("30s") == 30
    assert run_headless.parse_duration("2m") == 120
    assert run_headless.parse_duration("1h30m") == 5400
    assert run_headless.parse_duration("45") == 45
    for bad in ("", "abc", "5d"):
        with pytest.raises(ValueError, match="--run-time"):
            run_headless.parse_duration(bad)


def test_host_must_be_loopback_unless_allowed():
    assert run_headless.check_host("http://127.0.0.1:30000/", False) == "http://127.0.0.1:30000"
    assert run_headless.check_host("http://localhost:8000", False) == "http://localhost:8000"
    assert run_headless.check_host("http://[::1]:8000", False) == "http://[::1]:8000"
    with pytest.raises(ValueError, match="--allow-remote"):
        run_headless.check_host("http://10.0.0.5:30000", False)
    assert run_headless.check_host("http://10.0.0.5:30000", True) == "http://10.0.0.5:30000"
    with pytest.raises(ValueError, match="base URL"):
        run_headless.check_host("http://127.0.0.1:30000/generate", False)


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert run_headless.main(["--out", str(tmp_path), "--budget-mix", "0:-1"]) == 2
    assert "--budget-mix" in capsys.readouterr().err
    assert run_headless.main(["--out", str(tmp_path), "--users", "0"]) == 2


def test_short_run_against_fake_server(fake_server_url, tmp_path):
    rc = run_headless.main([
        "--host", fake_server_url, "--users", "2", "--spawn-rate", "2", "--run-time", "20s",
        "--max-requests", "12", "--budget-mix", "0:1,8:1", "--api-mix", "generate:1,chat:1,completions:1",
        "--stream-share", "0.5", "--max-new-tokens", "16", "--natural-max-new-tokens", "32",
        "--out", str(tmp_path), "--fail-on-error",
    ])
    log = (tmp_path / "locust.log").read_text()
    assert rc == 0, log
    s = json.loads((tmp_path / "summary.json").read_text())
    assert 12 <= s["requests"] <= 12 + 2 and s["errors"] == 0       # stopped by --max-requests
    assert s["duration_s"] < 20                                       # not by --run-time
    assert s["req_per_s"] > 0 and s["output_tok_per_s"] > 0
    assert s["e2e_s"]["p50"] > 0 and s["accept_length"] > 0
    assert {g["budget"] for g in s["by_budget"]} <= {0.0, 8.0}
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    fixed = [r for r in records if r["user"] == "fixed"]
    assert fixed and all(r["completion_tokens"] == 16 for r in fixed)
    assert (tmp_path / "summary.csv").read_text().startswith("group,requests,errors")
    assert (tmp_path / "locust_stats.csv").exists()
