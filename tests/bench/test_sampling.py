"""Sampled benchmarks (``--temperature``, ``--top-p``, ``--samples``): request bodies on every route
(checked against SGLang 0.5.23's own request parsing), the flags' errors, run logs keyed and paired
by seed (old logs read as seed 0), the clustered interval, and speed and audit runs end to end
against the fake server."""

import json

import pytest

from fake_server import Handler
from sglang_asd.bench import audit, audit_summary, sampling, speed, speed_summary, stats
from sglang_asd.bench.arms import Arm
from sglang_asd.bench.client import GenRequest, build_payload

SAMPLED = {"temperature": 0.7, "top_p": 0.9, "seed": 3}
FIELDS = {"asd_budget": 8, "asd_sampled_floor": 0.5}


def test_a_sampled_request_sends_temperature_top_p_and_seed_on_every_route():
    _, body = build_payload(GenRequest(text="hi", max_new_tokens=4, fields=FIELDS, **SAMPLED))
    assert body["sampling_params"] == {"temperature": 0.7, "top_p": 0.9, "sampling_seed": 3, "max_new_tokens": 4,
                                       "ignore_eos": False, "custom_params": FIELDS}
    for api in ("completions", "chat"):
        _, body = build_payload(GenRequest(text="hi", max_new_tokens=4, api=api, fields=FIELDS, **SAMPLED))
        assert (body["temperature"], body["top_p"], body["seed"]) == (0.7, 0.9, 3)
        assert {k: body[k] for k in FIELDS} == FIELDS  # the sampled rule's floor goes where the budget goes


def test_a_greedy_request_sends_what_it_always_sent():
    _, body = build_payload(GenRequest(text="hi", max_new_tokens=4))
    assert body["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": False}
    _, body = build_payload(GenRequest(text="hi", max_new_tokens=4, api="chat"))
    assert body["temperature"] == 0.0 and "top_p" not in body and "seed" not in body


def test_sglang_reads_the_seed_of_every_route():
    """SGLang 0.5.23's own parsing of the bodies: ``seed`` on the OpenAI routes is its ``sampling_seed``."""
    pytest.importorskip("sglang")
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
    from sglang.srt.sampling.sampling_params import SamplingParams

    def openai(api):  # as the server sees it: asd_* fields moved into custom_params by the middleware
        _, body = build_payload(GenRequest(text="hi", max_new_tokens=4, api=api, fields=FIELDS, **SAMPLED))
        return {k: v for k, v in body.items() if not k.startswith("asd_")}

    chat = ChatCompletionRequest(**openai("chat")).to_sampling_params(stop=[], model_generation_config={})
    assert (chat["sampling_seed"], chat["temperature"], chat["top_p"]) == (3, 0.7, 0.9)
    assert CompletionRequest(**openai("completions")).seed == 3  # serving_completions: "sampling_seed": request.seed
    _, body = build_payload(GenRequest(text="hi", max_new_tokens=4, fields=FIELDS, **SAMPLED))
    params = SamplingParams(**body["sampling_params"])
    params.verify(1000)
    assert (params.sampling_seed, params.temperature, params.top_p) == (3, 0.7, 0.9)


@pytest.mark.parametrize("kwargs,message", [
    ({"temperature": -0.1}, "temperature must be a finite number >= 0, got -0.1"),
    ({"temperature": float("nan")}, "temperature must be a finite number >= 0, got nan"),
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\], got 0.0"),
    ({"top_p": 1.5}, r"top_p must be in \(0, 1\], got 1.5"),
    ({"seed": "1"}, "seed must be an integer or None, got '1'"),
    ({"seed": True}, "seed must be an integer or None, got True"),
])
def test_request_sampling_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GenRequest(text="x", max_new_tokens=1, **kwargs)


@pytest.mark.parametrize("tool", [speed.main, audit.main])
@pytest.mark.parametrize("flags,message", [
    (["--temperature", "-1"], "argument --temperature: must be a finite number >= 0, got '-1'"),
    (["--temperature", "hot"], "argument --temperature: must be a finite number >= 0, got 'hot'"),
    (["--top-p", "0"], r"argument --top-p: must be in \(0, 1\], got '0'"),
    (["--top-p", "1.01"], r"argument --top-p: must be in \(0, 1\], got '1.01'"),
    (["--samples", "0"], "argument --samples: must be an integer >= 1, got '0'"),
    (["--samples", "1.5"], "argument --samples: must be an integer >= 1, got '1.5'"),
    (["--samples", "2"], "--samples 2 needs --temperature > 0 .*got --temperature 0"),
])
def test_bad_sampling_flags_are_usage_errors_naming_flag_and_value(tool, flags, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        tool(["--url", "http://127.0.0.1:9", *flags, "--out", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and __import__("re").search(message, err), err


def test_the_fingerprint_holds_sampling_only_when_it_is_not_greedy():
    assert sampling.Sampling().fingerprint() == {}  # every log made before these flags stays resumable
    how = sampling.Sampling(0.7, 0.95, 2)
    assert how.fingerprint() == {"sampling": {"temperature": 0.7, "top_p": 0.95, "samples": 2}}
    assert sampling.Sampling.of_fingerprint(how.fingerprint()) == how
    assert sampling.Sampling.of_fingerprint({}) == sampling.Sampling()
    assert how.seeds == [0, 1] and sampling.Sampling().seeds == [None] and sampling.Sampling(0.5).seeds == [0]
    assert sampling.seed_of({"tag": "q"}) == 0 and sampling.seed_of({"seed": None}) == 0
    assert sampling.seed_of({"seed": 1}) == 1


def test_rounds_count_every_prompt_and_seed():
    fp = {"prompts": [f"q{i}" for i in range(16)], "concurrency": 1, "schedule": "rounds"}
    assert speed.rounds_of(fp) == 16
    assert speed.rounds_of({**fp, **sampling.Sampling(0.7, 1.0, 2).fingerprint()}) == 32
    assert speed.rounds_of({**fp, "concurrency": 3, **sampling.Sampling(0.7, 1.0, 2).fingerprint()}) == 11


def _pass(arm, rates):
    """A logged pass whose requests ran at ``rates[(tag, seed)]`` tokens/s (10 tokens each; seed None = not logged)."""
    reqs = [{"tag": tag, **({} if seed is None else {"seed": seed}), "ok": True, "completion_tokens": 10,
             "latency_s": 10 / rate} for (tag, seed), rate in rates.items()]
    return {"arm": arm, "requests": reqs}


def test_per_prompt_ratios_pair_each_prompt_and_seed_with_strict():
    strict = _pass("strict", {("q0", 0): 10.0, ("q0", 1): 20.0, ("q1", 0): 10.0, ("q1", 1): 10.0})
    b8 = _pass("b8", {("q0", 0): 20.0, ("q0", 1): 20.0, ("q1", 0): 10.0, ("q1", 1): 40.0})
    ratios = speed_summary.prompt_ratios([((strict,), b8)])
    # q0: seed 0 doubles, seed 1 stays -> sqrt(2); q1: 1 and 4 -> 2 (a pairing by prompt alone would mix seeds)
    assert ratios == pytest.approx({"q0": 2 ** 0.5, "q1": 2.0})
    old_strict, old_b8 = _pass("strict", {("q0", None): 10.0}), _pass("b8", {("q0", None): 15.0})
    assert speed_summary.prompt_ratios([((old_strict,), old_b8)]) == pytest.approx({"q0": 1.5})  # seedless logs


def test_per_prompt_accept_lengths_pair_each_prompt_and_seed_with_strict():
    def verified(arm, rounds):  # 12 tokens per request over rounds[(tag, seed)] verify rounds
        return {"arm": arm, "requests": [{"tag": t, "seed": s, "ok": True, "completion_tokens": 12, "latency_s": 1.0,
                                          "spec_verify_ct": n} for (t, s), n in rounds.items()]}
    strict = verified("strict", {("q0", 0): 6, ("q0", 1): 4, ("q1", 0): 4, ("q1", 1): 3})
    b8 = verified("b8", {("q0", 0): 3, ("q0", 1): 4, ("q1", 0): 4, ("q1", 1): 4})
    ratios = speed_summary.prompt_ratios([((strict,), b8)], speed_summary.request_accept_lengths)
    # q0: accept length 2 -> 4 and 3 -> 3; q1: 3 -> 3 and 4 -> 3
    assert ratios == pytest.approx({"q0": 2 ** 0.5, "q1": 0.75 ** 0.5})
    plain = {"arm": "plain", "requests": [{"tag": "q0", "seed": 0, "ok": True, "completion_tokens": 12,
                                           "latency_s": 1.0, "spec_verify_ct": None}]}
    assert speed_summary.prompt_ratios([((strict,), plain)], speed_summary.request_accept_lengths) == {}


def _item(arm, tag, seed, correct, tokens=10, task="gsm8k"):
    return {"arm": arm, "task": task, "tag": tag, "seed": seed, "ok": True, "correct": correct,
            "completion_tokens": tokens, "hash": f"{correct}{tokens}", "text": str(correct), "fields": {}}


def test_audit_pairs_each_item_and_seed_with_strict():
    strict, b8 = Arm("strict", {"asd_budget": 0.0}), Arm("b8", {"asd_budget": 8.0})
    records = [_item("strict", "q0", 0, True), _item("strict", "q0", 1, False),
               _item("strict", "q1", 0, True), _item("strict", "q1", 1, True),
               _item("b8", "q0", 0, True), _item("b8", "q0", 1, True),  # seed 1 gained
               _item("b8", "q1", 0, False, 14), _item("b8", "q1", 1, True)]  # seed 0 lost
    rows, by_arm = audit_summary.summarize(records, [strict, b8], ["gsm8k"], {"gsm8k": 4})
    row = next(r for r in rows if r["arm"] == "b8")
    assert (row["pairs"], row["scored_pairs"], row["lost"], row["gained"]) == (4, 4, 1, 1)
    assert row["acc_delta"] == 0.0 and row["len_delta"] == pytest.approx(1.0)
    assert row["divergence_share"] == pytest.approx(0.5)


def test_the_clustered_interval_resamples_items_with_all_their_seeds():
    ref, cand = [1.0, 1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0, 1.0]
    # every item answered twice alike: resampling items draws what resampling the single answers drew
    twice = lambda xs: [x for x in xs for _ in range(2)]  # noqa: E731
    items = twice(range(5))
    assert stats.clustered_diff_ci(twice(ref), twice(cand), items) == stats.paired_diff_ci(ref, cand)
    # taking the 10 pairs as independent would claim a narrower interval
    lo, hi = stats.paired_diff_ci(twice(ref), twice(cand))
    clo, chi = stats.clustered_diff_ci(twice(ref), twice(cand), items)
    assert chi - clo > hi - lo
    assert stats.clustered_diff_ci(ref, cand, list("abcde")) == stats.paired_diff_ci(ref, cand)  # one pair each
    with pytest.raises(ValueError, match="same length"):
        stats.clustered_diff_ci(ref, cand, [0])


def test_a_launched_cpu_server_names_the_sampling_switch_only_when_on(monkeypatch):
    pytest.importorskip("torch")
    from sglang_asd.bench.server import identity, with_launch_facts

    monkeypatch.setenv("SGLANG_ASD_CPU_GEMM", "native")
    monkeypatch.setenv("SGLANG_ASD_CPU_SAMPLING", "off")
    assert "cpu_sampling" not in with_launch_facts({"device": "cpu"}, launched=True)
    monkeypatch.delenv("SGLANG_ASD_CPU_SAMPLING")  # the default: on
    assert identity(with_launch_facts({"device": "cpu"}, launched=True))["cpu_sampling"] == "on"
    monkeypatch.setenv("SGLANG_ASD_CPU_SAMPLING", "on")
    assert identity(with_launch_facts({"device": "cpu"}, launched=True))["cpu_sampling"] == "on"
    assert with_launch_facts({"device": "cpu"}, launched=False) == {"device": "cpu"}


SPEED_ARGS = ["--budgets", "0,8", "--num-prompts", "2", "--max-new-tokens", "6", "--concurrency", "1",
              "--repeats", "1", "--schedule", "rounds"]


def test_a_sampled_speed_run_sends_every_seed_under_every_arm_and_says_so(fake_server_url, tmp_path):
    Handler.bodies.clear()
    flags = ["--temperature", "0.7", "--top-p", "0.95", "--samples", "2"]
    assert speed.main(["--url", fake_server_url, *SPEED_ARGS, *flags, "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "speed.json").read_text())
    assert result["config"]["sampling"] == {"temperature": 0.7, "top_p": 0.95, "samples": 2}
    assert result["config"]["rounds"] == 4 and result["complete"] == {"passes": 8, "planned": 8}
    sent = [b["sampling_params"] for b in Handler.bodies if b["sampling_params"]["max_new_tokens"] == 6]
    assert {(p["temperature"], p["top_p"]) for p in sent} == {(0.7, 0.95)}
    seeds = {(p.get("custom_params", {}).get("asd_budget"), p["sampling_seed"]) for p in sent}
    assert seeds == {(0.0, 0), (0.0, 1), (8.0, 0), (8.0, 1)}
    logged = {(p["arm"], r["tag"], r["seed"]) for p in result["passes"] for r in p["requests"]}
    assert len(logged) == 8 and {s for *_, s in logged} == {0, 1}
    b8 = next(r for r in result["arms"] if r["arm"] == "b8")
    assert b8["prompts_n"] == 2 and b8["rounds_n"] == 4 and b8["repeats_n"] == 1
    md = (tmp_path / "speed.md").read_text()
    assert "sampled at temperature 0.7, top-p 0.95, 2 seeded sample(s) per prompt" in md
    assert "resampled with all of them" in md
    # the settings are part of the run's configuration: a resume may not change them
    with pytest.raises(SystemExit, match="sampling: stored"):
        speed.main(["--url", fake_server_url, *SPEED_ARGS, "--temperature", "0.7", "--top-p", "0.95", "--samples",
                    "3", "--resume", "--out", str(tmp_path)])
    assert speed.main(["--url", fake_server_url, *SPEED_ARGS, *flags, "--resume", "--out", str(tmp_path)]) == 0


def test_a_greedy_speed_log_resumes_as_it_did_and_not_as_a_sampled_run(fake_server_url, tmp_path):
    assert speed.main(["--url", fake_server_url, *SPEED_ARGS, "--out", str(tmp_path)]) == 0
    header = json.loads((tmp_path / "speed_passes.jsonl").read_text().splitlines()[0])
    assert "sampling" not in header["fingerprint"]
    assert "requests greedy (temperature 0)" in (tmp_path / "speed.md").read_text()
    with pytest.raises(SystemExit, match="sampling: stored null"):
        speed.main(["--url", fake_server_url, *SPEED_ARGS, "--temperature", "0.5", "--resume", "--out", str(tmp_path)])


def test_a_sampled_audit_pairs_items_by_seed_and_resumes_by_seed(fake_server_url, tmp_path):
    Handler.bodies.clear()
    args = ["--url", fake_server_url, "--budgets", "8", "--tasks", "gsm8k,mmlu", "--limit", "3", "--api", "chat",
            "--temperature", "0.7", "--samples", "2", "--concurrency", "4", "--out", str(tmp_path)]
    assert audit.main(args) == 0
    items = [json.loads(line) for line in (tmp_path / "audit_items.jsonl").read_text().splitlines()[1:]]
    items = [i for i in items if i.get("kind") == "item"]
    assert sorted((i["arm"], i["task"], i["tag"], i["seed"]) for i in items) == sorted(
        (a, t, tag, s) for a in ("strict", "b8") for t in ("gsm8k", "mmlu")
        for tag in {i["tag"] for i in items if i["task"] == t} for s in (0, 1))
    assert {(b["temperature"], b["seed"]) for b in Handler.bodies if b.get("max_tokens") != 1} == {(0.7, 0), (0.7, 1)}
    result = json.loads((tmp_path / "audit.json").read_text())
    b8 = next(r for r in result["by_arm"] if r["arm"] == "b8")
    assert b8["pairs"] == b8["scored_pairs"] == 12 and b8["n"] == 12
    assert result["complete"]["line"] == "complete: 24 of 24 items"
    md = (tmp_path / "audit.md").read_text()
    assert "sampled at temperature 0.7, top-p 1, 2 seeded sample(s) per item" in md
    assert "paired with strict on the same (item, seed), 2 seeds per item" in md
    assert result["title"] == "ASD speed / quality frontier (sampled: T 0.7, top-p 1, 2 seed(s) per item)"
    Handler.bodies.clear()
    assert audit.main(args + ["--resume"]) == 0  # nothing left to do: every (item, seed) is logged
    assert [b for b in Handler.bodies if b.get("max_tokens") != 1] == []
