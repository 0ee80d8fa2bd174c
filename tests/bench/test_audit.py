"""Quality audit end to end against the fake server: scoring, paired statistics, divergence, report
files, plot, a run stopped and resumed, and a published (gzipped) log resumed."""

import gzip
import json
from types import SimpleNamespace

import pytest

from killed_run import kill_mid_write
from sglang_asd.bench import audit, audit_report, audit_summary
from sglang_asd.bench.arms import Arm


def _items(path):
    return [r for r in map(json.loads, path.read_text().splitlines()) if r.get("kind") == "item"]


def test_audit_against_fake_server(fake_server_url, tmp_path):
    rc = audit.main(["--url", fake_server_url, "--budgets", "8", "--tasks", "gsm8k,math500,mmlu,mtbench",
                     "--limit", "8", "--concurrency", "4", "--noise-floor", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "audit.json").read_text())
    rows = {(r["task"], r["arm"]): r for r in result["results"]}
    # strict is always run (0 was not asked for) and is the reference
    for task in ("gsm8k", "math500", "mmlu"):
        strict, b8 = rows[(task, "strict")], rows[(task, "b8")]
        assert strict["accuracy"] == 1.0 and strict["divergence_share"] == 0.0   # right at B=0
        assert b8["accuracy"] < 1.0                                             # wrong on some items at B=8
        assert b8["divergence_share"] == pytest.approx(1.0 - b8["accuracy"])
        assert b8["lost"] == 8 - b8["correct"] and b8["gained"] == 0 and b8["scored_pairs"] == 8
        assert b8["acc_delta"] == pytest.approx(b8["accuracy"] - 1.0)
        lo, hi = b8["acc_delta_ci"]
        assert lo <= b8["acc_delta"] <= hi <= 0
    mt = rows[("mtbench", "b8")]
    assert mt["accuracy"] is None and mt["acc_delta"] is None and mt["mcnemar_p"] is None
    assert mt["divergence_share"] == 1.0 and 0 < mt["similarity_mean"] < 1
    floor = {r["task"]: r for r in result["noise_floor"]}
    assert all(r["divergence_share"] == 0.0 and r["lost"] in (0, None) for r in floor.values())
    assert floor["gsm8k"]["acc_delta"] == 0.0 and floor["mtbench"]["acc_delta"] is None
    by_arm = {r["arm"]: r for r in result["by_arm"]}
    assert list(by_arm) == ["strict", "b8", "strict-rerun"]
    b8 = by_arm["b8"]
    assert b8["scored_pairs"] == 24 and b8["pairs"] == 32 and b8["n"] == 32
    assert b8["mcnemar_p"] == pytest.approx(audit_summary.stats.mcnemar_exact(b8["lost"], 0))
    assert result["complete"] == {"items": 96, "planned": 96, "line": "complete: 96 of 96 items"}
    assert len(_items(tmp_path / "audit_items.jsonl")) == 4 * 8 * 3
    assert all(i["hash"] for i in _items(tmp_path / "audit_items.jsonl"))
    png = (tmp_path / "frontier.png").read_bytes()
    assert png[:4] == b"\x89PNG" and len(png) > 1000
    md = (tmp_path / "audit.md").read_text()
    assert "| gsm8k | b8 |" in md and "frontier.png" in md and "complete: 96 of 96 items" in md
    assert "| strict | asd_budget=0 | 32 |" in md and "reference" in md


def test_audit_arms_send_their_fields(fake_server_url, tmp_path):
    rc = audit.main(["--url", fake_server_url, "--budgets", "0", "--arms", "g05:asd_budget=8,asd_gate=0.5",
                     "--tasks", "mmlu", "--limit", "3", "--out", str(tmp_path)])
    assert rc == 0
    items = _items(tmp_path / "audit_items.jsonl")
    assert {(i["arm"], json.dumps(i["fields"], sort_keys=True)) for i in items} == {
        ("strict", '{"asd_budget": 0.0}'), ("g05", '{"asd_budget": 8, "asd_gate": 0.5}')}
    assert all(i["budget"] == 8.0 for i in items if i["arm"] == "g05")


def test_audit_code_task_uses_sandbox(fake_server_url, tmp_path):
    rc = audit.main(["--url", fake_server_url, "--budgets", "0", "--tasks", "humaneval", "--limit", "2",
                     "--out", str(tmp_path), "--exec-timeout", "5"])
    assert rc == 0
    items = _items(tmp_path / "audit_items.jsonl")
    assert [i["correct"] for i in items] == [False, False]  # the fake server writes no code
    assert all(i["extracted"] == "failed" for i in items)


def test_audit_with_speed_json(fake_server_url, tmp_path):
    speed = tmp_path / "speed.json"
    speed.write_text(json.dumps({"arms": [{"arm": "b8", "repeats_n": 3, "speedup_median": 1.05,
                                           "speedup_ci": [1.0, 1.1], "prompt_speedup": 1.04,
                                           "prompt_speedup_ci": [1.01, 1.07], "prompts_n": 16}]}))
    rc = audit.main(["--url", fake_server_url, "--budgets", "0,8", "--tasks", "mmlu", "--limit", "4",
                     "--speed-json", str(speed), "--out", str(tmp_path / "out")])
    assert rc == 0
    result = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert [r["speedup"] for r in result["by_arm"]] == [1.0, 1.04]   # 3 repeats: the per-prompt ratio


def test_stopped_audit_resumes_to_the_same_result(fake_server_url, tmp_path, monkeypatch):
    args = ["--url", fake_server_url, "--budgets", "0,8", "--tasks", "gsm8k,mmlu", "--limit", "6",
            "--concurrency", "2", "--noise-floor"]
    whole = tmp_path / "whole"
    assert audit.main(args + ["--out", str(whole)]) == 0

    stopped = tmp_path / "stopped"
    kill_mid_write(monkeypatch, audit.RunLog, "item", 9, '{"kind": "item", "arm": "b8", "ta', audit.main,
                   args + ["--out", str(stopped)])
    assert audit.main(["--report-only", "--out", str(stopped)]) == 0
    partial = json.loads((stopped / "audit.json").read_text())
    assert partial["complete"]["items"] == 9 and partial["complete"]["planned"] == 36
    assert "PARTIAL: 9 of 36 items" in (stopped / "audit.md").read_text()
    whole_server = json.loads((whole / "audit.json").read_text())["server"]
    assert partial["server"] == whole_server and whole_server["attention_backend"] == "fake"

    with pytest.raises(SystemExit, match="already holds a run; pass --resume"):
        audit.main(args + ["--out", str(stopped)])
    with pytest.raises(SystemExit, match="api: stored \"chat\", now \"generate\""):
        audit.main(args + ["--api", "generate", "--resume", "--out", str(stopped)])
    with pytest.raises(SystemExit, match="arm 'b8' sends"):
        audit.main(args[:3] + ["0", "--arms", "b8:asd_budget=4"] + args[4:] + ["--resume", "--out", str(stopped)])
    assert audit.main(args + ["--resume", "--out", str(stopped)]) == 0

    a, b = (json.loads((d / "audit.json").read_text()) for d in (whole, stopped))
    same = ("task", "arm", "n", "accuracy", "acc_delta", "acc_delta_ci", "lost", "gained", "mcnemar_p", "len_delta",
            "len_delta_ci", "divergence_share", "accept_length", "spent_mean")
    assert [{k: r[k] for k in same} for r in a["results"]] == [{k: r[k] for k in same} for r in b["results"]]
    assert [{k: r[k] for k in same[1:]} for r in a["by_arm"]] == [{k: r[k] for k in same[1:]} for r in b["by_arm"]]
    assert b["complete"]["line"] == "complete: 36 of 36 items"
    def keys(d):
        return sorted((i["arm"], i["task"], i["tag"], i["hash"]) for i in _items(d / "audit_items.jsonl"))

    assert keys(whole) == keys(stopped)


def test_resume_may_add_an_arm(fake_server_url, tmp_path):
    base = ["--url", fake_server_url, "--tasks", "mmlu", "--limit", "3", "--out", str(tmp_path)]
    assert audit.main(base + ["--budgets", "0,8"]) == 0
    assert audit.main(base + ["--budgets", "0,8,32", "--resume"]) == 0
    result = json.loads((tmp_path / "audit.json").read_text())
    assert [r["arm"] for r in result["by_arm"]] == ["strict", "b8", "b32"]
    assert len(_items(tmp_path / "audit_items.jsonl")) == 9       # strict and b8 were not re-run


def test_retried_item_replaces_its_failed_try_and_seeds_are_items_of_their_own():
    ok = {"arm": "b8", "task": "gsm8k", "tag": "x", "ok": True}  # logged before seeds (greedy): seed 0
    seeded = [dict(ok, seed=0, ok=False), dict(ok, seed=1), dict(ok, seed=0)]
    assert audit_summary.latest([dict(ok, ok=False), ok]) == {("b8", "gsm8k", "x", 0): ok}
    assert audit_summary.latest(seeded) == {("b8", "gsm8k", "x", 0): seeded[2], ("b8", "gsm8k", "x", 1): seeded[1]}


def test_audit_warns_when_asd_is_not_applied():
    rows = [{"task": "gsm8k", "arm": "b8", "budget": 8.0, "errors": 0, "first_errors": [], "verify_ct_mean": None,
             "applied_share": 0.0, "not_applied_reasons": {"no_speculative_decoding": 3}}]
    w = audit_summary.warnings_for(rows)
    assert any("not running speculative decoding" in x for x in w)
    assert any("applied to 0% of requests (reasons: no_speculative_decoding)" in x for x in w)


def test_noise_floor_label_is_reserved(tmp_path):
    with pytest.raises(SystemExit, match="reserved for --noise-floor"):
        audit.main(["--url", "http://127.0.0.1:9", "--arms", "strict-rerun:asd_budget=1", "--out", str(tmp_path)])
    assert audit.NOISE_ARM == Arm("strict-rerun", {"asd_budget": 0.0})


def test_an_arm_the_server_rejects_fails_before_anything_is_logged(fake_server_url, tmp_path):
    with pytest.raises(SystemExit, match="rejects arm big: HTTP 400: asd_budget must be"):
        audit.main(["--url", fake_server_url, "--budgets", "0", "--arms", "big:asd_budget=100", "--tasks", "mmlu",
                    "--limit", "2", "--out", str(tmp_path)])
    assert not (tmp_path / audit.LOG_NAME).exists()


def test_an_arm_that_loses_requests_stops_the_audit_and_resume_redoes_them(fake_server_url, tmp_path, monkeypatch):
    args = ["--url", fake_server_url, "--budgets", "0,8", "--tasks", "gsm8k", "--limit", "4",
            "--concurrency", "2", "--out", str(tmp_path)]
    real_run_pass = audit.run_pass

    def crashing_run_pass(url, reqs, *a, on_result=None, **kw):
        def lossy(i, result):
            if i == 2:
                result.ok, result.error = False, "ConnectionError: Remote end closed connection"
            on_result(i, result)
        return real_run_pass(url, reqs, *a, on_result=lossy, **kw)

    monkeypatch.setattr(audit, "run_pass", crashing_run_pass)
    assert audit.main(args) == 1
    stopped = json.loads((tmp_path / "audit.json").read_text())
    assert stopped["complete"]["items"] == 7 and stopped["complete"]["planned"] == 8   # the pass ran to its end

    monkeypatch.setattr(audit, "run_pass", real_run_pass)
    assert audit.main(args + ["--resume"]) == 0
    result = json.loads((tmp_path / "audit.json").read_text())
    assert result["complete"]["items"] == 8 and result["complete"]["planned"] == 8


def test_plan_is_task_then_item_major_with_every_arm_of_an_item_together():
    strict, b8 = Arm("strict", {"asd_budget": 0.0}), Arm("b8", {"asd_budget": 8.0})
    items = [SimpleNamespace(id=f"q{i}") for i in range(3)]
    done = {("strict", "gsm8k", "q0", 0), ("b8", "gsm8k", "q1", 0), ("strict", "mbpp", "q2", 0), ("b8", "mbpp", "q0", 0)}
    todo = [(t, a.label, p.id, s) for t, a, p, s in audit.plan([strict, b8], {"gsm8k": items, "mbpp": items[::-1]},
                                                                done)]
    assert todo == [("gsm8k", "b8", "q0", None), ("gsm8k", "strict", "q1", None), ("gsm8k", "strict", "q2", None),
                    ("gsm8k", "b8", "q2", None), ("mbpp", "b8", "q2", None), ("mbpp", "strict", "q1", None),
                    ("mbpp", "b8", "q1", None), ("mbpp", "strict", "q0", None)]
    # sampled: every (item, seed) with its arms together, seed by seed within an item
    todo = [(p.id, s, a.label) for _, a, p, s in audit.plan([strict, b8], {"gsm8k": items[:2]}, done, seeds=[0, 1])]
    assert todo == [("q0", 0, "b8"), ("q0", 1, "strict"), ("q0", 1, "b8"), ("q1", 0, "strict"), ("q1", 1, "strict"),
                    ("q1", 1, "b8")]


def test_every_task_runs_in_one_pass_and_each_finished_task_is_reported(fake_server_url, tmp_path, monkeypatch):
    """One pass for all tasks (the batch does not drain between them); the report is rewritten as each
    task completes, so a long audit shows its finished tasks while the last one runs."""
    passes, reports = [], []
    real_run_pass, real_write = audit.run_pass, audit.write

    def counting_run_pass(url, reqs, *a, **kw):
        passes.append(len(reqs))
        return real_run_pass(url, reqs, *a, **kw)

    def recording_write(result, out, speed):
        reports.append({r["task"]: r["n"] for r in result["results"] if r["arm"] == "b8"})
        return real_write(result, out, speed)

    monkeypatch.setattr(audit, "run_pass", counting_run_pass)
    monkeypatch.setattr(audit, "write", recording_write)
    args = ["--url", fake_server_url, "--budgets", "0,8", "--tasks", "gsm8k,mmlu", "--limit", "3",
            "--concurrency", "1", "--out", str(tmp_path)]
    assert audit.main(args) == 0
    assert passes == [12]   # 2 tasks x 3 items x 2 arms
    # gsm8k complete while mmlu runs, then the final report; a resume with nothing left sends nothing
    assert reports == [{"gsm8k": 3}, {"gsm8k": 3, "mmlu": 3}]
    assert audit.main(args + ["--resume"]) == 0
    assert passes == [12] and reports[-1] == {"gsm8k": 3, "mmlu": 3}


def test_report_at_a_smaller_limit_counts_only_its_items(fake_server_url, tmp_path):
    """A log that a --limit 4 resume has grown, reported with --limit 2, is the --limit 2 run's report."""
    base = ["--url", fake_server_url, "--tasks", "gsm8k,mmlu", "--budgets", "0,8", "--concurrency", "2"]
    small, grown = tmp_path / "small", tmp_path / "grown"
    assert audit.main(base + ["--limit", "2", "--out", str(small)]) == 0
    assert audit.main(base + ["--limit", "2", "--out", str(grown)]) == 0
    assert audit.main(base + ["--limit", "4", "--resume", "--out", str(grown)]) == 0
    assert json.loads((grown / "audit.json").read_text())["complete"]["line"] == "complete: 16 of 16 items"
    assert audit.main(["--report-only", "--limit", "2", "--out", str(grown)]) == 0
    a, b = (json.loads((d / "audit.json").read_text()) for d in (small, grown))
    assert b["complete"]["line"] == "complete: 8 of 8 items"
    same = ("task", "arm", "n", "accuracy", "acc_delta", "lost", "gained", "len_delta", "accept_length")
    assert [{k: r[k] for k in same} for r in a["results"]] == [{k: r[k] for k in same} for r in b["results"]]
    assert [r["n"] for r in b["results"]] == [2, 2, 2, 2]


def test_the_report_gives_the_logged_concurrency(fake_server_url, tmp_path):
    base = ["--url", fake_server_url, "--tasks", "mmlu", "--budgets", "0", "--out", str(tmp_path)]
    assert audit.main(base + ["--limit", "2", "--concurrency", "3"]) == 0
    assert audit.main(["--report-only", "--out", str(tmp_path)]) == 0  # the CLI default (8) is not the run's
    assert "concurrency 3." in (tmp_path / "audit.md").read_text()
    assert audit.main(base + ["--limit", "4", "--concurrency", "5", "--resume"]) == 0
    assert json.loads((tmp_path / "audit.json").read_text())["config"]["concurrency"] == [3, 5]
    assert "concurrency 3, 5 (a resume changed it)." in (tmp_path / "audit.md").read_text()
    assert audit.logged_concurrency([{"kind": "plan", "arms": []}]) is None  # a log from before the field
    # a log resumed after the field existed: the older runs stay "not logged", not silently the newer value
    assert audit.logged_concurrency([{"kind": "plan"}, {"kind": "plan", "concurrency": 24}]) == [24, None]
    assert audit_report._concurrency([24, None]) == "24; earlier runs did not log it"
    assert audit_report._concurrency([3, 5, None]) == "3, 5 (a resume changed it); earlier runs did not log it"
    assert audit_report._concurrency([3, 5]) == "3, 5 (a resume changed it)"
    assert audit_report._concurrency(None) == "not logged" and audit_report._concurrency(24) == "24"


def test_a_published_gzipped_log_reports_and_resumes(fake_server_url, tmp_path):
    """The form docs/measurements/publish.sh commits (audit_items.jsonl.gz alone): --report-only reads
    it, and --resume continues it in a live plain log beside it."""
    base = ["--url", fake_server_url, "--tasks", "mmlu", "--out", str(tmp_path), "--budgets", "0,8"]
    assert audit.main(base + ["--limit", "2"]) == 0
    log = tmp_path / "audit_items.jsonl"
    (tmp_path / "audit_items.jsonl.gz").write_bytes(gzip.compress(log.read_bytes()))
    log.unlink()
    (tmp_path / "audit.json").unlink()
    assert audit.main(["--report-only", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "audit.json").read_text())["complete"]["line"] == "complete: 4 of 4 items"
    assert not log.exists()
    with pytest.raises(SystemExit, match=r"audit_items\.jsonl\.gz already holds a run; pass --resume"):
        audit.main(base + ["--limit", "3"])
    assert audit.main(base + ["--limit", "3", "--resume"]) == 0
    assert len(_items(log)) == 6                  # the 4 published items, and only the 2 new ones decoded
    assert json.loads((tmp_path / "audit.json").read_text())["complete"]["line"] == "complete: 6 of 6 items"
