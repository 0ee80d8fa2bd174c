"""docs/measurements/issue13/ablation.py (issues 13 and 36: the table, the equal-spend comparisons and
the plot) on an audit and speed runs with every rule, run by the real tools against the fake server: one
row per rule and setting plus strict's noise floor, the paired statistics carried over from the audit,
the arm-against-arm comparisons recomputed from the logs, and the plot written. Plumbing only: the fake server's
rules are not SGLang's."""

import json
import math
import subprocess
import sys
from pathlib import Path

from sglang_asd.bench import audit, speed

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


def _round_prompt_rates(run: Path) -> dict:
    """(arm, repeat, round, prompt) -> that request's tok/s, straight from the speed run's log."""
    log = [json.loads(line) for line in (run / "speed_passes.jsonl").read_text().splitlines()]
    return {(p["arm"], p["repeat"], p["round"], r["tag"]): r["completion_tokens"] / r["latency_s"]
            for p in log if p.get("kind") == "pass" for r in p["requests"]}


def test_equal_spend_pairs_each_asd_setting_with_the_nearest_spending_rule(fake_server_url, tmp_path):
    rules = "asd=1|8,local=0.5|1,margin=0.5,threshold=0.5"
    assert audit.main(["--url", fake_server_url, "--budgets", "0", "--rules", rules, "--tasks", "gsm8k",
                       "--limit", "8", "--concurrency", "4", "--out", str(tmp_path / "audit")]) == 0
    work = ["--url", fake_server_url, "--rules", rules, "--concurrency", "2", "--schedule", "rounds", "--repeats", "1"]
    assert speed.main([*work, "--num-prompts", "4", "--max-new-tokens", "12", "--out", str(tmp_path / "speed")]) == 0
    assert speed.main([*work, "--num-prompts", "2", "--max-new-tokens", "24", "--out", str(tmp_path / "long")]) == 0
    r = subprocess.run([sys.executable, str(SCRIPT), "--audit", str(tmp_path / "audit" / "audit.json"),
                        "--speed", str(tmp_path / "speed" / "speed.json"),
                        "--speed-long", str(tmp_path / "long" / "speed.json"), "--out", str(tmp_path / "report")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "report" / "ablation.json").read_text())
    rows = {row["arm"]: row for row in report["rows"]}
    pairs = report["equal_spend"]
    # every asd setting meets every ledger-free rule once, at that rule's setting of nearest spend
    assert [(e["asd"], e["rule"]) for e in pairs] == [
        (a, rule) for a in sorted(("asd1", "asd8"), key=lambda a: rows[a]["spent"]) for rule in ("local", "margin", "threshold")]
    for e in pairs:
        candidates = [row for row in rows.values() if row["rule"] == e["rule"]]
        assert abs(rows[e["other"]]["spent"] - e["asd_spent"]) == min(abs(c["spent"] - e["asd_spent"]) for c in candidates)
    # accuracy: asd minus the other, paired by item, from the item log
    items = [json.loads(line) for line in (tmp_path / "audit" / "audit_items.jsonl").read_text().splitlines()]
    correct = {(i["arm"], i["tag"]): bool(i["correct"]) for i in items if i.get("kind") == "item"}
    for e in pairs:
        tags = sorted({t for a, t in correct if a == e["asd"]})
        diffs = [correct[(e["asd"], t)] - correct[(e["other"], t)] for t in tags]
        assert e["scored_pairs"] == 8 and abs(e["acc_delta"] - sum(diffs) / len(diffs)) < 1e-12
        assert (e["lost"], e["gained"]) == (diffs.count(-1), diffs.count(1))
    # the worst requests' spend, from the receipts
    for arm in ("asd1", "asd8", "local0.5", "local1"):
        spent = sorted(i["receipt"]["spent"] for i in items if i.get("kind") == "item" and i["arm"] == arm)
        assert len(spent) == 8 and rows[arm]["spent_max"] == spent[-1] and spent[0] <= rows[arm]["spent_p90"] <= spent[-1]
    # tok/s: asd over the other per round and prompt, geometric mean over prompts, in each run
    for name, run in (("short", "speed"), ("long", "long")):
        rates = _round_prompt_rates(tmp_path / run)
        for e in pairs:
            per_prompt = [rates[(e["asd"], *k[1:])] / rates[(e["other"], *k[1:])] for k in rates if k[0] == e["asd"]]
            assert len(per_prompt) == (4 if name == "short" else 2)
            assert abs(e[f"{name}_ratio"] - math.exp(sum(map(math.log, per_prompt)) / len(per_prompt))) < 1e-9
            lo, hi = e[f"{name}_ratio_ci"]
            assert lo <= e[f"{name}_ratio"] <= hi
    long_spent = {row["arm"]: row["long_spent"] for row in report["rows"]}
    assert long_spent["strict"] == 0.0 and all(long_spent[a] > 0 for a in ("asd1", "local1", "margin0.5"))
    md = (tmp_path / "report" / "ablation.md").read_text()
    assert "Long fixed work: 2 prompts x 24 tokens at concurrency 2" in md and "At equal spend" in md
    assert (tmp_path / "report" / "frontier_rules.png").stat().st_size > 10_000
