"""``python -m sglang_asd.calibrate``: the intervals, the verdicts and the recommendation on planted
answers, the quick recipe, the report and its server settings, bad inputs, a run stopped and resumed
against the fake server, and one end-to-end run against a real tiny CPU server (``server``)."""

import json
import math

import pytest

from fake_server import _wrong
from killed_run import kill_mid_write
from sglang_asd.bench import calibrate, calibrate_report, calibrate_summary, datasets, stats
from sglang_asd.bench.arms import STRICT_ARM, Arm
from sglang_asd.bench.calibrate_summary import MEETS, MISSES, UNSURE, Targets

Z2 = 1.959963984540054 ** 2
B8 = Arm("b8", {"asd_budget": 8.0})
B2 = Arm("b2", {"asd_budget": 2.0})


# ---------------------------------------------------------------- intervals


def test_score_intervals_have_width_where_every_pair_agrees():
    for n in (4, 100, 400):
        lo, hi = stats.paired_proportion_diff_ci(0, 0, n)
        assert lo == pytest.approx(-Z2 / (n + Z2)) and hi == pytest.approx(Z2 / (n + Z2))
        assert stats.wilson_ci(n, n)[0] == pytest.approx(n / (n + Z2)) and stats.wilson_ci(n, n)[1] == 1.0
    assert stats.bootstrap_ci([0.0] * 4) == (0.0, 0.0)   # what a bootstrap says instead


def test_tango_interval_bounds_are_where_the_score_test_turns():
    lo, hi = stats.paired_proportion_diff_ci(5, 1, 100)        # 5 lost, 1 gained: -4 points
    assert lo < -0.04 < hi and -0.11 < lo < -0.09 and 0.0 < hi < 0.02
    assert stats.paired_proportion_diff_ci(3, 3, 50) == pytest.approx((-stats.paired_proportion_diff_ci(3, 3, 50)[1],
                                                                      stats.paired_proportion_diff_ci(3, 3, 50)[1]))
    narrow, wide = stats.paired_proportion_diff_ci(2, 0, 400, 0.8), stats.paired_proportion_diff_ci(2, 0, 400, 0.99)
    assert wide[0] < narrow[0] and narrow[1] < wide[1]
    with pytest.raises(ValueError, match="lost \\+ gained must be <= n"):
        stats.paired_proportion_diff_ci(3, 2, 4)


# ---------------------------------------------------------------- planted answers


def _items(arm: Arm, n: int, wrong=(), differ=(), longer=(), answer_differs=(), task="prompts") -> list[dict]:
    """``n`` answered prompts of ``task`` under ``arm``: correct except ``wrong``, text differing from
    strict's on ``differ``, 10% longer on ``longer``, another final answer on ``answer_differs``."""
    out = []
    for i in range(n):
        tag = f"p{i}"
        out.append({"kind": "item", "arm": arm.label, "fields": dict(arm.fields), "task": task, "tag": tag,
                    "seed": None, "ok": True, "text": "x", "completion_tokens": 110 if i in longer else 100,
                    "spec_verify_ct": 40, "receipt": {"applied": arm.label != "strict", "spent": 0.5 * (i % 3)},
                    "correct": i not in wrong, "answer": f"a{i}" + ("'" if i in answer_differs else ""),
                    "hash": f"h{i}" + ("'" if i in differ or i in answer_differs else ""),
                    "first_event_pos": 7 if i in differ else None})
    return out


def _speed_row(arm: str, value: float, ci) -> dict:
    return {"arm": arm, "repeats_n": 1, "prompt_speedup": value, "prompt_speedup_ci": ci, "prompts_n": 4,
            "accept_length": 3.0, "prompt_accept_ratio": 1.2}


def _rows(items, arms, speeds, targets):
    quality = calibrate_summary.quality_rows(items, arms, targets.confidence)
    rows = calibrate_summary.combine(quality, [{"arm": "strict", "accept_length": 2.5}] + speeds, arms)
    return rows, calibrate_summary.recommend(rows, targets)


def test_recommends_the_fastest_setting_whose_interval_meets_the_target():
    n = 500
    items = (_items(STRICT_ARM, n) + _items(B2, n, differ=range(50))
             + _items(B8, n, wrong=range(40), differ=range(200)))   # b8: 8 points worse
    targets = Targets(max_accuracy_drop=1.0)
    rows, rec = _rows(items, [STRICT_ARM, B2, B8],
                      [_speed_row("b2", 1.08, [1.05, 1.11]), _speed_row("b8", 1.16, [1.12, 1.2])], targets)
    by = {r["arm"]: r for r in rows}
    assert by["b2"]["acc_delta"] == 0 and by["b2"]["acc_delta_ci"][0] > -0.01
    assert by["b8"]["acc_delta"] == pytest.approx(-0.08) and by["b8"]["lost"] == 40
    assert by["b8"]["acc_delta_ci"][1] < -0.01                    # the faster one misses for sure
    assert rec["found"] and rec["arm"] == "b2" and "fastest setting whose intervals meet" in rec["why"]
    verdicts = {v["arm"]: v["criteria"][0]["verdict"] for v in rec["settings"]}
    assert verdicts == {"b2": MEETS, "b8": MISSES}
    assert by["b2"]["divergence_share"] == 0.1 and by["b2"]["first_divergence"] == 7
    assert by["b8"]["spent_max"] == 1.0 and by["b8"]["spent_mean"] == pytest.approx(0.5, abs=0.01)


def test_a_pooled_accuracy_verdict_names_the_task_it_does_not_hold_on():
    """Two tasks: b2 gains 20 points on one and loses 3 on the other. Pooled it meets a 1-point target
    and is recommended; the recommendation and the verdicts say that on the second task alone it
    misses. A run of one task has no per-task verdicts."""
    n = 500
    items = (_items(STRICT_ARM, n, wrong=range(100), task="math") + _items(STRICT_ARM, n, task="code")
             + _items(B2, n, task="math") + _items(B2, n, wrong=range(15), task="code"))
    targets = Targets(max_accuracy_drop=1.0)
    rows, rec = _rows(items, [STRICT_ARM, B2], [_speed_row("b2", 1.08, [1.05, 1.11])], targets)
    b2 = {r["arm"]: r for r in rows}["b2"]
    assert b2["acc_delta"] == pytest.approx(0.085) and b2["acc_delta_ci"][0] > 0
    assert b2["acc_by_task"]["code"]["acc_delta"] == pytest.approx(-0.03) and b2["acc_by_task"]["code"]["lost"] == 15
    (acc,) = rec["settings"][0]["criteria"]
    assert acc["verdict"] == MEETS
    assert {t: c["verdict"] for t, c in acc["by_task"].items()} == {"code": MISSES, "math": MEETS}
    assert rec["found"] and rec["arm"] == "b2"
    assert "not on code alone (accuracy change -3.0" in rec["why"] and "math alone" not in rec["why"]
    one_task = _items(STRICT_ARM, n) + _items(B2, n, wrong=range(15))
    _, rec1 = _rows(one_task, [STRICT_ARM, B2], [_speed_row("b2", 1.08, [1.05, 1.11])], targets)
    assert "by_task" not in rec1["settings"][0]["criteria"][0] and "alone" not in rec1["why"]


def test_none_meets_and_too_few_prompts_is_the_answer():
    items = _items(STRICT_ARM, 4) + _items(B8, 4)               # four identical answers
    targets = Targets(min_agreement=0.95)
    rows, rec = _rows(items, [STRICT_ARM, B8], [_speed_row("b8", 1.3, [1.1, 1.5])], targets)
    assert not rec["found"] and rec["arm"] == "strict"
    (c,) = rec["settings"][0]["criteria"]
    assert c["verdict"] == UNSURE and c["ci"][0] == pytest.approx(4 / (4 + Z2))
    need = calibrate_summary.needed_prompts("agreement", 0.95, 0.95)
    assert need == math.ceil(0.95 * Z2 / 0.05) == 73
    assert "too few prompts to tell" in rec["why"] and f"at least {need} prompts" in rec["why"]
    assert "keep budget 0" in rec["why"]


def test_agreement_and_length_targets_on_enough_prompts():
    n = 400
    items = (_items(STRICT_ARM, n) + _items(B2, n, differ=range(20), longer=range(4))
             + _items(B8, n, answer_differs=range(60), longer=range(200)))
    targets = Targets(min_agreement=0.95, max_length_change=0.03)
    rows, rec = _rows(items, [STRICT_ARM, B2, B8],
                      [_speed_row("b2", 1.05, [1.0, 1.1]), _speed_row("b8", 1.2, [1.1, 1.3])], targets)
    by = {v["arm"]: {c["name"]: c["verdict"] for c in v["criteria"]} for v in rec["settings"]}
    assert by["b2"] == {"agreement": MEETS, "length": MEETS}     # 100% same answer, +0.1% length
    assert by["b8"] == {"agreement": MISSES, "length": MISSES}   # 85% same answer, +5% length
    assert rec["arm"] == "b2"


def test_unchanged_lengths_do_not_prove_a_length_bound_from_few_prompts():
    items = _items(STRICT_ARM, 4) + _items(B8, 4)
    row = calibrate_summary.quality_rows(items, [STRICT_ARM, B8], 0.95)[1]
    assert row["length_change"] == 0 and row["length_changed"] == 0
    assert row["length_change_ci"] == pytest.approx((-Z2 / (4 + Z2), Z2 / (4 + Z2)))
    (c,) = calibrate_summary.criteria(row, Targets(max_length_change=0.03))
    assert c["verdict"] == UNSURE


def test_a_setting_that_meets_but_is_not_faster_leaves_strict():
    items = _items(STRICT_ARM, 500) + _items(B2, 500)
    rows, rec = _rows(items, [STRICT_ARM, B2], [_speed_row("b2", 0.97, [0.95, 0.99])], Targets(min_agreement=0.95))
    assert rec["settings"][0]["meets"] and rec["arm"] == "strict" and "no faster than strict" in rec["why"]


def test_targets_are_validated():
    for kwargs, flag in (({"confidence": 1.0}, "--confidence"), ({"min_agreement": 1.5}, "--min-agreement"),
                         ({"max_accuracy_drop": -1}, "--max-accuracy-drop"),
                         ({"max_length_change": 0}, "--max-length-change")):
        with pytest.raises(ValueError, match=flag):
            Targets(**kwargs)


# ---------------------------------------------------------------- the report and the server settings


def test_server_settings_of_a_setting():
    s = calibrate_report.server_settings({"asd_budget": 8.0, "asd_gate": 0.25, "asd_max_exceptions_per_block": 1})
    assert s["flags"] == "--asd-default-budget 8 --asd-gate 0.25 --asd-max-exceptions-per-block 1"
    assert s["yaml"] == ["asd-default-budget: 8", "asd-gate: 0.25", "asd-max-exceptions-per-block: 1"]
    assert calibrate_report.server_settings({"asd_budget": 100.0})["flags"].endswith("--asd-max-budget 100")



def test_a_per_token_setting_maps_to_the_servers_default_rate_and_its_flags_parse():
    from sglang_asd.bench.arms import parse_arms
    from sglang_asd.server_settings import split_argv

    (arm,) = parse_arms("pt02:asd_budget_per_token=0.02,asd_budget_burst=0.5")
    assert arm.fields == {"asd_budget_per_token": 0.02, "asd_budget_burst": 0.5} and arm.budget is None
    s = calibrate_report.server_settings(dict(arm.fields))
    assert s["flags"] == "--asd-budget-per-token 0.02 --asd-budget-burst 0.5"
    settings, rest = split_argv(s["flags"].split())
    assert (settings.budget_per_token, settings.budget_burst, rest) == (0.02, 0.5, [])
    assert calibrate_report.server_settings({"asd_budget_per_token": 2.0})["flags"].endswith(
        "--asd-max-budget-per-token 2")


# ---------------------------------------------------------------- the quick recipe


def _probe(tag, regret, pos=10, gate=1.0):
    return {"kind": "probe", "task": "prompts", "tag": tag, "seed": None, "ok": True, "pos": pos, "regret": regret,
            "draft": 5, "gate": gate}


def _search(tag, q, admitted):
    return {"kind": "search", "task": "prompts", "tag": tag, "seed": None, "q": q, "admitted": admitted}


def test_suffix_value_search_narrows_to_the_largest_admitted_q():
    p = _probe("a", 0.3, gate=0.25)              # admitted at gate 0.25: q >= 0.3 / 0.25, so q >= 2
    st = calibrate_summary.probe_state(p, [], 5)       # up to K + 1, to catch a server deeper than it says
    assert (st["lo"], st["hi"], st["next"]) == (2, 6, 4)
    st = calibrate_summary.probe_state(p, [_search("a", 4, False)], 5)
    assert (st["lo"], st["hi"], st["next"]) == (2, 3, 3)
    st = calibrate_summary.probe_state(p, [_search("a", 4, False), _search("a", 3, True)], 5)
    assert (st["lo"], st["hi"], st["next"]) == (3, 3, None)
    assert calibrate_summary.probe_state(p, [_search("a", 4, None)], 5)["inconclusive"]
    deep = calibrate_summary.probe_state(p, [_search("a", 4, True), _search("a", 5, True), _search("a", 6, True)], 5)
    assert deep["beyond_k"] and deep["next"] is None
    # the retest gate admits r at suffix value q and not at q - 1
    g = calibrate_summary.search_gate(0.3, 3, 0.25)
    assert 0.3 / 3 <= g < 0.3 / 2


def test_quick_recipe_is_the_25th_percentile_of_regret_per_suffix_value():
    probes = [_probe(f"p{i}", r) for i, r in enumerate((0.1, 0.4, 0.9, 1.6, 0.5))]
    searches = [_search("p0", 2, False), _search("p1", 2, True), _search("p1", 3, False), _search("p2", 3, True),
                _search("p2", 4, False), _search("p3", 2, True), _search("p3", 3, True), _search("p3", 4, False),
                _search("p4", 2, None), _search("p5", 3, True), _search("p5", 4, True)]
    probes += [_probe("none", None), _probe("tie", 0.0), _probe("p5", 0.2)]
    q = calibrate_summary.quick_recipe(probes, searches, 3)
    assert q["beyond_k"] == 1                                # p5: admitted at suffix value 4 > K = 3
    ratios = sorted(v["ratio"] for v in q["values"])       # 0.1/1, 0.4/2, 0.9/3, 1.6/3; p4 inconclusive
    assert ratios == pytest.approx(sorted([0.1, 0.2, 0.3, 1.6 / 3]))
    assert q["ratio_q25"] == pytest.approx(stats.percentile(ratios, 25)) == pytest.approx(0.175)
    assert q["gate"] == q["ratio_q25"] and q["budget"] == pytest.approx(3 * 0.175)
    assert q["fields"] == {"asd_budget": 0.525, "asd_gate": 0.175, "asd_max_exceptions_per_block": 1}
    assert (q["without_exception"], q["zero_regret"], q["inconclusive"]) == (1, 1, 1)
    text = calibrate_report.quick_markdown({**q, "settings": calibrate_report.server_settings(q["fields"])})
    assert "does not measure" in text and "--asd-gate 0.175" in text and "wide `--asd-gate`" in text


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("line,problem", [
    ('{"prompt": "a"', "not JSON"),
    ('["a"]', 'must be a JSON object with a "prompt"'),
    ('{"text": "a"}', "unknown key(s) 'text'"),
    ('{"prompt": ""}', '"prompt" must be a non-empty string'),
    ('{"prompt": "b", "id": "one"}', "id 'one' already used on line 1"),
    ('{"prompt": "b", "reference": [1]}', '"reference" must be a string or a number'),
    ('{"prompt": "b", "max_new_tokens": 0}', '"max_new_tokens" must be an integer >= 1'),
])
def test_a_bad_prompt_file_names_file_line_and_problem(tmp_path, line, problem):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"id": "one", "prompt": "a", "reference": 3}\n' + line + "\n")
    with pytest.raises(ValueError) as e:
        datasets.load_prompt_file(path, 64)
    assert str(e.value).startswith(f"{path} line 2: ") and problem in str(e.value)


def test_prompt_file_and_cli_errors(tmp_path, capsys):
    good = tmp_path / "p.jsonl"
    good.write_text('{"prompt": "What is 2+2?", "reference": 4}\n\n{"id": 7, "prompt": "Hi", "max_new_tokens": 8}\n')
    ps = datasets.load_prompt_file(good, 64)
    assert [(p.id, p.max_new_tokens, p.item.get("answer")) for p in ps] == [("line1", 64, "4"), ("7", 8, None)]
    with pytest.raises(ValueError, match="no prompts"):
        (tmp_path / "e.jsonl").write_text("\n")
        datasets.load_prompt_file(tmp_path / "e.jsonl", 64)
    with pytest.raises(ValueError, match="no such file"):
        datasets.load_prompt_file(tmp_path / "missing.jsonl", 64)
    base = ["--url", "http://127.0.0.1:9", "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit, match="1 prompt\\(s\\) have a reference: name .* --scorer"):
        calibrate.main(base + ["--prompts", str(good)])
    nolabels = tmp_path / "n.jsonl"
    nolabels.write_text('{"prompt": "Hi"}\n')
    with pytest.raises(SystemExit, match="--max-accuracy-drop needs prompts with references"):
        calibrate.main(base + ["--prompts", str(nolabels), "--max-accuracy-drop", "1"])
    with pytest.raises(SystemExit, match="--gates must be > 0"):
        calibrate.main(base + ["--prompts", str(nolabels), "--gates", "0,0.25"])
    with pytest.raises(SystemExit, match="cannot reach the server at http://127.0.0.1:9"):
        calibrate.main(base + ["--prompts", str(nolabels), "--budgets", "0,8"])


# ---------------------------------------------------------------- against the fake server


def test_calibrate_against_fake_server_stops_and_resumes_to_the_same_report(fake_server_url, tmp_path, monkeypatch):
    args = ["--url", fake_server_url, "--tasks", "gsm8k", "--limit", "8", "--budgets", "0,2,8",
            "--max-new-tokens", "32", "--speed-max-new-tokens", "8", "--concurrency", "4", "--max-accuracy-drop", "5"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert calibrate.main(args + ["--out", str(whole)]) == 0
    kill_mid_write(monkeypatch, calibrate.RunLog, "item", 10, '{"kind": "item", "arm": "b', calibrate.main,
                   args + ["--out", str(part)])
    with pytest.raises(SystemExit, match="already holds a run; pass --resume"):
        calibrate.main(args + ["--out", str(part)])
    assert calibrate.main(args + ["--out", str(part), "--resume"]) == 0
    a, b = (json.loads((d / "calibrate.json").read_text()) for d in (whole, part))
    assert a["complete"]["line"] == b["complete"]["line"] == "complete: 24 of 24 answers, 6 of 6 speed passes"
    keys = ("arm", "acc_delta", "acc_delta_ci", "agreement", "lost", "gained", "spent_mean", "length_change")
    assert [{k: r[k] for k in keys} for r in a["rows"]] == [{k: r[k] for k in keys} for r in b["rows"]]
    rows = {r["arm"]: r for r in a["rows"]}
    # the fake server gets every fourth GSM8K item wrong at budget >= 8 (fake_server.py) and answers strict's at 2
    lost = sum(_wrong(p.id) for p in datasets.load_prompts("gsm8k", 8))
    assert lost and rows["b2"]["acc_delta"] == 0 and rows["b8"]["lost"] == lost and rows["b8"]["gained"] == 0
    assert rows["b8"]["acc_delta"] == -lost / 8 and rows["b8"]["agreement"] == 1 - lost / 8
    # 8 tokens: 3 verify rounds at the fake accept length 3, 4 at 2
    assert rows["b8"]["accept_length"] == pytest.approx(8 / 3) and rows["strict"]["accept_length"] == pytest.approx(2.0)
    assert a["recommendation"]["arm"] == "strict" and "too few prompts to tell" in a["recommendation"]["why"]
    assert {p.name for p in whole.iterdir()} >= {"calibrate.md", "calibrate.json", "calibrate.csv", "calibrate.png",
                                                 "calibrate_log.jsonl"}
    # the report is rebuilt from the log with another target, contacting no server
    assert calibrate.main(["--report-only", "--out", str(whole), "--min-agreement", "0.5"]) == 0
    again = json.loads((whole / "calibrate.json").read_text())
    assert again["targets"]["min_agreement"] == 0.5 and again["targets"]["max_accuracy_drop"] is None
    assert calibrate.main(["--report-only", "--out", str(whole), "--max-length-change", "0.5"]) == 0
    again = json.loads((whole / "calibrate.json").read_text())
    assert [c["name"] for c in again["recommendation"]["settings"][0]["criteria"]] == ["length"]


# ---------------------------------------------------------------- against a real tiny CPU server


@pytest.mark.server
@pytest.mark.server_group("eagle")
def test_calibrate_end_to_end_on_a_tiny_cpu_server(servers, tmp_path):
    """2 settings x 4 prompts of the user's file x 16 tokens, then --quick on the same prompts."""
    url = servers.get("eagle").url
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Add {i} and {i + 3}, then say the sum.",
                                           "reference": str(2 * i + 3)}) + "\n" for i in range(4)))
    out = tmp_path / "ladder"
    assert calibrate.main(["--url", url, "--prompts", str(prompts), "--scorer", "number", "--budgets", "0,8",
                           "--max-new-tokens", "16", "--speed-max-new-tokens", "16", "--concurrency", "4",
                           "--api", "generate", "--min-agreement", "0.95", "--out", str(out)]) == 0
    result = json.loads((out / "calibrate.json").read_text())
    assert result["complete"]["line"] == "complete: 8 of 8 answers, 2 of 2 speed passes"
    strict, b8 = result["rows"]
    assert (strict["arm"], b8["arm"]) == ("strict", "b8") and b8["pairs"] == 4
    assert b8["accept_length"] >= strict["accept_length"] > 1.0         # tokens per verify round, fixed work
    assert b8["speed"] > 0 and b8["speed_ci"] is not None and b8["fixed_work_ok"]
    assert 0 <= b8["spent_mean"] <= b8["spent_max"] <= 8.0 and strict["spent_max"] == 0.0
    assert b8["agreement_n"] == 4 and b8["agreement_ci"][0] <= 4 / (4 + Z2) + 1e-9
    assert b8["scored_pairs"] == 4 and b8["acc_delta_ci"][0] <= -Z2 / (4 + Z2) + 1e-9
    rec = result["recommendation"]
    assert rec["arm"] == "strict" and not rec["found"] and "too few prompts to tell" in rec["why"]
    md = (out / "calibrate.md").read_text()
    assert "| b8 | asd_budget=8 |" in md and "agreement: too few prompts to tell" in md
    assert (out / "calibrate.png").stat().st_size > 0 and (out / "calibrate.csv").read_text().startswith("arm,budget")

    quick = tmp_path / "quick"
    assert calibrate.main(["--url", url, "--prompts", str(prompts), "--scorer", "number", "--max-new-tokens", "16",
                           "--concurrency", "4", "--api", "generate", "--quick", "--out", str(quick)]) == 0
    q = json.loads((quick / "calibrate.json").read_text())["quick"]
    assert q["prompts"] == 4 and q["k"] == 3
    assert q["with_first_rejection"] + q["without_exception"] + q["zero_regret"] + q["inconclusive"] == 4
    for v in q["values"]:     # admitted by the server's gate, so regret / suffix value <= the gate
        assert 1 <= v["q"] <= 3 and v["ratio"] <= max(q["server_gate"]) * (1 + 1e-4) and v["pos"] < 16
    if q["values"]:
        assert q["fields"]["asd_max_exceptions_per_block"] == 1 and q["budget"] == pytest.approx(3 * q["gate"])
    assert "does not measure" in (quick / "calibrate.md").read_text()



@pytest.mark.server
@pytest.mark.server_group("eagle")
def test_calibrate_measures_a_per_token_setting_on_a_tiny_cpu_server(servers, tmp_path):
    """A per-token arm (``--arms 'pt05:asd_budget_per_token=0.05'``) runs end to end: its requests carry
    the rate, its spend stays within rate x tokens, and the report names it."""
    url = servers.get("eagle").url
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"Count from {i}:"}) + "\n" for i in range(2)))
    out = tmp_path / "per_token"
    assert calibrate.main(["--url", url, "--prompts", str(prompts), "--budgets", "0",
                           "--arms", "pt05:asd_budget_per_token=0.05", "--max-new-tokens", "12",
                           "--speed-max-new-tokens", "12", "--concurrency", "2", "--api", "generate",
                           "--min-agreement", "0.95", "--out", str(out)]) == 0
    result = json.loads((out / "calibrate.json").read_text())
    strict, pt = result["rows"]
    assert (strict["arm"], pt["arm"], pt["pairs"]) == ("strict", "pt05", 2)
    assert pt["field_values"] == {"asd_budget_per_token": 0.05}
    assert 0 <= pt["spent_mean"] <= pt["spent_max"] <= 0.05 * 12 + 1e-4
    assert "| pt05 | asd_budget_per_token=0.05 |" in (out / "calibrate.md").read_text()


def test_no_recommendation_before_the_speed_of_a_qualifying_setting_is_measured():
    items = _items(STRICT_ARM, 500) + _items(B2, 500)
    quality = calibrate_summary.quality_rows(items, [STRICT_ARM, B2], 0.95)
    rows = calibrate_summary.combine(quality, [], [STRICT_ARM, B2])
    rec = calibrate_summary.recommend(rows, Targets(min_agreement=0.95))
    assert rec["arm"] == "strict" and not rec["found"] and "speed phase has not measured" in rec["why"]


def test_reused_answers_are_taken_only_from_a_run_of_the_same_configuration(fake_server_url, tmp_path, capsys):
    base = ["--url", fake_server_url, "--tasks", "gsm8k", "--max-new-tokens", "32", "--speed-max-new-tokens", "8",
            "--concurrency", "4"]
    first = tmp_path / "first"
    assert calibrate.main(base + ["--limit", "4", "--budgets", "0,8", "--out", str(first)]) == 0
    source = first / calibrate.LOG_NAME
    # a later ladder on more prompts takes strict's and budget 8's four answers, under its own labels
    later = tmp_path / "later"
    assert calibrate.main(base + ["--limit", "8", "--budgets", "0,2", "--arms", "eight:asd_budget=8",
                                  "--reuse-answers", str(source), "--out", str(later)]) == 0
    assert "reused 8 answers" in capsys.readouterr().out
    _, records = calibrate.read_log(later / calibrate.LOG_NAME, calibrate.LOG_KIND)
    items = [r for r in records if r["kind"] == "item"]
    reused = [r for r in items if "reused_from" in r]
    assert sorted((r["arm"], r["tag"]) for r in reused) == sorted(
        (arm, p.id) for arm in ("strict", "eight") for p in datasets.load_prompts("gsm8k", 4))
    _, src_records = calibrate.read_log(source, calibrate.LOG_KIND)
    texts = {(r["arm"], r["tag"]): r["text"] for r in src_records if r["kind"] == "item"}
    assert all(r["text"] == texts[("b8" if r["arm"] == "eight" else "strict", r["tag"])] for r in reused)
    assert len(items) == 24 and len({(r["arm"], r["tag"]) for r in items}) == 24   # nothing asked twice
    result = json.loads((later / "calibrate.json").read_text())
    assert result["complete"]["line"] == "complete: 24 of 24 answers, 6 of 6 speed passes"
    assert result["config"]["reused"][0]["answers"] == {"strict": 4, "eight": 4}
    assert "answers reused from the run of" in (later / "calibrate.md").read_text()
    assert "speed at fixed work: 8 prompts x 8 tokens" in (later / "calibrate.md").read_text()
    # a resumed run takes nothing twice
    assert calibrate.main(base + ["--limit", "8", "--budgets", "0,2", "--arms", "eight:asd_budget=8",
                                  "--reuse-answers", str(source), "--out", str(later), "--resume"]) == 0
    assert "reused 0 answers" in capsys.readouterr().out
    # a server that runs a setting under other settings than the source's (its --asd-* defaults, which
    # a --url run cannot see in a launch line) gives nothing: the receipts' settings are compared
    header, _ = calibrate.read_log(later / calibrate.LOG_NAME, calibrate.LOG_KIND)
    fresh = calibrate.RunLog.open(tmp_path / "fresh" / calibrate.LOG_NAME, calibrate.LOG_KIND, header["fingerprint"],
                                  resume=False)
    arms = [STRICT_ARM, Arm("eight", {"asd_budget": 8.0})]
    prompts = datasets.load_prompts("gsm8k", 8)
    ours = {label: next(r["receipt"] for r in items if r["arm"] == label) for label in ("strict", "eight")}
    assert calibrate.reuse_answers(source, fresh, arms, prompts, ours)["answers"] == {"strict": 4, "eight": 4}
    fresh = calibrate.RunLog.open(tmp_path / "fresh2" / calibrate.LOG_NAME, calibrate.LOG_KIND, header["fingerprint"],
                                  resume=False)
    with pytest.raises(ValueError, match="setting eight ran under other settings .*'gate': 0.25.*'gate': 0.1"):
        calibrate.reuse_answers(source, fresh, arms, prompts, {**ours, "eight": {**ours["eight"], "gate": 0.1}})
    assert not [r for r in calibrate.read_log(fresh.path, calibrate.LOG_KIND)[1] if r["kind"] == "item"]
    # another cap, or prompts this run lacks: nothing is taken and the error says why
    with pytest.raises(SystemExit, match="another configuration; differences: max_new_tokens"):
        calibrate.main(base[:5] + ["64"] + base[6:] + ["--limit", "8", "--reuse-answers", str(source),
                                                      "--out", str(tmp_path / "cap")])
    with pytest.raises(SystemExit, match="2 of .* prompts are not in this run"):
        calibrate.main(base + ["--limit", "2", "--reuse-answers", str(source), "--out", str(tmp_path / "few")])
    with pytest.raises(SystemExit, match="does not go with --quick"):
        calibrate.main(base + ["--quick", "--reuse-answers", str(source), "--out", str(tmp_path / "quick")])


def test_speed_prompts_spread_over_the_run_and_set_the_rounds(fake_server_url, tmp_path):
    prompts = datasets.load_prompts("gsm8k", 6) + datasets.load_prompts("humaneval", 6)
    picked = calibrate.speed_set(prompts, 4)
    assert [p.task for p in picked] == ["gsm8k", "gsm8k", "humaneval", "humaneval"] and len({p.id for p in picked}) == 4
    assert calibrate.speed_set(prompts, None) == prompts == calibrate.speed_set(prompts, 99)
    out = tmp_path / "run"
    assert calibrate.main(["--url", fake_server_url, "--tasks", "gsm8k", "--limit", "8", "--budgets", "0,8",
                           "--max-new-tokens", "16", "--speed-max-new-tokens", "8", "--concurrency", "2",
                           "--speed-prompts", "4", "--out", str(out)]) == 0
    result = json.loads((out / "calibrate.json").read_text())
    # 4 prompts at concurrency 2: 2 rounds per setting, where all 8 would take 4
    assert result["complete"]["line"] == "complete: 16 of 16 answers, 4 of 4 speed passes"
    assert "speed at fixed work: 4 prompts x 8 tokens" in (out / "calibrate.md").read_text()
    with pytest.raises(SystemExit, match="--speed-prompts must be >= 1, got 0"):
        calibrate.main(["--url", fake_server_url, "--speed-prompts", "0", "--out", str(tmp_path / "bad")])
