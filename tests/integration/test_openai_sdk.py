"""The official ``openai`` Python client against an ASD server, as a user's code calls it: the SDK's own
defaults (no temperature: the OpenAI API's default of 1, so a sampled request), ``extra_body`` for the
ASD fields, receipts read from the SDK's response objects (``model_extra`` and attribute access), streams
with ``include_usage``, ``n``, logprobs, ``response_format`` and a bad field as the SDK's
``BadRequestError``. The server: the tiny EAGLE chain, serving SGLang's sampling verify on CPU (on by
default, ``cpu_backend/seams/sampling.py``)."""

from __future__ import annotations

import json

import openai
import pytest
from openai import OpenAI

pytestmark = [pytest.mark.server, pytest.mark.server_group("eagle")]  # runs in the eagle block (conftest.py)

MESSAGES = [{"role": "user", "content": "Tell me a story."}]
PROMPT = "Once upon a time"
BUDGET = 8.0
TOKENS = 12
ASD = {"asd_budget": BUDGET}
FIXED = {"asd_budget": BUDGET, "ignore_eos": True}  # every request runs to max_tokens: usage is known


@pytest.fixture(scope="module")
def client(servers):
    return OpenAI(base_url=servers.get("eagle").url + "/v1", api_key="unused", max_retries=0, timeout=300)


def _create(client, route: str, **kwargs):
    if route == "chat":
        return client.chat.completions.create(model="default", messages=MESSAGES, **kwargs)
    return client.completions.create(model="default", prompt=PROMPT, **kwargs)


def _text(choice) -> str:
    return choice.message.content if hasattr(choice, "message") else choice.text


def _sampled_receipt(choice) -> dict:
    """The choice's receipt, read as a user would: applied under the sampled rule, within budget."""
    r = choice.model_extra["asd"]
    assert choice.asd == r  # attribute access to the extra field: the same object
    assert r["applied"] is True and r["reason"] is None and r["rule"] == "asd-sampled-1", r
    assert r["budget"] == BUDGET and 0 <= r["spent"] <= BUDGET and abs(r["remaining"] - (BUDGET - r["spent"])) < 1e-6
    return r


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_the_sdks_defaults_get_applied_receipts(client, route):
    """No temperature: the API's default (1) samples, and the budget applies under the sampled rule."""
    resp = _create(client, route, max_tokens=TOKENS, extra_body=FIXED)
    (choice,) = resp.choices
    assert choice.finish_reason == "length" and _text(choice)
    assert resp.model_extra["asd"] == _sampled_receipt(choice)  # top level: choice 0's receipt
    u = resp.usage
    assert u.completion_tokens == TOKENS and u.prompt_tokens > 0 and u.total_tokens == u.prompt_tokens + TOKENS


def test_unseeded_requests_differ_and_a_seed_reproduces(client):
    """Sampling is sampling: identical unseeded requests draw fresh randomness (the tiny target is nearly
    flat at temperature 1, so equal 12-token texts would be a fluke); ``seed`` reproduces exactly."""
    unseeded = {_text(_create(client, "completions", max_tokens=TOKENS, extra_body=FIXED).choices[0])
                for _ in range(3)}
    assert len(unseeded) >= 2, unseeded
    seeded = [_create(client, "chat", max_tokens=TOKENS, seed=7, extra_body=FIXED) for _ in range(2)]
    assert _text(seeded[0].choices[0]) == _text(seeded[1].choices[0])
    assert seeded[0].choices[0].model_extra["asd"] == seeded[1].choices[0].model_extra["asd"]


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_a_stream_with_include_usage_carries_the_receipt_and_the_usage(client, route):
    """The stream is the seeded non-streamed answer, chunk by chunk: the receipt rides in the chunk with
    ``finish_reason``, the usage in a last chunk without choices."""
    want = _create(client, route, max_tokens=TOKENS, seed=11, extra_body=FIXED)
    chunks = list(_create(client, route, max_tokens=TOKENS, seed=11, stream=True,
                          stream_options={"include_usage": True}, extra_body=FIXED))
    *body, last = chunks
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == TOKENS and last.usage.prompt_tokens == want.usage.prompt_tokens
    assert all(c.usage is None for c in body)
    piece = (lambda c: c.choices[0].delta.content or "") if route == "chat" else (lambda c: c.choices[0].text)
    assert "".join(piece(c) for c in body) == _text(want.choices[0])
    finished = [c.choices[0] for c in body if c.choices[0].finish_reason is not None]
    assert [c.finish_reason for c in finished] == ["length"]
    assert _sampled_receipt(finished[0]) == want.choices[0].model_extra["asd"]


def test_n_2_gives_two_samples_each_with_its_receipt(client):
    resp = _create(client, "chat", max_tokens=TOKENS, n=2, extra_body=FIXED)
    assert [c.index for c in resp.choices] == [0, 1]
    for choice in resp.choices:
        _sampled_receipt(choice)
    assert _text(resp.choices[0]) != _text(resp.choices[1]), "two choices are two samples"
    assert resp.usage.completion_tokens == 2 * TOKENS


def test_logprobs_with_a_budget(client):
    chat = _create(client, "chat", max_tokens=TOKENS, logprobs=True, top_logprobs=2, extra_body=FIXED)
    _sampled_receipt(chat.choices[0])
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens == TOKENS
    for t in content:
        top = [x.logprob for x in t.top_logprobs]
        assert len(top) == 2 and top[0] >= top[1] and t.logprob <= top[0] + 1e-6 and t.logprob <= 0
    comp = _create(client, "completions", max_tokens=TOKENS, logprobs=2, extra_body=FIXED)
    _sampled_receipt(comp.choices[0])
    lp = comp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == TOKENS
    assert all(v <= 0 and len(top) == 2 for v, top in zip(lp.token_logprobs, lp.top_logprobs))


def test_response_format_json_schema_is_valid_json_with_a_budget(client):
    """The grammar masks every token, relaxed ones included: the answer is one of the schema's values.
    (An enum of objects: a tiny random model under a free-form object schema pads whitespace forever.)"""
    values = [{"ok": True}, {"ok": False}]
    schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"enum": values}}}
    for _ in range(2):
        resp = _create(client, "chat", max_tokens=48, response_format=schema, extra_body=ASD)
        choice = resp.choices[0]
        _sampled_receipt(choice)
        assert choice.finish_reason == "stop" and json.loads(choice.message.content) in values, choice.message.content


@pytest.mark.parametrize("route, field, value", [
    ("chat", "asd_budget", -1), ("completions", "asd_budget", "lots"), ("chat", "asd_sampled_floor", 1.5),
    ("completions", "asd_rule", "fuzzy")])
def test_a_bad_field_is_the_sdks_bad_request_error_naming_it(client, route, field, value):
    with pytest.raises(openai.BadRequestError) as e:
        _create(client, route, max_tokens=4, extra_body={"asd_budget": 4, field: value})
    assert e.value.status_code == 400
    message = e.value.body["message"]
    assert message.startswith(field) and str(value) in message and message in str(e.value), message
    assert _create(client, route, max_tokens=4, extra_body=ASD).choices[0].model_extra["asd"]["applied"]
