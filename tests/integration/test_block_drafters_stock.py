"""SGLang's block drafters, DSPARK and DFLASH, served by stock SGLang on CPU.

Stock SGLang 0.5.23 refuses both on CPU; ``cpu_backend/seams/block_drafters.py`` lets them serve
through the stand-in. The drafts are the tiny fixtures of ``fixtures/block_drafts.py`` on
``tiny-llama-bigram`` (noisy: partial acceptance; exact: every draft token accepted). Each server is
checked against plain greedy decoding of the same target (``plain_bigram``, and the target's
transformers references), solo and under concurrency. Both drafters run with SGLang's overlap
scheduler on (SGLang does not turn it off for them on CPU), which ``test_overlap_scheduler_on`` pins.
ASD on the same servers: ``test_block_drafters_asd.py``.
"""

import json
import math
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from sglang_asd.fixtures import fixture_path

pytestmark = pytest.mark.server

TEXT_PROMPTS = ["The quick brown fox", "def add(a, b):", "Once upon a time in a land far away", "1, 2, 3,",
                "import os", "Hello", "class Foo:", "The capital of France is"]
MAX_NEW = 24
W = {"dspark": 4, "dflash": 4}  # verify window: DSpark gamma 3 + anchor; DFlash block 4 (anchor included)


def _prompts() -> list[dict]:
    """Eight text prompts and the four prompts (token ids) of the target's transformers references."""
    stamp = json.loads((fixture_path("tiny-llama-bigram") / "fixture.json").read_text())
    ids = [{"input_ids": r["prompt_ids"]} for r in stamp["greedy"]]
    return [{"text": p} for p in TEXT_PROMPTS] + ids


def _request(server, prompt: dict) -> dict:
    body = {**prompt, "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW}}
    r = requests.post(server.url + "/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def _solo(server, prompts) -> list[dict]:
    return [_request(server, p) for p in prompts]


def _ids(responses) -> list[list[int]]:
    return [r["output_ids"] for r in responses]


@pytest.fixture(scope="module")
def plain(servers) -> list[list[int]]:
    """Plain greedy decoding of the bigram target, one request at a time."""
    return _ids(_solo(servers.get("plain_bigram", stock=True), _prompts()))


def test_plain_bigram_equals_transformers(plain):
    stamp = json.loads((fixture_path("tiny-llama-bigram") / "fixture.json").read_text())
    refs = [r["output_ids"][:MAX_NEW] for r in stamp["greedy"]]
    assert plain[len(TEXT_PROMPTS):] == refs


# Parametrized over ``algorithm``: these join the dspark / dflash blocks of tests/conftest.py, whose stock
# servers test_block_drafters_asd.py uses too (one start for both modules).
@pytest.mark.stock_twin
@pytest.mark.parametrize("algorithm", ["dspark", "dflash"])
def test_noisy_draft_is_plain_greedy_solo_and_concurrent(servers, plain, algorithm):
    """Token for token plain greedy, with part of the drafts rejected (so rejection paths ran); twelve
    requests at once (batched verify rounds, overlap scheduler) give the solo outputs."""
    server = servers.get(algorithm, stock=True)
    responses = _solo(server, _prompts())
    assert _ids(responses) == plain
    proposed = sum(r["meta_info"]["spec_num_proposed_drafts"] for r in responses)
    correct = sum(r["meta_info"]["spec_num_correct_drafts"] for r in responses)
    rounds = sum(r["meta_info"]["spec_verify_ct"] for r in responses)
    assert 0 < correct < proposed, f"{algorithm}: noisy draft accepted {correct}/{proposed}"
    assert rounds == proposed // (W[algorithm] - 1)
    with ThreadPoolExecutor(len(responses)) as pool:
        batched = list(pool.map(lambda p: _request(server, p), _prompts()))
    assert _ids(batched) == plain


@pytest.mark.parametrize("drafter", ["dspark", "dflash"])
def test_exact_draft_accepts_every_token_solo_and_concurrent(servers, plain, drafter):
    """Every verify round commits the whole block: W - 1 drafts + the bonus token."""
    server = servers.get(f"{drafter}_exact", stock=True)
    responses = _solo(server, _prompts())
    assert _ids(responses) == plain
    for r in responses:
        meta = r["meta_info"]
        assert meta["completion_tokens"] == MAX_NEW
        # the first token comes from the prefill; then ceil(23 / W) rounds, the last one cut at MAX_NEW
        assert meta["spec_verify_ct"] == math.ceil((MAX_NEW - 1) / W[drafter])
        assert meta["spec_num_correct_drafts"] == meta["spec_num_proposed_drafts"]
        assert meta["spec_accept_length"] == W[drafter]
    with ThreadPoolExecutor(len(responses)) as pool:
        batched = list(pool.map(lambda p: _request(server, p), _prompts()))
    assert _ids(batched) == plain


@pytest.mark.stock_twin
@pytest.mark.parametrize("algorithm", ["dspark", "dflash"])
def test_overlap_scheduler_on(servers, algorithm):
    """SGLang turns its overlap scheduler off for EAGLE and NGRAM on CPU, not for the block drafters."""
    server = servers.get(algorithm, stock=True)
    info = requests.get(server.url + "/server_info", timeout=30)
    if info.status_code == 404:
        info = requests.get(server.url + "/get_server_info", timeout=30)
    assert info.status_code == 200, info.text
    assert info.json()["disable_overlap_schedule"] is False
