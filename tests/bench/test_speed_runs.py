"""The speed benchmark run against the fake server: arms, the plain server, a run stopped and
resumed, on another machine too, a pass that loses requests, both schedules end to end."""

import json

import pytest

from fake_server import FakeServer
from killed_run import kill_mid_write
from sglang_asd.bench import host, speed

def _four_passes_on_a_then_resume_on_b(args, monkeypatch):
    """Run ``args`` on machine host-a/1 until four passes are logged (the session ends), then resume
    it to the end on host-b/2 (16 CPUs)."""
    real_append = speed.RunLog.append

    def stop_after_four(self, record):
        real_append(self, record)
        if len([r for r in self.records if r.get("kind") == "pass"]) == 4:
            raise KeyboardInterrupt

    monkeypatch.setattr(host, "machine", lambda: {"id": "host-a/1", "cpu": "X", "cpus": 2})
    monkeypatch.setattr(speed.RunLog, "append", stop_after_four)
    with pytest.raises(KeyboardInterrupt):
        speed.main(args)
    monkeypatch.setattr(speed.RunLog, "append", real_append)
    monkeypatch.setattr(host, "machine", lambda: {"id": "host-b/2", "cpu": "Y", "cpus": 16})
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
    m = host.machine()
    assert m == host.machine() and m["cpus"] >= 1 and m["cpu"]
    node, boot = m["id"].rsplit("/", 1)
    assert len(boot) == 8 or boot == "?"


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
    kill_mid_write(monkeypatch, speed.RunLog, "pass", 4, '{"kind": "pass", "repeat": 0, "ind', speed.main,
                   args + ["--out", str(stopped)])
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
