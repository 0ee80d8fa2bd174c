"""Tensor parallelism served: real SGLang servers with ``--tp-size 2`` on CPU (two gloo ranks, one core each).

Two TP=2 servers, stock and ASD (``eagle_tp2`` in tests/conftest.py), serve every check here. The ASD
server is ``tests/tp_asd_server.py``: each rank traces every verify step (what it committed, its whole
ledger table) and writes the trace on ``/flush_cache``; rank 1 perturbs its verify logits in every batch
that holds a sampled request (the batches SGLang broadcasts from rank 0). So the rank-equality checks
read both ranks' own state, and a rank that took its own decision where SGLang takes rank 0's shows up
as a trace that differs.
"""

from __future__ import annotations

import concurrent.futures
import re

import pytest
import requests

from tests.conftest import TP_TRACE_DIR
from tests.server_utils import assert_ranks_agree, check_receipt, tp_traces

pytestmark = [pytest.mark.server, pytest.mark.server_group("tp")]

PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away", "1, 2, 3,"]
MAX_NEW = 24


@pytest.fixture(scope="module")
def stock(servers):
    return servers.get("eagle_tp2", stock=True)


@pytest.fixture(scope="module")
def asd(servers):
    return servers.get("eagle_tp2")


def _greedy(server, prompt, **params):
    return server.generate(prompt, max_new_tokens=MAX_NEW, ignore_eos=True, **params)


def _sampled(i: int, **params) -> dict:
    return {"temperature": 0.8, "sampling_seed": 300 + i, "max_new_tokens": MAX_NEW, "ignore_eos": True, **params}


def _batch(server, prompts, params: list[dict]) -> list[dict]:
    r = requests.post(server.url + "/generate", json={"text": prompts, "sampling_params": params}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def _trace(server) -> list[list[dict]]:
    return tp_traces(server, TP_TRACE_DIR)


def test_stock_tp2_serves_and_equals_tp1(servers, stock):
    """Stock SGLang at TP 2 on CPU, greedy, equals TP 1 token for token on these prompts (float32: the
    row-parallel layers' all-reduce sums two partial sums, a + b, where TP 1 sums the whole row: the
    logits may differ in the last bits, which moves no argmax here)."""
    tp1 = servers.get("eagle", stock=True)
    log = stock.log_path.read_text(errors="replace")
    bound = dict(re.findall(r"TP(\d)\] sglang_asd: bound to cpus \[([\d, ]+)\]", log))
    cores = [set(bound.get(r, "").replace(",", " ").split()) for r in "01"]
    assert all(cores) and not cores[0] & cores[1], f"each rank must be bound to cores of its own: {bound}"
    for prompt in PROMPTS:
        out = _greedy(stock, prompt)
        assert out["meta_info"]["spec_verify_ct"] > 0, "EAGLE must verify at TP 2"
        assert out["output_ids"] == _greedy(tp1, prompt)["output_ids"], prompt


def test_budget_zero_equals_stock_tp2(stock, asd):
    for i, prompt in enumerate(PROMPTS):
        want = _greedy(stock, prompt)["output_ids"]
        assert _greedy(asd, prompt)["output_ids"] == want, prompt
        out = _greedy(asd, prompt, asd_budget=0)
        assert out["output_ids"] == want and out["meta_info"]["asd"]["reason"] == "strict", prompt
        assert (asd.generate(prompt, **_sampled(i, asd_budget=0))["output_ids"]
                == stock.generate(prompt, **_sampled(i))["output_ids"]), f"sampled, budget 0: {prompt}"


def test_every_rule_spends_within_its_receipt_at_tp2(asd):
    spent = 0.0
    for prompt in PROMPTS[:2]:
        spent += check_receipt(_greedy(asd, prompt, asd_budget=8), 8.0)["spent"]
        for rule, extra in (("local", {}), ("margin", {"asd_margin": 1.5}), ("threshold", {"asd_threshold": 0.5})):
            r = _greedy(asd, prompt, asd_budget=8, asd_rule=rule, **extra)["meta_info"]["asd"]
            assert r["applied"] and r["rule"].startswith(rule), r
    assert spent > 0, "the noisy EAGLE head must trigger exceptions at TP 2"


def test_receipts_hold_under_churn(asd):
    """Requests of different budgets and kinds arrive and finish while others decode."""
    jobs = [(p, dict(asd_budget=b)) for p in PROMPTS for b in (0, 2, 8)]
    jobs += [(p, _sampled(i, asd_budget=4)) for i, p in enumerate(PROMPTS)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda job: asd.generate(job[0], **{"max_new_tokens": MAX_NEW, **job[1]}), jobs))
    for (prompt, params), out in zip(jobs, outs):
        r = out["meta_info"]["asd"]
        if params.get("temperature"):
            assert r["applied"] and r["budget"] == 4 and 0 <= r["spent"] <= 4 + 1e-6, r
        elif params["asd_budget"] == 0:
            assert r["reason"] == "strict"
        else:
            check_receipt(out, float(params["asd_budget"]))


def test_both_ranks_commit_rank_0s_decisions_and_keep_equal_ledgers(asd):
    """Greedy and sampled ASD rows in one batch, rank 1's logits perturbed there: every rank commits rank
    0's tokens and its ledger table equals rank 0's after every verify step (the trace holds every step
    the server has run, this module's earlier checks included)."""
    n = 4
    params = [dict(max_new_tokens=MAX_NEW, ignore_eos=True, temperature=0, asd_budget=8) for _ in range(n)]
    params += [_sampled(i, asd_budget=8) for i in range(n)]
    outs = _batch(asd, PROMPTS + PROMPTS, params)
    for out, p in zip(outs, params):
        if p["temperature"] == 0:
            check_receipt(out, 8.0)
        else:
            assert out["meta_info"]["asd"]["applied"], out["meta_info"]["asd"]
    rank0, rank1 = _trace(asd)
    assert_ranks_agree(rank0, rank1, 8.0)
