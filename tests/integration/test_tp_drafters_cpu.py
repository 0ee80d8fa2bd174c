"""Tensor parallelism served on every other drafter: the EAGLE tree, STANDALONE, NGRAM, DSPARK and DFLASH on
real SGLang servers with ``--tp-size 2`` on CPU (two gloo ranks, one core each; the EAGLE chain:
``test_tp_cpu.py``).

One TP 2 server per drafter, ASD only: ``ALGORITHM_tp2`` in tests/conftest.py, ``tests/tp_asd_server.py``
(each rank traces every verify step, what it committed and its whole ledger table, and rank 1 perturbs
its verify logits in every batch holding a sampled request). It is started on first use, in the drafter's
block of algorithm tests (``tp2_twin``), whose stock TP 1 server of the same drafter it is compared
with; these tests run first in the block, so that server is then the least recently used one and the
first stopped when the block needs room. No other server is started for this module.

Budget 0 is compared with stock TP 1, not stock TP 2 (a stock TP 2 server per drafter would double the
cost): budget 0 runs SGLang's own verify for that request, so the TP 2 ASD server's budget-0 output is
stock TP 2's unless the ASD server's TP 2 run differs from SGLang's, which is what is under test, and
stock TP 2 = TP 1 holds for the target's forward (``test_stock_tp2_serves_and_equals_tp1`` on the chain:
the same tiny float32 target, whose all-reduce sums two partial sums and moves no argmax here), while
the drafter only proposes: a greedy stock server commits the target's argmax whatever it drafts. So
TP 2 ASD at budget 0 = stock TP 1 token for token on every drafter means it equals stock TP 2 too.
"""

from __future__ import annotations

import concurrent.futures
import os
import re

import pytest
import requests

from tests.conftest import TP_DRAFTERS, TP_TRACE_DIR
from tests.server_utils import assert_ranks_agree, check_receipt, tp_traces

pytestmark = [pytest.mark.server, pytest.mark.tp2_twin]

PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away", "1, 2, 3,"]
MAX_NEW = 24
BUDGET = 8.0
BLOCK_DRAFTERS = ("dspark", "dflash")  # sampled rows: "reason": "sampling" at any budget (CONTRACTS)
# Every rule, greedy: (asd_rule, extra fields). fly-bounded (fly under the ledger): window 1, as in
# test_fly_serving.py, so the tiny K = 3 drafts leave room for a deferral.
RULES = (("asd", {}), ("local", {}), ("margin", {"asd_margin": 1.0}), ("threshold", {"asd_threshold": 0.5}),
         ("fly-bounded", {"asd_fly_window_size": 1}))


def _tp2(servers, algorithm):
    """The drafter's TP 2 server, started once the block's two (started side by side) serve: a third
    start beside them can fail SGLang's start-up memory check, which charges this server with every
    drop of the host's free memory while it loads."""
    for stock in (True, False):
        servers.get(algorithm, stock=stock)
    server = servers.get(f"{algorithm}_tp2")
    bound = dict(re.findall(r"TP(\d)\] sglang_asd: bound to cpus \[([\d, ]+)\]",
                            server.log_path.read_text(errors="replace")))
    assert set(bound) == {"0", "1"}, f"{algorithm}: two ranks must serve, each bound to its cores: {bound}"
    return server


def _check(algorithm: str, out: dict, params: dict) -> None:
    """A churn row's receipt, by kind: budget 0 strict; sampled rows ASD's on the EAGLE family and
    ``sampling`` on the block drafters; greedy rows their rule's receipt."""
    r, n = out["meta_info"]["asd"], len(out["output_ids"])
    assert n == params["max_new_tokens"], (n, params)
    if params["asd_budget"] == 0:
        assert r["reason"] == "strict", r
    elif params.get("temperature"):
        if algorithm in BLOCK_DRAFTERS:
            assert not r["applied"] and r["reason"] == "sampling", r
        else:
            assert r["applied"] and r["budget"] == BUDGET and 0 <= r["spent"] <= BUDGET + 1e-6, r
    elif params["asd_rule"] == "asd":
        check_receipt(out, BUDGET)
    else:
        assert r["applied"] and r["reason"] is None and r["rule"] == f"{params['asd_rule']}-1", r
        assert r["exceptions"] == len(r["events"]) and abs(sum(e["regret"] for e in r["events"]) - r["spent"]) < 1e-4
        for e in r["events"]:
            assert out["output_ids"][e["pos"]] == e["draft"] != e["target"] and e["regret"] >= 0
        if params["asd_rule"] == "fly-bounded":
            assert r["spent"] <= BUDGET + 1e-6 and abs(r["remaining"] - (BUDGET - r["spent"])) < 1e-5, r


@pytest.mark.parametrize("algorithm", TP_DRAFTERS)
def test_tp2_churn_receipts_and_both_ranks_equal(servers, algorithm):
    """Greedy rows of every rule and budget 0, and sampled rows, arrive together with ragged lengths (slots
    freed and reused while others decode), rank 1's logits perturbed (in every batch holding a sampled
    request; DSPARK and DFLASH: in every batch): every receipt holds, and after every verify step the
    server has run rank 1 committed rank 0's tokens and holds rank 0's ledger table, a perturbed step
    with a charged ledger row among them. First on a fresh server: NGRAM's cache has not yet learnt
    these prompts' greedy continuations (its exact drafts would leave no mismatch to charge)."""
    tp2 = _tp2(servers, algorithm)
    jobs = []
    for i, prompt in enumerate(PROMPTS):
        for j, (rule, extra) in enumerate(RULES):
            jobs.append((prompt, dict(asd_budget=BUDGET, asd_rule=rule, max_new_tokens=12 + 4 * ((i + j) % 4),
                                      ignore_eos=True, **extra)))
        jobs.append((prompt, dict(asd_budget=0, max_new_tokens=16, ignore_eos=True)))
        jobs.append((prompt, dict(asd_budget=BUDGET, temperature=0.8, sampling_seed=300 + i,
                                  max_new_tokens=MAX_NEW, ignore_eos=True)))

    def run(job):
        prompt, params = job
        r = requests.post(tp2.url + "/generate", json={"text": prompt, "sampling_params": {"temperature": 0, **params}},
                          timeout=300)
        assert r.status_code == 200, r.text
        return r.json()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(run, jobs))
    for (_, params), out in zip(jobs, outs):
        _check(algorithm, out, params)

    rank0, rank1 = tp_traces(tp2, os.path.join(TP_TRACE_DIR, f"{algorithm}_tp2"))
    assert_ranks_agree(rank0, rank1, BUDGET, label=f"{algorithm}, ", perturbed_charge=True)


@pytest.mark.stock_twin
@pytest.mark.parametrize("algorithm", TP_DRAFTERS)
def test_tp2_serves_and_budget_zero_equals_stock(servers, algorithm):
    """The drafter serves at TP 2 (both ranks up, verify rounds run) and budget 0 is stock token for token
    (stock TP 1 of the same drafter: the module docstring says why that is stock TP 2 too)."""
    tp2, stock = _tp2(servers, algorithm), servers.get(algorithm, stock=True)
    for prompt in PROMPTS:
        want = stock.generate(prompt, max_new_tokens=MAX_NEW, ignore_eos=True)["output_ids"]
        out = tp2.generate(prompt, max_new_tokens=MAX_NEW, ignore_eos=True, asd_budget=0)
        assert out["meta_info"]["spec_verify_ct"] > 0, f"{algorithm} must verify at TP 2"
        assert out["output_ids"] == want and out["meta_info"]["asd"]["reason"] == "strict", prompt
