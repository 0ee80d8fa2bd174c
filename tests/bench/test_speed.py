"""Speed benchmark: pass order, ratio/drift/interval arithmetic, and runs against the fake server
(arms, the plain server, a run stopped and resumed)."""

import json

import pytest

from fake_server import FakeServer
from sglang_asd.bench import speed, speed_summary
from sglang_asd.bench.arms import PLAIN_ARM, Arm, resolve_arms

ARMS = resolve_arms("0,8,32", None, "0")


def test_schedule_brackets_every_candidate_with_strict():
    assert speed_summary.schedule(ARMS) == ["strict", "b8", "strict", "b32", "strict"]
    assert speed_summary.schedule([ARMS[0], PLAIN_ARM, ARMS[1]]) == ["strict", "plain", "strict", "b8", "strict"]
    assert speed_summary.schedule(ARMS[:1]) == ["strict"]


def _pass(arm, repeat, index, tok_s, accept=None, rates=None):
    reqs = [{"tag": t, "ok": True, "completion_tokens": 100, "latency_s": 100 / r} for t, r in (rates or {}).items()]
    return {"kind": "pass", "arm": arm, "repeat": repeat, "index": index, "tok_s": tok_s, "accept_length": accept,
            "verify_ct_mean": None, "spent_mean": None, "exceptions_mean": None, "server": "speculative",
            "applied_share": 1.0 if arm != "strict" else None, "errors": 0, "fixed_work_ok": True,
            "not_applied_reasons": {}, "first_errors": [], "requests": reqs}


def _repeat(repeat, values):
    return [_pass(a, repeat, i, t, accept=3.0 if a == "strict" else 3.5) for i, (a, t) in enumerate(values)]


def test_ratio_uses_mean_of_both_baselines_and_median_over_repeats():
    passes = _repeat(0, [("strict", 100), ("b8", 110), ("strict", 100), ("b32", 130), ("strict", 90)])
    passes += _repeat(1, [("strict", 100), ("b8", 120), ("strict", 100), ("b32", 100), ("strict", 110)])
    rows = {r["arm"]: r for r in speed_summary.summarize(passes, ARMS)}
    assert rows["b8"]["speedup_median"] == pytest.approx((1.1 + 1.2) / 2)
    assert rows["b8"]["speedup_ci"] == (pytest.approx(1.1), pytest.approx(1.2))  # two repeats: [min, max]
    assert rows["b8"]["drift_median"] == pytest.approx(0.0) and rows["b8"]["repeats_n"] == 2
    assert rows["b32"]["ratios"] == [pytest.approx(130 / 95), pytest.approx(100 / 105)]
    assert rows["b32"]["drift_median"] == pytest.approx((10 / 95 + 10 / 105) / 2)
    assert rows["b8"]["accept_length"] == 3.5 and rows["b8"]["strict_accept_length"] == 3.0
    assert rows["strict"]["speedup_median"] == 1.0 and rows["strict"]["tok_s_median"] == 100


def test_one_repeat_shows_no_interval():
    assert speed.repeats_cell(1.137, (1.137, 1.137), 1) == "1.137 (1 repeat)"
    assert speed.repeats_cell(1.1, (1.05, 1.2), 3) == "1.100 [1.050, 1.200]"
    assert speed.repeats_cell(1.0, None, 1) == "1.000"       # strict: the reference, no interval
    assert speed.repeats_cell(None, None, 0) == "n/a"


def test_incomplete_trio_does_not_count():
    passes = _repeat(0, [("strict", 100), ("b8", 110), ("strict", 100), ("b32", 130)])  # b32 has no "after"
    rows = {r["arm"]: r for r in speed_summary.summarize(passes, ARMS)}
    assert rows["b8"]["repeats_n"] == 1 and rows["b32"]["repeats_n"] == 0
    assert rows["b32"]["speedup_median"] is None and rows["b32"]["speedup_ci"] is None


def _on(machine, passes):
    for p in passes:
        p["machine"] = machine
    return passes


def test_a_trio_pairs_passes_of_one_machine():
    """Machine A ran strict, b8, strict, b32 before the session ended; machine B (twice as fast)
    re-measures strict 2 for b32's trio. b8 keeps A's trio, b32 gets B's: no ratio mixes them."""
    a = _on("A", _repeat(0, [("strict", 100), ("b8", 110), ("strict", 100), ("b32", 130)]))
    b = _on("B", [_pass("strict", 0, 2, 200), _pass("b32", 0, 3, 250), _pass("strict", 0, 4, 200)])
    rows = {r["arm"]: r for r in speed_summary.summarize(a + b, ARMS)}
    assert rows["b8"]["ratios"] == [pytest.approx(1.1)] and rows["b32"]["ratios"] == [pytest.approx(1.25)]
    assert rows["b8"]["drift_median"] == 0 and rows["b32"]["drift_median"] == 0
    warning = next(w for w in speed_summary.warnings_for(a + b, list(rows.values())) if "machines" in w)
    assert warning.startswith("passes from 2 machines (A: 4, B: 3)")
    # a candidate whose neighbours ran on another machine has no trio
    mixed = _on("A", _repeat(0, [("strict", 100), ("b8", 110)])) + _on("B", [_pass("strict", 0, 2, 200)])
    assert speed_summary.trios(mixed, "b8") == []


def test_a_run_resumed_on_another_machine_remeasures_what_its_open_trio_lacks():
    order = speed_summary.schedule(ARMS)                    # strict b8 strict b32 strict
    a = _on("A", _repeat(0, [("strict", 100), ("b8", 110), ("strict", 100), ("b32", 130)]))
    assert speed_summary.passes_to_run(a, order, 1, "A") == [(0, 4)]
    assert speed_summary.passes_to_run(a, order, 1, "B") == [(0, 2), (0, 3), (0, 4)]
    assert speed_summary.passes_to_run(a, order, 2, "B") == [(0, 2), (0, 3), (0, 4), (1, 0), (1, 1), (1, 2),
                                                            (1, 3), (1, 4)]
    assert speed_summary.passes_to_run([], order, 1, None) == [(0, i) for i in range(5)]
    done = a + _on("B", [_pass("strict", 0, 2, 200), _pass("b32", 0, 3, 250), _pass("strict", 0, 4, 200)])
    assert speed_summary.passes_to_run(done, order, 1, "C") == []
    # strict alone: every strict pass not logged on this machine
    assert speed_summary.passes_to_run(a[:1], ["strict"], 2, "A") == [(1, 0)]


def _four_passes_on_a_then_resume_on_b(args, monkeypatch):
    """Run ``args`` on machine host-a/1 until four passes are logged (the session ends), then resume
    it to the end on host-b/2 (16 CPUs)."""
    from sglang_asd.bench import quiet

    real_append = speed.RunLog.append

    def stop_after_four(self, record):
        real_append(self, record)
        if len([r for r in self.records if r.get("kind") == "pass"]) == 4:
            raise KeyboardInterrupt

    monkeypatch.setattr(quiet, "machine", lambda: {"id": "host-a/1", "cpu": "X", "cpus": 2})
    monkeypatch.setattr(speed.RunLog, "append", stop_after_four)
    with pytest.raises(KeyboardInterrupt):
        speed.main(args)
    monkeypatch.setattr(speed.RunLog, "append", real_append)
    monkeypatch.setattr(quiet, "machine", lambda: {"id": "host-b/2", "cpu": "Y", "cpus": 16})
    assert speed.main(args + ["--resume"]) == 0


def test_speed_logs_the_machine_and_a_resume_elsewhere_completes_the_trio(fake_server_url, tmp_path, monkeypatch):
    args = ["--url", fake_server_url, "--budgets", "0,8,32", "--num-prompts", "2", "--max-new-tokens", "6",
            "--concurrency", "2", "--repeats", "1", "--schedule", "trios", "--out", str(tmp_path)]
    _four_passes_on_a_then_resume_on_b(args, monkeypatch)
    result = json.loads((tmp_path / "speed.json").read_text())
    ran = [(p["index"], p["machine"]) for p in result["passes"]]
    assert sorted(ran) == [(0, "host-a/1"), (1, "host-a/1"), (2, "host-a/1"), (2, "host-b/2"), (3, "host-a/1"),
                           (3, "host-b/2"), (4, "host-b/2")]
    assert result["complete"] == {"passes": 5, "planned": 5}
    assert [(m["id"], m["passes"]) for m in result["machines"]] == [("host-a/1", 4), ("host-b/2", 3)]
    assert [r["repeats_n"] for r in result["arms"]] == [1, 1, 1]
    md = (tmp_path / "speed.md").read_text()
    assert "machines: host-a/1 (X, 2 CPUs): 4 passes; host-b/2 (Y, 16 CPUs): 3 passes" in md
    assert "passes from 2 machines" in md


def test_machine_id_names_this_boot():
    from sglang_asd.bench import quiet

    m = quiet.machine()
    assert m == quiet.machine() and m["cpus"] >= 1 and m["cpu"]
    node, boot = m["id"].rsplit("/", 1)
    assert len(boot) == 8 or boot == "?"


def test_cpu_ratio_is_tokens_per_cpu_second_against_strict():
    passes = _repeat(0, [("strict", 100), ("b8", 50), ("strict", 100), ("b32", 100), ("strict", 100)])
    for p, cpt in zip(passes, [0.02, 0.015, 0.03, None, 0.02]):
        p["cpu_s_per_token"] = cpt
    rows = {r["arm"]: r for r in speed_summary.summarize(passes, ARMS)}
    # strict neighbours: 50 and 33.3 tokens per CPU-s, b8: 66.7 -> 66.7 / 41.67 = 1.6
    assert rows["b8"]["cpu_speedup_median"] == pytest.approx((1 / 0.015) / ((1 / 0.02 + 1 / 0.03) / 2))
    assert rows["b8"]["cpu_drift_median"] == pytest.approx(abs(50 - 100 / 3) / ((50 + 100 / 3) / 2))
    assert rows["b8"]["speedup_median"] == pytest.approx(0.5)       # wall clock and CPU time disagree here
    assert rows["b32"]["cpu_speedup_median"] is None and rows["b32"]["cpu_repeats_n"] == 0  # not measured
    assert rows["strict"]["cpu_s_per_token_median"] == pytest.approx(0.02)


def test_per_prompt_ratios_geometric_means():
    arms = resolve_arms("0,8", None, "0")
    passes = []
    for rep, cand in ((0, {"p1": 12.0, "p2": 10.0}), (1, {"p1": 13.0, "p2": 9.0})):
        passes += [_pass("strict", rep, 0, 10, rates={"p1": 10.0, "p2": 10.0}),
                   _pass("b8", rep, 1, 11, rates=cand),
                   _pass("strict", rep, 2, 10, rates={"p1": 10.0, "p2": 10.0})]
    (row,) = [r for r in speed_summary.summarize(passes, arms) if r["arm"] == "b8"]
    assert row["prompt_ratios"]["p1"] == pytest.approx((1.2 * 1.3) ** 0.5)
    assert row["prompt_ratios"]["p2"] == pytest.approx((1.0 * 0.9) ** 0.5)
    assert row["prompt_speedup"] == pytest.approx((1.2 * 1.3 * 1.0 * 0.9) ** 0.25)
    lo, hi = row["prompt_speedup_ci"]
    assert lo == pytest.approx((0.9) ** 0.5) and hi == pytest.approx((1.2 * 1.3) ** 0.5)  # two prompts: [min, max]
    assert row["prompts_n"] == 2


def test_speed_run_against_fake_server(fake_server_url, tmp_path):
    rc = speed.main(["--url", fake_server_url, "--budgets", "0,8", "--arms", "b8g05:asd_budget=8,asd_gate=0.5",
                     "--dataset", "gsm8k,mtbench", "--num-prompts", "4", "--max-new-tokens", "24",
                     "--concurrency", "2", "--repeats", "1", "--schedule", "trios", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "speed.json").read_text())
    assert [p["arm"] for p in result["passes"]] == ["strict", "b8", "strict", "b8g05", "strict"]
    assert result["passes"][3]["fields"] == {"asd_budget": 8, "asd_gate": 0.5}
    assert all(p["fixed_work_ok"] and p["output_tokens"] == 4 * 24 for p in result["passes"])
    assert result["complete"] == {"passes": 5, "planned": 5}
    rows = {r["arm"]: r for r in result["arms"]}
    assert list(rows) == ["strict", "b8", "b8g05"]
    b8 = rows["b8"]
    p = result["passes"]                       # the ratio is the candidate over its two strict neighbours
    assert b8["speedup_median"] == pytest.approx(p[1]["tok_s"] / ((p[0]["tok_s"] + p[2]["tok_s"]) / 2))
    assert b8["accept_length"] == pytest.approx(3.0) and b8["strict_accept_length"] == pytest.approx(2.0)
    assert b8["verify_ct_mean"] == 8 and b8["strict_verify_ct_mean"] == 12
    assert b8["applied_share"] == 1.0 and b8["spent_mean"] > 0 and b8["prompts_n"] == 4
    assert result["server"]["speculative_algorithm"] == "FAKE"
    md = (tmp_path / "speed.md").read_text()
    assert md.startswith("# ASD speed at fixed work") and "complete: 5 of 5 passes" in md
    assert (tmp_path / "speed.csv").read_text().splitlines()[0].startswith("arm,budget,fields,repeats_n")


def test_plain_server_is_its_own_arm(fake_server_url, tmp_path):
    with FakeServer(plain=True) as plain_url:
        rc = speed.main(["--url", fake_server_url, "--plain-url", plain_url, "--budgets", "0,8", "--num-prompts", "3",
                         "--max-new-tokens", "12", "--concurrency", "3", "--repeats", "1", "--schedule", "trios",
                         "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "speed.json").read_text())
    assert [(p["arm"], p["server"]) for p in result["passes"]] == [
        ("strict", "speculative"), ("plain", "plain"), ("strict", "speculative"), ("b8", "speculative"),
        ("strict", "speculative")]
    rows = {r["arm"]: r for r in result["arms"]}
    assert list(rows) == ["plain", "strict", "b8"]
    assert rows["plain"]["accept_length"] is None and rows["plain"]["verify_ct_mean"] is None
    p = result["passes"]                             # timings are not asserted, only their arithmetic
    assert rows["plain"]["speedup_median"] == pytest.approx(p[1]["tok_s"] / ((p[0]["tok_s"] + p[2]["tok_s"]) / 2))
    assert rows["plain"]["vs_plain"] == 1.0
    assert rows["b8"]["vs_plain"] == pytest.approx(p[3]["tok_s"] / p[1]["tok_s"])
    assert rows["plain"]["verify_ct_mean"] is None and rows["strict"]["verify_ct_mean"] == 6  # 12 tokens, 2/round
    assert result["passes"][1]["requests"][0]["completion_tokens"] == 12
    assert not any("plain server reports" in w for w in result["warnings"])


def test_stopped_run_resumes_to_the_same_result(fake_server_url, tmp_path, monkeypatch):
    args = ["--url", fake_server_url, "--budgets", "0,8,32", "--num-prompts", "3", "--max-new-tokens", "8",
            "--concurrency", "3", "--repeats", "2"]
    whole = tmp_path / "whole"
    assert speed.main(args + ["--out", str(whole)]) == 0

    stopped = tmp_path / "stopped"
    real_append = speed.RunLog.append

    def dying_append(self, record):
        if record.get("kind") == "pass" and len([r for r in self.records if r.get("kind") == "pass"]) == 4:
            with self.path.open("a") as f:
                f.write('{"kind": "pass", "repeat": 0, "ind')   # killed mid-write
            raise KeyboardInterrupt
        real_append(self, record)

    monkeypatch.setattr(speed.RunLog, "append", dying_append)
    with pytest.raises(KeyboardInterrupt):
        speed.main(args + ["--out", str(stopped)])
    monkeypatch.setattr(speed.RunLog, "append", real_append)
    assert speed.main(["--report-only", "--out", str(stopped)]) == 0
    partial = json.loads((stopped / "speed.json").read_text())
    assert partial["complete"] == {"passes": 4, "planned": 6}       # 3 prompts at concurrency 3: one round
    assert "PARTIAL: 4 of 6 passes" in (stopped / "speed.md").read_text()
    whole_server = json.loads((whole / "speed.json").read_text())["server"]
    assert partial["server"] == whole_server and whole_server["launch_command"] == "--model-path fake-model"

    with pytest.raises(SystemExit, match="already holds a run; pass --resume"):
        speed.main(args + ["--out", str(stopped)])
    with pytest.raises(SystemExit, match="max_new_tokens: stored 8, now 9"):
        speed.main(args[:-5] + ["9", "--concurrency", "3", "--repeats", "2", "--resume", "--out", str(stopped)])
    assert speed.main(args + ["--resume", "--out", str(stopped)]) == 0

    a, b = (json.loads((d / "speed.json").read_text()) for d in (whole, stopped))
    def key(p):
        return p["repeat"], p["index"], p["arm"], p["output_tokens"], p["verify_ct_mean"], p["spent_mean"]

    assert sorted(map(key, a["passes"])) == sorted(map(key, b["passes"]))
    assert b["complete"] == {"passes": 6, "planned": 6}
    assert [r["repeats_n"] for r in b["arms"]] == [r["repeats_n"] for r in a["arms"]] == [2, 2, 2]
    assert [r["accept_length"] for r in b["arms"]] == [r["accept_length"] for r in a["arms"]]


def test_speed_rejects_bad_arguments(tmp_path):
    with pytest.raises(SystemExit, match="budgets"):
        speed.main(["--url", "http://127.0.0.1:9", "--budgets", "0,-1", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="tasks must be"):
        speed.main(["--url", "http://127.0.0.1:9", "--dataset", "imagenet", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="field names must be asd_"):
        speed.main(["--url", "http://127.0.0.1:9", "--arms", "t:temperature=1", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--plain-launch without args needs --launch"):
        speed.main(["--url", "http://127.0.0.1:9", "--plain-launch", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="no run log at"):
        speed.main(["--report-only", "--out", str(tmp_path)])


def test_speed_warnings():
    passes = [dict(_pass("strict", 0, 0, 100), verify_ct_mean=None, fixed_work_ok=False),
              dict(_pass("b8", 0, 1, 100), verify_ct_mean=None, applied_share=0.5,
                   not_applied_reasons={"sampling": 2}),
              dict(_pass("strict", 0, 2, 80), verify_ct_mean=None)]
    rows = speed_summary.summarize(passes, resolve_arms("0,8", None, "0"))
    w = " | ".join(speed_summary.warnings_for(passes, rows))
    assert "did not produce exactly" in w
    assert "not running speculative decoding" in w
    assert "b8: ASD applied to 50% of requests (reasons: sampling)" in w
    assert "b8: median baseline drift 22.2% > 5%" in w


def test_arm_row_with_custom_fields_keeps_its_label():
    arm = Arm("m1", {"asd_rule": "margin", "asd_margin": 1.0})
    passes = [_pass("strict", 0, 0, 100), _pass("m1", 0, 1, 120), _pass("strict", 0, 2, 100)]
    row = speed_summary.arm_row(arm, passes)
    assert row["arm"] == "m1" and row["budget"] is None and row["speedup_median"] == pytest.approx(1.2)
    assert row["fields"] == "asd_rule=margin, asd_margin=1"


def test_an_arm_the_server_rejects_fails_before_anything_is_logged(fake_server_url, tmp_path):
    with pytest.raises(SystemExit, match=r"rejects arm big: HTTP 400: asd_budget must be a finite number in \[0, 64\]"):
        speed.main(["--url", fake_server_url, "--budgets", "0", "--arms", "big:asd_budget=100", "--num-prompts", "2",
                    "--max-new-tokens", "4", "--repeats", "1", "--out", str(tmp_path)])
    assert not (tmp_path / speed.LOG_NAME).exists()     # a corrected run starts fresh, no --resume needed


def test_a_pass_that_loses_requests_stops_the_run_and_resume_redoes_it(fake_server_url, tmp_path, monkeypatch):
    """A server that dies mid-run (as a watchdog-killed scheduler does) must not leave passes of
    connection errors marked done: the run exits 1 at the first lossy pass, the report counts only
    clean passes, and --resume redoes the lost pass."""
    args = ["--url", fake_server_url, "--budgets", "0,8", "--num-prompts", "3", "--max-new-tokens", "8",
            "--concurrency", "3", "--repeats", "2", "--out", str(tmp_path)]
    real_run_pass = speed.run_pass
    calls = []

    def crashing_run_pass(url, reqs, *a, **kw):
        p = real_run_pass(url, reqs, *a, **kw)
        calls.append(reqs[0].fields)
        if len(calls) == 3:   # the warm-up is call 1: the second measured pass loses a request
            p.results[1].ok, p.results[1].error = False, "ConnectionError: Remote end closed connection"
        return p

    monkeypatch.setattr(speed, "run_pass", crashing_run_pass)
    assert speed.main(args) == 1
    assert len(calls) == 3
    stopped = json.loads((tmp_path / "speed.json").read_text())
    assert stopped["complete"] == {"passes": 1, "planned": 4}   # one round of strict and b8 per repeat

    monkeypatch.setattr(speed, "run_pass", real_run_pass)
    assert speed.main(args + ["--resume"]) == 0
    result = json.loads((tmp_path / "speed.json").read_text())
    assert result["complete"] == {"passes": 4, "planned": 4}
    assert [p["errors"] for p in result["passes"]] == [0] * 4
    assert len(result["passes"]) == 4   # the lossy pass counts once, as its redo


# ---------------------------------------------------------------- the rounds schedule

def test_rounds_run_every_arm_once_per_round_rotated():
    arms = [ARMS[0], PLAIN_ARM, ARMS[1]]
    assert speed_summary.schedule(arms, rounds=3) == ["strict", "plain", "b8", "plain", "b8", "strict",
                                                      "b8", "strict", "plain"]
    assert speed_summary.schedule(arms, rounds=1) == ["strict", "plain", "b8"]
    assert [speed_summary.round_of(i, 3) for i in range(6)] == [0, 0, 0, 1, 1, 1]


def _round_pass(arm, repeat, round_, wall, prompts, machine="A", cpu=None, finished="2026-12-03T00:00:00"):
    """A round's pass over ``prompts`` (100 tokens each) in ``wall`` seconds, every request taking the whole wall."""
    reqs = [{"tag": t, "ok": True, "completion_tokens": 100, "latency_s": wall} for t in prompts]
    return dict(_pass(arm, repeat, 0, 100 * len(prompts) / wall), round=round_, machine=machine, wall_s=wall,
                output_tokens=100 * len(prompts), server_cpu_s=cpu, requests=reqs, finished=finished,
                cpu_s_per_token=cpu / (100 * len(prompts)) if cpu else None)


def test_a_round_pairs_an_arm_with_strict_on_the_same_prompts_and_a_repeat_sums_its_rounds():
    arms = resolve_arms("0,8", None, "0")
    passes = [_round_pass("strict", 0, 0, 10, ["p1"], cpu=20), _round_pass("b8", 0, 0, 8, ["p1"], cpu=18),
              _round_pass("b8", 0, 1, 30, ["p2"], cpu=50), _round_pass("strict", 0, 1, 20, ["p2"], cpu=40),
              # repeat 1 has round 0 only: its per-prompt ratio counts, its repeat ratio does not yet
              _round_pass("strict", 1, 0, 10, ["p1"]), _round_pass("b8", 1, 0, 5, ["p1"])]
    rows = {r["arm"]: r for r in speed_summary.summarize(passes, arms, rounds=2)}
    b8 = rows["b8"]
    assert b8["repeats_n"] == 1 and b8["rounds_n"] == 3
    assert b8["ratios"] == [pytest.approx((10 + 20) / (8 + 30))]           # summed walls, not mean of ratios
    assert b8["cpu_speedup_median"] == pytest.approx((20 + 40) / (18 + 50))
    assert b8["drift_median"] is None and b8["drifts"] == []               # one baseline per pair: no drift
    assert b8["prompt_ratios"] == {"p1": pytest.approx((10 / 8 * 10 / 5) ** 0.5), "p2": pytest.approx(20 / 30)}
    assert b8["tok_s_median"] == pytest.approx(200 / 38) and b8["strict_tok_s_median"] == pytest.approx(200 / 30)
    assert rows["strict"]["repeats_n"] == 1 and rows["strict"]["tok_s_median"] == pytest.approx(200 / 30)
    assert rows["strict"]["rounds_n"] == 3


def test_a_round_pairs_passes_of_one_machine_and_a_resume_elsewhere_completes_it():
    arms = resolve_arms("0,8,32", None, "0")
    order = speed_summary.schedule(arms, rounds=2)          # strict b8 b32 | b8 b32 strict
    a = [dict(_round_pass(arm, 0, k, 10, [f"p{k}"], machine="A"), index=i)
         for i, (arm, k) in enumerate([("strict", 0), ("b8", 0), ("b32", 0), ("b8", 1)])]
    # round 1 lacks b32 and strict on A: B runs its three passes; round 0 is settled
    assert speed_summary.passes_to_run(a, order, 1, "A", rounds=2) == [(0, 4), (0, 5)]
    assert speed_summary.passes_to_run(a, order, 1, "B", rounds=2) == [(0, 3), (0, 4), (0, 5)]
    assert speed_summary.passes_to_run([], order, 1, None, rounds=2) == [(0, i) for i in range(6)]
    b = [dict(_round_pass(arm, 0, 1, w, ["p1"], machine="B", finished="2026-12-04T00:00:00"), index=i)
         for i, arm, w in ((3, "b8", 4), (4, "b32", 5), (5, "strict", 8))]
    assert speed_summary.passes_to_run(a + b, order, 1, "C", rounds=2) == []
    pairs = speed_summary.round_pairs(a + b, "b8")
    assert [(s["machine"], c["machine"], c["round"]) for s, c in pairs] == [("A", "A", 0), ("B", "B", 1)]
    # A's b8 of round 1 has no strict on A: never paired with B's strict
    row = speed_summary.arm_row(arms[1], a + b, rounds=2)
    assert row["ratios"] == [pytest.approx((10 + 8) / (10 + 4))]


def test_speed_runs_rounds_against_fake_server(fake_server_url, tmp_path, monkeypatch):
    with FakeServer(plain=True) as plain_url:
        args = ["--url", fake_server_url, "--plain-url", plain_url, "--budgets", "0,8", "--num-prompts", "4",
                "--max-new-tokens", "6", "--concurrency", "2", "--repeats", "1", "--out", str(tmp_path)]
        _four_passes_on_a_then_resume_on_b(args, monkeypatch)
    result = json.loads((tmp_path / "speed.json").read_text())
    assert result["config"]["schedule"] == "rounds" and result["config"]["rounds"] == 2
    ran = [(p["round"], p["arm"], p["machine"], sorted(r["tag"] for r in p["requests"])) for p in result["passes"]]
    first, second = ran[0][3], ran[3][3]
    assert len(first) == len(second) == 2 and not set(first) & set(second)   # each round its own two prompts
    # machine A ran round 0 and round 1's first arm (plain); B re-ran plain and ran b8 and strict
    assert [(k, arm, m) for k, arm, m, _ in ran] == [
        (0, "strict", "host-a/1"), (0, "plain", "host-a/1"), (0, "b8", "host-a/1"),
        (1, "plain", "host-a/1"), (1, "plain", "host-b/2"), (1, "b8", "host-b/2"), (1, "strict", "host-b/2")]
    assert all(p["output_tokens"] == 2 * 6 and p["fixed_work_ok"] for p in result["passes"])
    assert result["complete"] == {"passes": 6, "planned": 6}
    rows = {r["arm"]: r for r in result["arms"]}
    assert [(a, r["repeats_n"], r["rounds_n"]) for a, r in rows.items()] == [
        ("plain", 1, 2), ("strict", 1, 2), ("b8", 1, 2)]
    p = {(x["round"], x["arm"], x["machine"]): x for x in result["passes"]}
    walls = lambda arm, m1: p[(0, arm, "host-a/1")]["wall_s"] + p[(1, arm, m1)]["wall_s"]  # noqa: E731
    assert rows["b8"]["speedup_median"] == pytest.approx(walls("strict", "host-b/2") / walls("b8", "host-b/2"))
    md = (tmp_path / "speed.md").read_text()
    assert "1 repeat(s) of 2 rounds of 2 prompt(s), every arm once per round" in md and "paired rounds" in md
    assert "baseline drift" not in md


def test_the_report_explains_its_two_ratios_only_where_a_batch_has_a_tail(fake_server_url, tmp_path):
    args = ["--url", fake_server_url, "--budgets", "0,8", "--num-prompts", "2", "--max-new-tokens", "4",
            "--repeats", "1"]
    for concurrency in (1, 2):
        out = tmp_path / f"c{concurrency}"
        assert speed.main(args + ["--concurrency", str(concurrency), "--out", str(out)]) == 0
        md = (out / "speed.md").read_text()
        assert ("the two ratios differ in kind" in md) == (concurrency > 1), concurrency


def test_a_trios_log_resumes_only_as_trios(fake_server_url, tmp_path):
    """Logs made before schedules existed hold no schedule: they are trio logs, and stay resumable."""
    args = ["--url", fake_server_url, "--budgets", "0,8", "--num-prompts", "2", "--max-new-tokens", "4",
            "--concurrency", "2", "--out", str(tmp_path)]
    assert speed.main(args + ["--repeats", "1", "--schedule", "trios"]) == 0
    header = json.loads((tmp_path / speed.LOG_NAME).read_text().splitlines()[0])
    assert "schedule" not in header["fingerprint"]
    with pytest.raises(SystemExit, match='schedule: stored null, now "rounds"'):
        speed.main(args + ["--repeats", "2", "--resume"])
    assert speed.main(args + ["--repeats", "2", "--schedule", "trios", "--resume"]) == 0
    assert json.loads((tmp_path / "speed.json").read_text())["complete"] == {"passes": 6, "planned": 6}


def test_the_report_says_when_its_interval_over_repeats_is_only_their_range():
    """A percentile bootstrap of the median over 2-5 repeats returns their lowest and highest ratio:
    the report names that range as such; over 30 repeats the interval is a narrower, real one."""
    from sglang_asd.bench.stats import bootstrap_ci

    def arm(name, ratios):
        return {"arm": name, "ratios": ratios, "speedup_ci": list(bootstrap_ci(ratios, "median"))}

    few = [arm("b8", [1.10, 1.15, 1.13]), arm("b2", [1.05, 1.08]), {"arm": "strict", "ratios": None,
                                                                     "speedup_ci": None}]
    note = speed.few_repeats_note(few)
    assert note is not None and note.startswith("With 2 or 3 repeats") and "of b8, b2 is" in note
    many = [arm("b8", [1.0 + 0.01 * (i % 10) for i in range(30)])]
    assert many[0]["speedup_ci"][0] > 1.0 and many[0]["speedup_ci"][1] < 1.09
    assert speed.few_repeats_note(many) is None
    assert speed.few_repeats_note([arm("b8", [1.1])]) is None  # one repeat: the cell says "(1 repeat)"
