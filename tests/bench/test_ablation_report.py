"""docs/measurements/issue13/ablation.py (issue 13's table and plot) on an audit with every rule,
run against the fake server: one row per rule and setting plus strict's noise floor, the paired
statistics carried over from the audit, and the plot written. Plumbing only: the fake server's
rules are not SGLang's."""

import json
import subprocess
import sys
from pathlib import Path

from sglang_asd.bench import audit

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "measurements" / "issue13" / "ablation.py"


def test_ablation_table_has_every_rule_with_the_audits_paired_statistics(fake_server_url, tmp_path):
    assert audit.main(["--url", fake_server_url, "--budgets", "0", "--rules", "asd=8,local=1,margin=0.5,threshold=0.5",
                       "--tasks", "gsm8k", "--limit", "8", "--concurrency", "4", "--noise-floor",
                       "--out", str(tmp_path / "audit")]) == 0
    r = subprocess.run([sys.executable, str(SCRIPT), "--audit", str(tmp_path / "audit" / "audit.json"),
                        "--out", str(tmp_path / "report")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "report" / "ablation.json").read_text())["rows"]
    by_arm = {row["arm"]: row for row in rows}
    assert {row["rule"] for row in rows} == {"strict", "asd", "local", "margin", "threshold"}
    assert set(by_arm) == {"strict", "strict-rerun", "asd8", "local1", "margin0.5", "threshold0.5"}
    assert (by_arm["margin0.5"]["knob"], by_arm["margin0.5"]["value"]) == ("asd_margin", 0.5)
    stats = {a["arm"]: a for a in json.loads((tmp_path / "audit" / "audit.json").read_text())["by_arm"]}
    for arm, row in by_arm.items():
        assert row["n"] == 8
        assert row["acc_delta"] == stats[arm].get("acc_delta") and row["acc_delta_ci"] == stats[arm].get("acc_delta_ci")
    assert by_arm["asd8"]["acc_delta"] < 0 == by_arm["strict-rerun"]["acc_delta"]   # the fake's budget >= 8 errs
    assert (tmp_path / "report" / "frontier_rules.png").stat().st_size > 10_000
    assert "| local | asd_budget=1 | 8 |" in (tmp_path / "report" / "ablation.md").read_text()
