"""``asd_rule: fly`` and ``fly-bounded`` (FLy, ``sglang_asd/policy/fly.py``) on real CPU servers: served
with receipts on every drafter's seam (the EAGLE chain, the EAGLE tree, NGRAM, DSPARK, DFLASH), budget 0
token for token the server's strict output, fly-bounded within its budget under slot churn, a sampled
request's reason, and the 400s. The pool's servers only: no server of its own."""

import concurrent.futures as cf

import pytest
import requests

pytestmark = pytest.mark.server

PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away", "1, 2, 3,"]
ALGORITHMS = ["eagle_tree", "ngram", "dspark", "dflash", "eagle"]
# window 1: the tiny K = 3 drafts leave room for a deferral at positions 0 and 1 (the default, min(6, K - 1)
# = 2, only at position 0)
FLY = {"asd_fly_window_size": 1}


def _check_fly_receipt(out: dict, rule: str, budget: float, window: int = 1) -> dict:
    r = out["meta_info"]["asd"]
    assert r["applied"] and r["reason"] is None and r["rule"] == f"{rule}-1" and r["budget"] == budget
    assert r["fly_entropy_threshold"] >= 0.3 and r["fly_entropy_top_k"] == 3 and r["fly_window_size"] == window
    assert "gate" not in r and "max_exceptions_per_block" not in r
    assert r["exceptions"] == len(r["events"]) and abs(sum(e["regret"] for e in r["events"]) - r["spent"]) < 1e-4
    for e in r["events"]:  # each deferral at its output position, with the regret it cost
        assert out["output_ids"][e["pos"]] == e["draft"] != e["target"] and e["regret"] >= 0
    if rule == "fly":
        assert r["remaining"] is None, "fly has no ledger"
    else:
        assert r["spent"] <= budget + 1e-6 and abs(r["remaining"] - (budget - r["spent"])) < 1e-5
    return r


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_fly_is_served_with_receipts_and_budget_zero_is_strict(servers, algorithm):
    server = servers.get(algorithm)
    deferred = 0
    for p in PROMPTS:
        strict = server.generate(p, max_new_tokens=32, ignore_eos=True)
        for rule in ("fly", "fly-bounded"):
            zero = server.generate(p, max_new_tokens=32, ignore_eos=True, asd_budget=0, asd_rule=rule, **FLY)
            assert zero["output_ids"] == strict["output_ids"], f"{rule}: budget 0 must be strict"
            assert zero["meta_info"]["asd"]["reason"] == "strict"
            out = server.generate(p, max_new_tokens=32, ignore_eos=True, asd_budget=4, asd_rule=rule, **FLY)
            r = _check_fly_receipt(out, rule, 4.0)
            first = r["events"][0]["pos"] if r["events"] else len(out["output_ids"])
            assert out["output_ids"][:first] == strict["output_ids"][:first]
            deferred += r["exceptions"]
    if algorithm in ("eagle", "dspark", "dflash"):  # the noisy drafts, chain seams included: FLy defers there
        assert deferred > 0, f"{algorithm}: fly must defer some mismatches on the noisy draft"


@pytest.mark.server_group("eagle")
def test_fly_bounded_stays_within_its_budget_under_churn(servers):
    """24 requests at once, small budgets and ragged lengths, so slots are freed and reused while others
    decode: every fly-bounded receipt within its budget, remaining = budget - spent."""
    server = servers.get("eagle")
    jobs = [(PROMPTS[i % 4], 8 + 5 * (i % 7), [0.25, 0.5, 1.0][i % 3], "fly-bounded" if i % 4 else "fly")
            for i in range(24)]

    def run(job):
        prompt, n, budget, rule = job
        return job, server.generate(prompt, max_new_tokens=n, ignore_eos=True, asd_budget=budget, asd_rule=rule,
                                    **FLY)

    with cf.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, jobs))
    for (_, _, budget, rule), out in results:
        _check_fly_receipt(out, rule, budget)


@pytest.mark.server_group("eagle")
def test_a_sampled_fly_request_gets_a_reason_not_a_crash(servers):
    server = servers.get("eagle")
    out = server.generate("Once upon a time", max_new_tokens=16, temperature=0.8, asd_budget=4, asd_rule="fly")
    r = out["meta_info"]["asd"]
    assert not r["applied"] and r["reason"] == "fly_sampled" and r["rule"] == "fly-1" and r["exceptions"] == 0
    assert len(out["output_ids"]) > 0


@pytest.mark.server_group("eagle")
def test_bad_fly_fields_are_400_naming_field_and_value(servers):
    server = servers.get("eagle")
    cases = [({"asd_rule": "fly", "asd_fly_entropy_threshold": 0.1},
              "asd_fly_entropy_threshold must be a finite number >= 0.3 (the server's), got 0.1"),
             ({"asd_rule": "fly", "asd_fly_entropy_top_k": 4}, "asd_fly_entropy_top_k must be an integer in [1, 3], got 4"),
             ({"asd_rule": "fly-bounded", "asd_fly_window_size": -1}, "asd_fly_window_size must be an integer >= 0, got -1"),
             ({"asd_rule": "fly", "asd_fly_window_size": 1.5}, "asd_fly_window_size must be an integer >= 0, got 1.5"),
             ({"asd_fly_window_size": 2}, "asd_fly_window_size does not apply to asd_rule=asd"),
             ({"asd_rule": "fly", "asd_gate": 0.1}, "asd_gate does not apply to asd_rule=fly")]
    for fields, message in cases:
        r = requests.post(server.url + "/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 2, **fields}})
        assert r.status_code == 400 and message in r.json()["error"], r.text
        r = requests.post(server.url + "/v1/completions", json={"model": "default", "prompt": "hi", **fields})
        assert r.status_code == 400 and message in r.json()["message"], r.text
    ok = server.generate("hi", max_new_tokens=4, asd_budget=1, asd_rule="fly", asd_fly_entropy_threshold=0.5,
                         asd_fly_entropy_top_k=2, asd_fly_window_size=2)["meta_info"]["asd"]
    assert (ok["fly_entropy_threshold"], ok["fly_entropy_top_k"], ok["fly_window_size"]) == (0.5, 2, 2)
