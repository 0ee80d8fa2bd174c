"""Sampled requests on SGLang's block drafters, DSPARK and DFLASH, on real CPU servers, with the CPU
sampling switch on and off (``sglang_asd/cpu_backend/seams/chain_sampling.py``).

Stock SGLang's DSPARK accept launches a Triton kernel for any batch holding a sampled request, which
on CPU (no Triton driver) stopped the server. Here every mix of sampled and greedy requests, with and
without ``asd_budget``, is served and the server stays up; sampled rows are sampled with the switch on
and verified greedily with it off (as SGLang's CPU path verifies EAGLE's); a sampled request's
receipt says ``"applied": false, "reason": "sampling"`` whatever its budget (the block drafters'
seams decide greedy rows only), and greedy requests keep their ASD receipts.

Budget 0 against stock SGLang: the two accepts draw their coins from the process's torch generator
(not from the request's ``sampling_seed``), so a sampled request is reproducible only on a server
with the same ``--random-seed`` and the same history, on a GPU too. The identity test therefore
sends the same requests, one at a time, to a fresh stock and a fresh ASD server started with the
same ``--random-seed``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.server_utils import check_receipt

pytestmark = pytest.mark.server

DRAFTERS = ["dspark", "dflash"]
SEEDED = ("--random-seed", "11")  # the identity twins' extra arguments (fresh servers, used by this module only)
PROMPT_IDS = [[12, 345, 678, 90], [1000, 1500, 7], [5, 6, 7, 8, 9, 10], [2000, 33]]
MAX_NEW = 24


def _request(i: int, temperature: float, **params) -> dict:
    return {"input_ids": PROMPT_IDS[i % len(PROMPT_IDS)],
            "sampling_params": {"temperature": temperature, "max_new_tokens": MAX_NEW, "sampling_seed": 100 + i,
                                **params}}


def _post(server, body) -> dict:
    r = requests.post(server.url + "/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def _alive(server) -> None:
    assert requests.get(server.url + "/health", timeout=30).status_code == 200


def _mixed(i: int) -> dict:
    """Request i of a mixed batch: sampled or greedy, with or without a budget."""
    sampled, budget = i % 2 == 0, (i // 2) % 2 == 1
    return _request(i, 0.8 if sampled else 0.0, **({"asd_budget": 8} if budget else {}))


def _check_served(asd, stock, sampled_are_greedy: bool) -> None:
    """A concurrent mixed batch on the ASD server, then one request at a time: all served, the server
    up, receipts truthful; ``sampled_are_greedy``: sampled rows verify greedily (switch off)."""
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda i: _post(asd, _mixed(i)), range(8)))
    _alive(asd)
    for i, out in enumerate(outs):
        body, receipt = _mixed(i), out["meta_info"]["asd"]
        budget = body["sampling_params"].get("asd_budget", 0)
        assert len(out["output_ids"]) == MAX_NEW or out["meta_info"]["finish_reason"]["type"] == "stop"
        if body["sampling_params"]["temperature"] > 0:
            assert receipt["applied"] is False and receipt["reason"] == "sampling", receipt
            assert receipt["budget"] == budget and receipt["spent"] == 0 and receipt["relaxed"] == 0, receipt
        elif budget:
            check_receipt(out, 8.0)
        else:
            assert receipt["applied"] is False and receipt["reason"] == "strict", receipt
    # greedy without a budget is stock SGLang, token for token
    for i in range(1, 8, 4):
        assert outs[i]["output_ids"] == _post(stock, _request(i, 0.0))["output_ids"]
    # each sampled output against the greedy continuation of the prompt and its first (sampled) token
    greedy_after_first = []
    for i in range(0, 8, 2):
        first = outs[i]["output_ids"][0]
        cont = _post(stock, {"input_ids": PROMPT_IDS[i % len(PROMPT_IDS)] + [first],
                             "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW - 1}})["output_ids"]
        greedy_after_first.append(outs[i]["output_ids"][1:] == cont)
    if sampled_are_greedy:
        assert all(greedy_after_first), "with the switch off, sampled rows verify greedily (SGLang's CPU path)"
    else:
        assert not all(greedy_after_first), "with the switch on, sampled rows are sampled"
    _alive(stock)


@pytest.mark.stock_twin
@pytest.mark.parametrize("algorithm", DRAFTERS)
def test_switch_off_sampled_requests_are_served_greedily(servers, algorithm):
    # the stock server of the pool's block serves the greedy references (greedy decoding ignores the switch)
    _check_served(servers.get(algorithm, sampling=False), servers.get(algorithm, stock=True), sampled_are_greedy=True)


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_switch_on_budget_zero_equals_stock_and_requests_are_served(servers, drafter):
    stock = servers.get(drafter, stock=True, extra=SEEDED, sampling=True)
    asd = servers.get(drafter, extra=SEEDED, sampling=True)
    # the same requests, one at a time, on two fresh servers with the same seed: the same coins
    sequence = [_request(0, 0.8), _request(1, 0.8), _request(0, 0.8), _request(2, 0.8, top_k=20, top_p=0.9)]
    want = [_post(stock, body)["output_ids"] for body in sequence]
    budgets = [{}, {"asd_budget": 0}, {"asd_budget": 8}, {"asd_budget": 8}]
    got = [_post(asd, {**body, "sampling_params": {**body["sampling_params"], **extra}})
           for body, extra in zip(sequence, budgets)]
    assert [o["output_ids"] for o in got] == want, "a sampled request must be stock SGLang's, token for token"
    assert want[0] != want[2], "the accept's coins come from the process's generator, not the request's seed"
    for out, extra in zip(got, budgets):
        receipt = out["meta_info"]["asd"]
        assert receipt["applied"] is False and receipt["reason"] == "sampling"
        assert receipt["budget"] == extra.get("asd_budget", 0) and receipt["spent"] == 0
    _check_served(asd, stock, sampled_are_greedy=False)


@pytest.mark.parametrize("algorithm", DRAFTERS)
def test_greedy_asd_rows_beside_a_sampled_request_are_decided_by_asd(servers, algorithm):
    """A greedy ASD request batched with a sampled one is decided by ASD, as alone (the same tokens and
    receipt): the batch takes SGLang's sampling accept, and DFLASH's calls the kernel EAGLE's sampling
    hook wraps, which must leave a block drafter's step to the accept's seam (``VerifyStep.chain``);
    before, such rows were served strictly under an ``applied`` receipt with nothing spent."""
    server = servers.get(algorithm)
    exceptions = 0
    for i in range(len(PROMPT_IDS)):
        greedy = _request(i, 0.0, asd_budget=8, ignore_eos=True)
        alone = _post(server, greedy)
        outs = _post(server, {"input_ids": [greedy["input_ids"], PROMPT_IDS[(i + 1) % len(PROMPT_IDS)]],
                              "sampling_params": [greedy["sampling_params"],
                                                  {"temperature": 0.8, "max_new_tokens": MAX_NEW, "ignore_eos": True}]})
        mixed = outs[0]
        check_receipt(mixed, 8.0)
        assert mixed["output_ids"] == alone["output_ids"], f"{algorithm}, prompt {i}"
        assert mixed["meta_info"]["asd"]["spent"] == pytest.approx(alone["meta_info"]["asd"]["spent"], abs=1e-5)
        exceptions += alone["meta_info"]["asd"]["exceptions"]
    assert exceptions > 0, f"{algorithm}: the noisy draft must take exceptions alone, or the check shows nothing"
