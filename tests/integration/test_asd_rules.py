"""asd_rule on real servers: every rule at budget 0 or its gate 0 is strict greedy for every
algorithm; every rule on every route with receipts and metrics; a server that forbids rules."""

import json
import re

import pytest
import requests

from tests.server_utils import metric

pytestmark = pytest.mark.server

PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away", "1, 2, 3,"]
ALGORITHMS = ["standalone", "eagle", "eagle_tree", "eagle3", "ngram"]
GATE_OFF = {"asd": {"asd_gate": 0}, "local": {"asd_max_exceptions_per_block": 0}, "margin": {"asd_margin": 0},
            "threshold": {"asd_threshold": 0}}
# per-token limits generous enough that the tiny noisy drafts trigger exceptions under every rule (the
# EAGLE test server's ceilings allow them: ASD_ARGS in tests/conftest.py)
LOOSE = {"asd": {}, "local": {}, "margin": {"asd_margin": 2.0}, "threshold": {"asd_threshold": 1.0}}


def _outputs(server, **params):
    """The four prompts as one batch request (SGLang schedules them together; the identity tests check
    single requests, and test_asd_serving that concurrent requests decode as they do alone)."""
    return [out["output_ids"] for out in server.generate(PROMPTS, max_new_tokens=24, **params)]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_rule_at_budget_zero_or_gate_zero_is_strict(servers, algorithm):
    """The server's no-budget output is stock SGLang's (tests/integration/test_identity.py); every
    rule with budget 0, or with its own gate 0, must give exactly that output. The identity tests'
    servers (every rule allowed; a gate of 0 is within every margin and threshold ceiling)."""
    server = servers.get(algorithm)
    strict = _outputs(server)
    for rule, off in GATE_OFF.items():
        assert _outputs(server, asd_rule=rule, asd_budget=0) == strict, f"{rule}: budget 0 must be strict"
        assert _outputs(server, asd_rule=rule, asd_budget=8, **off) == strict, f"{rule}: {off} must be strict"


def _check_rule_receipt(receipt: dict, rule: str, budget: float):
    assert receipt["applied"] and receipt["rule"] == f"{rule}-1" and receipt["budget"] == budget
    assert abs(sum(e["regret"] for e in receipt["events"]) - receipt["spent"]) < 1e-4
    assert receipt["exceptions"] == len(receipt["events"])
    if rule == "asd":
        assert receipt["spent"] <= budget + 1e-6 and abs(receipt["remaining"] - (budget - receipt["spent"])) < 1e-5
        assert receipt["gate"] == 0.25 and receipt["max_exceptions_per_block"] == 2
    else:
        assert receipt["remaining"] is None, "a rule without a ledger must not claim a remaining budget"
    if rule == "margin":
        assert receipt["margin"] == 2.0 and "gate" not in receipt
        assert all(e["regret"] <= 2.0 for e in receipt["events"])
    if rule == "threshold":
        assert receipt["threshold"] == 1.0 and all(e["regret"] <= 1.0 for e in receipt["events"])


@pytest.mark.server_group("eagle")
@pytest.mark.parametrize("rule", ["asd", "local", "margin", "threshold"])
def test_each_rule_on_generate_with_receipts(servers, rule):
    server = servers.get("eagle")
    spent, budget = 0.0, 2.0
    for p in PROMPTS:
        strict = server.generate(p, max_new_tokens=32, ignore_eos=True)
        out = server.generate(p, max_new_tokens=32, ignore_eos=True, asd_budget=budget, asd_rule=rule, **LOOSE[rule])
        r = out["meta_info"]["asd"]
        _check_rule_receipt(r, rule, budget)
        for e in r["events"]:
            assert out["output_ids"][e["pos"]] == e["draft"] != e["target"]
        first = r["events"][0]["pos"] if r["events"] else len(out["output_ids"])
        assert out["output_ids"][:first] == strict["output_ids"][:first]
        spent += r["spent"]
    assert spent > 0, f"{rule}: the noisy draft must trigger exceptions"


def _sse(resp):
    for line in resp.iter_lines():
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            yield json.loads(line[6:])


@pytest.mark.server_group("eagle")
@pytest.mark.parametrize("rule", ["local", "margin", "threshold"])
def test_each_rule_on_the_openai_routes_and_streams(servers, rule):
    server = servers.get("eagle")
    base = server.url + "/v1"
    fields = {"asd_budget": 4, "asd_rule": rule, **LOOSE[rule]}
    r = requests.post(base + "/completions", json={"model": "default", "prompt": "Once upon a time", "max_tokens": 24,
                                                   "temperature": 0, **fields})
    assert r.status_code == 200, r.text
    _check_rule_receipt(r.json()["asd"], rule, 4.0)
    r = requests.post(base + "/chat/completions", json={
        "model": "default", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 24, "temperature": 0,
        "custom_params": fields})
    assert r.status_code == 200, r.text
    _check_rule_receipt(r.json()["choices"][0]["asd"], rule, 4.0)
    body = {"model": "default", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16,
            "temperature": 0, "stream": True, **fields}
    with requests.post(base + "/chat/completions", json=body, stream=True) as resp:
        finals = [ch for c in _sse(resp) for ch in c["choices"] if ch.get("finish_reason")]
    assert finals and finals[-1]["asd"]["rule"] == f"{rule}-1"
    body = {"text": "The quick brown fox", "stream": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": 16, **fields}}
    with requests.post(server.url + "/generate", json=body, stream=True) as resp:
        chunks = list(_sse(resp))
    _check_rule_receipt(chunks[-1]["meta_info"]["asd"], rule, 4.0)


@pytest.mark.server_group("eagle")
def test_bad_rule_fields_are_400_naming_field_and_value(servers):
    server = servers.get("eagle")
    cases = [({"asd_rule": "fuzzy"}, "asd_rule must be one of asd, local, margin, threshold, fly, fly-bounded, got 'fuzzy'"),
             ({"asd_rule": "margin", "asd_margin": 3}, "asd_margin must be a finite number in [0, 2], got 3"),
             ({"asd_threshold": 0.5}, "asd_threshold does not apply to asd_rule=asd")]
    for fields, message in cases:
        r = requests.post(server.url + "/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 2, **fields}})
        assert r.status_code == 400 and message in r.json()["error"], r.text
        r = requests.post(server.url + "/v1/completions", json={"model": "default", "prompt": "hi", **fields})
        assert r.status_code == 400 and message in r.json()["message"], r.text


@pytest.mark.server_group("eagle")
def test_metrics_carry_the_rule_label(servers):
    server = servers.get("eagle")
    for rule in ("margin", "threshold"):
        server.generate("Once upon a time in a land far away", max_new_tokens=32, ignore_eos=True, asd_budget=4,
                        asd_rule=rule, **LOOSE[rule])
    text = requests.get(server.url + "/metrics").text
    for rule in ("margin", "threshold"):
        assert re.search(rf'^sglang:asd_requests_total{{[^}}]*applied="true"[^}}]*rule="{rule}"', text, re.M), rule
        assert re.search(rf'^sglang:asd_exceptions_total{{[^}}]*rule="{rule}"[^}}]*}} [1-9]', text, re.M), rule
    assert metric(server, "sglang:asd_regret_spent_nats_total") > 0


def test_a_server_may_choose_the_default_rule_and_forbid_others(servers):
    server = servers.get("eagle", extra=("--asd-rule", "threshold", "--asd-allowed-rules", "asd,threshold",
                                         "--asd-threshold", "1"))
    out = server.generate("The quick brown fox", max_new_tokens=16, ignore_eos=True, asd_budget=4)
    assert out["meta_info"]["asd"]["rule"] == "threshold-1" and out["meta_info"]["asd"]["threshold"] == 1.0
    r = requests.post(server.url + "/generate", json={"text": "hi", "sampling_params": {"asd_rule": "margin"}})
    assert r.status_code == 400 and "asd_rule must be one of asd, threshold, got 'margin'" in r.json()["error"]
    assert server.generate("hi", max_new_tokens=4, asd_budget=1, asd_rule="asd")["meta_info"]["asd"]["rule"] == "asd-1"
