"""ASD with SGLang's overlap scheduler on (its GPU default), run on CPU through ``tests/cpu_overlap.py``.

Under overlap, batch N+1 is launched before batch N's results are processed: a request that
stops in batch N is still in batch N+1, and its request-pool slot is freed and handed (LIFO) to a
waiting request while N+1 is in flight. Requests here stop on frequent stop tokens, so slots churn
every few steps. Budget 0 must still be stock SGLang (with overlap) token for token, and every
receipt must stay within its budget with events that sum to what it spent.
"""

import concurrent.futures as cf
import random
import time

import pytest
import requests

from tests.server_utils import check_receipt, metric

pytestmark = [pytest.mark.server, pytest.mark.server_group("overlap")]

PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time", "1, 2, 3,", "import numpy as np",
           "Dear Sir or Madam,", "The weather today", "SELECT * FROM"]
# Frequent tokens of tiny-llama's output act as stop tokens: requests end after a few tokens, not
# by length (SGLang drops requests finishing by length from the next batch in advance; a stop token
# is only seen when the batch is processed, which is the overlap lag this test is about).
STOP_IDS = random.Random(0).sample(range(100, 2048), 160)
N_REQUESTS = 240


def _jobs(budgets):
    rng = random.Random(1)
    return [(PROMPTS[i % len(PROMPTS)] + " " * rng.randrange(3), budgets[i % len(budgets)]) for i in range(N_REQUESTS)]


def _run(server, jobs, concurrency=16):
    def one(job):
        prompt, budget = job
        params = {"max_new_tokens": 24, "stop_token_ids": STOP_IDS}
        if budget is not None:
            params["asd_budget"] = budget
        return server.generate(prompt, **params)
    with cf.ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, jobs))


@pytest.fixture(scope="module")
def asd(servers):
    return servers.get("eagle", overlap=True)


def _find(info, key):
    if isinstance(info, dict):
        if key in info:
            return info[key]
        for value in info.values():
            found = _find(value, key)
            if found is not None:
                return found
    return None


def test_overlap_is_really_on(asd):
    info = requests.get(asd.url + "/server_info", timeout=30).json()
    assert _find(info, "disable_overlap_schedule") is False
    assert "Overlap schedule is not implemented" not in open(asd.log_path, errors="replace").read()


def test_budget_zero_equals_stock_under_overlap_and_slot_churn(servers, asd):
    stock = _run(servers.get("eagle", stock=True, overlap=True), _jobs([None]))
    ours = _run(asd, _jobs([0]))
    lengths = [len(o["output_ids"]) for o in stock]
    assert sum(n < 24 for n in lengths) > N_REQUESTS // 2, "requests must mostly end on a stop token"
    assert [o["output_ids"] for o in ours] == [o["output_ids"] for o in stock]
    assert all(o["meta_info"]["asd"]["applied"] is False for o in ours)


def test_receipts_stay_within_budget_under_overlap_and_slot_churn(asd):
    jobs = _jobs([64.0, 0.5])
    outs = _run(asd, jobs)
    spent = 0.0
    for (_, budget), out in zip(jobs, outs):
        spent += check_receipt(out, budget)["spent"]
    assert spent > 0, "a noisy EAGLE head must trigger exceptions"
    deadline = time.time() + 30
    while time.time() < deadline and metric(asd, "sglang:asd_active_ledgers") > 0:
        time.sleep(0.5)
    assert metric(asd, "sglang:asd_active_ledgers") == 0, "a freed slot kept its ledger row"
