"""sglang-asd as the decode server of a prefill/decode (PD) pair, on CPU, everything on 127.0.0.1.

The pair: a prefill server (``sglang_asd.launch_server`` with ``server_configs/cpu_tiny_eagle_prefill.yaml``,
no ``--asd-*`` flags: it runs no verify step, its receipts say ``unsupported:pd_prefill``) and an ASD
decode server (``cpu_tiny_eagle.yaml``);
the stock pair runs ``sglang_asd.stock_server`` on both sides. The prefill server gets the same
model and speculative flags as the decode server: with EAGLE it also runs the draft's prefill and
hands its top-k and hidden state to the decode server with the KV.

Transfer backend: ``mooncake_tcp`` (SGLang's alias for Mooncake with its TCP transport;
``mooncake-transfer-engine-non-cuda`` from scripts/requirements-cpu.txt, which needs the system's
``libibverbs.so.1`` even for TCP: Debian/Ubuntu ``libibverbs1``), with the CPU seam
``cpu_backend/seams/pd_transfer.py``. Where the engine cannot load, the pair runs SGLang's ``fake``
backend: the decode server then never receives the prompt's KV (its prefix KV is whatever its pool
held) nor the prefill's first token (a hash of the request id), so requests carry fixed ids and
run one at a time on fresh servers, and only a stock decode server on the same backend is a
reference. SGLang refuses ``fake`` on a prefill server (``arg_groups/pd_disaggregation_hook.py``:
"Prefill server does not support 'fake' as the transfer backend"), so the "pair" is its decode
server alone, and smg cannot front it (its bootstrap host is the prefill's, so the decode side
would wait for metadata that never comes): those tests are skipped, saying why.

The last tests run the decode servers with SGLang's overlap decode loop (``tests/cpu_overlap.py``,
test-only on CPU), on a fresh ASD pair.

A client of a bare pair sends each request to both servers with the same ``bootstrap_room`` (smg
does this for its clients); the response and its receipt come from the decode server.
At most three servers and smg run at once (the pool's servers are stopped first).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from sglang_asd.testing.server import free_port
from tests.server_utils import Server, check_receipt, metric
from tests.smg import Smg

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--model-path", "fixture:tiny-llama", "--speculative-algorithm", "EAGLE",
        "--speculative-draft-model-path", "fixture:tiny-eagle-noisy", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
DECODE_CONFIG = ["--config", str(ROOT / "server_configs" / "cpu_tiny_eagle.yaml"), "--enable-metrics"]
PREFILL_CONFIG = ["--config", str(ROOT / "server_configs" / "cpu_tiny_eagle_prefill.yaml")]  # = TINY, as README runs it
FAKE_HOST = "2.2.2.2"  # SGLang's FAKE_BOOTSTRAP_HOST: the fake backend's requests
PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time", "1, 2, 3,", "import numpy as np",
           "Dear Sir or Madam,", "The weather today", "SELECT * FROM"]
STOP_IDS = random.Random(0).sample(range(100, 2048), 160)  # frequent tokens of tiny-llama: slots churn
N_IDENTITY = 16
N_CHURN = 96


def _mooncake_loads() -> bool:
    done = subprocess.run([sys.executable, "-c", "import mooncake.engine"], capture_output=True)
    return done.returncode == 0


# SGLANG_ASD_TEST_PD_BACKEND=fake runs the fallback on a host where Mooncake loads
BACKEND = os.environ.get("SGLANG_ASD_TEST_PD_BACKEND") or ("mooncake_tcp" if _mooncake_loads() else "fake")


class Pair:
    """A prefill server and a decode server on one transfer backend."""

    def __init__(self, name: str, stock: bool, overlap: bool = False):
        self.bootstrap_port = free_port()
        common = ["--disaggregation-transfer-backend", BACKEND]
        module = "sglang_asd.stock_server" if stock else "sglang_asd.launch_server"
        prefill = TINY if stock else PREFILL_CONFIG  # the stock launcher takes no --config
        self.prefill = None if BACKEND == "fake" else Server(
            f"pd-{name}-prefill", [*prefill, *common, "--disaggregation-mode", "prefill",
                                   "--disaggregation-bootstrap-port", str(self.bootstrap_port)],
            module=module, wait=False)
        decode = TINY if stock else DECODE_CONFIG
        if overlap:  # SGLang's overlap decode loop (event_loop_overlap_disagg_decode), test-only on CPU
            module = "tests.overlap_stock_server" if stock else "tests.overlap_asd_server"
        self.decode = Server(f"pd-{name}-decode", [*decode, *common, "--disaggregation-mode", "decode"],
                             module=module, wait=False)
        for server in self.servers:
            server.ready()

    @property
    def servers(self) -> list:
        return [s for s in (self.decode, self.prefill) if s is not None]

    def generate(self, text: str, rid: str, **sampling) -> tuple[dict, dict | None]:
        """One request through the pair, as smg sends it: (decode's response, prefill's response)."""
        host = FAKE_HOST if BACKEND == "fake" else "127.0.0.1"
        body = {"text": text, "rid": rid, "bootstrap_host": host, "bootstrap_port": self.bootstrap_port,
                "bootstrap_room": random.randrange(1, 2 ** 62), "sampling_params": {"temperature": 0, **sampling}}
        with cf.ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(requests.post, s.url + "/generate", json=body, timeout=300) for s in self.servers]
            answers = [f.result() for f in futures]
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
        return answers[0].json(), answers[1].json() if len(answers) > 1 else None

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def _identity_jobs():
    return [(PROMPTS[i % len(PROMPTS)], f"pd-identity-{i}") for i in range(N_IDENTITY)]


def _run_identity(pair: Pair, budget) -> list[dict]:
    def one(job):
        text, rid = job
        extra = {} if budget is None else {"custom_params": {"asd_budget": budget}}  # a stock server refuses asd_*
        return pair.generate(text, rid, max_new_tokens=24, **extra)[0]
    if BACKEND == "fake":  # the decode side's prefix KV is its pool's history: one at a time
        return [one(job) for job in _identity_jobs()]
    with cf.ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, _identity_jobs()))


@pytest.fixture(scope="module")
def stock_outputs(servers):
    """The stock pair's answers; the pair is stopped before the ASD pair starts."""
    servers.stop_all()
    pair = Pair("stock", stock=True)
    try:
        return [o["output_ids"] for o in _run_identity(pair, None)]
    finally:
        pair.stop()


@pytest.fixture(scope="module")
def asd_pair(stock_outputs):
    pair = Pair("asd", stock=False)
    try:
        yield pair
    finally:
        pair.stop()


def test_budget_zero_equals_a_stock_pair_token_for_token(asd_pair, stock_outputs):
    ours = _run_identity(asd_pair, 0)  # the first requests of a fresh pair, as the stock pair's were
    assert [o["output_ids"] for o in ours] == stock_outputs
    assert all(o["meta_info"]["asd"]["applied"] is False and o["meta_info"]["asd"]["reason"] == "strict"
               for o in ours)


def test_receipts_come_from_the_decode_server(asd_pair):
    decode, prefill = asd_pair.generate("The capital of France is", "pd-receipt", max_new_tokens=24, asd_budget=8)
    check_receipt(decode, 8.0)
    assert decode["meta_info"]["asd"]["gate"] == 0.25 and decode["meta_info"].get("spec_verify_ct", 0) > 0
    if prefill is not None:  # the fake backend has no prefill server
        assert prefill["meta_info"]["asd"]["applied"] is False
        assert prefill["meta_info"]["asd"]["reason"] == "unsupported:pd_prefill"


def test_receipts_hold_under_slot_churn(asd_pair):
    """Many concurrent requests ending on frequent stop tokens: decode slots are freed and taken again
    every few steps; every receipt stays within its budget, events at output positions."""
    _churn(asd_pair)


def _churn(pair: Pair) -> None:
    rng = random.Random(1)
    jobs = [(PROMPTS[i % len(PROMPTS)] + " " * rng.randrange(3), [64.0, 0.5, 0][i % 3], f"pd-churn-{i}")
            for i in range(N_CHURN)]

    def one(job):
        text, budget, rid = job
        return pair.generate(text, rid, max_new_tokens=24, stop_token_ids=STOP_IDS, asd_budget=budget)[0]
    with cf.ThreadPoolExecutor(16) as pool:
        outs = list(pool.map(one, jobs))
    assert sum(len(o["output_ids"]) < 24 for o in outs) > N_CHURN // 2, "requests must mostly end on a stop token"
    spent = 0.0
    for (_, budget, _), out in zip(jobs, outs):
        if budget == 0:
            assert out["meta_info"]["asd"]["reason"] == "strict"
            continue
        spent += check_receipt(out, budget)["spent"]
    assert spent > 0, "a noisy EAGLE head must trigger exceptions"
    deadline = time.time() + 30
    while time.time() < deadline and metric(pair.decode, "sglang:asd_active_ledgers") > 0:
        time.sleep(0.5)
    assert metric(pair.decode, "sglang:asd_active_ledgers") == 0, "a freed decode slot kept its ledger row"


@pytest.fixture(scope="module")
def pd_gateway(asd_pair):
    if BACKEND == "fake":
        pytest.skip("smg in front of a PD pair needs a real transfer backend (SGLang's fake one is decode-only): "
                    "mooncake.engine does not load here (mooncake-transfer-engine-non-cuda needs libibverbs.so.1: "
                    "apt-get install libibverbs1)")
    gw = Smg(["--pd-disaggregation", "--prefill", asd_pair.prefill.url, str(asd_pair.bootstrap_port),
              "--decode", asd_pair.decode.url], workers=2)
    try:
        yield gw
    finally:
        gw.stop()


def test_smg_in_pd_mode_carries_budgets_and_decode_receipts(pd_gateway, asd_pair, stock_outputs):
    gw = pd_gateway
    # /generate: sampling_params.custom_params passes smg (CONTRACTS "Behind a gateway")
    outs = []
    for text, _ in _identity_jobs()[:4]:
        r = requests.post(gw.url + "/generate", timeout=300, json={
            "text": text, "sampling_params": {"temperature": 0, "max_new_tokens": 24, "custom_params": {"asd_budget": 0}}})
        assert r.status_code == 200, r.text
        outs.append(r.json())
    assert [o["output_ids"] for o in outs] == stock_outputs[:4]
    body = {"text": "The capital of France is",
            "sampling_params": {"temperature": 0, "max_new_tokens": 24, "custom_params": {"asd_budget": 8}}}
    r = requests.post(gw.url + "/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    check_receipt(r.json(), 8.0)
    # a sampling_params.asd_budget is dropped by smg: the receipt shows it
    body["sampling_params"] = {"temperature": 0, "max_new_tokens": 8, "asd_budget": 8}
    r = requests.post(gw.url + "/generate", json=body, timeout=300)
    assert r.status_code == 200 and r.json()["meta_info"]["asd"]["reason"] == "strict", r.text
    # OpenAI completions: top-level asd_budget, receipt in choices[0].asd (and top-level asd)
    r = requests.post(gw.url + "/v1/completions", timeout=300, json={
        "model": gw.model, "prompt": "The capital of France is", "max_tokens": 24, "temperature": 0, "asd_budget": 8})
    assert r.status_code == 200, r.text
    receipt = r.json()["choices"][0]["asd"]
    assert receipt["applied"] and receipt["budget"] == 8.0 and 0 <= receipt["spent"] <= 8.0
    assert r.json()["asd"] == receipt


@pytest.fixture(scope="module")
def overlap_pair(asd_pair, stock_outputs):
    """An ASD pair whose decode server runs SGLang's overlap loop (``tests/cpu_overlap.py``): batch k+1 is
    launched before batch k's results are processed. The other ASD pair is stopped first."""
    asd_pair.stop()
    pair = Pair("asd-overlap", stock=False, overlap=True)
    try:
        info = requests.get(pair.decode.url + "/server_info", timeout=30).text
        assert '"disable_overlap_schedule":false' in info.replace(" ", ""), "the decode server must run its overlap loop"
        yield pair
    finally:
        pair.stop()


def test_budget_zero_equals_a_stock_pair_under_the_overlap_decode_loop(overlap_pair, stock_outputs):
    ours = _run_identity(overlap_pair, 0)
    assert [o["output_ids"] for o in ours] == stock_outputs


def test_receipts_hold_under_slot_churn_under_the_overlap_decode_loop(overlap_pair):
    _churn(overlap_pair)
