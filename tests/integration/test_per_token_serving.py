"""Budgets that accrue with output (``asd_budget_per_token``) on a real server: greedy and sampled requests
on /generate and the OpenAI routes, concurrent requests of different rates in the same batches, and receipts
that show the accrual bound held at every event: each event's cumulative spent <= rate x (its output
position) + burst. Rate 0 without a budget is budget 0, token for token; bad values are 400s.

One pool server serves everything here: the sampled tests' tiny EAGLE server (``test_sampled_serving.py``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.integration.test_sampled_serving import ASD_EXTRA, PROMPTS, check_sampled_receipt
from tests.server_utils import check_receipt

pytestmark = pytest.mark.server

MAX_BUDGET = 64.0  # the server's --asd-max-budget: a rate without asd_budget has this total
MAX_NEW = 32


@pytest.fixture
def server(servers):
    return servers.get("eagle", extra=ASD_EXTRA, sampling=True)


def check_accrual(receipt: dict, rate: float, burst: float = 0.0) -> list:
    """The receipt's accrual: its rate and burst, every listed event's cumulative spent (the running sum of
    the events' regrets or charges) within rate x pos + burst, and the top-level check that says so."""
    assert (receipt["budget_per_token"], receipt["budget_burst"]) == (rate, burst), receipt
    assert not receipt["events_truncated"], "every event must be listed for this check"
    running, headroom = 0.0, []
    for e in receipt["events"]:
        running += e.get("regret", e.get("charge"))
        assert abs(e["spent"] - running) < 1e-5, e
        assert abs(e["allowance"] - (rate * e["pos"] + burst)) < 1e-6, e
        assert e["spent"] <= e["allowance"] + 1e-4, (e, receipt)
        headroom.append(e["allowance"] - e["spent"])
    assert receipt["accrual_held"] is True
    if headroom:
        assert abs(receipt["accrual_min_headroom"] - min(headroom)) < 1e-5
    else:
        assert receipt["accrual_min_headroom"] is None
    return receipt["events"]


def _greedy(**fields) -> dict:
    return {"temperature": 0, "max_new_tokens": MAX_NEW, "ignore_eos": True, **fields}


def test_greedy_rates_under_churn_hold_the_bound_at_every_event(server):
    """Concurrent greedy requests of different rates and bursts, beside fixed budgets and strict requests:
    every rate's receipt holds the bound at every event, and a faster rate spends at least as much."""
    kinds = [dict(asd_budget_per_token=0.02), dict(asd_budget_per_token=0.1),
             dict(asd_budget_per_token=0.5, asd_budget_burst=0.5), dict(asd_budget_per_token=0.05, asd_budget=1),
             dict(asd_budget=8), dict(asd_budget=0)]
    jobs = [(p, _greedy(**k)) for p in PROMPTS for k in kinds] * 2
    with ThreadPoolExecutor(len(jobs)) as pool:
        outs = list(pool.map(lambda job: server.generate(job[0], **job[1]), jobs))
    events, spent = 0, {}
    for (prompt, params), out in zip(jobs, outs):
        r = out["meta_info"]["asd"]
        rate = params.get("asd_budget_per_token")
        if params.get("asd_budget") == 0:
            assert r["reason"] == "strict" and "budget_per_token" not in r
            continue
        check_receipt(out, params.get("asd_budget", MAX_BUDGET))
        if rate is None:
            assert "accrual_held" not in r, "a request without a rate has no accrual"
            continue
        events += len(check_accrual(r, rate, params.get("asd_budget_burst", 0.0)))
        spent.setdefault(rate, []).append(r["spent"])
    assert events > 0, "the tiny noisy EAGLE pair must take some exceptions under a rate"
    fixed = sum(out["meta_info"]["asd"]["spent"] for (_, params), out in zip(jobs, outs)
                if params.get("asd_budget") == 8)
    assert sum(spent[0.02]) < fixed, "the slowest rate binds where a fixed budget of 8 does not"
    solo = server.generate(PROMPTS[0], **_greedy(asd_budget_per_token=0.1))
    assert solo["output_ids"] == outs[1]["output_ids"], "a greedy row must not depend on its batch"


@pytest.mark.server_group("overlap")
def test_rates_hold_the_bound_with_the_overlap_scheduler(servers):
    """The overlap scheduler's server (the device ledger one round ahead of the host): concurrent requests of
    different rates, greedy, hold the bound at every event, as without overlap."""
    server = servers.get("eagle", overlap=True)
    kinds = [dict(asd_budget_per_token=0.02), dict(asd_budget_per_token=0.2, asd_budget_burst=0.25),
             dict(asd_budget=8), dict(asd_budget=0)]
    jobs = [(p, _greedy(**k)) for p in PROMPTS for k in kinds] * 3
    with ThreadPoolExecutor(12) as pool:
        outs = list(pool.map(lambda job: server.generate(job[0], **job[1]), jobs))
    events = 0
    for (_, params), out in zip(jobs, outs):
        rate = params.get("asd_budget_per_token")
        if rate is not None:
            events += len(check_accrual(out["meta_info"]["asd"], rate, params.get("asd_budget_burst", 0.0)))
    assert events > 0


def test_sampled_rates_hold_the_bound_at_every_relaxed_node(server):
    outs = []
    for rate in (0.01, 0.1):
        for i, p in enumerate(PROMPTS):
            out = server.generate(p, temperature=0.1, sampling_seed=1000 + i, max_new_tokens=MAX_NEW,
                                  ignore_eos=True, asd_budget_per_token=rate)
            r = check_sampled_receipt(out, MAX_BUDGET)
            events = check_accrual(r, rate)
            outs.append(len(events))
            if rate == 0.01 and events:  # the slow rate binds: the last node spends close to its allowance
                assert r["accrual_min_headroom"] < 0.05, r
    assert sum(outs) > 0, "the tiny EAGLE pair must relax some nodes under a rate"


def test_rate_zero_without_a_budget_is_budget_zero_token_for_token(server):
    for i, p in enumerate(PROMPTS):
        zero = server.generate(p, **_greedy(asd_budget=0))
        rate0 = server.generate(p, **_greedy(asd_budget_per_token=0))
        assert rate0["output_ids"] == zero["output_ids"]
        r = rate0["meta_info"]["asd"]
        assert r["applied"] is False and r["reason"] == "strict" and r["exceptions"] == 0
        sampled = dict(temperature=0.7, sampling_seed=1000 + i, max_new_tokens=16)
        assert (server.generate(p, asd_budget_per_token=0, **sampled)["output_ids"]
                == server.generate(p, asd_budget=0, **sampled)["output_ids"])


def test_openai_routes_carry_the_rate_and_its_receipt(server):
    base = server.url + "/v1"
    r = requests.post(base + "/completions", json={
        "model": "default", "prompt": PROMPTS[0], "max_tokens": MAX_NEW, "temperature": 0, "ignore_eos": True,
        "asd_budget_per_token": 0.1, "asd_budget_burst": 0.25})
    assert r.status_code == 200, r.text
    check_accrual(r.json()["choices"][0]["asd"], 0.1, 0.25)
    r = requests.post(base + "/chat/completions", json={
        "model": "default", "messages": [{"role": "user", "content": "hello"}], "max_tokens": MAX_NEW,
        "temperature": 0, "custom_params": {"asd_budget_per_token": 0.05, "asd_budget": 2}})
    assert r.status_code == 200, r.text
    receipt = r.json()["choices"][0]["asd"]
    assert receipt["budget"] == 2.0
    check_accrual(receipt, 0.05)


BAD = [
    ({"asd_budget_per_token": -1}, "asd_budget_per_token must be a finite number in [0, 1], got -1"),
    ({"asd_budget_per_token": "x"}, "asd_budget_per_token must be a finite number in [0, 1], got 'x'"),
    ({"asd_budget_per_token": 0.1, "asd_budget_burst": 100},
     "asd_budget_burst must be a finite number in [0, 64], got 100"),
    ({"asd_budget_burst": 1}, "asd_budget_burst needs a per-token rate: send asd_budget_per_token too (this "
                              "server sets no --asd-budget-per-token), got asd_budget_burst=1"),
    ({"asd_budget_per_token": 0.1, "asd_rule": "margin"},
     "asd_budget_per_token does not apply to asd_rule=margin (a rule without a request ledger; its parameters: "
     "asd_margin)"),
]


@pytest.mark.parametrize("fields, message", BAD)
def test_bad_rates_are_400s_naming_field_and_value_on_every_route(server, fields, message):
    r = requests.post(server.url + "/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 2},
                                                      **fields})
    assert r.status_code == 400 and r.json() == {"error": message}, r.text
    r = requests.post(server.url + "/v1/completions", json={"model": "x", "prompt": "hi", "max_tokens": 2, **fields})
    assert r.status_code == 400 and r.json()["message"] == message, r.text
    r = requests.post(server.url + "/v1/chat/completions", json={
        "model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "custom_params": fields})
    assert r.status_code == 400 and r.json()["message"] == message, r.text
    assert server.generate("hi", max_new_tokens=2)["meta_info"]["finish_reason"]["type"] == "length"
