"""Sampled requests on real servers serving SGLang's sampling verify on CPU (``SGLANG_ASD_CPU_SAMPLING``, on
by default, ``sglang_asd/cpu_backend/seams/sampling.py``): unseeded requests draw fresh randomness, seeded
ones reproduce, budget 0 is stock SGLang's sampling token for token (same ``sampling_seed``: SGLang's seeded coins),
a budget gets the sampled rule (``asd-sampled-1``) with receipts that never overspend, and sampled
ASD rows, greedy ASD rows and stock rows share batches.

The tiny target is nearly flat at temperature 0.7 (hardly any draft token reaches the floor), so the
budget tests sample at temperature 0.1 and the ASD servers run with ``--asd-sampled-floor 0.05``.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.server_utils import check_receipt, metric

pytestmark = pytest.mark.server

PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away", "1, 2, 3,"]
MAX_NEW = 24
ASD_EXTRA = ("--asd-sampled-floor", "0.05")
FLOOR, POWER, CAP = 0.05, 0.5, 2  # the ASD servers' sampled rule (power and cap: the defaults)
ALGORITHMS = ["eagle", "eagle_tree", "standalone", "ngram"]  # every algorithm that verifies in eagle_sample
EAGLE = ["eagle", "eagle_tree"]
# NGRAM drafts from a cache of earlier requests, so even stock SGLang's seeded sampling differs from one
# request to the next (the coins are seeded, the draft tree they walk is not): receipts only.
REPRODUCIBLE = ["eagle", "eagle_tree", "standalone"]


def _asd(servers, algorithm):
    return servers.get(algorithm, extra=ASD_EXTRA, sampling=True)


def _stock(servers, algorithm):
    return servers.get(algorithm, stock=True, sampling=True)


def _sampled(i: int, **params) -> dict:
    return {"temperature": 0.7, "sampling_seed": 1000 + i, "max_new_tokens": MAX_NEW, **params}


def _outputs(server, **params):
    return [server.generate(p, **_sampled(i, **params))["output_ids"] for i, p in enumerate(PROMPTS)]


@pytest.mark.parametrize("algorithm", REPRODUCIBLE)
def test_budget_zero_equals_stock_sampling(servers, algorithm):
    stock = _stock(servers, algorithm)
    want = _outputs(stock)
    assert _outputs(stock) == want, "seeded sampling must be deterministic"
    greedy = [stock.generate(p, max_new_tokens=MAX_NEW)["output_ids"] for p in PROMPTS]
    assert want != greedy, "the stock server must take SGLang's sampling branch"
    asd = _asd(servers, algorithm)
    assert _outputs(asd) == want, "no budget must be stock SGLang's sampling, token for token"
    assert _outputs(asd, asd_budget=0) == want, "budget 0 must be stock SGLang's sampling, token for token"
    assert _outputs(asd, asd_budget=8, asd_sampled_max_relaxed_per_block=0) == want, "cap 0 must be exact"
    top = dict(top_k=20, top_p=0.9)
    assert _outputs(asd, asd_budget=0, **top) == _outputs(stock, **top), "top-k / top-p, budget 0"
    r = asd.generate(PROMPTS[0], **_sampled(0, asd_budget=0))["meta_info"]["asd"]
    assert r["applied"] is False and r["reason"] == "strict" and r["rule"] == "asd-sampled-1"


@pytest.mark.parametrize("stock", [True, False], ids=["stock", "asd"])
def test_unseeded_requests_draw_fresh_randomness_and_seeded_ones_reproduce(servers, stock):
    """Without ``sampling_seed`` every request draws its own coins, one after another or side by side in
    one batch (the tiny target is nearly flat at temperature 1: equal 16-token outputs would be a fluke);
    with one, identical requests are identical."""
    server = servers.get("eagle", stock=stock)
    params = dict(temperature=1.0, max_new_tokens=16, ignore_eos=True, **({} if stock else {"asd_budget": 8}))
    one_by_one = {tuple(server.generate(PROMPTS[0], **params)["output_ids"]) for _ in range(3)}
    with ThreadPoolExecutor(4) as pool:
        side_by_side = {tuple(o["output_ids"]) for o in pool.map(lambda _: server.generate(PROMPTS[0], **params),
                                                                  range(4))}
    assert len(one_by_one) >= 2 and len(side_by_side) >= 2, (one_by_one, side_by_side)
    seeded = [server.generate(PROMPTS[0], sampling_seed=5, **params)["output_ids"] for _ in range(2)]
    assert seeded[0] == seeded[1]


def check_sampled_receipt(out: dict, budget: float) -> dict:
    """A sampled receipt agrees with the output and never overspends: events at their output positions
    (an accepted relaxed token is the token there, a rejected one is not), charges = the binary KL of
    (a, q), summing to spent."""
    meta, ids = out["meta_info"], out["output_ids"]
    r = meta["asd"]
    assert r["applied"] and r["reason"] is None and r["rule"] == "asd-sampled-1" and r["budget"] == budget
    assert (r["floor"], r["power"], r["max_relaxed_per_block"]) == (FLOOR, POWER, CAP)
    assert 0 <= r["spent"] <= budget and abs(r["remaining"] - (budget - r["spent"])) < 1e-6
    assert r["relaxed"] == len(r["events"]) or r["events_truncated"]
    assert r["relaxed"] <= CAP * meta["spec_verify_ct"]
    assert abs(sum(e["charge"] for e in r["events"]) - r["spent"]) < 1e-5
    positions = [e["pos"] for e in r["events"]]
    assert positions == sorted(set(positions)) and all(0 <= p < len(ids) for p in positions)
    for e in r["events"]:
        q, a = e["q"], e["a"]
        assert FLOOR <= q < a <= 1 and abs(a - q ** POWER) < 1e-5
        kl = a * math.log(a / q) + ((1 - a) * math.log((1 - a) / (1 - q)) if a < 1 else 0.0)
        assert abs(e["charge"] - kl) < 1e-4 * max(1.0, kl)
        assert (ids[e["pos"]] == e["token"]) == e["accepted"], e
    return r


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_sampled_budgets_get_receipts_that_never_overspend(servers, algorithm):
    asd = _asd(servers, algorithm)
    relaxed = 0
    for budget in (0.5, 8.0):
        for i, p in enumerate(PROMPTS):
            out = asd.generate(p, **_sampled(i, temperature=0.1, asd_budget=budget, ignore_eos=True))
            relaxed += check_sampled_receipt(out, budget)["relaxed"]
    assert relaxed > 0 or algorithm not in EAGLE, "the tiny EAGLE pair must relax some nodes"


def test_a_budget_lengthens_accepted_blocks(servers):
    """Accept length with a budget >= without (noisy tiny EAGLE head, same seeds and lengths)."""
    asd = _asd(servers, "eagle")

    def verify_rounds(budget):
        return sum(asd.generate(p, **_sampled(i, temperature=0.1, asd_budget=budget, ignore_eos=True))
                   ["meta_info"]["spec_verify_ct"] for i, p in enumerate(PROMPTS))

    assert verify_rounds(8) < verify_rounds(0)


def test_sampled_greedy_and_stock_rows_share_batches(servers):
    """Concurrent requests of every kind: sampled with a budget, greedy with a budget, and each at budget
    0; every receipt checks out, and the greedy rows are what they are alone."""
    asd = _asd(servers, "eagle")
    kinds = [dict(temperature=0.1, asd_budget=8), dict(temperature=0, asd_budget=8),
             dict(temperature=0.7, asd_budget=0), dict(temperature=0, asd_budget=0)]
    jobs = [(p, dict(_sampled(i, ignore_eos=True), **kind)) for i, p in enumerate(PROMPTS) for kind in kinds] * 2
    solo = {j: asd.generate(jobs[j][0], **jobs[j][1]) for j, (_, s) in enumerate(jobs) if s["temperature"] == 0}
    with ThreadPoolExecutor(len(jobs)) as pool:
        outs = list(pool.map(lambda job: asd.generate(job[0], **job[1]), jobs))
    for j, ((_, params), out) in enumerate(zip(jobs, outs)):
        if params["asd_budget"] == 0:
            assert out["meta_info"]["asd"]["reason"] == "strict"
        elif params["temperature"] > 0:
            check_sampled_receipt(out, 8.0)
        else:
            check_receipt(out, 8.0)
        if j in solo:
            assert out["output_ids"] == solo[j]["output_ids"], "a greedy row must not depend on its batch"


def test_sampled_metrics_carry_the_rule_label(servers):
    asd = _asd(servers, "eagle")
    before = metric(asd, "sglang:asd_kl_spent_nats_total")
    spent = sum(asd.generate(p, **_sampled(i, temperature=0.1, asd_budget=8, ignore_eos=True))["meta_info"]["asd"]
                ["spent"] for i, p in enumerate(PROMPTS))
    text = requests.get(asd.url + "/metrics").text
    assert 'rule="asd-sampled"' in text
    assert any(line.startswith("sglang:asd_relaxed_nodes_total{") and 'rule="asd-sampled"' in line
               for line in text.splitlines())
    assert abs(metric(asd, "sglang:asd_kl_spent_nats_total") - before - spent) < 1e-3


BAD_FIELDS = [("asd_sampled_floor", 1.5), ("asd_sampled_floor", 0.01), ("asd_sampled_floor", "x"),
              ("asd_sampled_power", 1), ("asd_sampled_power", 0.2), ("asd_sampled_max_relaxed_per_block", 3),
              ("asd_sampled_max_relaxed_per_block", -1), ("asd_sampled_max_relaxed_per_block", 1.5)]


def test_bad_sampled_fields_are_400s_naming_field_and_value(servers):
    asd = _asd(servers, "eagle")
    for field, value in BAD_FIELDS:
        body = {"text": "hi", "sampling_params": {"temperature": 0.7, "max_new_tokens": 2, "asd_budget": 1,
                                                   field: value}}
        r = requests.post(asd.url + "/generate", json=body)
        assert r.status_code == 400 and field in r.text and repr(value) in r.text, (field, value, r.text)
        r = requests.post(asd.url + "/v1/completions", json={"model": "x", "prompt": "hi", "max_tokens": 2,
                                                              "temperature": 0.7, field: value})
        assert r.status_code == 400 and field in r.text, (field, value, r.text)
    ok = asd.generate("hi", **_sampled(0, asd_budget=1, asd_sampled_floor=0.5, asd_sampled_power=0.8,
                                       asd_sampled_max_relaxed_per_block=1))["meta_info"]["asd"]
    assert (ok["floor"], ok["power"], ok["max_relaxed_per_block"]) == (0.5, 0.8, 1)
