"""ASD semantics on a real server: true logprobs, grammar masks, paged KV, mixed batches."""

import concurrent.futures as cf
import re

import pytest
import requests

from tests.server_utils import PAGED_STREAMING

pytestmark = [pytest.mark.server, pytest.mark.server_group("eagle")]  # runs in the eagle block (conftest.py)


@pytest.fixture(scope="module")
def server(servers):
    return servers.get("eagle")


def test_exception_tokens_carry_true_target_logprobs(server):
    out = server.generate("Once upon a time in a land far away", max_new_tokens=32, ignore_eos=True, asd_budget=16)
    body = {"text": "Once upon a time in a land far away", "return_logprob": True, "top_logprobs_num": 1,
            "sampling_params": {"temperature": 0, "max_new_tokens": 32, "ignore_eos": True, "asd_budget": 16}}
    meta = requests.post(server.url + "/generate", json=body).json()["meta_info"]
    # Same decisions as without logprobs (the prompt is now cached: regrets agree to float32 rounding).
    assert [(e["pos"], e["draft"], e["target"]) for e in meta["asd"]["events"]] == \
        [(e["pos"], e["draft"], e["target"]) for e in out["meta_info"]["asd"]["events"]]
    assert meta["asd"]["exceptions"] > 0
    for e in meta["asd"]["events"]:
        logprob, token, _ = meta["output_token_logprobs"][e["pos"]]
        top_logprob, top_token, _ = meta["output_top_logprobs"][e["pos"]][0]
        assert token == e["draft"] and top_token == e["target"]
        # The exception's logprob is the target's own, a regret below its argmax.
        assert top_logprob - logprob == pytest.approx(e["regret"], abs=2e-3)


def test_grammar_masked_tokens_are_never_exceptions(server):
    pattern = r"(ab|cd|ef)+"
    body = {"text": "Say something:", "sampling_params": {"temperature": 0, "max_new_tokens": 24, "regex": pattern,
                                                           "asd_budget": 64}}
    r = requests.post(server.url + "/generate", json=body)
    assert r.status_code == 200, r.text
    data = r.json()
    assert re.fullmatch(pattern, data["text"]), data["text"]
    strict = requests.post(server.url + "/generate", json={**body, "sampling_params": {
        **body["sampling_params"], "asd_budget": 0}}).json()
    assert re.fullmatch(pattern, strict["text"])


def test_mixed_greedy_and_sampling_batch(server):
    greedy = {"max_new_tokens": 20, "ignore_eos": True, "asd_budget": 8}
    solo = server.generate("The weather today", **greedy)

    def run(i):
        if i % 2:
            body = {"text": "The weather today", "sampling_params": {"temperature": 1.0, "max_new_tokens": 20,
                                                                     "asd_budget": 8}}
            return requests.post(server.url + "/generate", json=body).json()
        return server.generate("The weather today", **greedy)

    with cf.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(run, range(8)))
    for i, out in enumerate(outs):
        if i % 2:
            r = out["meta_info"]["asd"]
            assert r["applied"] and r["rule"] == "asd-sampled-1" and 0 <= r["spent"] <= 8
        else:
            assert out["output_ids"] == solo["output_ids"]
            assert [e["pos"] for e in out["meta_info"]["asd"]["events"]] == \
                [e["pos"] for e in solo["meta_info"]["asd"]["events"]]


@pytest.mark.server_group("paged_streaming")
def test_paged_kv_and_radix_cache(servers):
    server = servers.get("eagle", extra=PAGED_STREAMING)
    first = server.generate("Dear Sir or Madam, I write to you about", max_new_tokens=24, ignore_eos=True, asd_budget=8)
    again = server.generate("Dear Sir or Madam, I write to you about", max_new_tokens=24, ignore_eos=True, asd_budget=8)
    assert again["meta_info"]["cached_tokens"] > 0  # served from the radix cache
    assert again["output_ids"] == first["output_ids"]
    decisions = [[(e["pos"], e["draft"], e["target"]) for e in o["meta_info"]["asd"]["events"]] for o in (first, again)]
    assert decisions[0] == decisions[1]  # regrets agree to float32 rounding (cached prefix, other shapes)
    r = again["meta_info"]["asd"]
    assert r["applied"] and r["spent"] <= 8.0
    strict = server.generate("Dear Sir or Madam, I write to you about", max_new_tokens=24, ignore_eos=True)
    stock = servers.get("eagle", stock=True, extra=PAGED_STREAMING)
    assert strict["output_ids"] == stock.generate("Dear Sir or Madam, I write to you about", max_new_tokens=24,
                                                  ignore_eos=True)["output_ids"]
