"""ASD on a real server: receipts, acceptance, concurrency, API errors, OpenAI, streaming, abort, metrics."""

import concurrent.futures as cf
import json
import re

import pytest
import requests

from tests.server_utils import check_receipt, metric

pytestmark = pytest.mark.server

PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away", "1, 2, 3,",
           "import numpy as np", "Dear Sir or Madam,", "The weather today", "SELECT * FROM"]
ALGORITHMS = ["standalone", "eagle", "eagle_tree", "eagle3", "ngram"]


@pytest.fixture(scope="module")
def server(servers):
    return servers.get("eagle")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_budget_receipts_and_acceptance(servers, algorithm):
    server = servers.get(algorithm)
    strict_len, asd_len, spent = 0.0, 0.0, 0.0
    for p in PROMPTS[:4]:
        strict = server.generate(p, max_new_tokens=32, ignore_eos=True)
        asd = server.generate(p, max_new_tokens=32, ignore_eos=True, asd_budget=8)
        r = check_receipt(asd, 8.0)
        strict_len += strict["meta_info"]["spec_accept_length"]
        asd_len += asd["meta_info"]["spec_accept_length"]
        spent += r["spent"]
        # The output up to the first exception is the strict output.
        first = r["events"][0]["pos"] if r["events"] else len(asd["output_ids"])
        assert asd["output_ids"][:first] == strict["output_ids"][:first]
    assert asd_len >= strict_len, f"{algorithm}: accept length {asd_len / 4:.2f} < strict {strict_len / 4:.2f}"
    if algorithm != "ngram":  # n-gram drafts on random text are rare and far from the argmax
        assert spent > 0, f"{algorithm}: a noisy draft must trigger exceptions at budget 8"


def test_exact_draft_is_fully_accepted(servers):
    server = servers.get("eagle_exact")
    out = server.generate("The quick brown fox", max_new_tokens=40, ignore_eos=True, asd_budget=8)
    meta = out["meta_info"]
    assert meta["spec_accept_length"] == pytest.approx(4.0, abs=0.35)  # steps 3 + bonus
    assert meta["asd"]["exceptions"] == 0


@pytest.mark.server_group("eagle")
def test_concurrent_requests_match_solo(server):
    budgets = [0, 2, 8, 32]
    jobs = [(PROMPTS[i % len(PROMPTS)], budgets[i % 4]) for i in range(32)]
    solo = {job: server.generate(job[0], max_new_tokens=20, ignore_eos=True, asd_budget=job[1]) for job in set(jobs)}
    with cf.ThreadPoolExecutor(32) as pool:
        together = list(pool.map(lambda j: server.generate(j[0], max_new_tokens=20, ignore_eos=True, asd_budget=j[1]), jobs))
    for job, out in zip(jobs, together):
        assert out["output_ids"] == solo[job]["output_ids"], job
        a, b = out["meta_info"]["asd"], solo[job]["meta_info"]["asd"]
        # Same decisions; regrets agree to float32 rounding (batched and solo matmuls differ in ulps).
        assert a["exceptions"] == b["exceptions"], job
        assert _decisions(a) == _decisions(b), job
        assert a["spent"] == pytest.approx(b["spent"], abs=1e-4), job


@pytest.mark.server_group("eagle")
@pytest.mark.parametrize("value", [-1, "8", True, [1], 1e9, None, "nan"])
def test_bad_budget_is_400_and_serving_continues(server, value):
    body = {"text": "hi", "sampling_params": {"temperature": 0, "max_new_tokens": 4}}
    if value == "nan":
        raw = '{"text": "hi", "sampling_params": {"max_new_tokens": 4, "asd_budget": NaN}}'
        r = requests.post(server.url + "/generate", data=raw, headers={"content-type": "application/json"})
    elif value is None:
        body["sampling_params"]["asd_budget"] = None
        r = requests.post(server.url + "/generate", json=body)
        assert r.status_code == 200, r.text  # null = not given
        return
    else:
        body["sampling_params"]["asd_budget"] = value
        r = requests.post(server.url + "/generate", json=body)
    assert r.status_code == 400, r.text
    assert "asd_budget" in r.json()["error"] and "got" in r.json()["error"]
    assert server.generate("hi", max_new_tokens=4)["meta_info"]["finish_reason"]["type"] == "length"


@pytest.mark.server_group("eagle")
@pytest.mark.parametrize("route", ["/generate", "/v1/completions", "/v1/chat/completions"])
def test_a_number_no_type_holds_is_a_400_naming_the_field_on_every_route(server, route):
    """Hundreds of digits (beyond float), and thousands (beyond what Python parses from JSON text)."""
    for field in ("asd_budget", "asd_max_exceptions_per_block"):
        for digits in (400, 5000):
            literal = "9" * digits
            if route == "/generate":
                raw = f'{{"text": "hi", "sampling_params": {{"max_new_tokens": 4, "{field}": {literal}}}}}'
            else:
                chat = route.endswith("chat/completions")
                what = '"messages": [{"role": "user", "content": "hi"}]' if chat else '"prompt": "hi"'
                raw = f'{{"model": "default", {what}, "max_tokens": 4, "{field}": {literal}}}'
            r = requests.post(server.url + route, data=raw, headers={"content-type": "application/json"})
            assert r.status_code == 400, (field, digits, r.status_code, r.text[:300])
            message = r.json()["error" if route == "/generate" else "message"]
            assert message.startswith(field) and f"an integer of {digits} digits" in message, message
    assert server.generate("hi", max_new_tokens=4)["meta_info"]["finish_reason"]["type"] == "length"


@pytest.mark.server_group("eagle")
def test_openai_routes_carry_budget_and_receipt(server):
    base = server.url + "/v1"
    r = requests.post(base + "/completions", json={"model": "default", "prompt": "The quick brown fox",
                                                   "max_tokens": 16, "temperature": 0, "asd_budget": 8})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["choices"][0]["asd"]["budget"] == 8.0 and data["asd"] == data["choices"][0]["asd"]
    r = requests.post(base + "/chat/completions", json={
        "model": "default", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16,
        "temperature": 0, "custom_params": {"asd_budget": 4}})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["asd"]["budget"] == 4.0
    r = requests.post(base + "/completions", json={"model": "default", "prompt": "x", "asd_budget": -2})
    assert r.status_code == 400 and "asd_budget" in r.json()["message"]
    from openai import OpenAI

    client = OpenAI(base_url=base, api_key="none")
    c = client.completions.create(model="default", prompt="Once upon", max_tokens=8, temperature=0,
                                  extra_body={"asd_budget": 2})
    assert c.model_extra["asd"]["budget"] == 2.0


@pytest.mark.server_group("eagle")
def test_generate_top_level_fields(server):
    """Top-level fields on /generate (what bench_serving's --extra-request-body sends) apply to every
    sampling_params of the request; a second place may repeat the value, not change it."""
    greedy = {"temperature": 0, "max_new_tokens": 8}
    r = requests.post(server.url + "/generate", json={
        "text": PROMPTS[:2], "asd_budget": 4, "sampling_params": [dict(greedy), {**greedy, "asd_budget": 4.0}]})
    assert r.status_code == 200, r.text
    for out in r.json():
        check_receipt(out, 4.0)
    r = requests.post(server.url + "/generate", json={"text": PROMPTS[2], "asd_budget": 2, "asd_rule": "local",
                                                      "sampling_params": greedy})
    assert r.status_code == 200, r.text
    receipt = r.json()["meta_info"]["asd"]
    assert receipt["applied"] and receipt["budget"] == 2.0 and receipt["rule"] == "local-1", receipt
    r = requests.post(server.url + "/generate", json={"text": "x", "asd_budget": 8, "sampling_params": {"asd_budget": 4}})
    assert r.status_code == 400 and r.json() == {
        "error": "asd_budget is given twice with different values: 8 (top level) and 4 (sampling_params.asd_budget)"}


def _decisions(receipt: dict) -> list:
    return [(e["pos"], e["draft"], e["target"]) for e in receipt["events"]]


def _sse(resp):
    for line in resp.iter_lines():
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            yield json.loads(line[6:])


@pytest.mark.server_group("eagle")
def test_streaming_receipts(server):
    body = {"text": "The quick brown fox", "stream": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": 24, "ignore_eos": True, "asd_budget": 8}}
    with requests.post(server.url + "/generate", json=body, stream=True) as resp:
        chunks = list(_sse(resp))
    assert len(chunks) > 1 and all("asd" in c["meta_info"] for c in chunks)
    final = server.generate("The quick brown fox", max_new_tokens=24, ignore_eos=True, asd_budget=8)
    streamed, alone = chunks[-1]["meta_info"]["asd"], final["meta_info"]["asd"]
    assert _decisions(streamed) == _decisions(alone)  # the prompt is cached now: regrets to float32 rounding
    assert streamed["spent"] == pytest.approx(alone["spent"], abs=1e-4)
    body = {"model": "default", "prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0,
            "stream": True, "asd_budget": 8}
    with requests.post(server.url + "/v1/completions", json=body, stream=True) as resp:
        chunks = list(_sse(resp))
    finals = [ch for c in chunks for ch in c["choices"] if ch.get("finish_reason")]
    assert finals and finals[-1]["asd"]["budget"] == 8.0


@pytest.mark.server_group("eagle")
def test_metrics_move(server):
    before = metric(server, "sglang:asd_exceptions_total")
    req_before = metric(server, "sglang:asd_requests_total")
    out = server.generate("Once upon a time in a land far away", max_new_tokens=32, ignore_eos=True, asd_budget=16)
    assert metric(server, "sglang:asd_requests_total") >= req_before + 1
    assert metric(server, "sglang:asd_exceptions_total") - before >= out["meta_info"]["asd"]["exceptions"]


@pytest.mark.server_group("eagle")
def test_abort_mid_stream_leaves_no_ledger(server):
    body = {"text": "The quick brown fox", "stream": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": 2000, "ignore_eos": True, "asd_budget": 8}}
    with requests.post(server.url + "/generate", json=body, stream=True) as resp:
        for i, _ in enumerate(_sse(resp)):
            if i == 3:
                break  # client goes away mid-stream
    import time

    deadline = time.time() + 30
    while time.time() < deadline and metric(server, "sglang:asd_active_ledgers") > 0:
        time.sleep(0.5)
    assert metric(server, "sglang:asd_active_ledgers") == 0
    assert server.generate("hi", max_new_tokens=4, asd_budget=1)["meta_info"]["asd"]["applied"]


@pytest.mark.server_group("eagle")
def test_sampled_requests_get_the_sampled_rule(server):
    r = server.generate("hi", temperature=0.8, max_new_tokens=8, asd_budget=8)["meta_info"]["asd"]
    assert r["applied"] is True and r["reason"] is None and r["rule"] == "asd-sampled-1"
    assert 0 <= r["spent"] <= 8


def test_with_the_cpu_sampling_switch_off_sampled_rows_verify_greedily(servers):
    """``SGLANG_ASD_CPU_SAMPLING=off``: stock CPU SGLang's path. The first token is sampled (the
    sampler), every verify round commits the target's argmax: the rest is the greedy continuation of
    that first token. A budget says why it was not applied."""
    server = servers.get("eagle", sampling=False)
    prompt = [0, 412, 1203, 77, 1630, 905]  # any ids below the tiny target's vocabulary (2048)
    outs = [server.generate(input_ids=prompt, temperature=1.0, max_new_tokens=12, ignore_eos=True)["output_ids"]
            for _ in range(4)]
    assert len({o[0] for o in outs}) > 1, "the first token is sampled (unseeded, temperature 1)"
    for out in outs:
        greedy = server.generate(input_ids=prompt + out[:1], max_new_tokens=11, ignore_eos=True)["output_ids"]
        assert out[1:] == greedy
    r = server.generate(input_ids=prompt, temperature=0.8, max_new_tokens=8, asd_budget=8)["meta_info"]["asd"]
    assert r["applied"] is False and r["reason"] == "sampling"


def test_clean_shutdown(servers):
    """SIGTERM stops an ASD server with exit status 0: every one the pool has stopped so far to make room
    (each had served this suite's requests), or, run alone, one started and stopped here."""
    stopped = [(s, code) for s, code in servers.stopped if s.module == "sglang_asd.launch_server"]
    if not stopped:
        from tests.conftest import CONFIGS
        from tests.server_utils import Server

        s = Server("shutdown", CONFIGS["plain"])
        assert s.generate("hi", max_new_tokens=2)["meta_info"]["finish_reason"]["type"] == "length"
        stopped = [(s, s.stop(timeout=30))]
    for s, code in stopped:
        assert code == 0, f"{s.name} exited with {code}:\n{s.tail()}"
