"""Scopes on real CPU servers (EAGLE on tiny-llama; the overlap scheduler through ``tests/cpu_overlap.py``).

Every receipt event is checked against the pure scope rule (``policy.scope``) replayed on the
client over the request's prompt and output ids: no event at a position the scope forbids, under
churn (concurrent requests, slots recycled) and with SGLang's overlap scheduler. The strict prefix
is exact: with prefix N an exception the unscoped run takes at output index N is taken again, and
with N + 1 it is not. Markers are picked from the tiny model's own output (single tokens of its
tokenizer), so that spans open where exceptions would otherwise land.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools

import pytest
import requests

from sglang_asd.policy.scope import Scope, resolve, single_token_id
from tests.server_utils import metric

pytestmark = [pytest.mark.server]

PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time", "1, 2, 3,", "import numpy as np",
           "Dear Sir or Madam,", "The weather today", "SELECT * FROM"]
BUDGET = 64.0
NEW = 40


@functools.lru_cache(maxsize=1)
def tokenizer():
    from transformers import AutoTokenizer

    from sglang_asd.fixtures import fixture_path

    return AutoTokenizer.from_pretrained(str(fixture_path("tiny-llama")))


def ids(prompt: str) -> list[int]:
    return tokenizer().encode(prompt)


def generate(server, input_ids, **params) -> dict:
    body = {"input_ids": input_ids, "sampling_params": {"temperature": 0, "max_new_tokens": NEW, "ignore_eos": True,
                                                        **params}}
    r = requests.post(server.url + "/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def assert_in_scope(out: dict, prompt_ids: list[int], scope: Scope) -> int:
    """Every event of ``out`` at a position ``scope`` allows (replayed over prompt + output); -> events."""
    markers = resolve(scope, single_token_id(tokenizer()))
    receipt = out["meta_info"]["asd"]
    assert receipt["scope"] == {**scope.parameters(), "skipped": receipt["scope"]["skipped"]}
    output = out["output_ids"]
    for e in receipt["events"]:
        pos = e["pos"]
        assert output[pos] == e["draft"]
        state = markers.state_after(prompt_ids + output[:pos])
        assert markers.allowed(state, pos, e["draft"], e["target"]), (e, scope)
    return len(receipt["events"])


def _decisions(out: dict) -> list:
    return [(e["pos"], e["draft"], e["target"]) for e in out["meta_info"]["asd"]["events"]]


def _single(token: int):
    """``token``'s text when it is one token of the tokenizer on its own, else None."""
    text = tokenizer().decode([token])
    return text if single_token_id(tokenizer())(text) == token else None


@pytest.fixture(scope="module")
def baseline(servers):
    """Per prompt: the unscoped ASD output (no scope fields) and its events."""
    server = servers.get("eagle")
    return {p: generate(server, ids(p), asd_budget=BUDGET) for p in PROMPTS}


@pytest.mark.server_group("eagle")
def test_an_unscoped_scope_is_todays_output_token_for_token(servers, baseline):
    server = servers.get("eagle")
    for p in PROMPTS[:4]:
        out = generate(server, ids(p), asd_budget=BUDGET, asd_strict_prefix=0, asd_scope="all", asd_strict_spans=[])
        assert out["output_ids"] == baseline[p]["output_ids"]
        assert _decisions(out) == _decisions(baseline[p])  # regrets agree to float32 rounding (the prompt is cached)
        assert out["meta_info"]["asd"]["scope"] == {"strict_prefix": 0, "scope": "all", "strict_spans": [],
                                                     "skipped": 0}


@pytest.mark.server_group("eagle")
def test_the_strict_prefix_is_exact_at_its_boundary(servers, baseline):
    """Before the first exception the unscoped run is strict greedy; with prefix N = that position
    the same exception is taken at N (the rounds before are the same), with N + 1 it is not."""
    server = servers.get("eagle")
    checked = 0
    for p in PROMPTS:
        events = baseline[p]["meta_info"]["asd"]["events"]
        if not events or events[0]["pos"] < 2:
            continue
        first = events[0]["pos"]
        at = generate(server, ids(p), asd_budget=BUDGET, asd_strict_prefix=first)
        assert _decisions(at)[0] == _decisions(baseline[p])[0], "the exception at index N is allowed"
        assert at["output_ids"][:first + 1] == baseline[p]["output_ids"][:first + 1]
        past = generate(server, ids(p), asd_budget=BUDGET, asd_strict_prefix=first + 1)
        assert all(e["pos"] > first for e in past["meta_info"]["asd"]["events"])
        assert past["meta_info"]["asd"]["scope"]["skipped"] >= 1
        assert_in_scope(past, ids(p), Scope(strict_prefix=first + 1))
        checked += 1
    assert checked >= 2, "too few prompts with an exception past index 1 to test the boundary"


def _span_markers(baseline) -> tuple[str, str]:
    """An open marker the tiny model emits right before one of its exceptions, and a close marker
    it never emits: the span then covers the rest of that response."""
    seen = {t for out in baseline.values() for t in out["output_ids"]}
    for p in PROMPTS:
        out = baseline[p]
        for e in out["meta_info"]["asd"]["events"]:
            open_ = _single(out["output_ids"][e["pos"] - 1]) if e["pos"] > 0 else None
            if open_ is not None:
                close = next(_single(t) for t in range(100, 2048) if t not in seen and _single(t) is not None)
                return open_, close
    pytest.fail("no exception follows a single-token output token")


def _churn(server, jobs, concurrency=8):
    with cf.ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda job: generate(server, ids(job[0]), **job[1]), jobs))


def _scope_of(params: dict) -> Scope:
    return Scope().tightened(strict_prefix=params.get("asd_strict_prefix"), scope=params.get("asd_scope"),
                             strict_spans=params.get("asd_strict_spans"))


def _scoped_jobs(baseline, n=32):
    open_, close = _span_markers(baseline)
    variants = [{"asd_strict_spans": [[open_, close]]}, {"asd_strict_prefix": 5},
                {"asd_strict_spans": [[open_, close]], "asd_strict_prefix": 3}, {},
                {"asd_strict_spans": [[open_, open_]]}]  # a toggling span
    return [(PROMPTS[i % len(PROMPTS)], {"asd_budget": BUDGET, "max_new_tokens": 16 + i % 24,
                                         **variants[i % len(variants)]}) for i in range(n)]


@pytest.mark.parametrize("config", [
    pytest.param(c, marks=pytest.mark.server_group(c)) for c in ("eagle", "eagle_tree", "dflash", "dspark")])
def test_no_event_outside_the_scope_under_churn(servers, config):
    """Chains (EAGLE topk 1, DFLASH, DSPARK: the block drafters' accept) and trees (EAGLE topk 2)."""
    server = servers.get(config)
    baseline = {p: generate(server, ids(p), asd_budget=BUDGET) for p in PROMPTS}
    before = metric(server, "sglang:asd_scope_skipped_total")
    jobs = _scoped_jobs(baseline)
    outs = _churn(server, jobs)
    events = sum(assert_in_scope(out, ids(p), _scope_of(params)) for (p, params), out in zip(jobs, outs))
    assert events > 0, "no exception at all: the check above would hold vacuously"
    skipped = sum(out["meta_info"]["asd"]["scope"]["skipped"] for out in outs)
    assert skipped > 0, "the scope never made a difference"
    assert metric(server, "sglang:asd_scope_skipped_total") - before == skipped


@pytest.mark.server_group("overlap")
def test_no_event_outside_the_scope_with_the_overlap_scheduler(servers):
    server = servers.get("eagle", overlap=True)
    baseline = {p: generate(server, ids(p), asd_budget=BUDGET) for p in PROMPTS}
    jobs = _scoped_jobs(baseline, n=48)
    outs = _churn(server, jobs, concurrency=12)
    events = sum(assert_in_scope(out, ids(p), _scope_of(params)) for (p, params), out in zip(jobs, outs))
    assert events > 0


@pytest.mark.server_group("eagle")
@pytest.mark.parametrize("fields,message", [
    ({"asd_strict_prefix": -1}, "asd_strict_prefix must be an integer >= 0, got -1"),
    ({"asd_strict_prefix": 1.5}, "asd_strict_prefix must be an integer"),
    ({"asd_scope": "answer"}, "asd_scope must be one of 'all', 'reasoning', got 'answer'"),
    ({"asd_scope": "reasoning"}, "asd_scope='reasoning' needs a server started with --reasoning-parser"),
    ({"asd_strict_spans": [["<think>", "</think>"]]}, "marker '<think>' is not a single token of the served tokenizer"),
    ({"asd_strict_spans": "tool_call"}, "asd_strict_spans must be a list"),
    ({"asd_strict_spans": ["nope"]}, "unknown preset 'nope'"),
])
def test_bad_scope_fields_are_400s_on_every_route(servers, fields, message):
    server = servers.get("eagle")
    native = requests.post(server.url + "/generate", json={"text": "Hi", "asd_budget": 4, **fields,
                                                          "sampling_params": {"max_new_tokens": 4}})
    assert native.status_code == 400 and message in native.json()["error"], native.text
    openai = requests.post(server.url + "/v1/completions", json={"model": "default", "prompt": "Hi", "max_tokens": 4,
                                                                "custom_params": {"asd_budget": 4, **fields}})
    assert openai.status_code == 400 and message in openai.json()["message"]


@pytest.mark.server_group("eagle")
def test_sampled_requests_relax_only_inside_the_scope(servers):
    """The sampled rule (SGLang's sampling verify, served on CPU; temperature 0.1: the tiny target is
    nearly flat at 1, below the floor): every relaxed node's position is
    allowed by the request's scope, replayed over its prompt and committed output."""
    server = servers.get("eagle")
    token_id = single_token_id(tokenizer())
    jobs = [(PROMPTS[i % len(PROMPTS)], {"temperature": 0.1, "sampling_seed": i, "asd_budget": 8.0,
                                         "asd_strict_prefix": 4 + i % 3, "asd_strict_spans": [["(", ")"], ["=", "="]]})
            for i in range(16)]
    outs = _churn(server, jobs)
    relaxed = 0
    for (p, params), out in zip(jobs, outs):
        receipt = out["meta_info"]["asd"]
        assert receipt["rule"] == "asd-sampled-1" and receipt["applied"], receipt
        markers = resolve(_scope_of(params), token_id)
        for e in receipt["events"]:
            relaxed += 1
            state = markers.state_after(ids(p) + out["output_ids"][:e["pos"]])
            assert markers.allowed(state, e["pos"], e["token"], target=-1), (e, params)
    assert relaxed > 0, "no relaxed node at all: the check above would hold vacuously"
