"""Speed benchmark arithmetic on logged passes: pass order, ratio / drift / interval, pairing by
machine, for both schedules (trios, then rounds), and the report's notes. The tool's runs against
the fake server are test_speed_runs.py."""

import pytest

from sglang_asd.bench import speed, speed_report, speed_summary
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


def test_the_report_says_when_its_interval_over_repeats_is_only_their_range():
    """A percentile bootstrap of the median over 2-5 repeats returns their lowest and highest ratio:
    the report names that range as such; over 30 repeats the interval is a narrower, real one."""
    from sglang_asd.bench.stats import bootstrap_ci

    def arm(name, ratios):
        return {"arm": name, "ratios": ratios, "speedup_ci": list(bootstrap_ci(ratios, "median"))}

    few = [arm("b8", [1.10, 1.15, 1.13]), arm("b2", [1.05, 1.08]), {"arm": "strict", "ratios": None,
                                                                     "speedup_ci": None}]
    note = speed_report.few_repeats_note(few)
    assert note is not None and note.startswith("With 2 or 3 repeats") and "of b8, b2 is" in note
    many = [arm("b8", [1.0 + 0.01 * (i % 10) for i in range(30)])]
    assert many[0]["speedup_ci"][0] > 1.0 and many[0]["speedup_ci"][1] < 1.09
    assert speed_report.few_repeats_note(many) is None
    assert speed_report.few_repeats_note([arm("b8", [1.1])]) is None  # one repeat: the cell says "(1 repeat)"
